"""Jute, ZooKeeper's serialization: records declared as typed fields, their codec generated.

A record is a frozen, slotted dataclass decorated with ``@jute``; each field's annotation
names its jute type, as ``zookeeper.jute`` declares it::

    @jute
    class GetDataRequest(JuteRecord):
        path: UString
        watch: Bool

The decorator generates ``encode_into(out)`` (appends the record to a ``bytearray``),
``read(data, pos)`` (the record at ``pos`` and the position after it) and ``__init__`` as
straight-line code, adjacent fixed-width fields packed by one ``struct.Struct`` (as
``hedwig.protocol.schema`` does for Hedwig's frames), so a declared record costs no more than
a hand-written codec.

The types (all big-endian): ``int`` (4 bytes), ``long`` (8), ``boolean`` (1), ``buffer``
(an int length, then the bytes; -1 is null), ``ustring`` (a buffer of UTF-8), ``vector``
(an int count, then the items; -1 is null) and nested records. A null buffer or string
reads as empty and a null vector as empty: ZooKeeper sends null where Java had no value,
and nothing here tells the two apart. ``Trailing`` marks a last field that older servers
leave out (``ConnectResponse.read_only``): absent, it takes its default.

Everything here is pure: bytes in, records out, records in, bytes out. Input that is not a
well-formed record (too short, a length past the end, a negative one other than null, text
that is not UTF-8, bytes left over) raises ``hedwig.errors.ProtocolError``.
"""

from __future__ import annotations

import inspect
import struct
import typing
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass
from typing import Annotated, Any, ClassVar, Self, TypeVar, dataclass_transform

from hedwig.errors import ProtocolError

INT = struct.Struct(">i")
LONG = struct.Struct(">q")


class JuteType:
    """A field's wire type: how generated code writes and reads it."""

    fmt: str | None = None  # a struct format character, for fixed-width types

    def put(self, out: bytearray, value: Any) -> None:
        raise NotImplementedError

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        raise NotImplementedError

    def to_fixed(self, expr: str) -> str:
        return expr

    def from_fixed(self, expr: str) -> str:
        return expr


class _Fixed(JuteType):
    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self._struct = struct.Struct(">" + fmt)

    def put(self, out: bytearray, value: Any) -> None:
        out += self._struct.pack(self.to_value(value))

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        (value,) = self._struct.unpack_from(data, pos)
        return self.from_value(value), pos + self._struct.size

    def to_value(self, value: Any) -> Any:
        return value

    def from_value(self, value: Any) -> Any:
        return value


class _Bool(_Fixed):
    def __init__(self) -> None:
        super().__init__("B")

    def to_value(self, value: Any) -> Any:
        return 1 if value else 0

    def from_value(self, value: Any) -> Any:
        return value != 0

    def to_fixed(self, expr: str) -> str:
        return f"(1 if {expr} else 0)"

    def from_fixed(self, expr: str) -> str:
        return f"({expr} != 0)"


def put_buffer(out: bytearray, value: bytes) -> None:
    out += INT.pack(len(value))
    out += value


def read_buffer(data: bytes, pos: int) -> tuple[bytes, int]:
    (n,) = INT.unpack_from(data, pos)
    pos += 4
    if n < 0:
        if n != -1:
            raise ProtocolError(f"a jute buffer of length {n}")
        return b"", pos
    end = pos + n
    if end > len(data):
        raise ProtocolError("a jute buffer runs past the end of its frame")
    return data[pos:end], end


def put_ustring(out: bytearray, value: str) -> None:
    put_buffer(out, value.encode("utf-8"))


def read_ustring(data: bytes, pos: int) -> tuple[str, int]:
    raw, pos = read_buffer(data, pos)
    try:
        return raw.decode("utf-8"), pos
    except UnicodeDecodeError as exc:
        raise ProtocolError("a jute string is not UTF-8") from exc


class _Buffer(JuteType):
    def put(self, out: bytearray, value: Any) -> None:
        put_buffer(out, value)

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        return read_buffer(data, pos)


class _UString(JuteType):
    def put(self, out: bytearray, value: Any) -> None:
        put_ustring(out, value)

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        return read_ustring(data, pos)


class Vector(JuteType):
    """``vector<item>``, as a tuple."""

    def __init__(self, item: JuteType) -> None:
        self.item = item

    def put(self, out: bytearray, value: Any) -> None:
        out += INT.pack(len(value))
        put = self.item.put
        for item in value:
            put(out, item)

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        (n,) = INT.unpack_from(data, pos)
        pos += 4
        if n < 0:
            if n != -1:
                raise ProtocolError(f"a jute vector of {n} items")
            return (), pos
        if n > len(data) - pos:  # every item takes a byte at least
            raise ProtocolError(f"a jute vector of {n} items runs past the end of its frame")
        read = self.item.read
        items = []
        for _ in range(n):
            item, pos = read(data, pos)
            items.append(item)
        return tuple(items), pos


class _UStrings(Vector):
    """``vector<ustring>``, in one loop each way (a listing's children, a ``SetWatches``'s
    paths: thousands at a time)."""

    def __init__(self) -> None:
        super().__init__(USTRING_TYPE)

    def put(self, out: bytearray, value: Any) -> None:
        pack = INT.pack
        out += pack(len(value))
        for item in value:
            raw = item.encode()
            out += pack(len(raw))
            out += raw

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        (n,) = INT.unpack_from(data, pos)
        pos += 4
        if n < 0:
            if n != -1:
                raise ProtocolError(f"a jute vector of {n} items")
            return (), pos
        if n > len(data) - pos:
            raise ProtocolError(f"a jute vector of {n} items runs past the end of its frame")
        unpack, size = INT.unpack_from, len(data)
        items: list[str] = []
        append = items.append
        for _ in range(n):
            (length,) = unpack(data, pos)
            pos += 4
            end = pos + length
            if length < 0 or end > size:
                item, pos = read_ustring(data, pos - 4)  # null, or refused
                append(item)
                continue
            append(data[pos:end].decode())
            pos = end
        return tuple(items), pos


class Repeated(Vector):
    """A vector a writer gives again and again (every create's ACL): its encoding kept for
    the last value written, by identity."""

    def __init__(self, item: JuteType) -> None:
        super().__init__(item)
        self._last: Any = None
        self._last_bytes = b""

    def put(self, out: bytearray, value: Any) -> None:
        if value is not self._last:
            encoded = bytearray()
            super().put(encoded, value)
            self._last, self._last_bytes = value, bytes(encoded)
        out += self._last_bytes


class Nested(JuteType):
    """A record inside a record."""

    def __init__(self, record: type[JuteRecord]) -> None:
        self.record = record

    def put(self, out: bytearray, value: Any) -> None:
        value.encode_into(out)

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        return self.record.read(data, pos)


class Trailing(JuteType):
    """A last field older peers leave out: read if any bytes are left, else its default."""

    def __init__(self, inner: JuteType) -> None:
        self.inner = inner

    def put(self, out: bytearray, value: Any) -> None:
        self.inner.put(out, value)

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        return self.inner.read(data, pos)


INT_TYPE = _Fixed("i")
LONG_TYPE = _Fixed("q")
BOOL_TYPE = _Bool()
BUFFER_TYPE = _Buffer()
USTRING_TYPE = _UString()

Int = Annotated[int, INT_TYPE]
Long = Annotated[int, LONG_TYPE]
Bool = Annotated[bool, BOOL_TYPE]
Buffer = Annotated[bytes, BUFFER_TYPE]
UString = Annotated[str, USTRING_TYPE]
UStrings = Annotated[tuple[str, ...], _UStrings()]
TrailingBool = Annotated[bool, Trailing(BOOL_TYPE)]


class JuteRecord:
    """What every record has; ``@jute`` fills it in."""

    __slots__ = ()
    FIELDS: ClassVar[tuple[tuple[str, JuteType], ...]]

    def encode_into(self, out: bytearray) -> None:
        raise NotImplementedError

    @classmethod
    def read(cls, data: bytes, pos: int) -> tuple[Self, int]:
        raise NotImplementedError

    def encode(self) -> bytes:
        out = bytearray()
        self.encode_into(out)
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes) -> Self:
        """The record that is the whole of ``data``."""
        return decode_whole(cls.read, data, 0)


R = TypeVar("R", bound=type[JuteRecord])
T = TypeVar("T")


def decode_whole(read: Callable[[bytes, int], tuple[T, int]], data: bytes, pos: int) -> T:
    """``read`` at ``pos``, which must take the rest of ``data``; malformed input of any kind
    raises ``ProtocolError``."""
    try:
        value, end = read(data, pos)
    except struct.error as exc:
        raise ProtocolError(f"a ZooKeeper record cut short: {exc}") from exc
    except UnicodeDecodeError as exc:  # from generated code, which decodes strings inline
        raise ProtocolError("a jute string is not UTF-8") from exc
    if end != len(data):
        raise ProtocolError(f"{len(data) - end} bytes after a ZooKeeper record")
    return value


@dataclass_transform(frozen_default=True)
def jute(cls: R) -> R:
    """Make ``cls`` a record (see the module docstring)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    fields: list[tuple[str, JuteType]] = []
    for name in inspect.get_annotations(cls):
        hint = hints[name]
        if typing.get_origin(hint) is ClassVar:
            continue
        meta = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, JuteType)]
        if meta:
            fields.append((name, meta[0]))
        elif isinstance(hint, type) and issubclass(hint, JuteRecord):
            fields.append((name, Nested(hint)))
        else:
            raise TypeError(f"{cls.__name__}.{name} has no jute type")
    for i, (name, kind) in enumerate(fields):
        if isinstance(kind, Trailing) and i != len(fields) - 1:
            raise TypeError(f"{cls.__name__}.{name} is trailing: it must come last")
    cls.FIELDS = tuple(fields)
    made = dataclass(frozen=True, slots=True, init=False)(cls)
    # Fields are set through their slots' own descriptors, in decoding and in ``__init__``
    # alike: a frozen dataclass's ``__init__`` goes through ``object.__setattr__`` for each
    # (a lookup of the descriptor every time), half again as slow for a ``Stat``. Nothing
    # here has a check to run. The three functions are compiled together (a compile each
    # was most of what importing the records cost).
    ns = _namespace(fields)
    for name, _ in fields:
        ns[f"_set_{name}"] = made.__dict__[name].__set__
    source = "\n\n".join((_encode_source(fields), _read_source(fields), _init_source(made, fields)))
    exec(compile(source, f"<jute {cls.__name__}>", "exec"), ns)
    made.encode_into = ns["encode_into"]  # type: ignore[method-assign]
    made.read = classmethod(ns["read"])  # type: ignore[method-assign,assignment]
    made.__init__ = ns["__init__"]  # type: ignore[method-assign]
    return typing.cast(R, made)


def _runs(fields: Sequence[tuple[str, JuteType]]) -> list[list[tuple[str, JuteType]]]:
    """Fields grouped: runs of adjacent fixed-width fields, and single others."""
    runs: list[list[tuple[str, JuteType]]] = []
    for name, kind in fields:
        if kind.fmt is not None and runs and runs[-1][0][1].fmt is not None:
            runs[-1].append((name, kind))
        else:
            runs.append([(name, kind)])
    return runs


def _namespace(fields: Sequence[tuple[str, JuteType]]) -> dict[str, Any]:
    ns: dict[str, Any] = {
        "_INT": INT,
        "_new": object.__new__,
        "_put_buffer": put_buffer,
        "_read_buffer": read_buffer,
        "_put_ustring": put_ustring,
        "_read_ustring": read_ustring,
    }
    for i, run in enumerate(_runs(fields)):
        kind = run[0][1]
        if kind.fmt is not None:
            ns[f"_S{i}"] = struct.Struct(">" + "".join(k.fmt or "" for _, k in run))
        else:
            inner = kind.inner if isinstance(kind, Trailing) else kind
            ns[f"_T{i}"] = inner.record.read if isinstance(inner, Nested) else inner.read
            ns[f"_P{i}"] = inner.put
    return ns


def _encode_source(fields: Sequence[tuple[str, JuteType]]) -> str:
    lines = ["def encode_into(self, out):"]
    for i, run in enumerate(_runs(fields)):
        name, kind = run[0]
        if kind.fmt is not None:
            args = ", ".join(k.to_fixed(f"self.{n}") for n, k in run)
            lines.append(f"    out += _S{i}.pack({args})")
        elif kind is BUFFER_TYPE or kind is USTRING_TYPE:
            raw = f"self.{name}" if kind is BUFFER_TYPE else f"self.{name}.encode()"
            lines.append(f"    _b = {raw}")
            lines.append("    out += _INT.pack(len(_b))")
            lines.append("    out += _b")
        elif isinstance(kind, Nested):
            lines.append(f"    self.{name}.encode_into(out)")
        else:
            lines.append(f"    _P{i}(out, self.{name})")
    lines.append("    return None")
    return "\n".join(lines)


def _read_source(fields: Sequence[tuple[str, JuteType]]) -> str:
    lines = ["def read(cls, data, pos):"]
    for i, run in enumerate(_runs(fields)):
        name, kind = run[0]
        if kind.fmt is not None:
            names = [f"_v_{n}" for n, _ in run]
            lines.append(f"    ({', '.join(names)},) = _S{i}.unpack_from(data, pos)")
            lines.append(f"    pos += _S{i}.size")
            for (_, k), raw in zip(run, names, strict=True):
                if k.from_fixed(raw) != raw:
                    lines.append(f"    {raw} = {k.from_fixed(raw)}")
        elif isinstance(kind, Trailing):
            lines.append("    if pos < len(data):")
            lines.append(f"        _v_{name}, pos = _T{i}(data, pos)")
            lines.append("    else:")
            lines.append(f"        _v_{name} = cls.__dataclass_fields__[{name!r}].default")
        elif kind is BUFFER_TYPE or kind is USTRING_TYPE:
            # Inline, a buffer's length checked (a slice past the end would just be short);
            # a negative one is null (-1) or refused by ``read_buffer``.
            decode = ".decode()" if kind is USTRING_TYPE else ""
            lines.append("    (_n,) = _INT.unpack_from(data, pos)")
            lines.append("    _end = pos + 4 + _n")
            lines.append("    if _n < 0 or _end > len(data):")
            reader = "_read_ustring" if kind is USTRING_TYPE else "_read_buffer"
            lines.append(f"        _v_{name}, pos = {reader}(data, pos)")
            lines.append("    else:")
            lines.append(f"        _v_{name} = data[pos + 4 : _end]{decode}")
            lines.append("        pos = _end")
        else:
            lines.append(f"    _v_{name}, pos = _T{i}(data, pos)")
    lines.append("    self = _new(cls)")
    lines += [f"    _set_{n}(self, _v_{n})" for n, _ in fields]
    lines.append("    return self, pos")
    return "\n".join(lines)


def _init_source(cls: type, fields: Sequence[tuple[str, JuteType]]) -> str:
    params = []
    for name, _ in fields:
        default = cls.__dataclass_fields__[name].default  # type: ignore[attr-defined]
        params.append(name if default is MISSING else f"{name}={default!r}")
    lines = [f"def __init__(self, {', '.join(params)}):" if params else "def __init__(self):"]
    lines += [f"    _set_{n}(self, {n})" for n, _ in fields]
    lines.append("    return None")
    return "\n".join(lines)
