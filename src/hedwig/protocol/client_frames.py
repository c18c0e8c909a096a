"""Frames between clients and hubs: requests, their answers, and events hubs push.

Requests carry a request id the hub echoes in its answer, so many requests can be in flight on
one connection and answers may come back in any order. Events answer nothing (request id 0).
``docs/protocol.md`` is the byte-level specification of each, generated from the same
declarations (field order is wire order).
"""

from __future__ import annotations

from typing import Annotated

from hedwig.errors import UsageError
from hedwig.protocol.fields import (
    U16,
    U32,
    U64,
    Batches,
    CountedMessages,
    EnumCodec,
    Flag,
    OneBatch,
    OptStr,
    RequestId,
    Str,
    Subscriptions,
)
from hedwig.protocol.kinds import CloseReason, MoveKind, ResetTo, SubscribeMode
from hedwig.protocol.schema import FrameBase, Sender, frame

# Flag bits, named per frame by the field that holds them.
Redirected = Annotated[bool, Flag(0)]  # sent here by another hub's redirect: claim, do not choose
ForceAttach = Annotated[bool, Flag(1)]  # take over a subscription another connection holds
Force = Annotated[bool, Flag(1)]  # delete even while subscribers are attached
Duplicate = Annotated[bool, Flag(0)]  # the hub recognised a re-sent batch and stored nothing
FencesBatched = Annotated[bool, Flag(0)]  # (OK to STORAGE_HELLO) the hub takes FENCE_LEDGERS
AnswersHubAlive = Annotated[bool, Flag(1)]  # (OK to STORAGE_HELLO) the hub answers HUB_ALIVE

Mode = Annotated[SubscribeMode, EnumCodec(SubscribeMode)]
Kind = Annotated[MoveKind, EnumCodec(MoveKind)]
Reason = Annotated[CloseReason, EnumCodec(CloseReason)]
Reset = Annotated[ResetTo, EnumCodec(ResetTo)]

CLIENT = Sender.CLIENT
HUB = Sender.HUB


# Requests ------------------------------------------------------------------------------------


@frame(0x01, CLIENT)
class Publish(FrameBase):
    """Append a batch of messages to a topic. Answered by ``Published`` or an error.

    ``publisher_seq`` is the publisher's own sequence number of the first message (0: the
    publisher does not ask for duplicate detection).
    """

    request_id: RequestId
    topic: Str
    publisher_id: Str
    publisher_seq: U64
    messages: CountedMessages
    redirected: Redirected = False

    @property
    def count(self) -> int:
        return self.messages.count

    @property
    def payload(self) -> bytes:
        return self.messages.payload


@frame(0x02, CLIENT)
class Subscribe(FrameBase):
    """Create or attach a subscription. Answered by ``Subscribed`` or an error.

    ``message_window``: at most this many delivered but unconsumed messages (0: no limit).
    ``message_bound``: keep at most this many unconsumed messages for the subscriber; older
    ones are skipped (0: no bound).
    """

    request_id: RequestId
    topic: Str
    subscriber: Str
    mode: Mode = SubscribeMode.CREATE_OR_ATTACH
    message_window: U32 = 0
    message_bound: U32 = 0
    redirected: Redirected = False
    force_attach: ForceAttach = False


@frame(0x03, CLIENT)
class Consume(FrameBase):
    """Cumulative: the subscriber has consumed every message up to and including ``seq``."""

    request_id: RequestId
    topic: Str
    subscriber: Str
    seq: U64


@frame(0x04, CLIENT)
class Unsubscribe(FrameBase):
    """Delete the subscription and its consume mark."""

    request_id: RequestId
    topic: Str
    subscriber: Str


@frame(0x05, CLIENT)
class CloseSubscription(FrameBase):
    """Stop delivery on this connection; the subscription and its mark stay."""

    request_id: RequestId
    topic: Str
    subscriber: Str


@frame(0x06, CLIENT)
class Ping(FrameBase):
    """Answered by ``Ok`` at once: clients ping a silent hub to notice a frozen one."""

    request_id: RequestId


@frame(0x07, CLIENT)
class Read(FrameBase):
    """Read messages by sequence id without a subscription (for batch readers such as Spark).

    Answered by ``Messages``: batches starting at or after ``start_seq``, at most
    ``max_messages`` messages and about ``max_bytes`` bytes, never past the last confirmed one.
    ``start_seq`` 0 means "from the first kept message".
    """

    request_id: RequestId
    topic: Str
    start_seq: U64
    max_messages: U32
    max_bytes: U32
    redirected: Redirected = False


@frame(0x08, CLIENT)
class TopicStats(FrameBase):
    """Ask the owner for a topic's bounds. Answered by ``TopicInfo``."""

    request_id: RequestId
    topic: Str
    redirected: Redirected = False


@frame(0x09, CLIENT)
class ReleaseTopic(FrameBase):
    """Ask the owner to hand the topic over gracefully, to ``destination`` if given.

    The owner stops accepting publishes, flushes consume marks, closes its ledger, deletes its
    owner record and sends TOPIC_MOVED naming the destination to every client of the topic;
    then it answers OK. A hub that does not own the topic answers NOT_RESPONSIBLE. ``kind``
    says why (metrics count hand-offs by it); ``reason`` is free text for logs and events.
    """

    request_id: RequestId
    topic: Str
    destination: OptStr = None
    reason: Str = "move requested"
    kind: Kind = MoveKind.REQUESTED

    def validate(self) -> None:
        if len(self.reason) > 1024:
            raise UsageError("a release reason is at most 1024 characters")


@frame(0x0D, CLIENT)
class ReleaseBundle(FrameBase):
    """Ask a bundle's owner to hand the bundle (every topic of its hash range, in use or not)
    to ``destination``, make-before-break, as its own balancer hands bundles over: the
    bundle's topics in use are released, their clients told where they went, and the
    destination claims the bundle. Only in a region owning topics by bundle, and only for the
    region's super-users (a bundle holds every tenant's topics of its range). Answered OK once
    handed over; NOT_RESPONSIBLE naming the owner from a hub that does not own it;
    INVALID_REQUEST for a name that is not a bundle of the region's map, or a destination that
    is not an alive hub."""

    request_id: RequestId
    bundle: Str
    destination: Str
    reason: Str = "move requested"

    def validate(self) -> None:
        if len(self.reason) > 1024:
            raise UsageError("a release reason is at most 1024 characters")


@frame(0x0A, CLIENT)
class DeleteTopic(FrameBase):
    """Delete a topic: its messages, ledgers, subscriptions and owner record. Answered by
    ``Ok``; NO_SUCH_TOPIC if it does not exist; TOPIC_IN_USE while a subscription is attached,
    unless ``force`` (attached subscribers are then closed with TOPIC_DELETED)."""

    request_id: RequestId
    topic: Str
    redirected: Redirected = False
    force: Force = False


@frame(0x0B, CLIENT)
class ResetSubscription(FrameBase):
    """Move a subscription's consume mark (``to``: a sequence id, the earliest kept message,
    or the end). Answered by ``Subscribed`` with the new mark; an attached subscriber is closed
    with RESET and attaches again at the new position."""

    request_id: RequestId
    topic: Str
    subscriber: Str
    to: Reset
    seq: U64 = 0
    redirected: Redirected = False


@frame(0x0C, CLIENT)
class DescribeTopic(FrameBase):
    """A topic's bounds and subscriptions, from its owner. Answered by ``TopicDescription``;
    NO_SUCH_TOPIC if it does not exist (describing never creates a topic)."""

    request_id: RequestId
    topic: Str
    redirected: Redirected = False


# Answers -------------------------------------------------------------------------------------


@frame(0x80, HUB)
class Ok(FrameBase):
    """Done. Answering STORAGE_HELLO, ``fences_batched`` says the hub takes FENCE_LEDGERS
    (hubs from before it ignore the bit and are sent READ_LAC a ledger at a time), and
    ``answers_hub_alive`` that it answers HUB_ALIVE (hubs from before it are not asked: they
    would close the connection on a frame they do not know)."""

    request_id: RequestId
    fences_batched: FencesBatched = False
    answers_hub_alive: AnswersHubAlive = False


@frame(0x81, HUB)
class Published(FrameBase):
    """The batch is durable; it holds sequence ids ``first_seq .. last_seq``.

    ``duplicate`` is set when the hub recognised a retried publish and stored nothing new.
    """

    request_id: RequestId
    first_seq: U64
    last_seq: U64
    duplicate: Duplicate = False


@frame(0x82, HUB)
class Subscribed(FrameBase):
    """The subscription is attached; delivery starts after ``consumed_seq``."""

    request_id: RequestId
    consumed_seq: U64
    last_seq: U64


@frame(0x83, HUB)
class Messages(FrameBase):
    """The answer to ``Read``: the topic's bounds and zero or more batches, sent as stored."""

    request_id: RequestId
    first_available: U64
    last_seq: U64
    batches: Batches = ()


@frame(0x84, HUB)
class TopicInfo(FrameBase):
    request_id: RequestId
    first_available: U64
    last_seq: U64
    subscribers: U32


@frame(0x8F, HUB)
class Error(FrameBase):
    """A request failed with ``status`` (``hedwig.protocol.status``).

    The typed detail a caller needs travels in its own fields, never inside ``message``:
    ``address`` is the hub the error points to (the owner for NOT_RESPONSIBLE, the destination
    for TOPIC_MOVING); ``seq`` is the sequence the error is about (the first kept sequence id
    for MESSAGES_UNAVAILABLE, the publisher sequence the hub takes next for OUT_OF_ORDER).
    """

    request_id: RequestId
    status: U16
    message: Str
    address: OptStr = None
    seq: U64 = 0


@frame(0x87, HUB)
class TopicDescription(FrameBase):
    """The answer to ``DescribeTopic``."""

    request_id: RequestId
    first_available: U64
    last_seq: U64
    subscriptions: Subscriptions = ()


# Events --------------------------------------------------------------------------------------


@frame(0xC0, HUB)
class Deliver(FrameBase):
    """Messages for a subscription; the subscriber consumes them with ``Consume``."""

    topic: Str
    subscriber: Str
    batch: OneBatch


@frame(0xC1, HUB)
class TopicMoved(FrameBase):
    """The hub no longer serves the topic; ``new_owner`` is where it went, if known.

    Sent to every publisher and subscriber of the topic on this connection. ``subscriber`` is
    set when the event concerns one subscription.
    """

    topic: Str
    new_owner: OptStr
    reason: Str
    subscriber: OptStr = None


@frame(0xC2, HUB)
class SubscriptionForcedClosed(FrameBase):
    """The hub closed the subscription on this connection; ``code`` says why (and whether to
    subscribe again), ``reason`` is free text for logs."""

    topic: Str
    subscriber: Str
    code: Reason
    reason: Str = ""
