"""The Hedwig wire protocol, sans-IO: bytes in, typed frames out; typed frames in, bytes out.

Nothing here touches a socket or an event loop. The hub and the client both wrap
``Connection``; ``docs/protocol.md`` is the byte-level specification. Where things are:

- ``wire``: the header, integers and strings;
- ``messages``: messages, batches and their encoding (a package: encoding, checks of
  untrusted bytes, encoded and delivered messages, batches);
- ``schema``: how a frame is declared once and gets its codec;
- ``client_frames``, ``storage_frames``, ``security_frames``, ``plan_frames`` and
  ``queue_frames``: the frames themselves;
- ``codec``: the registry of frame types, and frames to bytes and back;
- ``connection``: the per-connection state machine (buffering, direction, oversized frames);
- ``status``: status codes and the table between them and exceptions;
- ``kinds``: enumerations on the wire; ``names``: topic and subscriber names.
"""

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
from hedwig.protocol.codec import FRAME_TYPES, Event, Frame, Reply, Request
from hedwig.protocol.connection import Connection, OversizedFrame, RefusedFrame, Role
from hedwig.protocol.fields import (
    BackoffStep,
    LaneInfo,
    LedgerEnd,
    LedgerLac,
    SeqRange,
    SubscriptionInfo,
)
from hedwig.protocol.kinds import (
    CloseReason,
    MoveKind,
    ResetTo,
    SubscribeMode,
    SubscriptionType,
)
from hedwig.protocol.messages import (
    Batch,
    DeliveredMessage,
    EncodedMessage,
    EncodedMessages,
    Message,
    encode_message,
    encode_messages,
    encode_value,
    encode_values,
)
from hedwig.protocol.names import decode_name, encode_name, lane_name, lane_of, validate_name
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
    QueueInfo,
    Redeliver,
)
from hedwig.protocol.region_frames import DescribeLinks, DescribeRegion, Links, Region
from hedwig.protocol.security_frames import Authenticate, Authenticated
from hedwig.protocol.status import Status, error_from_frame
from hedwig.protocol.storage_frames import (
    MAX_FENCED_LEDGERS,
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
from hedwig.protocol.wire import PROTOCOL_VERSION

__all__ = [
    "FRAME_TYPES",
    "MAX_FENCED_LEDGERS",
    "PROTOCOL_VERSION",
    "Ack",
    "AddEntry",
    "Authenticate",
    "Authenticated",
    "BackoffStep",
    "Batch",
    "CloseReason",
    "CloseSubscription",
    "Connection",
    "Consume",
    "CreateSubscription",
    "DeleteLedger",
    "DeleteTopic",
    "Deliver",
    "DeliveredMessage",
    "DeliveryStats",
    "DescribeLanes",
    "DescribeLinks",
    "DescribeQueues",
    "DescribeRegion",
    "DescribeTopic",
    "EncodedMessage",
    "EncodedMessages",
    "Entry",
    "Error",
    "Event",
    "FenceLedgers",
    "FencedLedgers",
    "Frame",
    "HubAlive",
    "HubAliveAnswer",
    "JoinSubscription",
    "Lac",
    "LaneInfo",
    "Lanes",
    "LanesChanged",
    "LedgerEnd",
    "LedgerLac",
    "Links",
    "Message",
    "Messages",
    "MoveKind",
    "Nack",
    "Ok",
    "OversizedFrame",
    "Ping",
    "Publish",
    "Published",
    "QueueDescription",
    "QueueInfo",
    "Read",
    "ReadEntry",
    "ReadLac",
    "Redeliver",
    "RefusedFrame",
    "Region",
    "ReleaseBundle",
    "ReleaseTopic",
    "Reply",
    "Request",
    "ResetSubscription",
    "ResetTo",
    "Role",
    "SeqRange",
    "Status",
    "StorageHello",
    "Subscribe",
    "SubscribeMode",
    "Subscribed",
    "SubscriptionForcedClosed",
    "SubscriptionInfo",
    "SubscriptionMoved",
    "SubscriptionType",
    "TailTopic",
    "TopicDescription",
    "TopicInfo",
    "TopicMoved",
    "TopicStats",
    "Unsubscribe",
    "WriteLacs",
    "decode_name",
    "encode_message",
    "encode_messages",
    "encode_name",
    "encode_value",
    "encode_values",
    "error_from_frame",
    "lane_name",
    "lane_of",
    "validate_name",
]
