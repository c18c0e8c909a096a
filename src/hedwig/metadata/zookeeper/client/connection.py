"""One connection to one ZooKeeper server: the codec (``records``) driven over an asyncio
transport, on the event loop.

A connection is an ``asyncio.Protocol``: bytes arrive in ``data_received`` and are cut into
frames there (``FrameSplitter``), and each frame is handled at once, on the loop; nothing of
it runs on a thread. Its life has two parts. First the handshake: ``handshake`` sends the
``ConnectRequest`` and the first frame back is the ``ConnectResponse``; then, if the session
has credentials to present, ``authenticate`` (answered out of turn by the server, so sent
before any request). After that, requests: ``send`` gives each the next xid, appends its frame
to what this turn of the loop has to write, and files it as pending; ZooKeeper answers a
connection's requests in the order it received them, so each answer belongs to the oldest
request pending, and an answer whose xid is not that one's is a broken protocol. An answer's
record is decoded here and handed to the request's ``Answer`` with its error code.
Notifications (``Xid.NOTIFICATION``) go to ``on_event``; a ping's answer only counts as
something heard.

Writes: the frames of the requests made in one turn of the loop are written together, once
the turn ends (a wave of claims or take-overs makes hundreds of requests in a turn: one write
and one system call instead of one each); the client's requests are written by its
``channel``, with the requests it made for many callers in that turn. Reads: every whole
frame that arrived is handled before the loop waits again.

An answer of more than ``LARGE_ANSWER`` bytes to a request without a watch (a region's list
of every ledger is tens of megabytes at a million topics: over half a second of decoding) is
decoded on the loop's executor, so the loop keeps its turns meanwhile (the interpreter
switches threads every few milliseconds); its caller is answered once it is decoded, possibly
after answers to later requests. One with a watch is decoded at once, so the watch is
recorded before any notification that follows it.

When the connection is lost (the server closed it, the socket failed, a frame did not parse,
or the session's keeper dropped it for silence), every pending request is answered with
``CONNECTION_LOSS``, whose outcome is unknown to its caller, and ``closed`` resolves.
``last_received`` and ``last_sent`` (on the injected clock) are what the keeper judges the
connection by: it pings when nothing was sent for a while and drops the connection when
nothing was heard for too long (``hedwig.metadata.zookeeper.client.session``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

from hedwig.clock import Clock
from hedwig.errors import MetadataUnavailableError, ProtocolError
from hedwig.metadata.zookeeper.client.codes import CONNECTION_LOSS, Xid
from hedwig.metadata.zookeeper.client.framing import (
    REPLY_HEADER_SIZE,
    FrameSplitter,
    put_connect,
    put_request,
    read_reply_header,
)
from hedwig.metadata.zookeeper.client.jute import decode_whole
from hedwig.metadata.zookeeper.client.records import (
    AuthRequest,
    ConnectRequest,
    ConnectResponse,
    PingRequest,
    Request,
    WatcherEvent,
)

log = logging.getLogger(__name__)

# The largest xid before it wraps to 1 (ZooKeeper's are signed 32-bit; negative ones are
# reserved, ``Xid``).
MAX_XID = 2**31 - 1
# Answers longer than this (bytes) are decoded off the loop (see the module docstring).
LARGE_ANSWER = 1 << 20


# Told the outcome of one request: ZooKeeper's error code (0: done) and the decoded record
# of its answer (``None`` unless the code is 0).
Answer = Callable[[int, Any], None]


# How a connection reaches a server: connects ``protocol`` to ``host:port`` (``connection_made``
# called) or raises ``OSError``. The default is the event loop's TCP; tests give their own.
Opener = Callable[[str, int, asyncio.Protocol], Awaitable[None]]


async def open_tcp(host: str, port: int, protocol: asyncio.Protocol) -> None:
    await asyncio.get_running_loop().create_connection(lambda: protocol, host, port)


class Connection(asyncio.Protocol):
    """A connection to one server (see the module docstring)."""

    def __init__(self, clock: Clock, on_event: Callable[[WatcherEvent], None]) -> None:
        self._clock = clock
        self._on_event = on_event
        self._transport: asyncio.Transport | None = None
        self._splitter = FrameSplitter()
        self._pending: collections.deque[tuple[int, Request, Answer]] = collections.deque()
        self._out = bytearray()
        self._flush_scheduled = False
        self._xid = 0
        self._greeting: asyncio.Future[ConnectResponse] | None = None
        self._auth: asyncio.Future[int] | None = None
        loop = asyncio.get_running_loop()
        self._loop = loop
        self.closed: asyncio.Future[None] = loop.create_future()
        self.last_received = self.last_sent = clock.monotonic()
        self.last_zxid = 0  # the latest zxid an answer carried
        self.requests = 0  # requests sent (pings and the handshake not counted)

    # asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's are not subclasses of asyncio's, only alike).
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.last_received = self._clock.monotonic()
        try:
            frames = self._splitter.feed(data)
            for frame in frames:
                self._handle(frame)
        except ProtocolError as exc:
            log.warning("ZooKeeper broke its protocol (%s): dropping the connection", exc)
            self.abort()

    def eof_received(self) -> bool:
        return False  # the server closed its side: close ours

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        pending, self._pending = self._pending, collections.deque()
        for _, _, answer in pending:
            _answer(answer, CONNECTION_LOSS, None)
        lost = MetadataUnavailableError(f"ZooKeeper connection lost ({exc or 'closed'})")
        if self._greeting is not None and not self._greeting.done():
            self._greeting.set_exception(lost)
        if self._auth is not None and not self._auth.done():
            self._auth.set_exception(lost)
        if not self.closed.done():
            self.closed.set_result(None)

    # the session's side --------------------------------------------------------------------

    @property
    def open(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def handshake(self, request: ConnectRequest) -> ConnectResponse:
        """Send the handshake and wait for the server's answer (raises if the connection
        goes first)."""
        self._greeting = self._loop.create_future()
        put_connect(self._out, request)
        self._flush()
        return await self._greeting

    async def authenticate(self, scheme: str, auth: bytes) -> int:
        """Present credentials; ZooKeeper's error code (0: accepted)."""
        self._auth = self._loop.create_future()
        put_request(self._out, Xid.AUTH, AuthRequest(0, scheme, auth))
        self._flush()
        return await self._auth

    def send(self, request: Request, answer: Answer, *, flush: bool = True) -> None:
        """Send ``request`` once this turn ends (``flush``: the connection writes it then;
        else the caller's ``flush`` does); ``answer`` is told its outcome (at once, with
        ``CONNECTION_LOSS``, if the connection is gone)."""
        if not self.open:
            _answer(answer, CONNECTION_LOSS, None)
            return
        xid = self._xid = self._xid % MAX_XID + 1
        put_request(self._out, xid, request)
        self._pending.append((xid, request, answer))
        self.requests += 1
        if flush and not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def flush(self) -> None:
        """Write what was sent so far, now."""
        self._flush()

    def ping(self) -> None:
        put_request(self._out, Xid.PING, PingRequest())
        self._flush()

    def close(self) -> None:
        if self._transport is not None:
            self._flush()
            self._transport.close()

    def abort(self) -> None:
        """Drop the connection now (what is pending fails with it)."""
        if self._transport is not None:
            self._transport.abort()

    # inside ---------------------------------------------------------------------------------

    def _flush(self) -> None:
        self._flush_scheduled = False
        out = self._out
        if not out:
            return
        self._out = bytearray()
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        transport.write(out)
        self.last_sent = self._clock.monotonic()

    def _handle(self, frame: bytes) -> None:
        greeting = self._greeting
        if greeting is not None and not greeting.done():
            greeting.set_result(decode_whole(ConnectResponse.read, frame, 0))
            return
        xid, zxid, err = read_reply_header(frame)
        if xid == Xid.NOTIFICATION:
            self._on_event(decode_whole(WatcherEvent.read, frame, REPLY_HEADER_SIZE))
            return
        if xid == Xid.PING:
            return
        if xid == Xid.AUTH:
            if self._auth is not None and not self._auth.done():
                self._auth.set_result(err)
            return
        if not self._pending or self._pending[0][0] != xid:
            expected = self._pending[0][0] if self._pending else None
            raise ProtocolError(f"ZooKeeper answered xid {xid}, expected {expected}")
        _, request, answer = self._pending.popleft()
        if zxid > 0:
            self.last_zxid = zxid
        result = None
        if err == 0:
            if len(frame) > LARGE_ANSWER and not getattr(request, "watch", False):
                self._decode_apart(request, answer, frame)
                return
            result = decode_whole(request.RESPONSE.read, frame, REPLY_HEADER_SIZE)
        _answer(answer, err, result)

    def _decode_apart(self, request: Request, answer: Answer, frame: bytes) -> None:
        decoding = self._loop.run_in_executor(
            None, decode_whole, request.RESPONSE.read, frame, REPLY_HEADER_SIZE
        )

        def decoded(done: asyncio.Future[Any]) -> None:
            if done.cancelled() or done.exception() is not None:
                log.warning("a ZooKeeper answer did not decode: %s", done.exception())
                _answer(answer, CONNECTION_LOSS, None)  # its outcome unknown to its caller
                self.abort()
                return
            _answer(answer, 0, done.result())

        decoding.add_done_callback(decoded)


def _answer(answer: Answer, err: int, result: Any) -> None:
    try:
        answer(err, result)
    except Exception:  # one broken callback must not break the connection's reading
        log.exception("a ZooKeeper answer's callback failed")
