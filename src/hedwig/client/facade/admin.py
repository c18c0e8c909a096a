"""The client's reading and administration calls: one request each, routed as every request is.

Reads, statistics and descriptions go to the topic's owner (``Router.topic_request``: redirects
followed, retries until the deadline) and never create a topic. Removals (a topic, a
subscription) share one rule (``_request_once``): a retry after an attempt whose answer was
lost may find the thing gone already, which is what was asked, not an error. A topic served
by lanes is removed with its lanes, lane 0 first.
"""

from __future__ import annotations

import contextlib
from datetime import datetime

from hedwig.client.routes import SubscriptionRoute
from hedwig.client.routing import RequestMaker, Router
from hedwig.errors import (
    ForbiddenError,
    HedwigError,
    NoSuchTopicError,
    NotResponsibleError,
    UsageError,
)
from hedwig.protocol import (
    DeleteTopic,
    DescribeLanes,
    DescribeLinks,
    DescribeQueues,
    DescribeTopic,
    Lanes,
    Links,
    Messages,
    MoveKind,
    QueueDescription,
    QueueInfo,
    Read,
    ReleaseBundle,
    ReleaseTopic,
    ResetSubscription,
    ResetTo,
    Subscribed,
    TopicDescription,
    TopicInfo,
    TopicStats,
    lane_name,
    lane_of,
    validate_name,
)


def reset_position(to: ResetTo | int | datetime) -> tuple[ResetTo, int]:
    """RESET_SUBSCRIPTION's ``to`` and ``seq`` for a position."""
    if isinstance(to, datetime):
        if to.tzinfo is None:
            raise UsageError("a reset to a time needs a time zone (an aware datetime)")
        ms = int(to.timestamp() * 1000)
        if ms < 0:
            raise UsageError(f"a reset to a time before 1970: {to.isoformat()}")
        return ResetTo.TIME, ms
    if isinstance(to, ResetTo):
        if to is ResetTo.TIME:
            raise UsageError("a reset to a time takes the time: pass a datetime")
        return to, 0
    return ResetTo.SEQ, to


# How many hubs a bundle's move is sent to, following the owners they name.
BUNDLE_REDIRECTS = 3


class Administration:
    """``HedwigClient``'s reading and administration calls."""

    router: Router

    async def read(
        self, topic: str, start_seq: int, *, max_messages: int = 10_000, max_bytes: int = 8 << 20
    ) -> Messages:
        """Messages from ``start_seq`` on, without a subscription (for batch readers)."""
        answer, _ = await self.router.topic_request(
            topic,
            lambda rid, redirected: Read(
                request_id=rid,
                topic=topic,
                start_seq=start_seq,
                max_messages=max_messages,
                max_bytes=max_bytes,
                redirected=redirected,
            ),
        )
        assert isinstance(answer, Messages)
        return answer

    async def describe_links(self, hub: str) -> Links:
        """``hub``'s links to other regions and how its replication from each stands (one
        hub's part: each hub replicates the topics it owns)."""
        conn = await self.router.connection(hub)
        answer = await conn.request(
            DescribeLinks(request_id=conn.next_id()), timeout=self.router.request_timeout_s
        )
        assert isinstance(answer, Links)
        return answer

    async def topic_info(self, topic: str) -> TopicInfo:
        answer, _ = await self.router.topic_request(
            topic,
            lambda rid, redirected: TopicStats(request_id=rid, topic=topic, redirected=redirected),
        )
        assert isinstance(answer, TopicInfo)
        return answer

    async def describe_topic(self, topic: str) -> TopicDescription:
        """The topic's bounds and subscriptions (``NoSuchTopicError`` if it does not exist)."""
        answer, _ = await self.router.topic_request(
            topic,
            lambda rid, redirected: DescribeTopic(
                request_id=rid, topic=topic, redirected=redirected
            ),
        )
        assert isinstance(answer, TopicDescription)
        return answer

    async def describe_queues(self, topic: str) -> tuple[QueueInfo, ...]:
        """Each of the topic's subscriptions as a queue, by name: its type, consumers,
        unacknowledged and redelivered counts and the oldest unacknowledged message's age, as
        its owner serves it (``NoSuchTopicError`` if the topic does not exist)."""
        validate_name(topic)
        answer, _ = await self.router.topic_request(
            topic,
            lambda rid, redirected: DescribeQueues(
                request_id=rid, topic=topic, redirected=redirected
            ),
        )
        assert isinstance(answer, QueueDescription)
        return answer.queues

    async def describe_lanes(self, topic: str) -> Lanes:
        """The lanes of ``topic`` (lane 0 alone for a topic not served by lanes)."""
        validate_name(topic)
        answer, _ = await self.router.topic_request(
            topic, lambda rid, _: DescribeLanes(request_id=rid, topic=topic)
        )
        assert isinstance(answer, Lanes)
        return answer

    async def _other_lanes(self, topic: str, quiet: type[HedwigError]) -> tuple[int, ...]:
        """The lanes of ``topic`` past lane 0: none for a lane, or when asking fails with
        ``quiet``."""
        if lane_of(topic)[1]:
            return ()
        try:
            described = await self.describe_lanes(topic)
        except quiet:
            return ()
        return tuple(x.index for x in described.lanes if x.index)

    async def delete_topic(self, topic: str, *, force: bool = False) -> None:
        """Delete the topic, its messages and its subscriptions (and its lanes').
        ``TopicInUseError`` while a subscriber is attached, unless ``force`` (attached
        subscribers are then closed)."""
        validate_name(topic)
        # Refused only to a caller without admin on the topic: the delete says so.
        lanes = await self._other_lanes(topic, ForbiddenError)
        await self._delete(topic, force)
        for index in lanes:
            # The topic is gone: its lanes go too, whoever reads them.
            with contextlib.suppress(NoSuchTopicError):
                await self._delete(lane_name(topic, index), True)

    async def _delete(self, topic: str, force: bool) -> None:
        await self._request_once(
            topic,
            lambda rid, redirected: DeleteTopic(
                request_id=rid, topic=topic, redirected=redirected, force=force
            ),
            already_done=NoSuchTopicError,
        )

    async def reset_subscription(
        self, topic: str, subscriber: str, to: ResetTo | int | datetime = ResetTo.EARLIEST
    ) -> int:
        """Move a subscription to a sequence id (delivery restarts at it), to the earliest kept
        message, to the end, or to a time (an aware ``datetime``: delivery restarts at the
        first message published then or later); returns the new consume mark. An attached
        subscriber is closed and attaches again at the new position."""
        validate_name(subscriber, what="subscriber")
        kind, seq = reset_position(to)
        answer, _ = await self.router.topic_request(
            topic,
            lambda rid, redirected: ResetSubscription(
                request_id=rid,
                topic=topic,
                subscriber=subscriber,
                to=kind,
                seq=seq,
                redirected=redirected,
            ),
            # A fan-out topic's subscription is reset where it is served.
            route=SubscriptionRoute(topic, subscriber),
        )
        assert isinstance(answer, Subscribed)
        return answer.consumed_seq

    async def move_topic(
        self,
        topic: str,
        to: str | None = None,
        *,
        reason: str = "move requested",
        kind: MoveKind = MoveKind.REQUESTED,
    ) -> None:
        """Ask the topic's owner to hand it over gracefully (to ``to`` if given)."""
        await self.router.topic_request(
            topic,
            lambda rid, _: ReleaseTopic(
                request_id=rid, topic=topic, destination=to, reason=reason[:1024], kind=kind
            ),
        )

    async def move_bundle(
        self, bundle: str, to: str, *, owner: str, reason: str = "move requested"
    ) -> None:
        """Ask ``owner`` (where the bundle's owner record says it is: ``hedwig bundles``) to
        hand the bundle named ``bundle`` to the hub ``to`` (``ReleaseBundle``). A hub that
        does not own it names its owner, which is asked instead, up to ``BUNDLE_REDIRECTS``
        times (a bundle moving meanwhile)."""
        address = owner
        for _ in range(BUNDLE_REDIRECTS):
            conn = await self.router.connection(address)
            request = ReleaseBundle(
                request_id=conn.next_id(), bundle=bundle, destination=to, reason=reason[:1024]
            )
            try:
                await conn.request(request)
                return
            except NotResponsibleError as exc:
                if not exc.owner or exc.owner == address:
                    raise
                address = exc.owner
        raise NotResponsibleError(f"bundle {bundle} kept moving: ask again", owner=address)

    async def _request_once(
        self,
        topic: str,
        make: RequestMaker,
        *,
        already_done: type[HedwigError],
        route: SubscriptionRoute | None = None,
    ) -> None:
        """Send a request whose effect is a thing gone (a topic, a subscription), retried as
        every request is. A retry after an attempt whose answer was lost (the hub it went to
        stopped answering, or the connection went) may find the thing gone already: that
        attempt removed it, or someone else did meanwhile. Either way it is gone, as asked;
        the retry does not turn into ``already_done``. Without a lost answer, the error is
        the caller's: the thing was never there."""
        in_doubt = False

        def doubted() -> None:
            nonlocal in_doubt
            in_doubt = True

        try:
            await self.router.topic_request(topic, make, route=route, on_in_doubt=doubted)
        except already_done:
            if not in_doubt:
                raise
