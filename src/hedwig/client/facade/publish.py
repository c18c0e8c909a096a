"""The client's publishing calls: each message checked and encoded, then queued on its topic's
publisher (``hedwig.client.publishing``).

The per-message path. ``publish_nowait`` and ``send`` check a message and encode it here, the
common case (a value, no key, no headers) inline, exactly as ``encode_value`` does: a function
call per message (even ``cast``) is a few per cent of a publisher's throughput; the value type
check compares ``type`` first and against a tuple made once (``bytes | bytearray |
memoryview`` written in the check would build a union object on every publish). The message
then goes to the publisher's queue, whose ``add``/``send`` are bound on the publisher: nothing
is called in between. ``publish_batch`` checks and encodes all its messages before queueing
any (``publishing.chunks``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from datetime import datetime

from hedwig.client.publishing import (
    BatchPublishResult,
    PublishResult,
    TopicPublisher,
    chunk_messages,
)
from hedwig.client.publishing.deliver_at import delivery_header
from hedwig.client.routing import Router
from hedwig.clock import Clock
from hedwig.errors import MessageTooLargeError, SendFailedError, UsageError
from hedwig.protocol import EncodedMessage, Message, encode_message, validate_name
from hedwig.protocol.messages import DELIVER_AT, NO_HEADERS, NO_KEY_BYTES
from hedwig.protocol.wire import U32 as _U32

# What a message value may be. A tuple made once: ``bytes | bytearray | memoryview`` written
# in the check would build a union object on every publish.
_VALUE_TYPES = (bytes, bytearray, memoryview)


class Publishing:
    """``HedwigClient``'s publishing calls."""

    router: Router
    clock: Clock
    publisher_id: str
    max_batch_messages: int
    max_batch_bytes: int
    max_inflight_batches: int
    linger_s: float
    max_message_size: int
    _publishers: dict[str, TopicPublisher]
    _closed: bool

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
        deliver_after: float | None = None,
        deliver_at: float | datetime | None = None,
    ) -> PublishResult:
        """Publish one message; returns once it is durable. Batched with concurrent publishes.

        ``deliver_after`` (seconds from now) or ``deliver_at`` (epoch seconds, or an aware
        ``datetime``) hold it back from the consumers of failover, shared and key-shared
        subscriptions until then (``hedwig.client.publishing.deliver_at``); the messages
        behind it are not held."""
        return await self.publish_nowait(
            topic,
            value,
            key=key,
            headers=headers,
            deliver_after=deliver_after,
            deliver_at=deliver_at,
        )

    def publish_nowait(
        self,
        topic: str,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: Iterable[tuple[str, bytes]] = (),
        deliver_after: float | None = None,
        deliver_at: float | datetime | None = None,
    ) -> asyncio.Future[PublishResult]:
        """Queue one message; the future resolves when it is durable (for pipelined callers)."""
        if deliver_after is not None or deliver_at is not None:
            headers = self._delayed(headers, deliver_after, deliver_at)
        raw = self._encoded(value, key, headers)
        return (self._publishers.get(topic) or self._publisher(topic)).add(raw)

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
        """Queue one message and wait for nothing, as Kafka's ``produce`` without a delivery
        callback: the same ordering, batching and retries as ``publish_nowait``, without the
        future (a third of a one-by-one publish's cost, most of it the cycle collector walking
        the futures in flight). ``flush`` waits until the messages are durable, and raises
        ``SendFailedError`` if any failed for good; mix with ``publish_nowait`` for the few
        whose outcome you want one by one."""
        if deliver_after is not None or deliver_at is not None:
            headers = self._delayed(headers, deliver_after, deliver_at)
        raw = self._encoded(value, key, headers)
        (self._publishers.get(topic) or self._publisher(topic)).send(raw)

    def encode(
        self,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: Iterable[tuple[str, bytes]] = (),
        deliver_after: float | None = None,
        deliver_at: float | datetime | None = None,
    ) -> EncodedMessage:
        """One message checked and encoded as ``send`` does it, without queueing it: for a
        caller on another thread (``SyncClient.send``) that must see a bad message refused at
        once and hands the encoded message to the loop later (``send_encoded``)."""
        if deliver_after is not None or deliver_at is not None:
            headers = self._delayed(headers, deliver_after, deliver_at)
        return self._encoded(value, key, headers)

    def send_encoded(self, topic: str, raw: EncodedMessage) -> None:
        """``send`` of a message ``encode`` checked and encoded."""
        (self._publishers.get(topic) or self._publisher(topic)).send(raw)

    def _delayed(
        self,
        headers: Iterable[tuple[str, bytes]],
        deliver_after: float | None,
        deliver_at: float | datetime | None,
    ) -> tuple[tuple[str, bytes], ...]:
        """``headers`` with the delivery time asked for (any given one replaced)."""
        header = delivery_header(
            deliver_after=deliver_after, deliver_at=deliver_at, now_ms=self.clock.wall_ms()
        )
        return (*((k, v) for k, v in headers if k != DELIVER_AT), header)

    def _encoded(
        self, value: bytes, key: bytes | None, headers: Iterable[tuple[str, bytes]]
    ) -> EncodedMessage:
        """One message checked and encoded for ``publish_nowait``, ``send`` and ``encode``."""
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
