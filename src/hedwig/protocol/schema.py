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

``FIELD_CODECS`` of a frame class lists its body fields and their codecs (``fields``), which
is what ``docs/protocol.md`` tables show and what the round-trip tests draw examples from.
"""

from __future__ import annotations

import re
import struct
import typing
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar, TypeVar, dataclass_transform

from hedwig.errors import ProtocolError, UsageError
from hedwig.protocol import wire
from hedwig.protocol.fields import (
    U32_CODEC,
    Codec,
    EnumCodec,
    Flag,
    RequestIdMarker,
    decode_batches,
    decode_ledger_ids,
    decode_strs,
    decode_subscriptions,
    encode_batches,
    encode_ledger_ids,
    encode_strs,
    encode_subscriptions,
)
from hedwig.protocol.messages import Batch, EncodedMessages


class Sender(Enum):
    """Who may send a frame: clients (and hubs as clients of hubs) or hubs."""

    CLIENT = "client"
    HUB = "hub"


# Frames --------------------------------------------------------------------------------------


class FrameBase:
    """What every frame class has; ``@frame`` fills it in."""

    __slots__ = ()
    TYPE: ClassVar[int]
    SENDER: ClassVar[Sender]
    # The frame's name in metrics and logs, from its class name: ``CloseSubscription`` is
    # ``close_subscription`` (``docs/protocol.md`` writes it ``CLOSE_SUBSCRIPTION``).
    LABEL: ClassVar[str]
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
            if isinstance(marker, RequestIdMarker):
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
        ns["_validate"] = cls.__dict__.get("validate")
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
        cls.LABEL = re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()
        cls.FIELD_CODECS = tuple(body)
        cls.FLAG_BITS = tuple(flags)
        return typing.cast(F, dataclass(frozen=True, slots=True, kw_only=True)(cls))

    return build


def _namespace(body: list[tuple[str, Codec]]) -> dict[str, Any]:
    """What the generated code refers to: wire helpers, enums, and one ``struct.Struct`` per
    run of adjacent fixed-width fields (``_S0``, ``_S1``...), shared by encoder and decoder."""
    ns: dict[str, Any] = {
        "_new": object.__new__,
        "_set": object.__setattr__,
        "_pack_str": wire.pack_str,
        "_pack_opt_str": wire.pack_opt_str,
        "_read_str": wire.read_str,
        "_read_opt_str": wire.read_opt_str,
        "_U32": wire.U32,
        "_EncodedMessages": EncodedMessages,
        "_Batch": Batch,
        "encode_batches": encode_batches,
        "decode_batches": decode_batches,
        "encode_subscriptions": encode_subscriptions,
        "decode_subscriptions": decode_subscriptions,
        "encode_ledger_ids": encode_ledger_ids,
        "decode_ledger_ids": decode_ledger_ids,
        "encode_strs": encode_strs,
        "decode_strs": decode_strs,
        "_ProtocolError": ProtocolError,
    }
    for _, codec in body:
        if isinstance(codec, EnumCodec):
            ns[f"_enum_{codec.enum.__name__}"] = codec.enum
        elif codec.ref is not None:
            ns[codec.ref] = codec
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
    # Built without ``__init__``: its checks (types and ranges of what the caller passed) hold
    # by construction for what was just decoded (every value comes out of a wire codec of the
    # right width and type), and were a measurable share of a small request. Only the frame's
    # own ``validate`` rules (about meaning, not types) run again.
    values = [(n, f"_v_{n}") for n, _ in body]
    values += [(n, f"bool(flags & {1 << bit})") for n, bit in flags]
    if rid_field is not None:
        values.append((rid_field, "request_id"))
    lines.append("    self = _new(cls)")
    lines += [f"    _set(self, {n!r}, {v})" for n, v in values]
    lines.append("    if _validate is not None:")
    lines.append("        _validate(self)")
    lines.append("    return self")
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
    checks = [(f"{cls_name}.{n}", n, c) for n, c in body]
    if rid_field is not None:
        checks.insert(0, (f"{cls_name}.{rid_field}", rid_field, U32_CODEC))

    def __post_init__(self: Any) -> None:
        for label, name, codec in checks:
            codec.check(label, getattr(self, name))
        for name, _ in flags:
            if not isinstance(getattr(self, name), bool):
                raise UsageError(f"{cls_name}.{name} must be a bool")
        extra = getattr(self, "validate", None)
        if extra is not None:
            extra()

    return __post_init__
