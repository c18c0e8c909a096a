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


@dataclass(frozen=True, slots=True)
class LaneInfo:
    """A lane as DESCRIBE_LANES reports it."""

    index: int
    sealed: bool


class LaneInfosCodec(Codec):
    """``u32 n`` then n times ``u32 index, u8 sealed``."""

    doc = "u32 n, {name}: n x (u32 index, u8 sealed)"

    def check(self, name: str, value: Any) -> None:
        if not isinstance(value, tuple) or not all(isinstance(x, LaneInfo) for x in value):
            raise UsageError(f"{name} must be a tuple of LaneInfo")

    def encode_expr(self, value: str) -> str:
        return f"encode_lanes({value})"

    def decode_lines(self, target: str) -> list[str]:
        return [f"{target}, pos = decode_lanes(data, pos)"]


_LANE = struct.Struct(">IB")


def encode_lanes(lanes: tuple[LaneInfo, ...]) -> bytes:
    return wire.U32.pack(len(lanes)) + b"".join(
        _LANE.pack(x.index, 1 if x.sealed else 0) for x in lanes
    )


def decode_lanes(data: bytes, pos: int) -> tuple[tuple[LaneInfo, ...], int]:
    (n,) = wire.U32.unpack_from(data, pos)
    pos += 4
    if n > (len(data) - pos) // _LANE.size:
        raise ValueError(f"{n} lanes do not fit in the frame")
    out = []
    for _ in range(n):
        index, sealed = _LANE.unpack_from(data, pos)
        pos += _LANE.size
        out.append(LaneInfo(index, bool(sealed)))
    return tuple(out), pos


@dataclass(frozen=True, slots=True)
class LedgerLac:
    """A ledger's last-add-confirmed entry, as a writer tells its replicas (WRITE_LACS)."""

    ledger_id: int
    lac: int


class LedgerLacsCodec(Codec):
    """``u32 n`` then n times ``u64 ledger_id, i64 lac``."""

    doc = "u32 n, {name}: n x (u64 ledger_id, i64 lac)"

    def check(self, name: str, value: Any) -> None:
        if not isinstance(value, tuple) or not all(
            isinstance(x, LedgerLac) and 0 <= x.ledger_id < 1 << 64 and -1 <= x.lac < 1 << 63
            for x in value
        ):
            raise UsageError(f"{name} must be a tuple of LedgerLac (u64 ledger id, lac >= -1)")

    def encode_expr(self, value: str) -> str:
        return f"encode_ledger_lacs({value})"

    def decode_lines(self, target: str) -> list[str]:
        return [f"{target}, pos = decode_ledger_lacs(data, pos)"]


_LEDGER_LAC = struct.Struct(">Qq")


def encode_ledger_lacs(lacs: tuple[LedgerLac, ...]) -> bytes:
    return wire.U32.pack(len(lacs)) + b"".join(_LEDGER_LAC.pack(x.ledger_id, x.lac) for x in lacs)


def decode_ledger_lacs(data: bytes, pos: int) -> tuple[tuple[LedgerLac, ...], int]:
    (n,) = wire.U32.unpack_from(data, pos)
    pos += 4
    if n > (len(data) - pos) // _LEDGER_LAC.size:
        raise ValueError(f"{n} ledger LACs do not fit in the frame")
    out = []
    for _ in range(n):
        ledger_id, lac = _LEDGER_LAC.unpack_from(data, pos)
        pos += _LEDGER_LAC.size
        out.append(LedgerLac(ledger_id, lac))
    return tuple(out), pos


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


@dataclass(frozen=True, slots=True)
class LedgerEnd:
    """A fenced ledger's last-add-confirmed and last stored entry on one replica (-1: none),
    as FENCE_LEDGERS answers them."""

    ledger_id: int
    lac: int
    last_entry_id: int


class LedgerEndsCodec(Codec):
    """``u32 n`` then n times ``u64 ledger_id, i64 lac, i64 last_entry_id``."""

    doc = "u32 n, {name}: n x (u64 ledger_id, i64 lac, i64 last_entry_id)"

    def check(self, name: str, value: Any) -> None:
        if not isinstance(value, tuple) or not all(
            isinstance(x, LedgerEnd)
            and 0 <= x.ledger_id < 1 << 64
            and -1 <= x.lac < 1 << 63
            and -1 <= x.last_entry_id < 1 << 63
            for x in value
        ):
            raise UsageError(f"{name} must be a tuple of LedgerEnd (u64 ledger id, entries >= -1)")

    def encode_expr(self, value: str) -> str:
        return f"encode_ledger_ends({value})"

    def decode_lines(self, target: str) -> list[str]:
        return [f"{target}, pos = decode_ledger_ends(data, pos)"]


_LEDGER_END = struct.Struct(">Qqq")


def encode_ledger_ends(ends: tuple[LedgerEnd, ...]) -> bytes:
    pack = _LEDGER_END.pack
    return wire.U32.pack(len(ends)) + b"".join(
        pack(x.ledger_id, x.lac, x.last_entry_id) for x in ends
    )


def decode_ledger_ends(data: bytes, pos: int) -> tuple[tuple[LedgerEnd, ...], int]:
    (n,) = wire.U32.unpack_from(data, pos)
    pos += 4
    if n > (len(data) - pos) // _LEDGER_END.size:
        raise ValueError(f"{n} ledger ends do not fit in the frame")
    out = [LedgerEnd(*x) for x in _LEDGER_END.iter_unpack(data[pos : pos + n * _LEDGER_END.size])]
    return tuple(out), pos + n * _LEDGER_END.size


@dataclass(frozen=True)
class Flag:
    """A boolean carried as one bit of the header's flags."""

    bit: int


class RequestIdMarker:
    """The header's request id (0 for events, which answer nothing)."""


U8_CODEC = Int("B", 0, 0xFF, "u8")
U16_CODEC = Int("H", 0, 0xFFFF, "u16")
U32_CODEC = Int("I", 0, 0xFFFFFFFF, "u32")
U64_CODEC = Int("Q", 0, 2**64 - 1, "u64")
I64_CODEC = Int("q", -(2**63), 2**63 - 1, "i64")

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
LaneInfos = Annotated[tuple[LaneInfo, ...], LaneInfosCodec()]
LedgerLacs = Annotated[tuple[LedgerLac, ...], LedgerLacsCodec()]
LedgerIds = Annotated[tuple[int, ...], LedgerIdsCodec()]
LedgerEnds = Annotated[tuple[LedgerEnd, ...], LedgerEndsCodec()]
