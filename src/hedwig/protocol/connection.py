"""One end of a Hedwig connection, without I/O.

Rules of the state machine (there are only two states):

- OPEN: bytes fed in with ``receive_data`` come out of ``next_frames`` as typed frames, in
  order. A frame must travel in its legal direction: a hub accepts only requests, a client only
  answers and events. A frame whose declared length exceeds ``max_frame_size`` is not buffered:
  its header is read, the rest is skipped as it arrives, and an ``OversizedFrame`` event is
  returned so the hub can answer that one request with MESSAGE_TOO_LARGE and keep the
  connection. A request whose framing is intact but whose batch does not hold the messages it
  counts is returned as ``RefusedFrame``, for the hub to answer INVALID_REQUEST, and the
  connection stays OPEN too. Everything else that is malformed (bad version, unknown type,
  short body, trailing bytes) moves the connection to BROKEN.
- BROKEN: every call raises ``ProtocolError``; the owner of the socket closes it. The
  connection keeps the reason, as text, and lets go of what it had buffered: an exception kept
  with its traceback holds the frame that raised it, and so this connection and its buffers,
  in a cycle only the cycle collector frees (a hub tunes it to run rarely: every connection
  closed for malformed input kept about 21 KB until it did).

``send`` turns frames into bytes; it never fails for a well-typed frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from hedwig.errors import MalformedBatchError, ProtocolError
from hedwig.protocol.codec import Frame, decode_body, encode_frame
from hedwig.protocol.wire import (
    FIRST_HUB_TYPE,
    HEADER,
    HEADER_AFTER_LENGTH,
    HEADER_SIZE,
    PROTOCOL_VERSION,
)

DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024


class Role(Enum):
    HUB = "hub"
    CLIENT = "client"


@dataclass(frozen=True, slots=True)
class OversizedFrame:
    """A frame larger than the connection accepts was skipped."""

    frame_type: int
    request_id: int
    size: int


@dataclass(frozen=True, slots=True)
class RefusedFrame:
    """A request with intact framing but invalid content (a batch whose count lies).

    ``error`` is made for it, never raised: the exception that was raised holds its traceback,
    whose frames hold the list this frame is in and the connections up the stack, a cycle
    that only the cycle collector frees (a hub closing a connection after a few refusals
    left the rest of its refused frames, and the connection, to it)."""

    frame_type: int
    request_id: int
    error: MalformedBatchError


class Connection:
    def __init__(self, role: Role, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.role = role
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._skip = 0  # bytes of an oversized frame still to discard
        self._broken: str | None = None  # why, once BROKEN

    @property
    def broken(self) -> bool:
        return self._broken is not None

    @property
    def pending_bytes(self) -> int:
        """Bytes of a frame begun and not yet complete: buffered, or still to be skipped."""
        return len(self._buf) + self._skip

    def send(self, frame: Frame) -> bytes:
        return encode_frame(frame)

    def _raise_broken(self) -> None:
        # A new exception each time: nothing here holds one, nor its traceback.
        raise ProtocolError(self._broken or "connection broken")

    def receive_data(self, data: bytes) -> None:
        if self._broken is not None:
            self._raise_broken()
        if self._skip:
            dropped = min(self._skip, len(data))
            self._skip -= dropped
            data = data[dropped:]
        self._buf += data

    def next_frames(self) -> list[Frame | OversizedFrame | RefusedFrame]:
        """Every complete frame buffered so far; raises ``ProtocolError`` on malformed input."""
        if self._broken is not None:
            self._raise_broken()
        out: list[Frame | OversizedFrame | RefusedFrame] = []
        buf = self._buf
        pos = 0
        try:
            while len(buf) - pos >= HEADER_SIZE:
                length, version, ftype, flags, rid = HEADER.unpack_from(buf, pos)
                if version != PROTOCOL_VERSION:
                    raise ProtocolError(
                        f"protocol version {version} is not supported (this end speaks "
                        f"{PROTOCOL_VERSION})"
                    )
                if length < HEADER_AFTER_LENGTH:
                    raise ProtocolError(f"frame length {length} is shorter than its header")
                total = 4 + length
                if total > self.max_frame_size:
                    self._check_direction(ftype)
                    available = len(buf) - pos
                    if available >= total:
                        pos += total
                    else:
                        self._skip = total - available
                        pos = len(buf)
                    out.append(OversizedFrame(ftype, rid, total))
                    continue
                if len(buf) - pos < total:
                    break
                self._check_direction(ftype)
                body = bytes(buf[pos + HEADER_SIZE : pos + total])
                pos += total
                try:
                    out.append(decode_body(ftype, flags, rid, body))
                except MalformedBatchError as exc:
                    if self.role is not Role.HUB:
                        raise
                    out.append(RefusedFrame(ftype, rid, MalformedBatchError(str(exc))))
        except ProtocolError as exc:
            self._broken = str(exc)
            buf.clear()
            self._skip = 0
            pos = 0
            raise
        finally:
            if pos:
                del buf[:pos]
        return out

    def _check_direction(self, ftype: int) -> None:
        from_client = ftype < FIRST_HUB_TYPE
        if self.role is Role.HUB and not from_client:
            raise ProtocolError(f"a client may not send frame type 0x{ftype:02x}")
        if self.role is Role.CLIENT and from_client:
            raise ProtocolError(f"a hub may not send frame type 0x{ftype:02x}")
