"""A subscription as the client sees it: attached to the hub serving it, and attached again
by itself after failures and moves.

``Subscriber`` is this module's attachment state machine together with its lanes (``lanes``)
and its caller's side (``reading``: ``async for msg in sub`` yields messages in order). Rules:

- Delivery is at least once: after a re-subscription the hub sends again everything past the
  consume mark it has persisted. The subscriber remembers the last sequence id it handed out
  and drops redeliveries at or below it, so the caller sees each message once per process.
- A lost connection, TOPIC_MOVED, or a SUBSCRIPTION_FORCED_CLOSED whose reason says so (the
  owner changed, delivery failed) makes it attach again, wherever the topic now is, with
  backoff and without a deadline. A forced close because another connection took the
  subscription over (or deleted it) stops it: it does not fight back; ``next`` raises.
- SUBSCRIPTION_MOVED (a fan-out topic's plan sends it to another hub) is make-before-break:
  the hub it is attached to goes on delivering for a while, so it keeps reading there while it
  attaches at the next hub, then switches and closes the old attachment. Both hubs may deliver
  the same messages around the switch; they are dropped by sequence id.
- Deliveries can overtake the answer to SUBSCRIBE (both arrive in one read): they are held,
  per connection, until the answer says which connection the subscription is attached on.
- A topic served by lanes is read lane by lane, each lane a subscription of its own that the
  topic's subscription follows (``lanes``); what the caller is handed, and the consumes it
  sends back, are ``reading``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable

from hedwig.client.retry import Backoff
from hedwig.client.routes import SubscriptionRoute
from hedwig.client.routing import Router
from hedwig.client.subscribing.inbox import Inbox
from hedwig.client.subscribing.lanes import LaneFollowing
from hedwig.client.subscribing.reading import Reading, ignore_answer
from hedwig.errors import (
    DeadlineExceededError,
    ForbiddenError,
    HedwigError,
    NoSuchSubscriptionError,
    NoSuchTopicError,
    SubscriptionBusyError,
)
from hedwig.net.connection import HubConnection
from hedwig.protocol import (
    CloseReason,
    CloseSubscription,
    Deliver,
    Reply,
    Subscribe,
    Subscribed,
    SubscribeMode,
    SubscriptionForcedClosed,
    lane_name,
)

log = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 5.0


class Subscriber(LaneFollowing, Reading):
    """An attached subscription: ``async for msg in sub`` yields messages in order."""

    def __init__(
        self,
        router: Router,
        topic: str,
        name: str,
        *,
        mode: SubscribeMode,
        window: int,
        bound: int,
        auto_consume: bool,
        lane: int = 0,
        inbox: Inbox | None = None,
        registry: Callable[[Subscriber, bool], None] | None = None,
    ) -> None:
        self._router = router
        self.topic = topic
        self.name = name
        # Which lane of its topic this subscription reads (0: the topic itself), and for
        # lane 0, the client's registry of subscriptions, which lanes are added to and
        # removed from (``None``: lanes are not followed).
        self.lane = lane
        self._registry = registry
        self._lanes: dict[int, Subscriber] = {}
        self._lanes_task: asyncio.Task[None] | None = None
        self._lanes_again = False
        self.lanes_generation = 0
        self._mode = mode
        self._window = window
        self._bound = bound
        self._auto_consume = auto_consume
        self._conn: HubConnection | None = None
        self._inbox = inbox if inbox is not None else Inbox()
        self._last_seen = 0
        self._consumed = 0
        self._closed = False
        self._reattach: asyncio.Task[None] | None = None
        self._early: dict[HubConnection, list[Deliver]] = {}
        # A move or loss told on a connection while an attach was waiting for its answer: the
        # answer and the event can arrive in one read, and the event is handled first.
        self._early_loss: dict[HubConnection, str] = {}
        # SUBSCRIPTION_MOVED came on this connection: it still delivers while the subscription
        # attaches at the next hub (make-before-break).
        self._moving_from: HubConnection | None = None
        # The hub moved the consume mark (RESET): take its position on the next attach, even
        # if it is behind what was handed out already.
        self._reset = False
        self._last_consume: asyncio.Future[Reply] | None = None
        self.resubscriptions = 0
        # Deliveries that arrived before the SUBSCRIBED answer and were held for it.
        self.held_deliveries = 0
        self.error: HedwigError | None = None

    @property
    def connection(self) -> HubConnection | None:
        """The connection the subscription is attached on (``None`` while re-attaching)."""
        return self._conn

    @property
    def closed(self) -> bool:
        return self._closed

    def _lane_subscriber(self, index: int) -> Subscriber:
        return Subscriber(
            self._router,
            lane_name(self.topic, index),
            self.name,
            mode=SubscribeMode.CREATE_OR_ATTACH,
            window=self._window,
            bound=self._bound,
            auto_consume=False,
            lane=index,
            inbox=self._inbox,
        )

    async def attach(self, *, force: bool) -> None:
        mode = self._mode
        self._early_loss = {}  # what was told before this request is about an older attachment
        answer, conn = await self._router.topic_request(
            self.topic,
            lambda rid, redirected: Subscribe(
                request_id=rid,
                topic=self.topic,
                subscriber=self.name,
                mode=mode,
                message_window=self._window,
                message_bound=self._bound,
                redirected=redirected,
                force_attach=force,
            ),
            route=SubscriptionRoute(self.topic, self.name),
        )
        assert isinstance(answer, Subscribed)
        first = self._last_seen == 0 and self.resubscriptions == 0 and self._conn is None
        old, self._moving_from = self._moving_from, None
        if old is not None and old is not conn and old is self._conn and not old.closed:
            self._send_close(old)  # attached at the next hub: the old one may stop now
        if self._last_seen == 0 or self._reset:
            self._reset = False
            self._last_seen = answer.consumed_seq
            self._consumed = answer.consumed_seq
        self._conn = conn
        if self._consumed > answer.consumed_seq:
            # The hub's mark is behind what this subscriber consumed: the previous owner
            # could not write it (its metadata store was out of reach) before it lost the
            # topic. Say it again. Otherwise the hub redelivers from its mark, this side drops
            # those as already seen and never consumes them, and once they fill the message
            # window the hub sends nothing more: the subscriber would stall for good.
            self._send_consume(conn, self._consumed)
        early, self._early = self._early.get(conn, []), {}
        for event in early:
            self._take(event)
        # Later re-subscriptions attach to what we created, taking it over from our own dead
        # connection if the hub has not noticed yet.
        self._mode = SubscribeMode.ATTACH
        lost, self._early_loss = self._early_loss.get(conn), {}
        if lost is not None:
            # The hub let the topic (or this attachment) go right after answering: attached
            # there, nothing would ever be delivered. Subscribe again.
            self._lost(lost)
        if self._registry is not None and not first:
            self.on_lanes_changed()  # the plan may have changed while this was detached

    # events from the connection -----------------------------------------------------------

    @property
    def _attaching(self) -> bool:
        """An attach is under way whose answer has not been taken in: with no attachment, or
        while the current one is being replaced (make-before-break)."""
        return self._conn is None or self._moving_from is self._conn

    def on_deliver(self, conn: HubConnection, event: Deliver) -> None:
        if self._conn is conn:
            self._take(event)
        elif self._attaching:
            self.held_deliveries += 1
            self._early.setdefault(conn, []).append(event)

    def on_moved(self, conn: HubConnection, reason: str) -> None:
        if self._conn is conn:
            self._lost(f"topic moved: {reason}")
        elif self._attaching:
            self._early_loss[conn] = f"topic moved: {reason}"

    def on_subscription_moved(self, conn: HubConnection, reason: str) -> None:
        """The plan serves this subscription elsewhere: attach there, reading here meanwhile."""
        if self._conn is not conn:
            self.on_moved(conn, reason)
            return
        if self._closed:
            return
        self._moving_from = conn
        if self._reattach is None or self._reattach.done():
            log.info(
                "subscription %r/%r: %s; attaching there, reading here until then",
                self.topic,
                self.name,
                reason,
            )
            self._reattach = asyncio.get_running_loop().create_task(self._resubscribe())

    def on_connection_lost(self, conn: HubConnection) -> None:
        if self._conn is conn:
            self._lost("connection to hub lost")
        elif self._attaching:
            self._early_loss[conn] = "connection to hub lost"

    def on_forced_close(self, conn: HubConnection, event: SubscriptionForcedClosed) -> None:
        if self._attaching and self._conn is not conn and event.code.resubscribe:
            self._early_loss[conn] = f"closed by hub: {event.reason}"
            return
        if self._conn is not conn:
            return
        if event.code is CloseReason.RESET:
            # Delivery restarts at the new position: what is queued and not handed out yet
            # belongs to the old one (as a seek discards fetched records). A lane's queue is
            # its topic's, shared with the other lanes: it is left alone.
            self._reset = True
            if not self.lane:
                self._drop_queued()
        if event.code.resubscribe:
            self._lost(f"closed by hub: {event.reason}")
            return
        # Someone else took the subscription over, deleted it or its topic, on purpose, or the
        # permission to subscribe was revoked: stop.
        self._conn = None
        if self.lane and event.code is CloseReason.TOPIC_DELETED:
            # A sealed lane its readers had finished, dropped: nothing is lost, and the
            # topic's subscription forgets it when it next looks at the lanes.
            self._closed = True
            return
        if not self._closed:
            error: HedwigError
            if event.code is CloseReason.TOPIC_DELETED:
                error = NoSuchTopicError(f"topic {self.topic!r} was deleted")
            elif event.code is CloseReason.UNSUBSCRIBED:
                error = NoSuchSubscriptionError(
                    f"subscription {self.name!r} was deleted: {event.reason}"
                )
            elif event.code is CloseReason.ACCESS_REVOKED:
                error = ForbiddenError(f"closed by hub: {event.reason}", topic=self.topic)
            else:
                error = SubscriptionBusyError(f"closed by hub: {event.reason}")
            self.error = error
            self._inbox.put(error)

    def _drop_queued(self) -> None:
        self._inbox.drop_messages()

    def _take(self, event: Deliver) -> None:
        """Queue what this batch holds past the last message handed over (the rest are
        redeliveries): its sequence ids are consecutive, so that is all from some point on."""
        batch = event.batch
        last_seen = self._last_seen
        if batch.last_seq <= last_seen:
            return
        messages = batch.iter_delivered(self.lane)
        if batch.first_seq <= last_seen:
            messages = itertools.islice(messages, last_seen - batch.first_seq + 1, None)
        self._last_seen = batch.last_seq
        self._inbox.put_messages(messages)

    def _lost(self, reason: str) -> None:
        self._conn = None
        if self._closed:
            return
        if self._reattach is None or self._reattach.done():
            log.info("subscription %r/%r: %s; re-subscribing", self.topic, self.name, reason)
            self._reattach = asyncio.get_running_loop().create_task(self._resubscribe())

    async def _resubscribe(self) -> None:
        router = self._router
        backoff = Backoff(router.retry, router.clock)
        while not self._closed and self._attaching:
            try:
                await self.attach(force=True)
                self.resubscriptions += 1
                continue  # attached, unless a move told with the answer undid it at once
            except HedwigError as exc:
                if not exc.retriable and not isinstance(exc, DeadlineExceededError):
                    self.error = exc
                    self._inbox.put(exc)
                    return
                if not await backoff.wait():
                    backoff = Backoff(router.retry, router.clock)

    def _send_close(self, conn: HubConnection) -> None:
        with contextlib.suppress(HedwigError):
            fut = conn.send_nowait(
                CloseSubscription(request_id=conn.next_id(), topic=self.topic, subscriber=self.name)
            )
            fut.add_done_callback(ignore_answer)

    async def close(self) -> None:
        """Stop delivery; the subscription and its consume mark stay on the hub."""
        if self._closed:
            return
        self._closed = True
        if self._reattach is not None:
            self._reattach.cancel()
        if self._lanes_task is not None:
            self._lanes_task.cancel()
        for child in list(self._lanes.values()):
            await child.close()
            if self._registry is not None:
                self._registry(child, False)
        self._lanes.clear()
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            with contextlib.suppress(HedwigError, TimeoutError):
                await conn.request(
                    CloseSubscription(
                        request_id=conn.next_id(), topic=self.topic, subscriber=self.name
                    ),
                    CLOSE_TIMEOUT_S,
                )
        if not self.lane:
            self._inbox.put(None)  # a lane's queue is its topic's: the topic ends it
