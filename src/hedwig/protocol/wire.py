"""Wire primitives: the frame header, fixed-width integers and length-prefixed strings.

All integers are big-endian. A string is ``u16 length + UTF-8``; an optional string uses the
length ``0xFFFF`` for "absent", so a present string holds at most 65,534 bytes.
"""

from __future__ import annotations

import struct

from hedwig.errors import ProtocolError

PROTOCOL_VERSION = 2

# u32 length | u8 version | u8 type | u16 flags | u32 request_id
HEADER = struct.Struct(">IBBHI")
HEADER_SIZE = HEADER.size  # 12
# Bytes after the length field that are header, not body.
HEADER_AFTER_LENGTH = HEADER_SIZE - 4
# Frame types below this are sent by clients (and by hubs acting as clients of other hubs);
# this and above, by hubs.
FIRST_HUB_TYPE = 0x80

U8 = struct.Struct(">B")
U16 = struct.Struct(">H")
U32 = struct.Struct(">I")
U64 = struct.Struct(">Q")
I64 = struct.Struct(">q")

NO_STR = 0xFFFF
MAX_STR_BYTES = NO_STR - 1


def pack_str(s: str) -> bytes:
    raw = s.encode("utf-8")
    if len(raw) > MAX_STR_BYTES:
        raise ProtocolError(f"string of {len(raw)} bytes is too long for the wire (64 KiB)")
    return U16.pack(len(raw)) + raw


def pack_opt_str(s: str | None) -> bytes:
    return U16.pack(NO_STR) if s is None else pack_str(s)


def read_str(data: bytes, pos: int) -> tuple[str, int]:
    """The string at ``pos`` and the position after it."""
    (n,) = U16.unpack_from(data, pos)
    pos += 2
    end = pos + n
    if n == NO_STR or end > len(data):
        raise ProtocolError("string runs past the end of the frame body")
    try:
        return data[pos:end].decode("utf-8"), end
    except UnicodeDecodeError as exc:
        raise ProtocolError("string is not valid UTF-8") from exc


def read_opt_str(data: bytes, pos: int) -> tuple[str | None, int]:
    (n,) = U16.unpack_from(data, pos)
    if n == NO_STR:
        return None, pos + 2
    return read_str(data, pos)


def read_sized(data: bytes, pos: int) -> tuple[bytes, int]:
    """A ``u32 size + bytes`` block."""
    (n,) = U32.unpack_from(data, pos)
    pos += 4
    end = pos + n
    if end > len(data):
        raise ProtocolError("block runs past the end of the frame body")
    return data[pos:end], end
