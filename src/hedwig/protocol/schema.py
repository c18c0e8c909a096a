"""Frames declared once: each field's wire type is in its annotation, and the codec follows.

A frame is a frozen, slotted, keyword-only dataclass decorated with ``@frame(type, sender)``.
Its fields say how they travel::

    @frame(0x01, Sender.CLIENT)
    class Publish(FrameBase):
        request_id: RequestId                 # the header's request id
        topic: Str                            # u16 length + UTF-8
        publisher_seq: U64
        messages: CountedMessages             # u32 count + the encoded messages (rest of body)
        redirected: Annotated[bool, Flag(0)] = False   # bit 0 of the header's flags

The decorator turns that into the dataclass, a body encoder, a decoder and construction-time
checks (integers in range, enums known), generating straight-line code for each frame, as
``dataclasses`` does for ``__init__``: adjacent fixed-width fields are packed by one
``struct.Struct``, so declaring a frame costs nothing at run time compared with writing its
codec by hand. Flag bits are named per frame by the field that holds them. Body fields are
encoded in declaration order; a field that takes the rest of the body must come last.

``FIELD_CODECS`` of a frame class lists its body fields and their codecs, which is what
``docs/protocol.md`` tables show and what the round-trip tests draw examples from.
"""

from __future__ import annotations

import struct
import typing
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Annotated, Any, ClassVar, TypeVar, dataclass_transform

from hedwig.errors import ProtocolError, UsageError
from hedwig.protocol import wire
from hedwig.protocol.messages import Batch, EncodedMessages


class Sender(Enum):
    """Who may send a frame: clients (and hubs as clients of hubs) or hubs."""

    CLIENT = "client"
    HUB = "hub"


# Field codecs --------------------------------------------------------------------------------


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
        return f"_encode_batches({value})"

    def decode_lines(self, target: str) -> list[str]:
        return [f"{target}, pos = _decode_batches(data, pos)"]


def _encode_batches(batches: tuple[Batch, ...]) -> bytes:
    parts = [wire.U32.pack(len(batches))]
    for b in batches:
        raw = b.encode()
        parts.append(wire.U32.pack(len(raw)))
        parts.append(raw)
    return b"".join(parts)


def _decode_batches(data: bytes, pos: int) -> tuple[tuple[Batch, ...], int]:
    (n,) = wire.U32.unpack_from(data, pos)
    pos += 4
    out = []
    for _ in range(n):
        raw, pos = wire.read_sized(data, pos)
        out.append(Batch.decode(raw))
    return tuple(out), pos


@dataclass(frozen=True)
class Flag:
    """A boolean carried as one bit of the header's flags."""

    bit: int


class _RequestIdMarker:
    """The header's request id (0 for events, which answer nothing)."""


U8_CODEC = Int("B", 0, 0xFF, "u8")
U16_CODEC = Int("H", 0, 0xFFFF, "u16")
U32_CODEC = Int("I", 0, 0xFFFFFFFF, "u32")
U64_CODEC = Int("Q", 0, 2**64 - 1, "u64")
I64_CODEC = Int("q", -(2**63), 2**63 - 1, "i64")

RequestId = Annotated[int, _RequestIdMarker()]
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


# Frames --------------------------------------------------------------------------------------


class FrameBase:
    """What every frame class has; ``@frame`` fills it in."""

    __slots__ = ()
    TYPE: ClassVar[int]
    SENDER: ClassVar[Sender]
    # Body fields in wire order, with their codecs; flag fields with their bits.
    FIELD_CODECS: ClassVar[tuple[tuple[str, Codec], ...]]
    FLAG_BITS: ClassVar[tuple[tuple[str, int], ...]]

    def encode_body(self) -> bytes:
        raise NotImplementedError

    def header_fields(self) -> tuple[int, int]:
        """``(flags, request_id)`` for the frame header."""
        raise NotImplementedError

    @classmethod
    def decode(cls, flags: int, request_id: int, data: bytes) -> Any:
        raise NotImplementedError


F = TypeVar("F", bound=type[FrameBase])


@dataclass_transform(frozen_default=True, kw_only_default=True)
def frame(type_code: int, sender: Sender) -> Callable[[F], F]:
    """Make ``cls`` a frame of ``type_code`` sent by ``sender`` (see the module docstring)."""
    if (type_code >= wire.FIRST_HUB_TYPE) != (sender is Sender.HUB):
        raise ValueError(f"frame type 0x{type_code:02x} is in the wrong range for {sender}")

    def build(cls: F) -> F:
        hints = typing.get_type_hints(cls, include_extras=True)
        body: list[tuple[str, Codec]] = []
        flags: list[tuple[str, int]] = []
        rid_field: str | None = None
        for name in cls.__annotations__:
            hint = hints[name]
            if typing.get_origin(hint) is ClassVar:
                continue
            meta = [m for m in getattr(hint, "__metadata__", ()) if not isinstance(m, str)]
            if not meta:
                raise TypeError(f"{cls.__name__}.{name} has no wire type")
            marker = meta[0]
            if isinstance(marker, _RequestIdMarker):
                rid_field = name
            elif isinstance(marker, Flag):
                flags.append((name, marker.bit))
            elif isinstance(marker, Codec):
                body.append((name, marker))
            else:
                raise TypeError(f"{cls.__name__}.{name}: unknown wire type {marker!r}")
        for i, (name, codec) in enumerate(body):
            if codec.takes_rest and i != len(body) - 1:
                raise TypeError(f"{cls.__name__}.{name} takes the rest of the body: put it last")
        ns = _namespace(body)
        generated = {
            "__post_init__": _make_checks(cls.__name__, body, flags, rid_field),
            "encode_body": _compile(_encode_source(body), "encode_body", ns),
            "header_fields": _compile(_header_source(flags, rid_field), "header_fields", ns),
            "decode": classmethod(_compile(_decode_source(body, flags, rid_field), "decode", ns)),
        }
        for attr, value in generated.items():
            setattr(cls, attr, value)
        cls.TYPE = type_code
        cls.SENDER = sender
        cls.FIELD_CODECS = tuple(body)
        cls.FLAG_BITS = tuple(flags)
        return typing.cast(F, dataclass(frozen=True, slots=True, kw_only=True)(cls))

    return build


def _namespace(body: list[tuple[str, Codec]]) -> dict[str, Any]:
    """What the generated code refers to: wire helpers, enums, and one ``struct.Struct`` per
    run of adjacent fixed-width fields (``_S0``, ``_S1``...), shared by encoder and decoder."""
    ns: dict[str, Any] = {
        "_pack_str": wire.pack_str,
        "_pack_opt_str": wire.pack_opt_str,
        "_read_str": wire.read_str,
        "_read_opt_str": wire.read_opt_str,
        "_U32": wire.U32,
        "_EncodedMessages": EncodedMessages,
        "_Batch": Batch,
        "_encode_batches": _encode_batches,
        "_decode_batches": _decode_batches,
        "_ProtocolError": ProtocolError,
    }
    for _, codec in body:
        if isinstance(codec, EnumCodec):
            ns[f"_enum_{codec.enum.__name__}"] = codec.enum
    for i, run in enumerate(_fixed_runs(body)):
        if run[0][1].fmt is not None:
            ns[f"_S{i}"] = struct.Struct(">" + "".join(c.fmt or "" for _, c in run))
    return ns


def _fixed_runs(body: list[tuple[str, Codec]]) -> list[list[tuple[str, Codec]]]:
    """Body fields grouped: runs of adjacent fixed-width fields, and single others."""
    runs: list[list[tuple[str, Codec]]] = []
    for name, codec in body:
        if codec.fmt is not None and runs and runs[-1][0][1].fmt is not None:
            runs[-1].append((name, codec))
        else:
            runs.append([(name, codec)])
    return runs


def _encode_source(body: list[tuple[str, Codec]]) -> str:
    parts = []
    for i, run in enumerate(_fixed_runs(body)):
        if run[0][1].fmt is not None:
            args = ", ".join(c.to_fixed(f"self.{n}") for n, c in run)
            parts.append(f"_S{i}.pack({args})")
        else:
            name, codec = run[0]
            parts.append(codec.encode_expr(f"self.{name}"))
    if not parts:
        result = "b''"
    elif len(parts) == 1:
        result = parts[0]
    else:
        result = f"b''.join(({', '.join(parts)},))"
    return f"def encode_body(self):\n    return {result}"


def _decode_source(
    body: list[tuple[str, Codec]], flags: list[tuple[str, int]], rid_field: str | None
) -> str:
    lines = ["def decode(cls, flags, request_id, data):", "    pos = 0"]
    for i, run in enumerate(_fixed_runs(body)):
        if run[0][1].fmt is not None:
            names = [f"_v_{n}" for n, _ in run]
            lines.append(f"    ({', '.join(names)},) = _S{i}.unpack_from(data, pos)")
            lines.append(f"    pos += _S{i}.size")
            for (_, codec), raw in zip(run, names, strict=True):
                if codec.from_fixed(raw) != raw:
                    lines.append(f"    {raw} = {codec.from_fixed(raw)}")
        else:
            name, codec = run[0]
            lines += ["    " + line for line in codec.decode_lines(f"_v_{name}")]
    lines.append("    if pos != len(data):")
    lines.append(
        "        raise _ProtocolError(f'{len(data) - pos} unexpected bytes after the body')"
    )
    args = [f"{n}=_v_{n}" for n, _ in body]
    args += [f"{n}=bool(flags & {1 << bit})" for n, bit in flags]
    if rid_field is not None:
        args.append(f"{rid_field}=request_id")
    lines.append(f"    return cls({', '.join(args)})")
    return "\n".join(lines)


def _header_source(flags: list[tuple[str, int]], rid_field: str | None) -> str:
    word = " | ".join(f"({1 << bit} if self.{n} else 0)" for n, bit in flags) or "0"
    rid = f"self.{rid_field}" if rid_field else "0"
    return f"def header_fields(self):\n    return {word}, {rid}"


def _compile(source: str, name: str, namespace: dict[str, Any]) -> Any:
    ns = dict(namespace)
    exec(compile(source, f"<frame codec {name}>", "exec"), ns)
    return ns[name]


def _make_checks(
    cls_name: str,
    body: list[tuple[str, Codec]],
    flags: list[tuple[str, int]],
    rid_field: str | None,
) -> Callable[[Any], None]:
    checks = [(n, c) for n, c in body]
    if rid_field is not None:
        checks.insert(0, (rid_field, U32_CODEC))

    def __post_init__(self: Any) -> None:
        for name, codec in checks:
            codec.check(f"{cls_name}.{name}", getattr(self, name))
        for name, _ in flags:
            if not isinstance(getattr(self, name), bool):
                raise UsageError(f"{cls_name}.{name} must be a bool")
        extra = getattr(self, "validate", None)
        if extra is not None:
            extra()

    return __post_init__
