"""Field codecs: how each kind of frame field travels, for ``hedwig.protocol.schema``.

A frame declares each field's wire type in its annotation with one of the aliases at the end
(``Str``, ``U64``, ``CountedMessages``...). A codec either is fixed-width (``fmt``: adjacent
ones are packed together by one ``struct.Struct``) or gives an expression that encodes the
field and statements that decode it, which the schema pastes into each frame's generated
codec. ``check`` runs when a frame is built, so a value that cannot travel is refused there.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Annotated, Any

from hedwig.errors import UsageError
from hedwig.protocol import wire
from hedwig.protocol.messages import Batch, EncodedMessages


class Codec:
    """How one field travels. ``fmt`` is set for fixed-width fields, which get packed
    together; others give an encoding expression and decoding statements."""

    doc: str = "?"
    fmt: str | None = None
    takes_rest = False
    # The name the generated code calls this codec by (``{ref}.encode``), for a codec that
    # encodes and decodes itself; None for the others.
    ref: str | None = None

    def check(self, name: str, value: Any) -> None:
        """Raise ``UsageError`` if ``value`` cannot travel in this field."""

    def encode_expr(self, value: str) -> str:
        raise NotImplementedError

    def decode_lines(self, target: str) -> list[str]:
        """Statements reading ``data`` at ``pos`` into ``target``, advancing ``pos``."""
        raise NotImplementedError

    def from_fixed(self, raw: str) -> str:
        """For fixed-width fields: the expression turning the unpacked int into the value."""
        return raw

    def to_fixed(self, value: str) -> str:
        return value


class Int(Codec):
    def __init__(self, fmt: str, lo: int, hi: int, name: str) -> None:
        self.fmt = fmt
        self.lo = lo
        self.hi = hi
        self.doc = name

    def check(self, name: str, value: Any) -> None:
        if not isinstance(value, int) or not self.lo <= value <= self.hi:
            raise UsageError(f"{name} must be an integer in {self.lo}..{self.hi}, got {value!r}")


class BoolCodec(Codec):
    """A flag in a byte of its own (struct's ``?``): for fields of records, where there is no
    header to carry it as a bit."""

    fmt = "?"
    doc = "u8"

    def check(self, name: str, value: Any) -> None:
        if not isinstance(value, bool):
            raise UsageError(f"{name} must be a bool, got {value!r}")


U8_CODEC = Int("B", 0, 0xFF, "u8")
U16_CODEC = Int("H", 0, 0xFFFF, "u16")
U32_CODEC = Int("I", 0, 0xFFFFFFFF, "u32")
U64_CODEC = Int("Q", 0, 2**64 - 1, "u64")
I64_CODEC = Int("q", -(2**63), 2**63 - 1, "i64")
# An entry id or a LAC: -1 for none, else what a signed 64-bit field holds.
ENTRY_CODEC = Int("q", -1, 2**63 - 1, "i64")
BOOL_CODEC = BoolCodec()


class EnumCodec(Codec):
    def __init__(self, enum: type[IntEnum]) -> None:
        self.enum = enum
        self.fmt = "B"
        self.doc = f"u8 {enum.__name__}"

    def check(self, name: str, value: Any) -> None:
        if not isinstance(value, self.enum):
            raise UsageError(f"{name} must be a {self.enum.__name__}, got {value!r}")

    def from_fixed(self, raw: str) -> str:
        return f"_enum_{self.enum.__name__}({raw})"

    def to_fixed(self, value: str) -> str:
        return value


class StrCodec(Codec):
    doc = "str"

    def check(self, name: str, value: Any) -> None:
        if not isinstance(value, str):
            raise UsageError(f"{name} must be a str, got {type(value).__name__}")

    def encode_expr(self, value: str) -> str:
        return f"_pack_str({value})"

    def decode_lines(self, target: str) -> list[str]:
        return [f"{target}, pos = _read_str(data, pos)"]


class OptStrCodec(Codec):
    doc = "opt str"

    def check(self, name: str, value: Any) -> None:
        if value is not None and not isinstance(value, str):
            raise UsageError(f"{name} must be a str or None, got {type(value).__name__}")

    def encode_expr(self, value: str) -> str:
        return f"_pack_opt_str({value})"

    def decode_lines(self, target: str) -> list[str]:
        return [f"{target}, pos = _read_opt_str(data, pos)"]


class RestCodec(Codec):
    """Opaque bytes up to the end of the body (a ledger entry)."""

    doc = "{name}: bytes to the end"
    takes_rest = True

    def check(self, name: str, value: Any) -> None:
        if not isinstance(value, bytes):
            raise UsageError(f"{name} must be bytes, got {type(value).__name__}")

    def encode_expr(self, value: str) -> str:
        return value

    def decode_lines(self, target: str) -> list[str]:
        return [f"{target} = data[pos:]", "pos = len(data)"]


class MessagesCodec(Codec):
    """``u32 count`` then the encoded messages to the end of the body."""

    doc = "u32 count, {name} to the end"
    takes_rest = True

    def check(self, name: str, value: Any) -> None:
        if not isinstance(value, EncodedMessages):
            raise UsageError(f"{name} must be EncodedMessages, got {type(value).__name__}")

    def encode_expr(self, value: str) -> str:
        return f"_U32.pack({value}.count) + {value}.payload"

    def decode_lines(self, target: str) -> list[str]:
        return [
            "(_count,) = _U32.unpack_from(data, pos)",
            f"{target} = _EncodedMessages.parse(data[pos + 4:], _count)",
            "pos = len(data)",
        ]


class BatchCodec(Codec):
    """One batch, to the end of the body, sent as stored (``Batch.raw``)."""

    doc = "{name}: a batch, to the end"
    takes_rest = True

    def check(self, name: str, value: Any) -> None:
        if not isinstance(value, Batch):
            raise UsageError(f"{name} must be a Batch, got {type(value).__name__}")

    def encode_expr(self, value: str) -> str:
        return f"{value}.encode()"

    def decode_lines(self, target: str) -> list[str]:
        return [f"{target} = _Batch.decode(data[pos:])", "pos = len(data)"]


class BatchListCodec(Codec):
    """``u32 n`` then n times ``u32 size + batch``, each sent as stored."""

    doc = "u32 n, {name}: n x (u32 size, batch)"

    def check(self, name: str, value: Any) -> None:
        if not isinstance(value, tuple) or not all(isinstance(b, Batch) for b in value):
            raise UsageError(f"{name} must be a tuple of Batch")

    def encode_expr(self, value: str) -> str:
        return f"encode_batches({value})"

    def decode_lines(self, target: str) -> list[str]:
        return [f"{target}, pos = decode_batches(data, pos)"]


def encode_batches(batches: tuple[Batch, ...]) -> bytes:
    parts = [wire.U32.pack(len(batches))]
    for b in batches:
        raw = b.encode()
        parts.append(wire.U32.pack(len(raw)))
        parts.append(raw)
    return b"".join(parts)


def decode_batches(data: bytes, pos: int) -> tuple[tuple[Batch, ...], int]:
    (n,) = wire.U32.unpack_from(data, pos)
    pos += 4
    out = []
    for _ in range(n):
        raw, pos = wire.read_sized(data, pos)
        out.append(Batch.decode(raw))
    return tuple(out), pos


@dataclass(frozen=True, slots=True)
class SubscriptionInfo:
    """A subscription as DESCRIBE_TOPIC reports it."""

    name: str
    consumed_seq: int
    attached: bool
    last_active_ms: int


class SubscriptionInfosCodec(Codec):
    """``u32 n`` then n times ``str name, u64 consumed_seq, u8 attached, u64 last_active_ms``."""

    doc = "u32 n, {name}: n x (str name, u64 consumed_seq, u8 attached, u64 last_active_ms)"

    def check(self, name: str, value: Any) -> None:
        if not isinstance(value, tuple) or not all(isinstance(s, SubscriptionInfo) for s in value):
            raise UsageError(f"{name} must be a tuple of SubscriptionInfo")

    def encode_expr(self, value: str) -> str:
        return f"encode_subscriptions({value})"

    def decode_lines(self, target: str) -> list[str]:
        return [f"{target}, pos = decode_subscriptions(data, pos)"]


_SUB_TAIL = struct.Struct(">QBQ")


def encode_subscriptions(subs: tuple[SubscriptionInfo, ...]) -> bytes:
    parts = [wire.U32.pack(len(subs))]
    for s in subs:
        parts.append(wire.pack_str(s.name))
        parts.append(_SUB_TAIL.pack(s.consumed_seq, 1 if s.attached else 0, s.last_active_ms))
    return b"".join(parts)


def decode_subscriptions(data: bytes, pos: int) -> tuple[tuple[SubscriptionInfo, ...], int]:
    (n,) = wire.U32.unpack_from(data, pos)
    pos += 4
    out = []
    for _ in range(n):
        name, pos = wire.read_str(data, pos)
        consumed, attached, active = _SUB_TAIL.unpack_from(data, pos)
        pos += _SUB_TAIL.size
        out.append(SubscriptionInfo(name, consumed, bool(attached), active))
    return tuple(out), pos


class RecordsCodec(Codec):
    """``u32 n`` then n records of fixed width, each one ``struct`` of its fields in order:
    the lists of small records storage and lanes frames carry (a ledger's LAC, a fenced
    ledger's end, a lane), one codec for all of them.

    Each field is ``(attribute, codec)``, with the fixed-width codec a frame's own field of
    that type would have (its format, bounds and name in ``docs/protocol.md``): narrower
    than the wire type where the value is (a LAC is -1 or more)."""

    def __init__(
        self, record: type, fields: tuple[tuple[str, Int | BoolCodec], ...], noun: str
    ) -> None:
        self.record = record
        self.struct = struct.Struct(">" + "".join(codec.fmt or "" for _, codec in fields))
        self.fields = fields
        self.noun = noun
        self.ref = f"_records_{record.__name__}"
        members = ", ".join(f"{codec.doc} {attr}" for attr, codec in fields)
        self.doc = "u32 n, {name}: n x (" + members + ")"

    def check(self, name: str, value: Any) -> None:
        kind = self.record.__name__
        if not isinstance(value, tuple):
            raise UsageError(f"{name} must be a tuple of {kind}, got {type(value).__name__}")
        for i, x in enumerate(value):
            if not isinstance(x, self.record):
                raise UsageError(f"{name}[{i}] must be a {kind}, got {type(x).__name__}")
            for attr, codec in self.fields:
                codec.check(f"{name}[{i}].{attr}", getattr(x, attr))

    def encode_expr(self, value: str) -> str:
        return f"{self.ref}.encode({value})"

    def decode_lines(self, target: str) -> list[str]:
        return [f"{target}, pos = {self.ref}.decode(data, pos)"]

    def encode(self, records: tuple[Any, ...]) -> bytes:
        pack, names = self.struct.pack, [attr for attr, _ in self.fields]
        return wire.U32.pack(len(records)) + b"".join(
            pack(*[getattr(x, n) for n in names]) for x in records
        )

    def decode(self, data: bytes, pos: int) -> tuple[tuple[Any, ...], int]:
        (n,) = wire.U32.unpack_from(data, pos)
        pos += 4
        size = self.struct.size
        if n > (len(data) - pos) // size:
            raise ValueError(f"{n} {self.noun} do not fit in the frame")
        record = self.record
        end = pos + n * size
        return tuple(record(*x) for x in self.struct.iter_unpack(data[pos:end])), end


@dataclass(frozen=True, slots=True)
class LaneInfo:
    """A lane as DESCRIBE_LANES reports it."""

    index: int
    sealed: bool


@dataclass(frozen=True, slots=True)
class LedgerLac:
    """A ledger's last-add-confirmed entry, as a writer tells its replicas (WRITE_LACS)."""

    ledger_id: int
    lac: int


@dataclass(frozen=True, slots=True)
class LedgerEnd:
    """A fenced ledger's last-add-confirmed and last stored entry on one replica (-1: none),
    as FENCE_LEDGERS answers them."""

    ledger_id: int
    lac: int
    last_entry_id: int


@dataclass(frozen=True, slots=True)
class SeqRange:
    """Sequence ids ``first`` to ``last``, inclusive: what ACK and NACK name."""

    first: int
    last: int


@dataclass(frozen=True, slots=True)
class BackoffStep:
    """One step of a redelivery backoff: milliseconds to wait before the next delivery."""

    ms: int


BACKOFF_STEPS = RecordsCodec(BackoffStep, (("ms", U32_CODEC),), "backoff steps")
SEQ_RANGES = RecordsCodec(SeqRange, (("first", U64_CODEC), ("last", U64_CODEC)), "ranges")
LANE_INFOS = RecordsCodec(LaneInfo, (("index", U32_CODEC), ("sealed", BOOL_CODEC)), "lanes")
LEDGER_LACS = RecordsCodec(
    LedgerLac, (("ledger_id", U64_CODEC), ("lac", ENTRY_CODEC)), "ledger LACs"
)
LEDGER_ENDS = RecordsCodec(
    LedgerEnd,
    (("ledger_id", U64_CODEC), ("lac", ENTRY_CODEC), ("last_entry_id", ENTRY_CODEC)),
    "ledger ends",
)


class LedgerIdsCodec(Codec):
    """``u32 n`` then n times ``u64 ledger_id``."""

    doc = "u32 n, {name}: n x u64 ledger_id"

    def check(self, name: str, value: Any) -> None:
        if not isinstance(value, tuple) or not all(
            isinstance(x, int) and 0 <= x < 1 << 64 for x in value
        ):
            raise UsageError(f"{name} must be a tuple of u64 ledger ids")

    def encode_expr(self, value: str) -> str:
        return f"encode_ledger_ids({value})"

    def decode_lines(self, target: str) -> list[str]:
        return [f"{target}, pos = decode_ledger_ids(data, pos)"]


def encode_ledger_ids(ids: tuple[int, ...]) -> bytes:
    return wire.U32.pack(len(ids)) + struct.pack(f">{len(ids)}Q", *ids)


def decode_ledger_ids(data: bytes, pos: int) -> tuple[tuple[int, ...], int]:
    (n,) = wire.U32.unpack_from(data, pos)
    pos += 4
    if n > (len(data) - pos) // 8:
        raise ValueError(f"{n} ledger ids do not fit in the frame")
    return struct.unpack_from(f">{n}Q", data, pos), pos + 8 * n


class U64sCodec(LedgerIdsCodec):
    """``u32 n`` then n times ``u64`` (a bundle map's boundaries), coded as ledger ids are."""

    doc = "u32 n, {name}: n x u64"

    def check(self, name: str, value: Any) -> None:
        if not isinstance(value, tuple) or not all(
            isinstance(x, int) and 0 <= x < 1 << 64 for x in value
        ):
            raise UsageError(f"{name} must be a tuple of u64")


class StrsCodec(Codec):
    """``u32 n`` then n strings (a region's hub addresses)."""

    doc = "u32 n, {name}: n x str"

    def check(self, name: str, value: Any) -> None:
        if not isinstance(value, tuple) or not all(isinstance(x, str) for x in value):
            raise UsageError(f"{name} must be a tuple of str")

    def encode_expr(self, value: str) -> str:
        return f"encode_strs({value})"

    def decode_lines(self, target: str) -> list[str]:
        return [f"{target}, pos = decode_strs(data, pos)"]


def encode_strs(items: tuple[str, ...]) -> bytes:
    return wire.U32.pack(len(items)) + b"".join(wire.pack_str(x) for x in items)


def decode_strs(data: bytes, pos: int) -> tuple[tuple[str, ...], int]:
    (n,) = wire.U32.unpack_from(data, pos)
    pos += 4
    if n > (len(data) - pos) // 2:
        raise ValueError(f"{n} strings do not fit in the frame")
    out = []
    for _ in range(n):
        item, pos = wire.read_str(data, pos)
        out.append(item)
    return tuple(out), pos


@dataclass(frozen=True)
class Flag:
    """A boolean carried as one bit of the header's flags."""

    bit: int


class RequestIdMarker:
    """The header's request id (0 for events, which answer nothing)."""


RequestId = Annotated[int, RequestIdMarker()]
U8 = Annotated[int, U8_CODEC]
U16 = Annotated[int, U16_CODEC]
U32 = Annotated[int, U32_CODEC]
U64 = Annotated[int, U64_CODEC]
I64 = Annotated[int, I64_CODEC]
Str = Annotated[str, StrCodec()]
OptStr = Annotated[str | None, OptStrCodec()]
Rest = Annotated[bytes, RestCodec()]
CountedMessages = Annotated[EncodedMessages, MessagesCodec()]
OneBatch = Annotated[Batch, BatchCodec()]
Batches = Annotated[tuple[Batch, ...], BatchListCodec()]
Subscriptions = Annotated[tuple[SubscriptionInfo, ...], SubscriptionInfosCodec()]
LaneInfos = Annotated[tuple[LaneInfo, ...], LANE_INFOS]
SeqRanges = Annotated[tuple[SeqRange, ...], SEQ_RANGES]
BackoffSteps = Annotated[tuple[BackoffStep, ...], BACKOFF_STEPS]
LedgerLacs = Annotated[tuple[LedgerLac, ...], LEDGER_LACS]
LedgerIds = Annotated[tuple[int, ...], LedgerIdsCodec()]
LedgerEnds = Annotated[tuple[LedgerEnd, ...], LEDGER_ENDS]
Strs = Annotated[tuple[str, ...], StrsCodec()]
U64s = Annotated[tuple[int, ...], U64sCodec()]
