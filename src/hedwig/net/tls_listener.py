"""A TLS listener that tells a plaintext client so, instead of leaving it guessing.

A TLS server fed plaintext just closes the connection, and the client sees a connection lost
for no reason it can name, then retries until its deadline. This listener accepts sockets
itself and peeks at the first bytes before anything reads them: a TLS handshake starts with a
handshake record (``0x16``), which can never start a Hedwig frame (its length would be over
350 MB). A handshake goes on as TLS (``connect_accepted_socket`` with the context); anything
else is answered, in plaintext, with an UNAUTHENTICATED error for the request it started (its
id read from the peeked header) saying the hub needs TLS, and closed. The peek costs one
readiness wait per new connection, nothing per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable

from hedwig.protocol.client_frames import Error
from hedwig.protocol.codec import encode_frame
from hedwig.protocol.status import Status
from hedwig.protocol.wire import HEADER, HEADER_SIZE

log = logging.getLogger(__name__)

TLS_HANDSHAKE_RECORD = 0x16
# A connection that sends nothing for this long is closed before TLS starts.
FIRST_BYTES_TIMEOUT_S = 30.0
HANDSHAKE_TIMEOUT_S = 10.0


class TlsListener:
    def __init__(
        self,
        sock: socket.socket,
        host: str,
        factory: Callable[[], asyncio.Protocol],
        ctx: ssl.SSLContext,
    ) -> None:
        self._sock = sock
        self._host = host
        self._factory = factory
        self._ctx = ctx
        self._loop = asyncio.get_running_loop()
        self._pending: set[asyncio.Task[None]] = set()
        self._task = self._loop.create_task(self._accept())

    @classmethod
    async def start(
        cls, host: str, port: int, factory: Callable[[], asyncio.Protocol], ctx: ssl.SSLContext
    ) -> TlsListener:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host, port), family=family, backlog=1024)
        sock.setblocking(False)
        return cls(sock, host, factory, ctx)

    @property
    def address(self) -> str:
        return f"{self._host}:{self._sock.getsockname()[1]}"

    def close(self) -> None:
        self._task.cancel()
        for task in list(self._pending):
            task.cancel()
        self._sock.close()

    async def _accept(self) -> None:
        while True:
            try:
                conn, _ = await self._loop.sock_accept(self._sock)
            except OSError as exc:
                if self._sock.fileno() < 0:
                    return
                log.warning("accepting a connection failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            task = self._loop.create_task(self._serve(conn))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    async def _serve(self, conn: socket.socket) -> None:
        conn.setblocking(False)
        try:
            first = await asyncio.wait_for(self._peek(conn), FIRST_BYTES_TIMEOUT_S)
        except (TimeoutError, OSError):
            conn.close()
            return
        if not first:
            conn.close()
            return
        if first[0] != TLS_HANDSHAKE_RECORD:
            self._refuse_plaintext(conn, first)
            return
        try:
            await self._loop.connect_accepted_socket(
                self._factory, conn, ssl=self._ctx, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S
            )
        except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
            peer = _peer(conn)
            log.info("TLS handshake with %s failed: %s", peer, exc)
            conn.close()

    async def _peek(self, conn: socket.socket) -> bytes:
        ready = self._loop.create_future()
        fd = conn.fileno()

        def readable() -> None:
            if not ready.done():
                ready.set_result(None)

        self._loop.add_reader(fd, readable)
        try:
            await ready
        finally:
            self._loop.remove_reader(fd)
        return conn.recv(HEADER_SIZE, socket.MSG_PEEK)

    def _refuse_plaintext(self, conn: socket.socket, first: bytes) -> None:
        request_id = HEADER.unpack(first)[4] if len(first) == HEADER_SIZE else 0
        log.info("plaintext connection from %s on a TLS listener refused", _peer(conn))
        answer = Error(
            request_id=request_id,
            status=Status.UNAUTHENTICATED,
            message="this hub accepts TLS connections only: connect with TLS and trust its CA "
            "(--tls-ca, HEDWIG_TLS_CA)",
        )
        with contextlib.suppress(OSError):
            conn.recv(1 << 16)  # what it sent so far: closing on unread bytes resets the answer
        with contextlib.suppress(OSError):
            conn.send(encode_frame(answer))
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_WR)
        conn.close()


def _peer(conn: socket.socket) -> str:
    try:
        host, port = conn.getpeername()[:2]
    except OSError:
        return "?"
    return f"{host}:{port}"
