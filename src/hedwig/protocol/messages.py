"""Messages and batches: the bytes a publisher sends, a ledger stores and a subscriber receives.

A message is ``key: u32 len (0xFFFFFFFF = no key) + bytes``, ``value: u32 len + bytes``,
``headers: u16 count`` then per header ``str name + u32 len + bytes``.

A batch is consecutive messages of one topic, and the same bytes in three places: the unit a
publisher sends, the unit a ledger stores as one entry, and the unit a subscriber receives::

    u64 first_seq | u64 publish_time_ms | str publisher_id | u64 publisher_seq
    | u32 count | messages

so the hub never re-encodes a message on the hot path: it prefixes and forwards. Individual
messages are decoded only by whoever wants to look inside (``Batch.messages``).

``EncodedMessages`` pairs the encoded messages with their count, and every way of making one
guarantees that the two agree: from messages encoded here (no check needed), or from untrusted
bytes, which are scanned (``MalformedBatchError`` if the count lies).
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, NewType

from hedwig.errors import MalformedBatchError
from hedwig.protocol.wire import U16, U32, pack_str, read_str

_NO_KEY = 0xFFFFFFFF
NO_KEY_BYTES = _NO_KEY_BYTES = U32.pack(_NO_KEY)
NO_HEADERS = _NO_HEADERS = U16.pack(0)
_BATCH_HEAD = struct.Struct(">QQ")  # first_seq, publish_time_ms
_PUB_SEQ_COUNT = struct.Struct(">QI")  # publisher_seq, count
_KEY_VALUE = struct.Struct(">II")  # a message's key length and, without a key, value length
# Bytes a message takes on the wire besides its key, value and headers.
MESSAGE_OVERHEAD = 4 + 4 + 2

# One message in its wire encoding. Only ``encode_message`` and ``encode_value`` make these, so
# a list of them always holds exactly one message per element.
EncodedMessage = NewType("EncodedMessage", bytes)


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """One message as a publisher hands it over."""

    value: bytes
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()

    @property
    def size(self) -> int:
        """The bytes this message counts against the maximum message size."""
        return (
            len(self.value)
            + (len(self.key) if self.key is not None else 0)
            + sum(len(k.encode()) + len(v) for k, v in self.headers)
        )


def encode_message(m: Message) -> EncodedMessage:
    out = bytearray()
    if m.key is None:
        out += _NO_KEY_BYTES
    else:
        out += U32.pack(len(m.key))
        out += m.key
    out += U32.pack(len(m.value))
    out += m.value
    out += U16.pack(len(m.headers))
    for name, value in m.headers:
        out += pack_str(name)
        out += U32.pack(len(value))
        out += value
    return EncodedMessage(bytes(out))


def encode_value(value: bytes) -> EncodedMessage:
    """The common case, fast: a value without key or headers."""
    return EncodedMessage(b"".join((_NO_KEY_BYTES, U32.pack(len(value)), value, _NO_HEADERS)))


def encode_values(values: Sequence[bytes]) -> bytes:
    """The payload for values without keys or headers (``EncodedMessages.of_values`` wraps it
    with its count).

    Built by slice assignment into one list of parts and a single join: every per-message
    step (``len``, ``U32.pack``) then runs in C through ``map``, with no intermediate bytes
    object per message (about a fifth of the cost of concatenating each message)."""
    n = len(values)
    parts: list[bytes] = [_NO_HEADERS] * (4 * n)
    parts[0::4] = (_NO_KEY_BYTES,) * n
    parts[1::4] = map(U32.pack, map(len, values))
    parts[2::4] = values
    return b"".join(parts)


def encode_messages(messages: Iterable[Message]) -> tuple[int, bytes]:
    """Encode messages into a batch payload; returns ``(count, payload)``."""
    parts = [encode_message(m) for m in messages]
    return len(parts), b"".join(parts)


# Batches at least this long are first tried as equal messages (``_uniform``).
_UNIFORM_FROM = 16


def _uniform(payload: bytes, count: int) -> int | None:
    """The size of every message, if the payload is ``count`` messages of one size without
    keys or headers (the common batch: records of one schema), else ``None``.

    Checked without a Python step per message: the messages then sit at a fixed stride, so
    each of the ten framing bytes of every message (the no-key marker, the value length, the
    empty header count) is compared at once by a strided slice. If all match, reading the
    payload message by message would find exactly that layout."""
    if count < _UNIFORM_FROM or len(payload) < MESSAGE_OVERHEAD:
        return None
    klen, vlen = _KEY_VALUE.unpack_from(payload, 0)
    stride = vlen + MESSAGE_OVERHEAD
    if klen != _NO_KEY or stride * count != len(payload):
        return None
    framing = _KEY_VALUE.pack(_NO_KEY, vlen) + _NO_HEADERS
    starts = (0, 1, 2, 3, 4, 5, 6, 7, vlen + 8, vlen + 9)
    for k, start in enumerate(starts):
        if payload[start::stride] != framing[k : k + 1] * count:
            return None
    return int(vlen)


def _scan(payload: bytes, count: int) -> tuple[list[int], int]:
    """The offset where each message starts and the size of the largest one.

    Raises ``MalformedBatchError`` unless the payload holds exactly ``count`` messages.
    """
    size = _uniform(payload, count)
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
            if klen != _NO_KEY:
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


def _largest(payload: bytes, count: int) -> int:
    """The check every publish goes through, so it is lean (no offsets, and a message without
    a key has its key and value lengths read in one go, and a batch of equal messages is
    checked at once): the size of the largest message, or ``MalformedBatchError`` unless the
    payload holds exactly ``count`` messages."""
    uniform = _uniform(payload, count)
    if uniform is not None:
        return uniform
    largest = 0
    pos = 0
    lengths = _KEY_VALUE.unpack_from
    unpack32 = U32.unpack_from
    unpack16 = U16.unpack_from
    try:
        for _ in range(count):
            klen, vlen = lengths(payload, pos)
            if klen == _NO_KEY:
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
    offsets, largest = _scan(payload, count)
    if largest > max_message_size:
        raise ValueError(largest)
    return offsets


def decode_messages(payload: bytes, count: int) -> list[Message]:
    out: list[Message] = []
    pos = 0
    unpack32 = U32.unpack_from
    unpack16 = U16.unpack_from
    try:
        for _ in range(count):
            (klen,) = unpack32(payload, pos)
            pos += 4
            key: bytes | None = None
            if klen != _NO_KEY:
                key = payload[pos : pos + klen]
                pos += klen
            (vlen,) = unpack32(payload, pos)
            pos += 4
            value = payload[pos : pos + vlen]
            pos += vlen
            (nh,) = unpack16(payload, pos)
            pos += 2
            headers: list[tuple[str, bytes]] = []
            for _h in range(nh):
                name, pos = read_str(payload, pos)
                (hv,) = unpack32(payload, pos)
                pos += 4
                headers.append((name, payload[pos : pos + hv]))
                pos += hv
            if pos > len(payload):
                raise MalformedBatchError("message runs past the end of its batch")
            out.append(Message(value=value, key=key, headers=tuple(headers)))
    except struct.error as exc:
        raise MalformedBatchError("malformed message in batch") from exc
    if pos != len(payload):
        raise MalformedBatchError("trailing bytes after the last message of a batch")
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class EncodedMessages:
    """Encoded messages and their count; built only in ways that keep the two in agreement.

    ``largest`` is the size of the largest message when it was measured (bytes parsed from the
    wire are), else ``None``; a hub checks it against the topic's limit without a second scan.
    """

    count: int
    payload: bytes
    largest: int | None = field(default=None, compare=False, repr=False)
    # True when a check found every message of one size without key or headers (then
    # ``largest`` is that size and the messages sit at a fixed stride).
    uniform: bool = field(default=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.count < 0:
            raise MalformedBatchError(f"negative message count {self.count}")
        if self.largest is None:
            object.__setattr__(self, "largest", _largest(self.payload, self.count))

    @classmethod
    def of(cls, parts: Sequence[EncodedMessage]) -> EncodedMessages:
        """Messages encoded by ``encode_message``/``encode_value``: one per part, no scan."""
        return _trusted(len(parts), b"".join(parts))

    @classmethod
    def of_joined(cls, parts: Sequence[bytes], count: int) -> EncodedMessages:
        """Parts made here (``encode_message``, ``encode_value``, ``encode_values``) holding
        ``count`` messages in all: joined, no scan (a publisher's batch of single messages
        and of chunks handed over together)."""
        return _trusted(count, b"".join(parts))

    @classmethod
    def of_values(cls, values: Sequence[bytes]) -> EncodedMessages:
        return _trusted(len(values), encode_values(values))

    @classmethod
    def of_messages(cls, messages: Iterable[Message]) -> EncodedMessages:
        return cls.of([encode_message(m) for m in messages])

    @classmethod
    def parse(cls, payload: bytes, count: int) -> EncodedMessages:
        """Untrusted bytes: scanned, ``MalformedBatchError`` if they do not hold ``count``
        messages."""
        size = _uniform(payload, count)
        if size is not None:
            return cls(count=count, payload=payload, largest=size, uniform=True)
        return cls(count=count, payload=payload, largest=_largest(payload, count))

    def decode(self) -> list[Message]:
        return decode_messages(self.payload, self.count)


def _trusted(count: int, payload: bytes) -> EncodedMessages:
    """An ``EncodedMessages`` whose count is known to match (skips ``__post_init__``'s scan)."""
    made = object.__new__(EncodedMessages)
    object.__setattr__(made, "count", count)
    object.__setattr__(made, "payload", payload)
    object.__setattr__(made, "largest", None)
    object.__setattr__(made, "uniform", False)
    return made


class DeliveredMessage(NamedTuple):
    """A message as a subscriber or reader sees it: with its place in the topic.

    One flat tuple per message (a subscriber makes one per delivered message, so it is the
    cheapest record to make: ``tuple.__new__`` in one call, read through C accessors);
    ``message`` gives the ``Message`` as it was published, made on demand."""

    seq: int
    publish_time_ms: int
    publisher_id: str
    value: bytes
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    # The lane it came from (``hedwig.metadata.plans``): 0 for a topic not served by lanes.
    # ``seq`` is its place in that lane; a subscriber consumes per lane.
    lane: int = 0

    @property
    def message(self) -> Message:
        return Message(value=self.value, key=self.key, headers=self.headers)


_new_tuple = tuple.__new__


def iter_delivered(
    payload: bytes, first_seq: int, publish_time_ms: int, publisher_id: str, lane: int = 0
) -> Iterator[DeliveredMessage]:
    """A checked batch's messages as delivered, one at a time as they are asked for.

    Lazy on purpose: a subscriber makes each record as it hands it out, and the record is
    usually dropped soon after (so its memory is reused at once), instead of a whole batch of
    records made up front and kept alive in a queue. ``payload`` must have passed a structure
    check (``EncodedMessages.parse``), as every batch from the wire has."""
    new = _new_tuple
    lengths = _KEY_VALUE.unpack_from
    unpack32 = U32.unpack_from
    unpack16 = U16.unpack_from
    end = len(payload)
    pos = 0
    seq = first_seq
    while pos < end:
        klen, vlen = lengths(payload, pos)
        key: bytes | None = None
        if klen != _NO_KEY:
            key = payload[pos + 4 : pos + 4 + klen]
            (vlen,) = unpack32(payload, pos + 4 + klen)
            pos += klen
        pos += 8
        value = payload[pos : pos + vlen]
        pos += vlen
        (nh,) = unpack16(payload, pos)
        pos += 2
        headers: tuple[tuple[str, bytes], ...] = ()
        if nh:
            found: list[tuple[str, bytes]] = []
            for _h in range(nh):
                name, pos = read_str(payload, pos)
                (hv,) = unpack32(payload, pos)
                pos += 4
                found.append((name, payload[pos : pos + hv]))
                pos += hv
            headers = tuple(found)
        yield new(DeliveredMessage, (seq, publish_time_ms, publisher_id, value, key, headers, lane))
        seq += 1


def _iter_uniform(
    payload: bytes, size: int, first_seq: int, publish_time_ms: int, publisher_id: str, lane: int
) -> Iterator[DeliveredMessage]:
    """``iter_delivered`` for a batch checked to hold messages of ``size`` bytes without keys
    or headers: each value is a slice at a fixed stride, nothing to read first."""
    new = _new_tuple
    for seq, start in zip(
        itertools.count(first_seq), range(8, len(payload), size + MESSAGE_OVERHEAD), strict=False
    ):
        yield new(
            DeliveredMessage,
            (seq, publish_time_ms, publisher_id, payload[start : start + size], None, (), lane),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch:
    """Consecutive messages of one topic, as stored in one ledger entry and delivered.

    ``first_seq`` is the topic sequence id of the first message; the batch covers
    ``first_seq .. last_seq``. ``publisher_id`` and ``publisher_seq`` identify the publish
    request, so a retried publish can be recognised as a duplicate. ``raw`` is the batch's
    encoding when it is already known (read from a ledger, or just written to one), so it is
    forwarded as it is stored, never encoded again.
    """

    first_seq: int
    publish_time_ms: int
    publisher_id: str
    publisher_seq: int
    messages: EncodedMessages
    raw: bytes | None = field(default=None, compare=False, repr=False)
    # Where each message starts in the payload, and its end: measured by the first ``slice``
    # and kept, because a stored batch is cut again and again (by every subscription whose
    # window ends inside it, and where the next delivery starts).
    offsets: list[int] | None = field(default=None, compare=False, repr=False, init=False)

    @property
    def count(self) -> int:
        return self.messages.count

    @property
    def payload(self) -> bytes:
        return self.messages.payload

    @property
    def last_seq(self) -> int:
        return self.first_seq + self.messages.count - 1

    def encode(self) -> bytes:
        if self.raw is not None:
            return self.raw
        return b"".join(
            (
                _BATCH_HEAD.pack(self.first_seq, self.publish_time_ms),
                pack_str(self.publisher_id),
                _PUB_SEQ_COUNT.pack(self.publisher_seq, self.messages.count),
                self.messages.payload,
            )
        )

    def with_raw(self) -> Batch:
        """This batch carrying its encoding (made once, then reused by every reader)."""
        if self.raw is not None:
            return self
        return Batch(
            first_seq=self.first_seq,
            publish_time_ms=self.publish_time_ms,
            publisher_id=self.publisher_id,
            publisher_seq=self.publisher_seq,
            messages=self.messages,
            raw=self.encode(),
        )

    @classmethod
    def decode(cls, data: bytes) -> Batch:
        """A batch from the wire: its messages are checked against its count (one lean scan;
        they are decoded when asked for, by ``delivered`` or ``iter_delivered``)."""
        return cls._decode(data, trusted=False)

    @classmethod
    def from_stored(cls, data: bytes) -> Batch:
        """A batch read back from a ledger entry: written by a hub from a checked publish and
        checksummed on disk, so its messages are not scanned again."""
        return cls._decode(data, trusted=True)

    @classmethod
    def _decode(cls, data: bytes, *, trusted: bool) -> Batch:
        try:
            first_seq, time_ms = _BATCH_HEAD.unpack_from(data, 0)
            pid, pos = read_str(data, _BATCH_HEAD.size)
            pseq, count = _PUB_SEQ_COUNT.unpack_from(data, pos)
        except struct.error as exc:
            raise MalformedBatchError("truncated batch header") from exc
        payload = data[pos + _PUB_SEQ_COUNT.size :]
        messages = _trusted(count, payload) if trusted else EncodedMessages.parse(payload, count)
        return cls(
            first_seq=first_seq,
            publish_time_ms=time_ms,
            publisher_id=pid,
            publisher_seq=pseq,
            messages=messages,
            raw=data,
        )

    def iter_delivered(self, lane: int = 0) -> Iterator[DeliveredMessage]:
        """Its messages with their places in the topic (or in ``lane`` of it), made one at a
        time."""
        messages = self.messages
        if messages.uniform and messages.largest is not None:
            return _iter_uniform(
                messages.payload,
                messages.largest,
                self.first_seq,
                self.publish_time_ms,
                self.publisher_id,
                lane,
            )
        return iter_delivered(
            self.payload, self.first_seq, self.publish_time_ms, self.publisher_id, lane
        )

    def delivered(self) -> list[DeliveredMessage]:
        """Its messages with their places in the topic."""
        return list(self.iter_delivered())

    def slice(self, first: int, last: int) -> Batch:
        """The sub-batch holding sequence ids ``first .. last`` (inclusive)."""
        first = max(first, self.first_seq)
        last = min(last, self.last_seq)
        if first == self.first_seq and last == self.last_seq:
            return self
        offsets = self.offsets
        if offsets is None:
            offsets, _ = _scan(self.payload, self.count)
            offsets.append(len(self.payload))
            object.__setattr__(self, "offsets", offsets)
        lo = first - self.first_seq
        hi = last - self.first_seq + 1
        count = max(0, hi - lo)
        return Batch(
            first_seq=first,
            publish_time_ms=self.publish_time_ms,
            publisher_id=self.publisher_id,
            publisher_seq=self.publisher_seq + lo if self.publisher_seq else 0,
            messages=_trusted(count, self.payload[offsets[lo] : offsets[hi]] if count else b""),
        )
