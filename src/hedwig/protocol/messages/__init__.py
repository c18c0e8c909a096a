"""Messages and batches: the bytes a publisher sends, a ledger stores and a subscriber receives.

A batch is consecutive messages of one topic and the same bytes in all three places, so the
hub never re-encodes a message on the hot path: it prefixes and forwards; individual messages
are decoded only by whoever wants to look inside. Encoded messages always travel with their
count, and every way of making them guarantees that the two agree: messages encoded here need
no check, untrusted bytes are scanned. One module each:

- ``encoding``: a message's wire encoding (``Message``, ``encode_message``, ``encode_values``),
  and its decoding back;
- ``scanning``: the checks of untrusted bytes (equal messages checked at once);
- ``encoded``: ``EncodedMessages``, encoded messages and their count;
- ``delivered``: ``DeliveredMessage``, a message with its place, made as it is handed out;
- ``batch``: ``Batch``, the unit sent, stored and delivered, and its encoding;
- ``delivery_time``: the ``hedwig-deliver-at`` header (a message delivered later).
"""

from hedwig.protocol.messages.batch import Batch
from hedwig.protocol.messages.delivered import DeliveredMessage, iter_delivered
from hedwig.protocol.messages.delivery_time import (
    DELIVER_AT,
    DeliveryTimeError,
    deliver_at_header,
    deliver_at_of,
)
from hedwig.protocol.messages.encoded import EncodedMessages
from hedwig.protocol.messages.encoding import (
    MESSAGE_OVERHEAD,
    NO_HEADERS,
    NO_KEY_BYTES,
    EncodedMessage,
    Message,
    decode_messages,
    encode_message,
    encode_messages,
    encode_value,
    encode_values,
)
from hedwig.protocol.messages.scanning import scan_messages

__all__ = [
    "DELIVER_AT",
    "MESSAGE_OVERHEAD",
    "NO_HEADERS",
    "NO_KEY_BYTES",
    "Batch",
    "DeliveredMessage",
    "DeliveryTimeError",
    "EncodedMessage",
    "EncodedMessages",
    "Message",
    "decode_messages",
    "deliver_at_header",
    "deliver_at_of",
    "encode_message",
    "encode_messages",
    "encode_value",
    "encode_values",
    "iter_delivered",
    "scan_messages",
]
