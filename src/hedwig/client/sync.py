"""A thin synchronous facade: the async client on an event loop in a background thread.

For scripts and frameworks without asyncio (Spark executors among them). Every call blocks
until the async call it wraps has finished, with the same results and the same typed
exceptions, except ``send``, which returns at once as ``HedwigClient.send`` does.

``send`` checks and encodes the message in the caller's thread (a bad one raises there, at
once) and appends it to an outbox; the first message of a burst schedules one callback on the
loop, which hands every message queued by then to the client's publishers. So a thread sending
flat out pays a lock and an append per message, not a wake-up of the loop. ``flush`` is
scheduled after that callback (the loop runs callbacks in the order they were scheduled), so it
waits for every message sent before it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any, TypeVar

from hedwig.client.facade import HedwigClient
from hedwig.client.publishing import BatchPublishResult, PublishResult
from hedwig.client.subscribing import Subscriber
from hedwig.client.subscribing.acking import MAX_NACK_DELAY_S
from hedwig.errors import DeadlineExceededError, UsageError
from hedwig.protocol import (
    DeliveredMessage,
    EncodedMessage,
    Message,
    Messages,
    SubscribeMode,
    TopicInfo,
    validate_name,
)

T = TypeVar("T")


class SyncClient:
    def __init__(self, hubs: str | Sequence[str], **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="hedwig-client", daemon=True
        )
        self._thread.start()
        self._client: HedwigClient = self._run(self._make(hubs, options))
        # Messages ``send`` queued for the loop, and whether a callback is due to take them.
        self._outbox: list[tuple[str, EncodedMessage]] = []
        self._outbox_lock = threading.Lock()
        self._outbox_due = False
        self._named: set[str] = set()  # topic names ``send`` found valid

    @staticmethod
    async def _make(hubs: str | Sequence[str], options: dict[str, Any]) -> HedwigClient:
        return HedwigClient(hubs, **options)

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def submit(self, fn: Callable[[HedwigClient], Awaitable[T]]) -> concurrent.futures.Future[T]:
        """Start ``fn(client)`` on the client's loop and return at once.

        For callers that keep several requests in flight from plain threads (a Spark reader
        keeps the next READ going while it decodes the previous answer).
        """

        async def run() -> T:
            return await fn(self._client)

        return asyncio.run_coroutine_threadsafe(run(), self._loop)

    def call(self, fn: Callable[[HedwigClient], Awaitable[T]], timeout: float | None = None) -> T:
        """``fn(client)`` on the client's loop; blocks until it is done."""
        return self.submit(fn).result(timeout)

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._run(self._client.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def publish(self, topic: str, value: bytes, **kw: Any) -> PublishResult:
        """``HedwigClient.publish``, the same keywords (``key``, ``headers``,
        ``deliver_after``, ``deliver_at``); returns when the message is durable."""
        return self._run(self._client.publish(topic, value, **kw))

    def publish_batch(self, topic: str, messages: Iterable[bytes | Message]) -> BatchPublishResult:
        """Publish many messages at once (``HedwigClient.publish_batch``, the same result);
        returns when all are durable."""
        return self._run(self._client.publish_batch(topic, list(messages)))

    def send(
        self,
        topic: str,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: Iterable[tuple[str, bytes]] = (),
        deliver_after: float | None = None,
        deliver_at: float | datetime | None = None,
    ) -> None:
        """Queue one message and wait for nothing (``HedwigClient.send``): a message the
        client refuses (not bytes, too large, the client closed) raises here; ``flush``
        raises ``SendFailedError`` for those that failed for good later."""
        if topic not in self._named:
            validate_name(topic)  # here, not on the loop, where it would stop the hand-over
            self._named.add(topic)
        raw = self._client.encode(
            value, key=key, headers=headers, deliver_after=deliver_after, deliver_at=deliver_at
        )
        with self._outbox_lock:
            self._outbox.append((topic, raw))
            if self._outbox_due:
                return
            self._outbox_due = True
        self._loop.call_soon_threadsafe(self._hand_over)

    def _hand_over(self) -> None:
        """On the loop: every message ``send`` queued so far, to the client's publishers."""
        with self._outbox_lock:
            outbox, self._outbox = self._outbox, []
            self._outbox_due = False
        for topic, raw in outbox:
            self._client.send_encoded(topic, raw)

    def flush(self, topic: str | None = None, timeout: float | None = None) -> None:
        """Wait until every message published or sent so far (to ``topic``, or to any) has
        settled (``HedwigClient.flush``)."""
        self._run(self._client.flush(topic), timeout)

    def read(self, topic: str, start_seq: int, **kw: Any) -> Messages:
        return self._run(self._client.read(topic, start_seq, **kw))

    def topic_info(self, topic: str) -> TopicInfo:
        return self._run(self._client.topic_info(topic))

    def subscribe(
        self,
        topic: str,
        subscriber: str,
        *,
        mode: SubscribeMode = SubscribeMode.CREATE_OR_ATTACH,
        **kw: Any,
    ) -> SyncSubscriber:
        sub = self._run(self._client.subscribe(topic, subscriber, mode=mode, **kw))
        return SyncSubscriber(self, sub)

    def create_subscription(self, topic: str, subscriber: str, **kw: Any) -> int:
        """``HedwigClient.create_subscription``: a subscription of a type and its policy."""
        return self._run(self._client.create_subscription(topic, subscriber, **kw))

    def unsubscribe(self, topic: str, subscriber: str) -> None:
        self._run(self._client.unsubscribe(topic, subscriber))


class SyncSubscriber:
    def __init__(self, owner: SyncClient, sub: Subscriber) -> None:
        self._owner = owner
        self._sub = sub

    def next(self, timeout: float | None = None) -> DeliveredMessage:
        return self._owner._run(self._sub.next(timeout))

    def __iter__(self) -> Iterator[DeliveredMessage]:
        while True:
            try:
                yield self.next(None)
            except DeadlineExceededError:
                return

    def consume(self, seq: int) -> None:
        self._owner._loop.call_soon_threadsafe(self._sub.consume, seq)

    def ack(self, msg: DeliveredMessage) -> None:
        """A shared or failover subscription's message is processed (``Subscriber.ack``)."""
        self._owner._loop.call_soon_threadsafe(self._sub.ack, msg)

    def nack(self, msg: DeliveredMessage, *, delay: float = 0.0) -> None:
        """It was not: deliver it again (``Subscriber.nack``)."""
        if not 0 <= delay <= MAX_NACK_DELAY_S:
            raise UsageError(f"a nack's delay is 0 to {MAX_NACK_DELAY_S:.0f} seconds")
        self._owner._loop.call_soon_threadsafe(lambda: self._sub.nack(msg, delay=delay))

    def close(self) -> None:
        self._owner._run(self._sub.close())
