"""Typed frames and their byte encoding (``docs/protocol.md`` is the specification).

Every frame is ``u32 length | u8 version | u8 type | u16 flags | u32 request_id | body``, all
integers big-endian; ``length`` counts the bytes after itself. Requests carry a request id the
hub echoes in its answer, so many requests can be in flight on one connection and answers may
come back in any order. Server-pushed events use request id 0.

Messages travel in batches. A batch is the unit a publisher sends, the unit a ledger stores as
one entry, and the unit a subscriber receives, with the same bytes in all three places: the hub
never re-encodes a message on the hot path, it prefixes and forwards. Individual messages are
decoded only by whoever wants to look inside (``Batch.messages``).

Decoders raise ``ProtocolError`` for anything malformed: truncated bodies, trailing bytes,
counts that do not match, invalid UTF-8, unknown enum values. Nothing else may escape them.
"""

from __future__ import annotations

import builtins
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import ClassVar

from hedwig.errors import ProtocolError

PROTOCOL_VERSION = 1

HEADER = struct.Struct(">IBBHI")
HEADER_SIZE = HEADER.size  # 12
# Bytes after the length field that are header, not body.
HEADER_AFTER_LENGTH = HEADER_SIZE - 4

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_BATCH_HEAD = struct.Struct(">QQ")  # first_seq, publish_time_ms
_PUB_SEQ_COUNT = struct.Struct(">QI")  # publisher_seq, count
_NO_KEY = 0xFFFFFFFF
_NO_STR = 0xFFFF

# Flag bits. Their meaning is shared by every request that carries them.
FLAG_REDIRECTED = 0x0001  # the client was redirected here: claim, do not choose again
FLAG_FORCE_ATTACH = 0x0002  # take over a subscription another connection holds


class SubscribeMode(IntEnum):
    CREATE = 0
    ATTACH = 1
    CREATE_OR_ATTACH = 2


# --------------------------------------------------------------------------------------------
# Messages and batches


@dataclass(frozen=True, slots=True)
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


def encode_message(m: Message, out: bytearray) -> None:
    if m.key is None:
        out += _U32.pack(_NO_KEY)
    else:
        out += _U32.pack(len(m.key))
        out += m.key
    out += _U32.pack(len(m.value))
    out += m.value
    out += _U16.pack(len(m.headers))
    for name, value in m.headers:
        raw = name.encode("utf-8")
        out += _U16.pack(len(raw))
        out += raw
        out += _U32.pack(len(value))
        out += value


def encode_messages(messages: Iterable[Message]) -> tuple[int, bytes]:
    """Encode messages into a batch payload; returns ``(count, payload)``."""
    out = bytearray()
    n = 0
    for m in messages:
        encode_message(m, out)
        n += 1
    return n, bytes(out)


def encode_values(values: Sequence[bytes]) -> bytes:
    """Fast path for the common case: values without keys or headers."""
    parts: list[bytes] = []
    no_key = _U32.pack(_NO_KEY)
    no_headers = _U16.pack(0)
    pack = _U32.pack
    for v in values:
        parts.append(no_key + pack(len(v)) + v + no_headers)
    return b"".join(parts)


def scan_messages(payload: bytes, count: int, max_message_size: int) -> list[int]:
    """Check a batch payload's structure; return the offset where each message starts.

    Raises ``ProtocolError`` if the payload does not hold exactly ``count`` well-formed messages,
    and ``ValueError`` (with the offending size) if one message exceeds ``max_message_size``.
    """
    offsets: list[int] = []
    pos = 0
    end = len(payload)
    unpack32 = _U32.unpack_from
    unpack16 = _U16.unpack_from
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
                raise ProtocolError("message runs past the end of its batch")
            if size > max_message_size:
                raise ValueError(size)
    except struct.error as exc:
        raise ProtocolError("truncated message in batch") from exc
    if pos != end:
        raise ProtocolError(f"batch holds {end - pos} bytes after its {count} messages")
    return offsets


def decode_messages(payload: bytes, count: int) -> list[Message]:
    out: list[Message] = []
    pos = 0
    unpack32 = _U32.unpack_from
    unpack16 = _U16.unpack_from
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
                (hn,) = unpack16(payload, pos)
                pos += 2
                name = payload[pos : pos + hn].decode("utf-8")
                pos += hn
                (hv,) = unpack32(payload, pos)
                pos += 4
                headers.append((name, payload[pos : pos + hv]))
                pos += hv
            if pos > len(payload):
                raise ProtocolError("message runs past the end of its batch")
            out.append(Message(value=value, key=key, headers=tuple(headers)))
    except (struct.error, UnicodeDecodeError) as exc:
        raise ProtocolError("malformed message in batch") from exc
    if pos != len(payload):
        raise ProtocolError("trailing bytes after the last message of a batch")
    return out


@dataclass(frozen=True, slots=True)
class DeliveredMessage:
    """A message as a subscriber or reader sees it: with its place in the topic."""

    seq: int
    publish_time_ms: int
    publisher_id: str
    message: Message

    @property
    def value(self) -> bytes:
        return self.message.value


@dataclass(frozen=True, slots=True)
class Batch:
    """Consecutive messages of one topic, as stored in one ledger entry and delivered.

    ``first_seq`` is the topic sequence id of the first message; the batch covers
    ``first_seq .. last_seq``. ``publisher_id`` and ``publisher_seq`` identify the publish
    request, so a retried publish can be recognised as a duplicate.
    """

    first_seq: int
    publish_time_ms: int
    publisher_id: str
    publisher_seq: int
    count: int
    payload: bytes

    @property
    def last_seq(self) -> int:
        return self.first_seq + self.count - 1

    def encode(self) -> bytes:
        pid = self.publisher_id.encode("utf-8")
        return b"".join(
            (
                _BATCH_HEAD.pack(self.first_seq, self.publish_time_ms),
                _U16.pack(len(pid)),
                pid,
                _PUB_SEQ_COUNT.pack(self.publisher_seq, self.count),
                self.payload,
            )
        )

    @classmethod
    def decode(cls, data: bytes | memoryview) -> Batch:
        r = _Reader(data)
        first_seq = r.u64()
        time_ms = r.u64()
        pid = r.str()
        pseq = r.u64()
        count = r.u32()
        payload = r.rest()
        return cls(first_seq, time_ms, pid, pseq, count, payload)

    def messages(self) -> list[Message]:
        return decode_messages(self.payload, self.count)

    def delivered(self) -> list[DeliveredMessage]:
        return [
            DeliveredMessage(self.first_seq + i, self.publish_time_ms, self.publisher_id, m)
            for i, m in enumerate(self.messages())
        ]

    def slice(self, first: int, last: int) -> Batch:
        """The sub-batch holding sequence ids ``first .. last`` (inclusive)."""
        first = max(first, self.first_seq)
        last = min(last, self.last_seq)
        if first == self.first_seq and last == self.last_seq:
            return self
        offsets = scan_messages(self.payload, self.count, 1 << 62)
        offsets.append(len(self.payload))
        lo = first - self.first_seq
        hi = last - self.first_seq + 1
        return Batch(
            first,
            self.publish_time_ms,
            self.publisher_id,
            self.publisher_seq + lo if self.publisher_seq else 0,
            max(0, hi - lo),
            self.payload[offsets[lo] : offsets[hi]] if hi > lo else b"",
        )


# --------------------------------------------------------------------------------------------
# Body reader


class _Reader:
    __slots__ = ("_data", "_pos")

    def __init__(self, data: bytes | memoryview) -> None:
        self._data = bytes(data)
        self._pos = 0

    def _take(self, n: int) -> bytes:
        end = self._pos + n
        if end > len(self._data):
            raise ProtocolError("frame body is truncated")
        chunk = self._data[self._pos : end]
        self._pos = end
        return chunk

    def u8(self) -> int:
        (v,) = _U8.unpack(self._take(1))
        return int(v)

    def u16(self) -> int:
        (v,) = _U16.unpack(self._take(2))
        return int(v)

    def u32(self) -> int:
        (v,) = _U32.unpack(self._take(4))
        return int(v)

    def u64(self) -> int:
        (v,) = _U64.unpack(self._take(8))
        return int(v)

    def str(self) -> str:
        n = self.u16()
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError("string is not valid UTF-8") from exc

    def opt_str(self) -> builtins.str | None:
        n = self.u16()
        if n == _NO_STR:
            return None
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError("string is not valid UTF-8") from exc

    def rest(self) -> bytes:
        chunk = self._data[self._pos :]
        self._pos = len(self._data)
        return chunk

    def done(self) -> None:
        if self._pos != len(self._data):
            raise ProtocolError(f"{len(self._data) - self._pos} unexpected bytes after the body")


def _str(s: str) -> bytes:
    raw = s.encode("utf-8")
    if len(raw) >= _NO_STR:
        raise ProtocolError("string too long for the wire (64 KiB)")
    return _U16.pack(len(raw)) + raw


def _opt_str(s: str | None) -> bytes:
    return _U16.pack(_NO_STR) if s is None else _str(s)


# --------------------------------------------------------------------------------------------
# Frames. Each class knows its type code, its direction, and how to encode its body.


@dataclass(frozen=True, slots=True)
class _FrameBase:
    TYPE: ClassVar[int] = -1
    FROM_CLIENT: ClassVar[bool] = True

    def body(self) -> bytes:
        raise NotImplementedError

    def header_fields(self) -> tuple[int, int]:
        """``(flags, request_id)`` for the frame header."""
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Publish(_FrameBase):
    """Append a batch of messages to a topic. Answered by ``Published`` or ``Error``.

    ``publisher_seq`` is the publisher's own sequence number of the first message (0: the
    publisher does not ask for duplicate detection).
    """

    TYPE: ClassVar[int] = 0x01
    request_id: int
    topic: str
    publisher_id: str
    publisher_seq: int
    count: int
    payload: bytes
    redirected: bool = False

    def header_fields(self) -> tuple[int, int]:
        return (FLAG_REDIRECTED if self.redirected else 0), self.request_id

    def body(self) -> bytes:
        return b"".join(
            (
                _str(self.topic),
                _str(self.publisher_id),
                _PUB_SEQ_COUNT.pack(self.publisher_seq, self.count),
                self.payload,
            )
        )

    @classmethod
    def decode(cls, flags: int, rid: int, r: _Reader) -> Publish:
        topic = r.str()
        pid = r.str()
        pseq = r.u64()
        count = r.u32()
        return cls(rid, topic, pid, pseq, count, r.rest(), bool(flags & FLAG_REDIRECTED))


@dataclass(frozen=True, slots=True)
class Subscribe(_FrameBase):
    """Create or attach a subscription. Answered by ``Subscribed`` or ``Error``.

    ``message_window``: at most this many delivered but unconsumed messages (0: no limit).
    ``message_bound``: keep at most this many unconsumed messages for the subscriber; older
    ones are skipped (0: no bound).
    """

    TYPE: ClassVar[int] = 0x02
    request_id: int
    topic: str
    subscriber: str
    mode: SubscribeMode = SubscribeMode.CREATE_OR_ATTACH
    message_window: int = 0
    message_bound: int = 0
    redirected: bool = False
    force_attach: bool = False

    def header_fields(self) -> tuple[int, int]:
        flags = (FLAG_REDIRECTED if self.redirected else 0) | (
            FLAG_FORCE_ATTACH if self.force_attach else 0
        )
        return flags, self.request_id

    def body(self) -> bytes:
        return b"".join(
            (
                _str(self.topic),
                _str(self.subscriber),
                _U8.pack(int(self.mode)),
                _U32.pack(self.message_window),
                _U32.pack(self.message_bound),
            )
        )

    @classmethod
    def decode(cls, flags: int, rid: int, r: _Reader) -> Subscribe:
        topic = r.str()
        sub = r.str()
        mode = r.u8()
        if mode not in SubscribeMode._value2member_map_:
            raise ProtocolError(f"unknown subscribe mode {mode}")
        window = r.u32()
        bound = r.u32()
        r.done()
        return cls(
            rid,
            topic,
            sub,
            SubscribeMode(mode),
            window,
            bound,
            bool(flags & FLAG_REDIRECTED),
            bool(flags & FLAG_FORCE_ATTACH),
        )


@dataclass(frozen=True, slots=True)
class _TopicSubscriberRequest(_FrameBase):
    request_id: int
    topic: str
    subscriber: str

    def header_fields(self) -> tuple[int, int]:
        return 0, self.request_id

    def body(self) -> bytes:
        return _str(self.topic) + _str(self.subscriber)


@dataclass(frozen=True, slots=True)
class Consume(_FrameBase):
    """Cumulative: the subscriber has consumed every message up to and including ``seq``."""

    TYPE: ClassVar[int] = 0x03
    request_id: int
    topic: str
    subscriber: str
    seq: int

    def header_fields(self) -> tuple[int, int]:
        return 0, self.request_id

    def body(self) -> bytes:
        return _str(self.topic) + _str(self.subscriber) + _U64.pack(self.seq)

    @classmethod
    def decode(cls, flags: int, rid: int, r: _Reader) -> Consume:
        topic = r.str()
        sub = r.str()
        seq = r.u64()
        r.done()
        return cls(rid, topic, sub, seq)


@dataclass(frozen=True, slots=True)
class Unsubscribe(_TopicSubscriberRequest):
    """Delete the subscription and its consume mark."""

    TYPE: ClassVar[int] = 0x04

    @classmethod
    def decode(cls, flags: int, rid: int, r: _Reader) -> Unsubscribe:
        topic = r.str()
        sub = r.str()
        r.done()
        return cls(rid, topic, sub)


@dataclass(frozen=True, slots=True)
class CloseSubscription(_TopicSubscriberRequest):
    """Stop delivery on this connection; the subscription and its mark stay."""

    TYPE: ClassVar[int] = 0x05

    @classmethod
    def decode(cls, flags: int, rid: int, r: _Reader) -> CloseSubscription:
        topic = r.str()
        sub = r.str()
        r.done()
        return cls(rid, topic, sub)


@dataclass(frozen=True, slots=True)
class Ping(_FrameBase):
    TYPE: ClassVar[int] = 0x06
    request_id: int

    def header_fields(self) -> tuple[int, int]:
        return 0, self.request_id

    def body(self) -> bytes:
        return b""

    @classmethod
    def decode(cls, flags: int, rid: int, r: _Reader) -> Ping:
        r.done()
        return cls(rid)


@dataclass(frozen=True, slots=True)
class Read(_FrameBase):
    """Read messages by sequence id without a subscription (for batch readers such as Spark).

    Answered by ``Messages``: batches starting at or after ``start_seq``, at most
    ``max_messages`` messages and about ``max_bytes`` bytes, never past the last confirmed one.
    """

    TYPE: ClassVar[int] = 0x07
    request_id: int
    topic: str
    start_seq: int
    max_messages: int
    max_bytes: int
    redirected: bool = False

    def header_fields(self) -> tuple[int, int]:
        return (FLAG_REDIRECTED if self.redirected else 0), self.request_id

    def body(self) -> bytes:
        return (
            _str(self.topic)
            + _U64.pack(self.start_seq)
            + _U32.pack(self.max_messages)
            + _U32.pack(self.max_bytes)
        )

    @classmethod
    def decode(cls, flags: int, rid: int, r: _Reader) -> Read:
        topic = r.str()
        start = r.u64()
        mm = r.u32()
        mb = r.u32()
        r.done()
        return cls(rid, topic, start, mm, mb, bool(flags & FLAG_REDIRECTED))


@dataclass(frozen=True, slots=True)
class TopicStats(_FrameBase):
    """Ask the owner for a topic's bounds. Answered by ``TopicInfo``."""

    TYPE: ClassVar[int] = 0x08
    request_id: int
    topic: str
    redirected: bool = False

    def header_fields(self) -> tuple[int, int]:
        return (FLAG_REDIRECTED if self.redirected else 0), self.request_id

    def body(self) -> bytes:
        return _str(self.topic)

    @classmethod
    def decode(cls, flags: int, rid: int, r: _Reader) -> TopicStats:
        topic = r.str()
        r.done()
        return cls(rid, topic, bool(flags & FLAG_REDIRECTED))


@dataclass(frozen=True, slots=True)
class ReleaseTopic(_FrameBase):
    """Ask the owner to hand the topic over gracefully, to ``destination`` if given.

    The owner stops accepting publishes, flushes consume marks, closes its ledger, deletes its
    owner record and sends TOPIC_MOVED naming the destination to every client of the topic;
    then it answers OK. A hub that does not own the topic answers NOT_RESPONSIBLE.
    """

    TYPE: ClassVar[int] = 0x09
    request_id: int
    topic: str
    destination: str | None = None
    reason: str = "move requested"

    def header_fields(self) -> tuple[int, int]:
        return 0, self.request_id

    def body(self) -> bytes:
        return _str(self.topic) + _opt_str(self.destination) + _str(self.reason[:1024])

    @classmethod
    def decode(cls, flags: int, rid: int, r: _Reader) -> ReleaseTopic:
        topic = r.str()
        dest = r.opt_str()
        reason = r.str()
        r.done()
        return cls(rid, topic, dest, reason)


# Answers ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ok(_FrameBase):
    TYPE: ClassVar[int] = 0x80
    FROM_CLIENT: ClassVar[bool] = False
    request_id: int

    def header_fields(self) -> tuple[int, int]:
        return 0, self.request_id

    def body(self) -> bytes:
        return b""

    @classmethod
    def decode(cls, flags: int, rid: int, r: _Reader) -> Ok:
        r.done()
        return cls(rid)


@dataclass(frozen=True, slots=True)
class Published(_FrameBase):
    """The batch is durable; it holds sequence ids ``first_seq .. last_seq``.

    ``duplicate`` is set when the hub recognised a retried publish and stored nothing new.
    """

    TYPE: ClassVar[int] = 0x81
    FROM_CLIENT: ClassVar[bool] = False
    request_id: int
    first_seq: int
    last_seq: int
    duplicate: bool = False

    def header_fields(self) -> tuple[int, int]:
        return (1 if self.duplicate else 0), self.request_id

    def body(self) -> bytes:
        return _U64.pack(self.first_seq) + _U64.pack(self.last_seq)

    @classmethod
    def decode(cls, flags: int, rid: int, r: _Reader) -> Published:
        first = r.u64()
        last = r.u64()
        r.done()
        return cls(rid, first, last, bool(flags & 1))


@dataclass(frozen=True, slots=True)
class Subscribed(_FrameBase):
    """The subscription is attached; delivery starts after ``consumed_seq``."""

    TYPE: ClassVar[int] = 0x82
    FROM_CLIENT: ClassVar[bool] = False
    request_id: int
    consumed_seq: int
    last_seq: int

    def header_fields(self) -> tuple[int, int]:
        return 0, self.request_id

    def body(self) -> bytes:
        return _U64.pack(self.consumed_seq) + _U64.pack(self.last_seq)

    @classmethod
    def decode(cls, flags: int, rid: int, r: _Reader) -> Subscribed:
        c = r.u64()
        last = r.u64()
        r.done()
        return cls(rid, c, last)


@dataclass(frozen=True, slots=True)
class Messages(_FrameBase):
    """The answer to ``Read``: the topic's bounds and zero or more batches."""

    TYPE: ClassVar[int] = 0x83
    FROM_CLIENT: ClassVar[bool] = False
    request_id: int
    first_available: int
    last_seq: int
    batches: tuple[Batch, ...] = ()

    def header_fields(self) -> tuple[int, int]:
        return 0, self.request_id

    def body(self) -> bytes:
        parts = [_U64.pack(self.first_available), _U64.pack(self.last_seq)]
        parts.append(_U32.pack(len(self.batches)))
        for b in self.batches:
            raw = b.encode()
            parts.append(_U32.pack(len(raw)))
            parts.append(raw)
        return b"".join(parts)

    @classmethod
    def decode(cls, flags: int, rid: int, r: _Reader) -> Messages:
        first = r.u64()
        last = r.u64()
        n = r.u32()
        batches = []
        for _ in range(n):
            size = r.u32()
            batches.append(_decode_checked_batch(r._take(size)))
        r.done()
        return cls(rid, first, last, tuple(batches))


@dataclass(frozen=True, slots=True)
class TopicInfo(_FrameBase):
    TYPE: ClassVar[int] = 0x84
    FROM_CLIENT: ClassVar[bool] = False
    request_id: int
    first_available: int
    last_seq: int
    subscribers: int

    def header_fields(self) -> tuple[int, int]:
        return 0, self.request_id

    def body(self) -> bytes:
        return (
            _U64.pack(self.first_available) + _U64.pack(self.last_seq) + _U32.pack(self.subscribers)
        )

    @classmethod
    def decode(cls, flags: int, rid: int, r: _Reader) -> TopicInfo:
        first = r.u64()
        last = r.u64()
        subs = r.u32()
        r.done()
        return cls(rid, first, last, subs)


@dataclass(frozen=True, slots=True)
class Error(_FrameBase):
    """A request failed with ``status``; ``detail`` is the owner's address for redirects."""

    TYPE: ClassVar[int] = 0x8F
    FROM_CLIENT: ClassVar[bool] = False
    request_id: int
    status: int
    message: str
    detail: str | None = None

    def header_fields(self) -> tuple[int, int]:
        return 0, self.request_id

    def body(self) -> bytes:
        return _U16.pack(self.status) + _str(self.message[:4096]) + _opt_str(self.detail)

    @classmethod
    def decode(cls, flags: int, rid: int, r: _Reader) -> Error:
        status = r.u16()
        msg = r.str()
        detail = r.opt_str()
        r.done()
        return cls(rid, status, msg, detail)


# Events -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Deliver(_FrameBase):
    """Messages for a subscription; the subscriber consumes them with ``Consume``."""

    TYPE: ClassVar[int] = 0xC0
    FROM_CLIENT: ClassVar[bool] = False
    topic: str
    subscriber: str
    batch: Batch
    # The encoded batch, when the sender already has it (the hub forwards ledger entries).
    raw: bytes | None = field(default=None, compare=False)

    def header_fields(self) -> tuple[int, int]:
        return 0, 0

    def body(self) -> bytes:
        return _str(self.topic) + _str(self.subscriber) + (self.raw or self.batch.encode())

    @classmethod
    def decode(cls, flags: int, rid: int, r: _Reader) -> Deliver:
        topic = r.str()
        sub = r.str()
        return cls(topic, sub, _decode_checked_batch(r.rest()))


@dataclass(frozen=True, slots=True)
class TopicMoved(_FrameBase):
    """The hub no longer serves the topic; ``new_owner`` is where it went, if known.

    Sent to every publisher and subscriber of the topic on this connection. ``subscriber`` is
    set when the event concerns one subscription.
    """

    TYPE: ClassVar[int] = 0xC1
    FROM_CLIENT: ClassVar[bool] = False
    topic: str
    new_owner: str | None
    reason: str
    subscriber: str | None = None

    def header_fields(self) -> tuple[int, int]:
        return 0, 0

    def body(self) -> bytes:
        return (
            _str(self.topic)
            + _opt_str(self.new_owner)
            + _str(self.reason[:1024])
            + _opt_str(self.subscriber)
        )

    @classmethod
    def decode(cls, flags: int, rid: int, r: _Reader) -> TopicMoved:
        topic = r.str()
        owner = r.opt_str()
        reason = r.str()
        sub = r.opt_str()
        r.done()
        return cls(topic, owner, reason, sub)


@dataclass(frozen=True, slots=True)
class SubscriptionForcedClosed(_FrameBase):
    """Another connection attached the subscription with force-attach, or it was deleted."""

    TYPE: ClassVar[int] = 0xC2
    FROM_CLIENT: ClassVar[bool] = False
    topic: str
    subscriber: str
    reason: str

    def header_fields(self) -> tuple[int, int]:
        return 0, 0

    def body(self) -> bytes:
        return _str(self.topic) + _str(self.subscriber) + _str(self.reason[:1024])

    @classmethod
    def decode(cls, flags: int, rid: int, r: _Reader) -> SubscriptionForcedClosed:
        topic = r.str()
        sub = r.str()
        reason = r.str()
        r.done()
        return cls(topic, sub, reason)


# Storage role (hub to hub) -------------------------------------------------------------------
# A hub's storage role holds ledger replicas for other hubs' topics. These frames are how a
# ledger writer or a recovering hub reaches it; ``docs/protocol.md`` lists them with the rest.

_LEDGER_ENTRY = struct.Struct(">QQq")  # ledger id, entry id, lac
_LEDGER = struct.Struct(">Q")
_LAC = struct.Struct(">qq")


@dataclass(frozen=True, slots=True)
class AddEntry(_FrameBase):
    """Store one entry. ``recovery`` adds are allowed on a fenced ledger (write-back)."""

    TYPE: ClassVar[int] = 0x10
    request_id: int
    ledger_id: int
    entry_id: int
    lac: int
    payload: bytes
    recovery: bool = False

    def header_fields(self) -> tuple[int, int]:
        return (1 if self.recovery else 0), self.request_id

    def body(self) -> bytes:
        return _LEDGER_ENTRY.pack(self.ledger_id, self.entry_id, self.lac) + self.payload

    @classmethod
    def decode(cls, flags: int, rid: int, r: _Reader) -> AddEntry:
        lid, eid, lac = _LEDGER_ENTRY.unpack(r._take(_LEDGER_ENTRY.size))
        return cls(rid, lid, eid, lac, r.rest(), bool(flags & 1))


@dataclass(frozen=True, slots=True)
class ReadEntry(_FrameBase):
    """Read one stored entry. Answered by ``Entry`` or NO_SUCH_ENTRY."""

    TYPE: ClassVar[int] = 0x11
    request_id: int
    ledger_id: int
    entry_id: int

    def header_fields(self) -> tuple[int, int]:
        return 0, self.request_id

    def body(self) -> bytes:
        return _LEDGER_ENTRY.pack(self.ledger_id, self.entry_id, 0)

    @classmethod
    def decode(cls, flags: int, rid: int, r: _Reader) -> ReadEntry:
        lid, eid, _ = _LEDGER_ENTRY.unpack(r._take(_LEDGER_ENTRY.size))
        r.done()
        return cls(rid, lid, eid)


@dataclass(frozen=True, slots=True)
class ReadLac(_FrameBase):
    """The replica's LAC and last stored entry for a ledger; fences it first if asked."""

    TYPE: ClassVar[int] = 0x12
    request_id: int
    ledger_id: int
    fence: bool = False

    def header_fields(self) -> tuple[int, int]:
        return (1 if self.fence else 0), self.request_id

    def body(self) -> bytes:
        return _LEDGER.pack(self.ledger_id)

    @classmethod
    def decode(cls, flags: int, rid: int, r: _Reader) -> ReadLac:
        (lid,) = _LEDGER.unpack(r._take(_LEDGER.size))
        r.done()
        return cls(rid, lid, bool(flags & 1))


@dataclass(frozen=True, slots=True)
class DeleteLedger(_FrameBase):
    TYPE: ClassVar[int] = 0x13
    request_id: int
    ledger_id: int

    def header_fields(self) -> tuple[int, int]:
        return 0, self.request_id

    def body(self) -> bytes:
        return _LEDGER.pack(self.ledger_id)

    @classmethod
    def decode(cls, flags: int, rid: int, r: _Reader) -> DeleteLedger:
        (lid,) = _LEDGER.unpack(r._take(_LEDGER.size))
        r.done()
        return cls(rid, lid)


@dataclass(frozen=True, slots=True)
class Entry(_FrameBase):
    TYPE: ClassVar[int] = 0x85
    FROM_CLIENT: ClassVar[bool] = False
    request_id: int
    payload: bytes

    def header_fields(self) -> tuple[int, int]:
        return 0, self.request_id

    def body(self) -> bytes:
        return self.payload

    @classmethod
    def decode(cls, flags: int, rid: int, r: _Reader) -> Entry:
        return cls(rid, r.rest())


@dataclass(frozen=True, slots=True)
class Lac(_FrameBase):
    TYPE: ClassVar[int] = 0x86
    FROM_CLIENT: ClassVar[bool] = False
    request_id: int
    lac: int
    last_entry_id: int

    def header_fields(self) -> tuple[int, int]:
        return 0, self.request_id

    def body(self) -> bytes:
        return _LAC.pack(self.lac, self.last_entry_id)

    @classmethod
    def decode(cls, flags: int, rid: int, r: _Reader) -> Lac:
        lac, last = _LAC.unpack(r._take(_LAC.size))
        r.done()
        return cls(rid, lac, last)


def _decode_checked_batch(data: bytes) -> Batch:
    batch = Batch.decode(data)
    scan_messages(batch.payload, batch.count, 1 << 62)
    return batch


Frame = (
    Publish
    | Subscribe
    | Consume
    | Unsubscribe
    | CloseSubscription
    | Ping
    | Read
    | TopicStats
    | ReleaseTopic
    | Ok
    | Published
    | Subscribed
    | Messages
    | TopicInfo
    | Error
    | Deliver
    | TopicMoved
    | SubscriptionForcedClosed
    | AddEntry
    | ReadEntry
    | ReadLac
    | DeleteLedger
    | Entry
    | Lac
)

_Decoder = Callable[[int, int, _Reader], Frame]

DECODERS: dict[int, tuple[bool, _Decoder]] = {
    cls.TYPE: (cls.FROM_CLIENT, cls.decode)
    for cls in (
        Publish,
        Subscribe,
        Consume,
        Unsubscribe,
        CloseSubscription,
        Ping,
        Read,
        TopicStats,
        ReleaseTopic,
        Ok,
        Published,
        Subscribed,
        Messages,
        TopicInfo,
        Error,
        Deliver,
        TopicMoved,
        SubscriptionForcedClosed,
        AddEntry,
        ReadEntry,
        ReadLac,
        DeleteLedger,
        Entry,
        Lac,
    )
}


def encode_frame(frame: Frame) -> bytes:
    body = frame.body()
    flags, rid = frame.header_fields()
    return (
        HEADER.pack(len(body) + HEADER_AFTER_LENGTH, PROTOCOL_VERSION, frame.TYPE, flags, rid)
        + body
    )


def decode_body(ftype: int, flags: int, rid: int, body: bytes) -> Frame:
    entry = DECODERS.get(ftype)
    if entry is None:
        raise ProtocolError(f"unknown frame type 0x{ftype:02x}")
    try:
        return entry[1](flags, rid, _Reader(body))
    except ProtocolError:
        raise
    except (struct.error, ValueError, UnicodeDecodeError, IndexError) as exc:
        raise ProtocolError(f"malformed frame of type 0x{ftype:02x}: {exc}") from exc
