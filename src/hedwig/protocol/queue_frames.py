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
- ``Redeliver``: ``Deliver`` of messages delivered before (``delivery_count`` is how many
  times, this one included, 2 or more). A first delivery is a plain DELIVER, so a consumer
  that never sees a redelivery reads the frames it always read.
"""

from __future__ import annotations

from typing import Annotated

from hedwig.protocol.client_frames import Redirected
from hedwig.protocol.fields import (
    U32,
    BackoffSteps,
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


@frame(0xA0, Sender.HUB)
class Redeliver(FrameBase):
    """Messages delivered again, each for the ``delivery_count``-th time."""

    topic: Str
    subscriber: Str
    delivery_count: U32
    batch: OneBatch
