"""Checking untrusted bytes: does a payload hold exactly its count of well-formed messages?

Every publish a hub takes is checked (``largest_message``: lean, no offsets, a message
without a key has its key and value lengths read in one go), a stored batch cut by a
subscription's window is scanned for where its messages start (``scan``), and a delivered
batch is checked by its subscriber. Batches of equal messages without keys or headers, the
common batch (records of one schema), are checked at once, without a Python step per message
(``uniform_size``): at a fixed stride, each framing byte of every message is compared by one
strided slice. Anything else is read message by message. Either way, a payload that does not
hold exactly its count is ``MalformedBatchError``.
"""

from __future__ import annotations

import struct

from hedwig.errors import MalformedBatchError
from hedwig.protocol.messages.encoding import KEY_VALUE, MESSAGE_OVERHEAD, NO_HEADERS, NO_KEY
from hedwig.protocol.wire import U16, U32

# Batches at least this long are first tried as equal messages (``uniform_size``).
UNIFORM_FROM = 16


def uniform_size(payload: bytes, count: int) -> int | None:
    """The size of every message, if the payload is ``count`` messages of one size without
    keys or headers (the common batch: records of one schema), else ``None``.

    Checked without a Python step per message: the messages then sit at a fixed stride, so
    each of the ten framing bytes of every message (the no-key marker, the value length, the
    empty header count) is compared at once by a strided slice. If all match, reading the
    payload message by message would find exactly that layout."""
    if count < UNIFORM_FROM or len(payload) < MESSAGE_OVERHEAD:
        return None
    klen, vlen = KEY_VALUE.unpack_from(payload, 0)
    stride = vlen + MESSAGE_OVERHEAD
    if klen != NO_KEY or stride * count != len(payload):
        return None
    framing = KEY_VALUE.pack(NO_KEY, vlen) + NO_HEADERS
    starts = (0, 1, 2, 3, 4, 5, 6, 7, vlen + 8, vlen + 9)
    for k, start in enumerate(starts):
        if payload[start::stride] != framing[k : k + 1] * count:
            return None
    return int(vlen)


def scan(payload: bytes, count: int) -> tuple[list[int], int]:
    """The offset where each message starts and the size of the largest one.

    Raises ``MalformedBatchError`` unless the payload holds exactly ``count`` messages.
    """
    size = uniform_size(payload, count)
    if size is not None:
        return list(range(0, len(payload), size + MESSAGE_OVERHEAD)), size
    offsets: list[int] = []
    largest = 0
    pos = 0
    end = len(payload)
    unpack32 = U32.unpack_from
    unpack16 = U16.unpack_from
    try:
        for _ in range(count):
            offsets.append(pos)
            (klen,) = unpack32(payload, pos)
            pos += 4
            size = 0
            if klen != NO_KEY:
                pos += klen
                size += klen
            (vlen,) = unpack32(payload, pos)
            pos += 4 + vlen
            size += vlen
            (nh,) = unpack16(payload, pos)
            pos += 2
            for _h in range(nh):
                (hn,) = unpack16(payload, pos)
                pos += 2 + hn
                (hv,) = unpack32(payload, pos)
                pos += 4 + hv
                size += hn + hv
            if pos > end:
                raise MalformedBatchError("message runs past the end of its batch")
            if size > largest:
                largest = size
    except struct.error as exc:
        raise MalformedBatchError("truncated message in batch") from exc
    if pos != end:
        raise MalformedBatchError(f"batch holds {end - pos} bytes after its {count} messages")
    return offsets, largest


def largest_message(payload: bytes, count: int) -> int:
    """The check every publish goes through, so it is lean (no offsets, and a message without
    a key has its key and value lengths read in one go, and a batch of equal messages is
    checked at once): the size of the largest message, or ``MalformedBatchError`` unless the
    payload holds exactly ``count`` messages."""
    uniform = uniform_size(payload, count)
    if uniform is not None:
        return uniform
    largest = 0
    pos = 0
    lengths = KEY_VALUE.unpack_from
    unpack32 = U32.unpack_from
    unpack16 = U16.unpack_from
    try:
        for _ in range(count):
            klen, vlen = lengths(payload, pos)
            if klen == NO_KEY:
                pos += 8 + vlen
                size = vlen
            else:
                vlen = unpack32(payload, pos + 4 + klen)[0]
                pos += 8 + klen + vlen
                size = klen + vlen
            nh = unpack16(payload, pos)[0]
            pos += 2
            if nh:  # (most messages have no headers: not even an empty loop for them)
                for _h in range(nh):
                    hn = unpack16(payload, pos)[0]
                    pos += 2 + hn
                    hv = unpack32(payload, pos)[0]
                    pos += 4 + hv
                    size += hn + hv
            if size > largest:
                largest = size
    except struct.error as exc:
        raise MalformedBatchError("truncated message in batch") from exc
    if pos != len(payload):
        raise MalformedBatchError(f"batch does not hold exactly its {count} messages")
    return largest


def scan_messages(payload: bytes, count: int, max_message_size: int) -> list[int]:
    """Check a batch payload's structure; return the offset where each message starts.

    Raises ``MalformedBatchError`` if the payload does not hold exactly ``count`` well-formed
    messages, and ``ValueError`` (with the offending size) if the largest exceeds
    ``max_message_size``.
    """
    offsets, largest = scan(payload, count)
    if largest > max_message_size:
        raise ValueError(largest)
    return offsets
