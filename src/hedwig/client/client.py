"""The asynchronous client: publish, subscribe and read through any hub.

Routing: a request for a topic goes to the hub last known to own it, else to one of the hubs
the client was given. A NOT_RESPONSIBLE answer names the owner (or the hub chosen to become
it); the client retries there with the redirected flag, so that hub claims instead of choosing
again. TOPIC_MOVING, SERVICE_UNAVAILABLE and lost connections are retried with backoff until
the retry deadline, which is how a client rides through a hub failure or a topic move.

Publishing is batched per topic and ordered: messages are sent in batches that carry the
publisher id and a per-topic publisher sequence; when a batch fails, later batches wait until
it has been re-sent and acknowledged, so the log holds each publisher's messages in the order
they were published. A re-sent batch that the hub had already stored is recognised as a
duplicate and not stored twice.

Subscribing returns a ``Subscriber``, an async iterator of messages that re-subscribes by
itself after a hub failure, a topic move or a forced close by a hub, and skips redeliveries
of messages it already handed out.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import struct
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from hedwig.client.retry import Backoff, RetryPolicy
from hedwig.clock import Clock, SystemClock
from hedwig.errors import ConnectionLostError, HedwigError, TimeoutError_, UsageError
from hedwig.net.connection import Answer, Event, HubConnection
from hedwig.protocol import status
from hedwig.protocol.frames import (
    CloseSubscription,
    Consume,
    Deliver,
    DeliveredMessage,
    Frame,
    Message,
    Messages,
    Publish,
    Published,
    Read,
    ReleaseTopic,
    Subscribe,
    Subscribed,
    SubscribeMode,
    SubscriptionForcedClosed,
    TopicInfo,
    TopicMoved,
    TopicStats,
    Unsubscribe,
    encode_message,
)
from hedwig.protocol.names import validate_name

log = logging.getLogger(__name__)

MAX_REDIRECTS = 3
HAND_OFF_PAUSE_S = 0.01
_U32 = struct.Struct(">I")
_NO_KEY = _U32.pack(0xFFFFFFFF)
_NO_HEADERS = b"\x00\x00"

# Builds a request from its request id and the redirected flag.
_FrameMaker = Callable[[int, bool], Frame]


@dataclass(frozen=True, slots=True)
class PublishResult:
    """Where a message landed: its sequence id in the topic (0 if a duplicate of unknown place)."""

    seq: int
    duplicate: bool = False


class HedwigClient:
    """Connects to any hub(s); keyword-only options, each with a reasoned default."""

    def __init__(
        self,
        hubs: str | Sequence[str],
        *,
        publisher_id: str | None = None,
        max_batch_messages: int = 2000,
        max_batch_bytes: int = 1024 * 1024,
        max_inflight_batches: int = 16,
        linger_s: float = 0.0,
        max_message_size: int = 1024 * 1024,
        retry: RetryPolicy | None = None,
        request_timeout_s: float = 30.0,
        clock: Clock | None = None,
    ) -> None:
        self.hubs = [h.strip() for h in ([hubs] if isinstance(hubs, str) else hubs) if h.strip()]
        if not self.hubs:
            raise UsageError("at least one hub address is needed")
        self.hubs = [a for h in self.hubs for a in h.split(",") if a]
        self.publisher_id = publisher_id or uuid.uuid4().hex
        self.max_batch_messages = max_batch_messages
        self.max_batch_bytes = max_batch_bytes
        self.max_inflight_batches = max_inflight_batches
        self.linger_s = linger_s
        self.max_message_size = max_message_size
        self.retry = retry or RetryPolicy()
        self.request_timeout_s = request_timeout_s
        self.clock = clock or SystemClock()
        self._conns: dict[str, HubConnection] = {}
        self._connecting: dict[str, asyncio.Future[HubConnection]] = {}
        self._owners: dict[str, str] = {}
        self._claim_hints: set[str] = set()
        self._next_hub = itertools.cycle(range(len(self.hubs)))
        self._publishers: dict[str, _TopicPublisher] = {}
        self._subscribers: dict[tuple[str, str], Subscriber] = {}
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
        for sub in list(self._subscribers.values()):
            await sub.close()
        self._closed = True
        for conn in list(self._conns.values()):
            conn.close()

    # connections and routing --------------------------------------------------------------

    async def _connection(self, address: str) -> HubConnection:
        conn = self._conns.get(address)
        if conn is not None and not conn.closed:
            return conn
        pending = self._connecting.get(address)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[HubConnection] = asyncio.get_running_loop().create_future()
        self._connecting[address] = fut
        try:
            conn = await HubConnection.open(address, self._on_event, self._on_close)
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()
            raise
        finally:
            self._connecting.pop(address, None)
        self._conns[address] = conn
        fut.set_result(conn)
        return conn

    def _on_close(self, conn: HubConnection) -> None:
        if self._conns.get(conn.address) is conn:
            del self._conns[conn.address]
        for topic, owner in list(self._owners.items()):
            if owner == conn.address:
                del self._owners[topic]
        for sub in list(self._subscribers.values()):
            if sub._conn is conn:
                sub._lost("connection to hub lost")

    def _on_event(self, conn: HubConnection, event: Event) -> None:
        if isinstance(event, Deliver):
            sub = self._subscribers.get((event.topic, event.subscriber))
            if sub is not None:
                if sub._conn is conn:
                    sub._deliver(event)
                elif sub._conn is None:
                    # Delivery can overtake the coroutine that handles the SUBSCRIBED answer
                    # (both arrive in one read): keep it until we know which hub attached us.
                    sub._early.setdefault(conn, []).append(event)
            return
        if isinstance(event, TopicMoved):
            if self._owners.get(event.topic) == conn.address:
                del self._owners[event.topic]
            if event.new_owner:
                # The old owner named its successor: go there as a redirected client would,
                # so it claims the topic rather than choosing again.
                self._owners[event.topic] = event.new_owner
                self._claim_hints.add(event.topic)
            pub = self._publishers.get(event.topic)
            if pub is not None:
                pub.barrier()
            for (topic, _), sub in list(self._subscribers.items()):
                if topic == event.topic and sub._conn is conn:
                    sub._lost(f"topic moved: {event.reason}")
            return
        if isinstance(event, SubscriptionForcedClosed):
            sub = self._subscribers.get((event.topic, event.subscriber))
            if sub is not None and sub._conn is conn:
                sub._lost(f"closed by hub: {event.reason}", forced=True)

    def _route(self, topic: str) -> str:
        owner = self._owners.get(topic)
        return owner if owner is not None else self.hubs[next(self._next_hub)]

    async def _topic_request(
        self,
        topic: str,
        make: _FrameMaker,
        *,
        deadline_s: float | None = None,
        before_retry: Callable[[], Awaitable[None]] | None = None,
    ) -> tuple[Answer, HubConnection]:
        """Send a topic request to its owner, following redirects and retrying transient errors.

        ``before_retry`` is awaited before every attempt after the first (redirects included):
        ordered publishing uses it to let earlier batches go first.
        """
        policy = self.retry if deadline_s is None else _with_deadline(self.retry, deadline_s)
        backoff = Backoff(policy, self.clock)
        redirected = topic in self._claim_hints
        self._claim_hints.discard(topic)
        redirects = 0
        hand_off_waits = 0
        address = self._route(topic)
        while True:
            try:
                conn = await self._connection(address)
                answer = await conn.request(
                    make(conn.next_id(), redirected), self.request_timeout_s
                )
                self._owners[topic] = address
                return answer, conn
            except status.NotResponsibleError as exc:
                self._owners.pop(topic, None)
                if exc.owner and redirects < MAX_REDIRECTS:
                    redirects += 1
                    address, redirected = exc.owner, True
                    if before_retry is not None:
                        await before_retry()
                    continue
                err: HedwigError = exc
            except status.ServerError as exc:
                if not exc.retriable:
                    raise
                self._owners.pop(topic, None)
                if isinstance(exc, status.TopicMovingError) and exc.detail and hand_off_waits < 25:
                    # A hand-off to a named hub is under way and takes a few tens of ms: go
                    # there after a short fixed pause (the destination is told to claim as
                    # soon as the old owner is done), rather than backing off exponentially.
                    hand_off_waits += 1
                    redirects = 0
                    address, redirected = exc.detail, True
                    self._owners[topic] = exc.detail
                    if before_retry is not None:
                        await before_retry()
                    await self.clock.sleep(HAND_OFF_PAUSE_S)
                    continue
                err = exc
            except ConnectionLostError as exc:
                self._owners.pop(topic, None)
                err = exc
            if before_retry is not None:
                # At once, before the backoff sleep: ordered publishing closes its gate here,
                # so no later batch can reach a new owner ahead of this one.
                await before_retry()
            if not await backoff.wait():
                raise TimeoutError_(
                    f"topic {topic!r}: gave up after {policy.deadline_s}s: {err}"
                ) from err
            redirects = 0
            redirected = False
            address = self._route(topic)

    # publishing ---------------------------------------------------------------------------

    def _publisher(self, topic: str) -> _TopicPublisher:
        pub = self._publishers.get(topic)
        if pub is None:
            validate_name(topic)
            pub = self._publishers[topic] = _TopicPublisher(self, topic)
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
        if self._closed:
            raise UsageError("client is closed")
        pub = self._publishers.get(topic) or self._publisher(topic)
        if key is None and not headers:
            # The common case, encoded inline: no Message object on the hot path.
            size = len(value)
            raw = b"".join((_NO_KEY, _U32.pack(size), value, _NO_HEADERS))
        else:
            msg = Message(bytes(value), key, tuple(headers))
            size = msg.size
            buf = bytearray()
            encode_message(msg, buf)
            raw = bytes(buf)
        if size > self.max_message_size:
            raise UsageError(
                f"message of {size} bytes exceeds the limit of {self.max_message_size}"
            )
        return pub.add(raw)

    async def flush(self, topic: str | None = None) -> None:
        for name, pub in list(self._publishers.items()):
            if topic is None or name == topic:
                await pub.flush()

    # subscribing --------------------------------------------------------------------------

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
        validate_name(topic)
        validate_name(subscriber, what="subscriber")
        key = (topic, subscriber)
        if key in self._subscribers:
            raise UsageError(f"already subscribed to {topic!r} as {subscriber!r}")
        sub = Subscriber(self, topic, subscriber, mode, message_window, message_bound, auto_consume)
        self._subscribers[key] = sub
        try:
            await sub._attach(force=force_attach)
        except BaseException:
            self._subscribers.pop(key, None)
            raise
        return sub

    async def unsubscribe(self, topic: str, subscriber: str) -> None:
        sub = self._subscribers.get((topic, subscriber))
        if sub is not None:
            await sub.close()
        await self._topic_request(topic, lambda rid, r: Unsubscribe(rid, topic, subscriber))

    # reading ------------------------------------------------------------------------------

    async def read(
        self, topic: str, start_seq: int, *, max_messages: int = 10_000, max_bytes: int = 8 << 20
    ) -> Messages:
        """Messages from ``start_seq`` on, without a subscription (for batch readers)."""
        answer, _ = await self._topic_request(
            topic, lambda rid, r: Read(rid, topic, start_seq, max_messages, max_bytes, r)
        )
        assert isinstance(answer, Messages)
        return answer

    async def topic_info(self, topic: str) -> TopicInfo:
        answer, _ = await self._topic_request(topic, lambda rid, r: TopicStats(rid, topic, r))
        assert isinstance(answer, TopicInfo)
        return answer

    async def move_topic(
        self, topic: str, to: str | None = None, *, reason: str = "move requested"
    ) -> None:
        """Ask the topic's owner to hand it over gracefully (to ``to`` if given)."""
        await self._topic_request(topic, lambda rid, r: ReleaseTopic(rid, topic, to, reason))

    def owner_of(self, topic: str) -> str | None:
        """The hub this client last saw owning ``topic``."""
        return self._owners.get(topic)


def _with_deadline(policy: RetryPolicy, deadline_s: float) -> RetryPolicy:
    return RetryPolicy(policy.initial_delay_s, policy.max_delay_s, deadline_s, policy.rng)


@dataclass
class _Batch:
    pseq: int
    count: int
    payload: bytes
    futures: list[asyncio.Future[PublishResult]]


class _TopicPublisher:
    """Ordered, batched, pipelined publishing to one topic (see the module docstring)."""

    def __init__(self, client: HedwigClient, topic: str) -> None:
        self.client = client
        self.topic = topic
        # Encoded messages waiting for a batch, and their futures (two deques: the hot path).
        self._raws: deque[bytes] = deque()
        self._futs: deque[asyncio.Future[PublishResult]] = deque()
        self._next_pseq = 1
        self._inflight = asyncio.Semaphore(client.max_inflight_batches)
        self._wakeup = asyncio.Event()
        self._settled = asyncio.Event()
        self._gate = asyncio.Event()
        self._gate.set()
        self._failed: set[int] = set()
        self._barrier_pseq = 0  # batches below this must settle before the gate reopens
        self._outstanding: dict[int, _Batch] = {}
        self._loop = asyncio.get_running_loop()
        self._task = self._loop.create_task(self._run())

    def add(self, raw: bytes) -> asyncio.Future[PublishResult]:
        """Queue one encoded message (``encode_message``'s bytes)."""
        fut: asyncio.Future[PublishResult] = self._loop.create_future()
        self._raws.append(raw)
        self._futs.append(fut)
        if not self._wakeup.is_set():
            self._wakeup.set()
        return fut

    def stop(self) -> None:
        self._task.cancel()

    def barrier(self) -> None:
        """The topic moved: hold new batches until those in flight have settled, so none of
        them can reach the new owner ahead of an earlier one still coming back from the old."""
        if self._outstanding:
            self._barrier_pseq = max(self._barrier_pseq, self._next_pseq)
            self._gate.clear()

    def _reopen(self) -> None:
        if self._barrier_pseq and (
            not self._outstanding or min(self._outstanding) >= self._barrier_pseq
        ):
            self._barrier_pseq = 0
        if not self._failed and not self._barrier_pseq:
            self._gate.set()

    async def flush(self) -> None:
        futs = list(self._futs) + [f for b in self._outstanding.values() for f in b.futures]
        if futs:
            await asyncio.gather(*futs, return_exceptions=True)

    async def _run(self) -> None:
        client = self.client
        while True:
            if not self._raws:
                self._wakeup.clear()
                await self._wakeup.wait()
                if client.linger_s:
                    await asyncio.sleep(client.linger_s)
            await self._inflight.acquire()
            await self._gate.wait()
            # While the owner is unknown (a new topic, or just moved), one batch at a time:
            # pipelined first tries could reach different hubs, and whichever claims the topic
            # first would store a later batch ahead of an earlier one.
            while self.topic not in client._owners and self._outstanding:
                self._settled.clear()
                await self._settled.wait()
            raws, futs = self._raws, self._futs
            parts: list[bytes] = []
            size = 0
            max_messages, max_bytes = client.max_batch_messages, client.max_batch_bytes
            while raws and len(parts) < max_messages:
                if parts and size + len(raws[0]) > max_bytes:
                    break
                raw = raws.popleft()
                parts.append(raw)
                size += len(raw)
            take = len(parts)
            batch = _Batch(self._next_pseq, take, b"".join(parts), [futs.popleft() for _ in parts])
            self._next_pseq += take
            self._outstanding[batch.pseq] = batch
            self._loop.create_task(self._send(batch))

    async def _wait_turn(self, batch: _Batch) -> None:
        """Before any re-send: hold back new batches and wait until every earlier batch is
        settled. Without this a later batch could be stored before an earlier one that is
        still being retried, and the earlier one would then look like a duplicate."""
        self._failed.add(batch.pseq)
        self._gate.clear()
        while self._outstanding and min(self._outstanding) < batch.pseq:
            self._settled.clear()
            await self._settled.wait()

    async def _send(self, batch: _Batch) -> None:
        client = self.client
        topic = self.topic

        async def wait_turn() -> None:
            await self._wait_turn(batch)

        try:
            if not self._gate.is_set():
                # A batch made just before a failure was noticed: it must not overtake the
                # failed batches on their way to the new owner.
                while self._outstanding and min(self._outstanding) < batch.pseq:
                    self._settled.clear()
                    await self._settled.wait()
            while True:
                try:
                    answer, _ = await client._topic_request(
                        topic,
                        lambda rid, r: Publish(
                            rid,
                            topic,
                            client.publisher_id,
                            batch.pseq,
                            batch.count,
                            batch.payload,
                            r,
                        ),
                        before_retry=wait_turn,
                    )
                except (TimeoutError_, status.ServerError, UsageError) as exc:
                    for f in batch.futures:
                        if not f.done():
                            f.set_exception(exc)
                    return
                except HedwigError:
                    await self._wait_turn(batch)
                    continue
                assert isinstance(answer, Published)
                first, dup = answer.first_seq, answer.duplicate
                for i, f in enumerate(batch.futures):
                    if not f.done():
                        f.set_result(PublishResult(first + i if first else 0, dup))
                return
        finally:
            self._outstanding.pop(batch.pseq, None)
            self._failed.discard(batch.pseq)
            self._reopen()
            self._settled.set()
            self._inflight.release()


class Subscriber:
    """An attached subscription: ``async for msg in sub`` yields messages in order."""

    def __init__(
        self,
        client: HedwigClient,
        topic: str,
        name: str,
        mode: SubscribeMode,
        window: int,
        bound: int,
        auto_consume: bool,
    ) -> None:
        self.client = client
        self.topic = topic
        self.name = name
        self._mode = mode
        self._window = window
        self._bound = bound
        self._auto_consume = auto_consume
        self._conn: HubConnection | None = None
        self._queue: asyncio.Queue[DeliveredMessage | HedwigError | None] = asyncio.Queue()
        self._last_seen = 0
        self._consumed = 0
        self._closed = False
        self._reattach: asyncio.Task[None] | None = None
        self.resubscriptions = 0
        self.error: HedwigError | None = None
        self._early: dict[HubConnection, list[Deliver]] = {}

    async def _attach(self, *, force: bool) -> None:
        mode = self._mode
        answer, conn = await self.client._topic_request(
            self.topic,
            lambda rid, r: Subscribe(
                rid, self.topic, self.name, mode, self._window, self._bound, r, force
            ),
        )
        assert isinstance(answer, Subscribed)
        if self._last_seen == 0:
            self._last_seen = answer.consumed_seq
            self._consumed = answer.consumed_seq
        self._conn = conn
        early, self._early = self._early.get(conn, []), {}
        for event in early:
            self._deliver(event)
        # Later re-subscriptions attach to what we created, taking it over from our own dead
        # connection if the hub has not noticed yet.
        self._mode = SubscribeMode.ATTACH

    def _deliver(self, event: Deliver) -> None:
        for m in event.batch.delivered():
            if m.seq > self._last_seen:
                self._last_seen = m.seq
                self._queue.put_nowait(m)

    def _lost(self, reason: str, *, forced: bool = False) -> None:
        self._conn = None
        if self._closed:
            return
        if forced and "another connection" in reason:
            # Someone else took the subscription over on purpose: stop, do not fight back.
            self.error = status.SubscriptionBusyError(reason)
            self._queue.put_nowait(self.error)
            return
        if self._reattach is None or self._reattach.done():
            log.info("subscription %r/%r: %s; re-subscribing", self.topic, self.name, reason)
            self._reattach = asyncio.get_running_loop().create_task(self._resubscribe())

    async def _resubscribe(self) -> None:
        backoff = Backoff(self.client.retry, self.client.clock)
        while not self._closed and self._conn is None:
            try:
                await self._attach(force=True)
                self.resubscriptions += 1
                return
            except HedwigError as exc:
                if isinstance(exc, status.ServerError) and not exc.retriable:
                    self.error = exc
                    self._queue.put_nowait(exc)
                    return
                if not await backoff.wait():
                    backoff = Backoff(self.client.retry, self.client.clock)

    def __aiter__(self) -> AsyncIterator[DeliveredMessage]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[DeliveredMessage]:
        while True:
            item = await self._queue.get()
            if item is None:
                return
            if isinstance(item, HedwigError):
                raise item
            yield item
            if self._auto_consume:
                self.consume(item.seq)

    async def next(self, timeout: float | None = None) -> DeliveredMessage:
        """The next message; raises ``TimeoutError_`` after ``timeout`` seconds."""
        try:
            item = await asyncio.wait_for(self._queue.get(), timeout)
        except TimeoutError:
            raise TimeoutError_(f"no message on {self.topic!r} within {timeout}s") from None
        if item is None:
            raise UsageError("subscriber is closed")
        if isinstance(item, HedwigError):
            raise item
        if self._auto_consume:
            self.consume(item.seq)
        return item

    def consume(self, seq: int) -> None:
        """Cumulatively consume every message up to ``seq`` (sent without waiting)."""
        if seq <= self._consumed:
            return
        self._consumed = seq
        conn = self._conn
        if conn is None or conn.closed:
            return  # the hub redelivers past its mark after re-subscription: at least once
        with contextlib.suppress(HedwigError):
            fut = conn.send_nowait(Consume(conn.next_id(), self.topic, self.name, seq))
            fut.add_done_callback(_ignore)

    async def close(self) -> None:
        """Stop delivery; the subscription and its consume mark stay on the hub."""
        if self._closed:
            return
        self._closed = True
        if self._reattach is not None:
            self._reattach.cancel()
        self.client._subscribers.pop((self.topic, self.name), None)
        conn = self._conn
        self._conn = None
        if conn is not None and not conn.closed:
            with contextlib.suppress(HedwigError, TimeoutError):
                await conn.request(CloseSubscription(conn.next_id(), self.topic, self.name), 5.0)
        self._queue.put_nowait(None)


def _ignore(fut: asyncio.Future[Answer]) -> None:
    if not fut.cancelled():
        fut.exception()
