"""The Hedwig wire protocol, sans-IO: bytes in, typed frames out; typed frames in, bytes out.

Nothing here touches a socket or an event loop. The hub and the client both wrap
``Connection`` from ``hedwig.protocol.connection``; ``docs/protocol.md`` is the byte-level
specification and must change together with ``frames.py``.
"""

from hedwig.protocol.connection import Connection, OversizedFrame, Role
from hedwig.protocol.frames import (
    PROTOCOL_VERSION,
    Batch,
    CloseSubscription,
    Consume,
    Deliver,
    Error,
    Frame,
    Message,
    Messages,
    Ok,
    Ping,
    Publish,
    Published,
    Read,
    Subscribe,
    SubscribeMode,
    Subscribed,
    SubscriptionForcedClosed,
    TopicInfo,
    TopicMoved,
    TopicStats,
    Unsubscribe,
    encode_messages,
)
from hedwig.protocol.names import decode_name, encode_name, validate_name
from hedwig.protocol.status import Status, ServerError, error_for_status

__all__ = [
    "PROTOCOL_VERSION",
    "Batch",
    "CloseSubscription",
    "Connection",
    "Consume",
    "Deliver",
    "Error",
    "Frame",
    "Message",
    "Messages",
    "Ok",
    "OversizedFrame",
    "Ping",
    "Publish",
    "Published",
    "Read",
    "Role",
    "ServerError",
    "Status",
    "Subscribe",
    "SubscribeMode",
    "Subscribed",
    "SubscriptionForcedClosed",
    "TopicInfo",
    "TopicMoved",
    "TopicStats",
    "Unsubscribe",
    "decode_name",
    "encode_messages",
    "encode_name",
    "error_for_status",
    "validate_name",
]
