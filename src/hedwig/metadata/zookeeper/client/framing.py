"""ZooKeeper's framing: how records travel on a connection.

Every message is a 4-byte length and that many bytes. After the handshake
(``ConnectRequest``, answered by ``ConnectResponse``, neither with a header) a request is a
``RequestHeader`` (xid, operation code) and its record, and an answer a ``ReplyHeader`` (xid,
the zxid the server had reached, an error code) and, if the error code is 0, the record the
request names. A notification is an answer with ``Xid.NOTIFICATION`` carrying a
``WatcherEvent``. The server's side (``put_reply``, ``read_request``) is here too, for tests
that play a server. Everything here is pure; ``hedwig.metadata.zookeeper.client.connection``
drives it over a socket.
"""

from __future__ import annotations

import struct

from hedwig.errors import ProtocolError
from hedwig.metadata.zookeeper.client.jute import INT, JuteRecord, decode_whole
from hedwig.metadata.zookeeper.client.multi import MultiReadRequest, MultiRequest
from hedwig.metadata.zookeeper.client.records import (
    REQUESTS,
    ConnectRequest,
    ConnectResponse,
    Request,
)

# Every request record, by its operation code.
REQUEST_TYPES: dict[int, type[Request]] = {
    **REQUESTS,
    MultiRequest.OPCODE: MultiRequest,
    MultiReadRequest.OPCODE: MultiReadRequest,
}

_REQUEST_HEADER = struct.Struct(">iii")  # length, xid, type
_REPLY_HEADER = struct.Struct(">iqi")  # xid, zxid, err
REPLY_HEADER_SIZE = _REPLY_HEADER.size
# A frame longer than this is refused as garbage. Far above ZooKeeper's own request limit
# (``jute.maxbuffer``, 1 MiB) because answers have none: the children of a region's
# ``ledgers`` at a million topics are tens of megabytes.
MAX_FRAME = 1 << 28


def put_request(out: bytearray, xid: int, request: Request) -> None:
    """Append ``request``'s frame (header and record) to ``out``."""
    start = len(out)
    out += _REQUEST_HEADER.pack(0, xid, request.OPCODE)
    request.encode_into(out)
    INT.pack_into(out, start, len(out) - start - 4)


def put_connect(out: bytearray, connect: ConnectRequest | ConnectResponse) -> None:
    """Append the handshake's frame (a record with no header) to ``out``."""
    start = len(out)
    out += INT.pack(0)
    connect.encode_into(out)
    INT.pack_into(out, start, len(out) - start - 4)


def read_reply_header(frame: bytes) -> tuple[int, int, int]:
    """``(xid, zxid, err)`` of an answer's frame; its record starts at ``REPLY_HEADER_SIZE``."""
    if len(frame) < REPLY_HEADER_SIZE:
        raise ProtocolError(f"a ZooKeeper answer of {len(frame)} bytes has no header")
    xid, zxid, err = _REPLY_HEADER.unpack_from(frame, 0)
    return int(xid), int(zxid), int(err)


def put_reply(out: bytearray, xid: int, zxid: int, err: int, body: JuteRecord | None) -> None:
    """Append an answer's frame to ``out`` (what a server sends; for tests of the client)."""
    start = len(out)
    out += INT.pack(0)
    out += _REPLY_HEADER.pack(xid, zxid, err)
    if body is not None:
        body.encode_into(out)
    INT.pack_into(out, start, len(out) - start - 4)


def read_request(frame: bytes) -> tuple[int, Request]:
    """``(xid, request)`` of a request's frame (what a server reads; for tests)."""
    if len(frame) < 8:
        raise ProtocolError(f"a ZooKeeper request of {len(frame)} bytes has no header")
    xid, opcode = struct.unpack_from(">ii", frame, 0)
    kind = REQUEST_TYPES.get(opcode)
    if kind is None:
        raise ProtocolError(f"a ZooKeeper request of unknown type {opcode}")
    return int(xid), decode_whole(kind.read, frame, 8)


class FrameSplitter:
    """Bytes as they arrive in, whole frames out (each without its length)."""

    __slots__ = ("_held", "max_frame")

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._held = bytearray()
        self.max_frame = max_frame

    def feed(self, data: bytes) -> list[bytes]:
        """The frames ``data`` completes; ``ProtocolError`` for a length no frame can have."""
        held = self._held
        if held:
            held += data
            if len(held) < 4:
                return []
            (size,) = INT.unpack_from(held, 0)
            if 0 <= size <= self.max_frame and len(held) < 4 + size:
                return []  # the frame held is not whole yet: no copy until it is
            data = bytes(held)
            held.clear()
        frames = []
        pos, end = 0, len(data)
        while end - pos >= 4:
            (size,) = INT.unpack_from(data, pos)
            if size < 0 or size > self.max_frame:
                raise ProtocolError(f"a ZooKeeper frame of {size} bytes")
            stop = pos + 4 + size
            if stop > end:
                break
            frames.append(data[pos + 4 : stop])
            pos = stop
        if pos < end:
            held += data[pos:] if pos else data
        return frames

    @property
    def held(self) -> int:
        """Bytes of a frame not yet whole."""
        return len(self._held)
