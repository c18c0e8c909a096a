"""Frames of subscriptions whose consumers acknowledge message by message (failover, shared
and key-shared: ``SubscriptionType``, ``docs/architecture.md`` "Queues").

- ``JoinSubscription``: attach as one of a subscription's consumers. SUBSCRIBE attaches the
  one consumer of an exclusive subscription; JOIN_SUBSCRIPTION names the type the consumer
  expects (a subscription it creates gets that type; one of another type is refused, so a
  worker pool never consumes cumulatively from a queue by mistake), and ``message_window`` is
  this consumer's room: delivered and not yet acknowledged messages it may hold at once.
  Answered by ``Subscribed``.
- ``Ack``: these messages are processed. ``Nack``: they are not, deliver them again after
  ``delay_ms`` (0: the subscription's backoff for their delivery count). Both name ranges of
  sequence ids, so a consumer acknowledging many at once sends one frame; both are answered
  ``Ok``, or NOT_HELD when a message named is not held by this connection (never delivered
  to it, acknowledged already, or given to another consumer after a timeout): the messages it
  does hold are acknowledged all the same.
- ``CreateSubscription``: make a subscription of a type with its delivery policy (the ack
  timeout, the most deliveries, the backoff steps, a dead-letter topic, a delay), which the
  owner then applies to every consumer alike. Answered by ``Subscribed``; SUBSCRIPTION_EXISTS
  if it exists (whatever its type), INVALID_REQUEST for a policy that cannot be applied.
- ``DescribeQueues``: what the owner knows of each of a topic's subscriptions as a queue
  (``QueueInfo``): its type, its consumers, how many messages are unacknowledged (held by
  consumers or waiting to be delivered again), redelivered and dropped since this hub serves
  it, and how long the oldest unacknowledged message has waited since its first delivery
  here. TOPIC_DESCRIPTION's record is fixed, so this is a frame of its own. Answered by
  ``QueueDescription``; NO_SUCH_TOPIC if the topic does not exist.
- ``Redeliver``: ``Deliver`` of messages delivered before (``delivery_count`` is how many
  times, this one included, 2 or more). A first delivery is a plain DELIVER, so a consumer
  that never sees a redelivery reads the frames it always read.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Annotated, Any

from hedwig.errors import UsageError
from hedwig.protocol import wire
from hedwig.protocol.client_frames import Redirected
from hedwig.protocol.fields import (
    U32,
    BackoffSteps,
    Codec,
    EnumCodec,
    OneBatch,
    OptStr,
    RequestId,
    SeqRanges,
    Str,
)
from hedwig.protocol.kinds import SubscribeMode, SubscriptionType
from hedwig.protocol.schema import FrameBase, Sender, frame

Mode = Annotated[SubscribeMode, EnumCodec(SubscribeMode)]
Type = Annotated[SubscriptionType, EnumCodec(SubscriptionType)]

# Ranges one ACK or NACK may name (more is INVALID_REQUEST, the connection kept).
MAX_RANGES = 65_536


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """One subscription as DESCRIBE_QUEUES reports it. For one the owner does not serve at
    the moment (nobody attached since it took the topic) the counts are 0: what is
    unacknowledged then is the backlog past its mark."""

    name: str
    type: SubscriptionType
    consumers: int
    # Held by consumers, or waiting to be delivered again.
    unacked: int
    # Since this hub serves the subscription: deliveries of messages delivered before, and
    # messages acknowledged unprocessed past their last delivery.
    redelivered: int
    dropped: int
    # Since the oldest unacknowledged message was first delivered here (0: it has not been).
    oldest_unacked_ms: int


_QUEUE_TAIL = struct.Struct(">BIQQQQ")


class QueueInfosCodec(Codec):
    """``u32 n`` then n times ``str name`` and the fixed-width rest of a ``QueueInfo``."""

    doc = (
        "u32 n, {name}: n x (str name, u8 SubscriptionType type, u32 consumers, u64 unacked, "
        "u64 redelivered, u64 dropped, u64 oldest_unacked_ms)"
    )
    ref = "_queue_infos"

    def check(self, name: str, value: Any) -> None:
        if not isinstance(value, tuple):
            raise UsageError(f"{name} must be a tuple of QueueInfo")
        for i, q in enumerate(value):
            if not isinstance(q, QueueInfo) or not isinstance(q.type, SubscriptionType):
                raise UsageError(f"{name}[{i}] must be a QueueInfo with a SubscriptionType")
            if not 0 <= q.consumers < 1 << 32 or not all(
                0 <= x < 1 << 64 for x in (q.unacked, q.redelivered, q.dropped, q.oldest_unacked_ms)
            ):
                raise UsageError(f"{name}[{i}]: counts out of range")

    def encode_expr(self, value: str) -> str:
        return f"{self.ref}.encode({value})"

    def decode_lines(self, target: str) -> list[str]:
        return [f"{target}, pos = {self.ref}.decode(data, pos)"]

    def encode(self, infos: tuple[QueueInfo, ...]) -> bytes:
        parts = [wire.U32.pack(len(infos))]
        for q in infos:
            parts.append(wire.pack_str(q.name))
            parts.append(
                _QUEUE_TAIL.pack(
                    q.type, q.consumers, q.unacked, q.redelivered, q.dropped, q.oldest_unacked_ms
                )
            )
        return b"".join(parts)

    def decode(self, data: bytes, pos: int) -> tuple[tuple[QueueInfo, ...], int]:
        (n,) = wire.U32.unpack_from(data, pos)
        pos += 4
        if n > (len(data) - pos) // (_QUEUE_TAIL.size + 2):
            raise ValueError(f"{n} queues do not fit in the frame")
        out = []
        for _ in range(n):
            name, pos = wire.read_str(data, pos)
            kind, consumers, unacked, redelivered, dropped, oldest = _QUEUE_TAIL.unpack_from(
                data, pos
            )
            pos += _QUEUE_TAIL.size
            info = QueueInfo(
                name, SubscriptionType(kind), consumers, unacked, redelivered, dropped, oldest
            )
            out.append(info)
        return tuple(out), pos


QueueInfos = Annotated[tuple[QueueInfo, ...], QueueInfosCodec()]


@frame(0x40, Sender.CLIENT)
class JoinSubscription(FrameBase):
    """Attach as one consumer of a subscription of ``type``. Answered by ``Subscribed``."""

    request_id: RequestId
    topic: Str
    subscriber: Str
    type: Type
    mode: Mode = SubscribeMode.CREATE_OR_ATTACH
    message_window: U32 = 0
    redirected: Redirected = False


@frame(0x41, Sender.CLIENT)
class Ack(FrameBase):
    """The messages in ``ranges`` are processed. Answered by ``Ok`` or NOT_HELD."""

    request_id: RequestId
    topic: Str
    subscriber: Str
    ranges: SeqRanges


@frame(0x42, Sender.CLIENT)
class Nack(FrameBase):
    """The messages in ``ranges`` were not processed: deliver them again after ``delay_ms``
    (0: the subscription's backoff). Answered by ``Ok`` or NOT_HELD."""

    request_id: RequestId
    topic: Str
    subscriber: Str
    delay_ms: U32
    ranges: SeqRanges


@frame(0x43, Sender.CLIENT)
class CreateSubscription(FrameBase):
    """Create a subscription of ``type`` with its delivery policy, after the topic's last
    message. Answered by ``Subscribed``."""

    request_id: RequestId
    topic: Str
    subscriber: Str
    type: Type
    ack_timeout_ms: U32 = 30_000
    max_deliveries: U32 = 0
    delay_ms: U32 = 0
    backoff: BackoffSteps = ()
    dead_letter: OptStr = None
    redirected: Redirected = False


@frame(0x44, Sender.CLIENT)
class DescribeQueues(FrameBase):
    """Each of a topic's subscriptions as a queue, from its owner. Answered by
    ``QueueDescription``; NO_SUCH_TOPIC if it does not exist (describing creates nothing)."""

    request_id: RequestId
    topic: Str
    redirected: Redirected = False


@frame(0xA1, Sender.HUB)
class QueueDescription(FrameBase):
    """The answer to ``DescribeQueues``, by subscription name."""

    request_id: RequestId
    queues: QueueInfos = ()


@frame(0xA0, Sender.HUB)
class Redeliver(FrameBase):
    """Messages delivered again, each for the ``delivery_count``-th time."""

    topic: Str
    subscriber: Str
    delivery_count: U32
    batch: OneBatch
