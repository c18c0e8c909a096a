"""The asynchronous client: publish, subscribe and read through any hub.

``HedwigClient`` is the facade; the work is done by three parts, each in its own module:

- ``routing.Router``: connections, which hub owns which topic, redirects and retries;
- ``publishing.TopicPublisher``: ordered, batched, pipelined publishing to one topic;
- ``subscriber.Subscriber``: one subscription, re-attached by itself after failures and moves.

The client routes what hubs push (deliveries, TOPIC_MOVED, forced closes, lost connections) to
the publishers and subscribers they concern. Every wait runs on the injected clock, and the
``network`` decides whether hubs are reached over TCP or in memory (tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Iterable, Sequence

from hedwig.client.publishing import (
    BatchPublishResult,
    PublishResult,
    TopicPublisher,
    chunk_messages,
)
from hedwig.client.retry import RetryPolicy
from hedwig.client.routes import SubscriptionRoute
from hedwig.client.routing import RequestMaker, Router
from hedwig.client.subscribing import Subscriber
from hedwig.clock import Clock, SystemClock
from hedwig.errors import (
    ForbiddenError,
    HedwigError,
    MessageTooLargeError,
    NoSuchSubscriptionError,
    NoSuchTopicError,
    SendFailedError,
    UsageError,
)
from hedwig.net.connection import CONNECT_TIMEOUT_S, HubConnection
from hedwig.net.transport import TCP, Network, TcpNetwork, split_address
from hedwig.protocol import (
    DeleteTopic,
    Deliver,
    DescribeLanes,
    DescribeTopic,
    EncodedMessage,
    Event,
    Lanes,
    LanesChanged,
    Message,
    Messages,
    MoveKind,
    Read,
    ReleaseTopic,
    ResetSubscription,
    ResetTo,
    Subscribed,
    SubscribeMode,
    SubscriptionForcedClosed,
    SubscriptionMoved,
    TopicDescription,
    TopicInfo,
    TopicMoved,
    TopicStats,
    Unsubscribe,
    encode_message,
    lane_name,
    lane_of,
    validate_name,
)
from hedwig.protocol.messages import NO_HEADERS, NO_KEY_BYTES
from hedwig.protocol.wire import U32 as _U32
from hedwig.security.credentials import ClientSecurity

# What a message value may be. A tuple made once: ``bytes | bytearray | memoryview`` written
# in the check would build a union object on every publish.
_VALUE_TYPES = (bytes, bytearray, memoryview)


class HedwigClient:
    """Connects to any hub(s); keyword-only options, each with a reasoned default."""

    def __init__(
        self,
        hubs: str | Sequence[str],
        *,
        publisher_id: str | None = None,
        # Batches are cut at this many messages or bytes: large enough to amortise a round
        # trip and an fsync, small enough to keep one batch's latency low.
        max_batch_messages: int = 2000,
        max_batch_bytes: int = 1024 * 1024,
        # Batches in flight per topic: enough to keep a hub's group commit busy.
        max_inflight_batches: int = 16,
        # Wait this long for more messages before cutting a batch (0: cut at once).
        linger_s: float = 0.0,
        max_message_size: int = 1024 * 1024,
        retry: RetryPolicy | None = None,
        # A request not answered in this long fails its attempt (and is retried).
        request_timeout_s: float = 30.0,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        # A region with fewer hubs than a topic's replication needs (a lone hub with 3/3/2)
        # refuses publishes at once; wait for more hubs instead (up to the retry deadline).
        wait_for_hubs: bool = False,
        # Called (topic, error, seconds so far) whenever a request waits to be retried.
        on_wait: Callable[[str, HedwigError, float], None] | None = None,
        clock: Clock | None = None,
        network: Network | None = None,
        # TLS and credentials (``ClientSecurity.from_env()`` reads HEDWIG_* variables and finds
        # a pod's projected token). None: plaintext and anonymous, which only a hub with
        # security off accepts.
        security: ClientSecurity | None = None,
    ) -> None:
        given = [hubs] if isinstance(hubs, str) else list(hubs)
        addresses = [a.strip() for h in given for a in h.split(",") if a.strip()]
        if not addresses:
            raise UsageError("at least one hub address is needed")
        for address in addresses:
            split_address(address)  # HOST:PORT, or a UsageError now rather than at first use
        self.hubs = addresses
        self.publisher_id = publisher_id or uuid.uuid4().hex
        self.max_batch_messages = max_batch_messages
        self.max_batch_bytes = max_batch_bytes
        self.max_inflight_batches = max_inflight_batches
        self.linger_s = linger_s
        self.max_message_size = max_message_size
        self.retry = retry or RetryPolicy()
        self.clock = clock or SystemClock()
        self.security = security or ClientSecurity()
        if (
            isinstance(network, TcpNetwork)
            and network.client_tls is None
            and self.security.tls is not None
        ):
            # Plain TCP given with TLS asked for would send the credentials in the clear.
            raise UsageError(
                "security asks for TLS but the network given does none: leave network out, "
                "or give a TcpNetwork with client_tls"
            )
        if network is None:
            reload = self.security.reload
            network = (
                TcpNetwork(
                    client_tls=self.security.tls,
                    before_connect=reload.reload_if_changed if reload else None,
                )
                if self.security.tls
                else TCP
            )
        self.router = Router(
            addresses,
            retry=self.retry,
            request_timeout_s=request_timeout_s,
            connect_timeout_s=connect_timeout_s,
            clock=self.clock,
            network=network,
            on_event=self._on_event,
            on_close=self._on_close,
            wait_for_hubs=wait_for_hubs,
            on_wait=on_wait,
            credentials=self.security.credentials,
        )
        self._publishers: dict[str, TopicPublisher] = {}
        self._subscribers: dict[SubscriptionRoute, Subscriber] = {}
        self._closed = False

    async def __aenter__(self) -> HedwigClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        for pub in list(self._publishers.values()):
            with contextlib.suppress(HedwigError):
                await pub.flush()
            pub.stop()
        # Let go of them: a client kept after closing (a tool's, a test's) would otherwise
        # hold every topic's publisher, a few kilobytes each, for as long as it lives.
        self._publishers.clear()
        for sub in list(self._subscribers.values()):
            await sub.close()
        self._subscribers.clear()
        self._closed = True
        self.router.close()

    async def connection(self, address: str) -> HubConnection:
        """The client's connection to the hub at ``address`` (for tools that send raw
        requests)."""
        return await self.router.connection(address)

    def owner_of(self, topic: str) -> str | None:
        """The hub this client last saw owning ``topic``."""
        return self.router.owner_of(topic)

    # what hubs push -------------------------------------------------------------------------

    def _on_event(self, conn: HubConnection, event: Event) -> None:
        if isinstance(event, Deliver):
            sub = self._subscribers.get(SubscriptionRoute(event.topic, event.subscriber))
            if sub is not None:
                sub.on_deliver(conn, event)
        elif isinstance(event, TopicMoved):
            pub = self._publishers.get(event.topic) or self._publishers.get(lane_of(event.topic)[0])
            if pub is not None and pub.target == event.topic:
                pub.barrier()
            for key, sub in list(self._subscribers.items()):
                if key.topic == event.topic:
                    sub.on_moved(conn, event.reason)
        elif isinstance(event, SubscriptionForcedClosed):
            sub = self._subscribers.get(SubscriptionRoute(event.topic, event.subscriber))
            if sub is not None:
                sub.on_forced_close(conn, event)
        elif isinstance(event, LanesChanged):
            for key, sub in list(self._subscribers.items()):
                if key.topic == event.topic:
                    sub.on_lanes_changed()
        elif isinstance(event, SubscriptionMoved):
            sub = self._subscribers.get(SubscriptionRoute(event.topic, event.subscriber))
            if sub is not None:
                sub.on_subscription_moved(
                    conn, f"served by {event.hub or 'the owner'} now: {event.reason}"
                )

    def _on_close(self, conn: HubConnection) -> None:
        for sub in list(self._subscribers.values()):
            sub.on_connection_lost(conn)

    # publishing -----------------------------------------------------------------------------

    def _publisher(self, topic: str) -> TopicPublisher:
        pub = self._publishers.get(topic)
        if pub is None:
            validate_name(topic)
            pub = self._publishers[topic] = TopicPublisher(
                topic,
                publisher_id=self.publisher_id,
                router=self.router,
                limits=self,
                clock=self.clock,
            )
        return pub

    async def publish(
        self,
        topic: str,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: Iterable[tuple[str, bytes]] = (),
    ) -> PublishResult:
        """Publish one message; returns once it is durable. Batched with concurrent publishes."""
        return await self.publish_nowait(topic, value, key=key, headers=headers)

    def publish_nowait(
        self,
        topic: str,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: Iterable[tuple[str, bytes]] = (),
    ) -> asyncio.Future[PublishResult]:
        """Queue one message; the future resolves when it is durable (for pipelined callers)."""
        raw = self._encoded(value, key, headers)
        return (self._publishers.get(topic) or self._publisher(topic)).add(raw)

    def send(
        self,
        topic: str,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: Iterable[tuple[str, bytes]] = (),
    ) -> None:
        """Queue one message and wait for nothing, as Kafka's ``produce`` without a delivery
        callback: the same ordering, batching and retries as ``publish_nowait``, without the
        future (a third of a one-by-one publish's cost, most of it the cycle collector walking
        the futures in flight). ``flush`` waits until the messages are durable, and raises
        ``SendFailedError`` if any failed for good; mix with ``publish_nowait`` for the few
        whose outcome you want one by one."""
        raw = self._encoded(value, key, headers)
        (self._publishers.get(topic) or self._publisher(topic)).send(raw)

    def _encoded(
        self, value: bytes, key: bytes | None, headers: Iterable[tuple[str, bytes]]
    ) -> EncodedMessage:
        """One message checked and encoded for ``publish_nowait`` and ``send``."""
        if self._closed:
            raise UsageError("client is closed")
        if type(value) is not bytes and not isinstance(value, _VALUE_TYPES):
            raise UsageError(
                f"a message value is bytes, not {type(value).__name__} (encode text first)"
            )
        if key is None and not headers:
            # The common case, encoded inline exactly as ``encode_value`` does: a function call
            # per message (even ``cast``) is a few per cent of a publisher's throughput.
            size = len(value)
            raw: EncodedMessage = b"".join(  # type: ignore[assignment]
                (NO_KEY_BYTES, _U32.pack(size), value, NO_HEADERS)
            )
        else:
            msg = Message(value=bytes(value), key=key, headers=tuple(headers))
            size = msg.size
            raw = encode_message(msg)
        if size > self.max_message_size:
            raise MessageTooLargeError(
                f"message of {size} bytes exceeds the limit of {self.max_message_size}",
                size=size,
                limit=self.max_message_size,
            )
        return raw

    async def publish_batch(
        self, topic: str, messages: Sequence[bytes | Message]
    ) -> BatchPublishResult:
        """Publish many messages at once, in order; returns once all are durable.

        The same guarantees as publishing them one by one (in order, each stored once, batched
        with concurrent publishes), for far less work per message: they are encoded together
        and settle per batch, with one result for the call (``BatchPublishResult``, a sequence
        of ``PublishResult``). If it raises, the messages before some point may be stored and
        those after it are not (as if published one by one, the first failure and every one
        after it failing)."""
        return await self.publish_batch_nowait(topic, messages)

    def publish_batch_nowait(
        self, topic: str, messages: Sequence[bytes | Message]
    ) -> asyncio.Future[BatchPublishResult]:
        """Queue many messages (values, or ``Message`` for keys and headers); the future
        resolves once all are durable. Each message is checked as ``publish_nowait`` checks
        it, and a bad one refuses the whole call before anything is queued."""
        if self._closed:
            raise UsageError("client is closed")
        pub = self._publishers.get(topic) or self._publisher(topic)
        return pub.add_chunks(
            chunk_messages(
                messages,
                max_message_size=self.max_message_size,
                max_batch_messages=self.max_batch_messages,
                max_batch_bytes=self.max_batch_bytes,
            )
        )

    async def flush(self, topic: str | None = None) -> None:
        """Wait until every message published so far (to ``topic``, or to any) has settled.
        Raises ``SendFailedError`` (for the first topic with any) if messages queued by
        ``send`` failed for good since the last flush; the other topics are flushed first."""
        failed: SendFailedError | None = None
        for name, pub in list(self._publishers.items()):
            if topic is None or name == topic:
                try:
                    await pub.flush()
                except SendFailedError as exc:
                    failed = failed or exc
        if failed is not None:
            raise failed

    # subscribing ----------------------------------------------------------------------------

    async def subscribe(
        self,
        topic: str,
        subscriber: str,
        *,
        mode: SubscribeMode = SubscribeMode.CREATE_OR_ATTACH,
        message_window: int = 1000,
        message_bound: int = 0,
        force_attach: bool = False,
        auto_consume: bool = False,
    ) -> Subscriber:
        if self._closed:
            raise UsageError("client is closed")
        validate_name(topic)
        validate_name(subscriber, what="subscriber")
        key = SubscriptionRoute(topic, subscriber)
        existing = self._subscribers.get(key)
        if existing is not None and not existing.closed:
            raise UsageError(f"already subscribed to {topic!r} as {subscriber!r}")
        sub = Subscriber(
            self.router,
            topic,
            subscriber,
            mode=mode,
            window=message_window,
            bound=message_bound,
            auto_consume=auto_consume,
            registry=self._lane_registry,
        )
        self._subscribers[key] = sub
        try:
            await sub.attach(force=force_attach)
            # A topic served by lanes is read from every lane before this returns, so
            # nothing published to a lane after it returns is missed.
            await sub.follow_lanes()
        except BaseException:
            self._subscribers.pop(key, None)
            await sub.close()
            raise
        return sub

    def _lane_registry(self, sub: Subscriber, add: bool) -> None:
        """Lanes' subscriptions get the events of their lane's topic."""
        key = SubscriptionRoute(sub.topic, sub.name)
        if add:
            self._subscribers[key] = sub
        elif self._subscribers.get(key) is sub:
            del self._subscribers[key]

    async def close_subscription(self, topic: str, subscriber: str) -> None:
        sub = self._subscribers.pop(SubscriptionRoute(topic, subscriber), None)
        if sub is not None:
            await sub.close()

    async def unsubscribe(self, topic: str, subscriber: str) -> None:
        """Delete the subscription (and its lanes' subscriptions, for a topic with lanes)."""
        await self.close_subscription(topic, subscriber)
        lanes = await self._other_lanes(topic, NoSuchTopicError)
        await self._unsubscribe(topic, subscriber)
        for index in lanes:
            with contextlib.suppress(NoSuchSubscriptionError, NoSuchTopicError):
                await self._unsubscribe(lane_name(topic, index), subscriber)

    async def _unsubscribe(self, topic: str, subscriber: str) -> None:
        await self._request_once(
            topic,
            lambda rid, _: Unsubscribe(request_id=rid, topic=topic, subscriber=subscriber),
            already_done=NoSuchSubscriptionError,
            route=SubscriptionRoute(topic, subscriber),
        )

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

    # reading and administration -------------------------------------------------------------

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
        self, topic: str, subscriber: str, to: ResetTo | int = ResetTo.EARLIEST
    ) -> int:
        """Move a subscription to a sequence id (delivery restarts at it), to the earliest kept
        message, or to the end; returns the new consume mark. An attached subscriber is closed
        and attaches again at the new position."""
        validate_name(subscriber, what="subscriber")
        kind, seq = (ResetTo.SEQ, to) if not isinstance(to, ResetTo) else (to, 0)
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
