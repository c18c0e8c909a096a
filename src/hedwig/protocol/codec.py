"""Every frame type, and frames to bytes and back.

Every frame is ``u32 length | u8 version | u8 type | u16 flags | u32 request_id | body``;
``length`` counts the bytes after itself. ``FRAME_TYPES`` is the registry every decoder comes
from: a frame class listed here is a frame the protocol has (the round-trip tests iterate it, so
a new frame cannot be left out of them).
"""

from __future__ import annotations

import struct

from hedwig.errors import ProtocolError
from hedwig.protocol.client_frames import (
    CloseSubscription,
    Consume,
    DeleteTopic,
    Deliver,
    DescribeTopic,
    Error,
    Messages,
    Ok,
    Ping,
    Publish,
    Published,
    Read,
    ReleaseBundle,
    ReleaseTopic,
    ResetSubscription,
    Subscribe,
    Subscribed,
    SubscriptionForcedClosed,
    TopicDescription,
    TopicInfo,
    TopicMoved,
    TopicStats,
    Unsubscribe,
)
from hedwig.protocol.plan_frames import (
    DeliveryStats,
    DescribeLanes,
    Lanes,
    LanesChanged,
    SubscriptionMoved,
    TailTopic,
)
from hedwig.protocol.queue_frames import (
    Ack,
    CreateSubscription,
    DescribeQueues,
    JoinSubscription,
    Nack,
    QueueDescription,
    Redeliver,
)
from hedwig.protocol.region_frames import DescribeLinks, DescribeRegion, Links, Region
from hedwig.protocol.schema import FrameBase
from hedwig.protocol.security_frames import Authenticate, Authenticated
from hedwig.protocol.storage_frames import (
    AddEntry,
    DeleteLedger,
    Entry,
    FencedLedgers,
    FenceLedgers,
    HubAlive,
    HubAliveAnswer,
    Lac,
    ReadEntry,
    ReadLac,
    StorageHello,
    WriteLacs,
)
from hedwig.protocol.wire import HEADER, HEADER_AFTER_LENGTH, PROTOCOL_VERSION

# What a client sends a hub (and a hub sends another hub's storage role).
Request = (
    Publish
    | Subscribe
    | Consume
    | Unsubscribe
    | CloseSubscription
    | Ping
    | Read
    | TopicStats
    | ReleaseTopic
    | ReleaseBundle
    | DeleteTopic
    | ResetSubscription
    | DescribeTopic
    | AddEntry
    | ReadEntry
    | ReadLac
    | FenceLedgers
    | HubAlive
    | WriteLacs
    | DeleteLedger
    | StorageHello
    | Authenticate
    | TailTopic
    | DeliveryStats
    | DescribeLanes
    | JoinSubscription
    | Ack
    | Nack
    | CreateSubscription
    | DescribeRegion
    | DescribeLinks
    | DescribeQueues
)
# What a hub answers a request with.
Reply = (
    Ok
    | Published
    | Subscribed
    | Messages
    | TopicInfo
    | TopicDescription
    | Error
    | Entry
    | Lac
    | FencedLedgers
    | HubAliveAnswer
    | Authenticated
    | Lanes
    | Region
    | Links
    | QueueDescription
)
# What a hub pushes unasked.
Event = (
    Deliver | TopicMoved | SubscriptionForcedClosed | SubscriptionMoved | LanesChanged | Redeliver
)
Frame = Request | Reply | Event
# The storage role's requests: hub to hub only.
STORAGE_REQUESTS = (
    AddEntry,
    ReadEntry,
    ReadLac,
    FenceLedgers,
    HubAlive,
    WriteLacs,
    DeleteLedger,
    StorageHello,
)

FRAME_TYPES: tuple[type[FrameBase], ...] = (
    Publish,
    Subscribe,
    Consume,
    Unsubscribe,
    CloseSubscription,
    Ping,
    Read,
    TopicStats,
    ReleaseTopic,
    ReleaseBundle,
    DeleteTopic,
    ResetSubscription,
    DescribeTopic,
    *STORAGE_REQUESTS,
    Authenticate,
    TailTopic,
    DeliveryStats,
    DescribeLanes,
    JoinSubscription,
    Ack,
    Nack,
    CreateSubscription,
    DescribeRegion,
    DescribeLinks,
    DescribeQueues,
    Ok,
    Published,
    Subscribed,
    Messages,
    TopicInfo,
    TopicDescription,
    Entry,
    Lac,
    FencedLedgers,
    HubAliveAnswer,
    Authenticated,
    Lanes,
    Region,
    Links,
    QueueDescription,
    Error,
    Deliver,
    TopicMoved,
    SubscriptionForcedClosed,
    SubscriptionMoved,
    LanesChanged,
    Redeliver,
)

BY_TYPE: dict[int, type[FrameBase]] = {cls.TYPE: cls for cls in FRAME_TYPES}
assert len(BY_TYPE) == len(FRAME_TYPES), "two frames share a type code"


def encode_frame(frame: Frame) -> bytes:
    body = frame.encode_body()
    flags, rid = frame.header_fields()
    return (
        HEADER.pack(len(body) + HEADER_AFTER_LENGTH, PROTOCOL_VERSION, frame.TYPE, flags, rid)
        + body
    )


def decode_body(ftype: int, flags: int, rid: int, body: bytes) -> Frame:
    """The frame of type ``ftype``; ``ProtocolError`` for anything malformed.

    ``MalformedBatchError`` (a ``ProtocolError``) is raised as such, so that a hub can refuse
    just that request.
    """
    cls = BY_TYPE.get(ftype)
    if cls is None:
        raise ProtocolError(f"unknown frame type 0x{ftype:02x}")
    try:
        frame: Frame = cls.decode(flags, rid, body)
    except ProtocolError:
        raise
    except (struct.error, ValueError, UnicodeDecodeError, IndexError) as exc:
        raise ProtocolError(f"malformed frame of type 0x{ftype:02x}: {exc}") from exc
    return frame


def describe_body(cls: type[FrameBase]) -> str:
    """A frame's body as ``docs/protocol.md`` shows it: ``type name`` per field, in order."""
    parts = [
        codec.doc.format(name=name) if "{name}" in codec.doc else f"{codec.doc} {name}"
        for name, codec in cls.FIELD_CODECS
    ]
    return ", ".join(parts) if parts else "empty"


def describe_flags(cls: type[FrameBase]) -> str:
    """A frame's flag bits as ``docs/protocol.md`` shows them."""
    return ", ".join(f"bit {bit} {name}" for name, bit in cls.FLAG_BITS) or "-"
