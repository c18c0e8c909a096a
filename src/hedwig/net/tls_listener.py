"""A TLS listener that tells a plaintext client so, instead of leaving it guessing.

A TLS server fed plaintext just closes the connection, and the client sees a connection lost
for no reason it can name, then retries until its deadline. This listener accepts sockets
itself and peeks at the first bytes before anything reads them: a TLS handshake starts with a
handshake record (``0x16``), which can never start a Hedwig frame (its length would be over
350 MB). A handshake goes on as TLS (``connect_accepted_socket`` with the context); anything
else is answered, in plaintext, with an UNAUTHENTICATED error for the request it started (its
id read from the peeked header) saying the hub needs TLS, and closed. The peek costs one
readiness wait per new connection, nothing per request.

Until its handshake is done a connection is anyone's, and it holds a socket and a task for up
to 30 s (its first bytes) and 10 s more (the handshake). The hub's door counts connections
only after the handshake, so these are counted here (``HandshakeLimits``: in all, and per
peer address as the door groups them, ``hedwig.net.peers``): one over either count is closed
as it is accepted. Before, 2,000 connections from one address that sent nothing were all
held for 30 s, and enough of them take every file descriptor a hub may open, so that it
accepts nobody. Those refused are counted (``refused``) and logged once a minute at most.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from hedwig.net.peers import peer_group
from hedwig.protocol.client_frames import Error
from hedwig.protocol.codec import encode_frame
from hedwig.protocol.status import Status
from hedwig.protocol.wire import HEADER, HEADER_SIZE

log = logging.getLogger(__name__)

TLS_HANDSHAKE_RECORD = 0x16
# A connection that sends nothing for this long is closed before TLS starts.
FIRST_BYTES_TIMEOUT_S = 30.0
HANDSHAKE_TIMEOUT_S = 10.0
# A listener refusing connections over its counts says so at most once in this long.
REFUSED_LOG_INTERVAL_S = 60.0


@dataclass(frozen=True, slots=True)
class HandshakeLimits:
    """Connections a TLS listener holds before their handshake is done (more are closed as
    they are accepted). The hub gives its doorway's counts (``unauthenticated_connections``,
    ``unauthenticated_connections_per_ip``): a connection is anyone's until then too."""

    # In all: each holds a socket and a task for up to 40 s.
    connections: int = 1024
    # From one peer address (IPv6: its /64): one host cannot take them all.
    per_peer: int = 128


class TlsListener:
    def __init__(
        self,
        sock: socket.socket,
        host: str,
        factory: Callable[[], asyncio.Protocol],
        ctx: ssl.SSLContext,
        limits: HandshakeLimits | None = None,
    ) -> None:
        self._sock = sock
        self._host = host
        self._factory = factory
        self._ctx = ctx
        self._limits = limits or HandshakeLimits()
        self._loop = asyncio.get_running_loop()
        self._pending: set[asyncio.Task[None]] = set()
        self._per_peer: Counter[str] = Counter()
        self.refused = 0
        self._refused_logged_at: float | None = None
        self._task = self._loop.create_task(self._accept())

    @classmethod
    async def start(
        cls,
        host: str,
        port: int,
        factory: Callable[[], asyncio.Protocol],
        ctx: ssl.SSLContext,
        limits: HandshakeLimits | None = None,
    ) -> TlsListener:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host, port), family=family, backlog=1024)
        sock.setblocking(False)
        return cls(sock, host, factory, ctx, limits)

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
            group = peer_group(_peer_host(conn))
            if (
                len(self._pending) >= self._limits.connections
                or self._per_peer[group] >= self._limits.per_peer
            ):
                conn.close()
                self._refuse(group)
                continue
            self._per_peer[group] += 1
            task = self._loop.create_task(self._serve(conn, group))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    def _refuse(self, group: str) -> None:
        self.refused += 1
        now = self._loop.time()
        if self._refused_logged_at is None or now - self._refused_logged_at >= (
            REFUSED_LOG_INTERVAL_S
        ):
            self._refused_logged_at = now
            log.warning(
                "%s: %d connections closed as they came, over the count before TLS "
                "handshakes (%d in all, %d per peer; the last from %s)",
                self.address,
                self.refused,
                self._limits.connections,
                self._limits.per_peer,
                group,
            )

    async def _serve(self, conn: socket.socket, group: str) -> None:
        try:
            await self._handshake(conn)
        finally:
            self._per_peer[group] -= 1
            if self._per_peer[group] <= 0:
                del self._per_peer[group]

    async def _handshake(self, conn: socket.socket) -> None:
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


def _peer_host(conn: socket.socket) -> str:
    try:
        return str(conn.getpeername()[0])
    except OSError:
        return "?"
