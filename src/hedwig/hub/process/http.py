"""``/metrics``, ``/healthz`` and ``/readyz`` on a small asyncio HTTP server.

Readiness means: registered in ZooKeeper and serving; liveness means the event loop answers.
Kubernetes uses them for the StatefulSet's probes. They are read-only and open to anyone who
can reach the port. ``POST /drain`` changes things: it is served only when ``drain_allowed``
says so for the caller (``DrainCaller``: whether it came through the local socket, its peer
address, its ``Authorization: Bearer`` token); others get 403.

The same server also listens on a Unix socket when given one (``start_unix``, the hub's
``drain_socket``): whoever can open the file (mode 0600, in the hub's own container) is
local, which a peer address cannot prove. A service mesh's sidecar forwards callers from
anywhere to the hub from a loopback address (Istio's 127.0.0.6, other proxies' 127.0.0.1),
so "from 127.0.0.0/8" let anyone who reached the pod's metrics port through the mesh drain it;
no proxy forwards to a file in the hub's container.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from hedwig.errors import HedwigError, UsageError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DrainCaller:
    """Who asks to drain: through the local socket, or from a peer address with a token."""

    local_socket: bool
    peer_host: str = ""
    token: str | None = None


class HealthServer:
    def __init__(
        self,
        registry: CollectorRegistry,
        ready: Callable[[], tuple[bool, str]],
        *,
        before_scrape: Callable[[], None] | None = None,
        drain: Callable[[bool], Awaitable[int]] | None = None,
        drain_allowed: Callable[[DrainCaller], Awaitable[bool]] | None = None,
    ) -> None:
        self._drain_allowed = drain_allowed
        self._registry = registry
        self._ready = ready
        self._before_scrape = before_scrape
        self._drain = drain
        self._server: asyncio.AbstractServer | None = None
        self._unix: asyncio.AbstractServer | None = None
        self._unix_path: str | None = None
        self.port = 0

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._handle_tcp, host, port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def start_unix(self, path: str) -> None:
        """Serve on the Unix socket ``path`` too, readable and writable by this user only. A
        socket left there by an earlier run (a restarted container) is replaced; any other
        file is not touched (``UsageError``)."""
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISSOCK(os.lstat(path).st_mode):
                raise UsageError(f"drain_socket {path} exists and is not a socket")
            os.unlink(path)
        self._unix = await asyncio.start_unix_server(self._handle_local, path)
        os.chmod(path, 0o600)
        self._unix_path = path

    async def close(self) -> None:
        for server in (self._server, self._unix):
            if server is not None:
                server.close()
                await server.wait_closed()
        if self._unix_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._unix_path)

    async def _handle_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._handle(reader, writer, local=False)

    async def _handle_local(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await self._handle(reader, writer, local=True)

    async def _may_drain(self, writer: asyncio.StreamWriter, request: bytes, local: bool) -> bool:
        if self._drain_allowed is None:
            return True
        if local:
            return await self._drain_allowed(DrainCaller(local_socket=True))
        peer = writer.get_extra_info("peername")
        host = str(peer[0]) if peer else ""
        token = None
        for line in request.split(b"\r\n")[1:]:
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "authorization":
                scheme, _, credentials = value.strip().partition(" ")
                if scheme.lower() == "bearer":
                    token = credentials.strip()
        return await self._drain_allowed(DrainCaller(False, host, token))

    async def _handle(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, local: bool
    ) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            line = request.split(b"\r\n", 1)[0].decode("latin-1").split()
            method = line[0] if line else "GET"
            path, _, query = (line[1] if len(line) >= 2 else "/").partition("?")
            if (
                path == "/drain"
                and method == "POST"
                and self._drain is not None
                and not await self._may_drain(writer, request, local)
            ):
                code, ctype, body = (
                    403,
                    "text/plain",
                    b"draining needs a local caller or an admin\n",
                )
            elif path == "/drain" and method == "POST" and self._drain is not None:
                # For a preStop hook: hand every topic over and answer when done, so the pod
                # is stopped only after its clients have somewhere to go.
                try:
                    released = await self._drain("force=1" in query.split("&"))
                    code, ctype, body = 200, "text/plain", f"released {released} topics\n".encode()
                except HedwigError as exc:
                    code, ctype, body = 409, "text/plain", f"{exc}\n".encode()
            elif path == "/drain":
                code, ctype, body = 405, "text/plain", b"POST to drain\n"
            elif path == "/metrics":
                if self._before_scrape is not None:
                    self._before_scrape()
                code, ctype, body = 200, CONTENT_TYPE_LATEST, generate_latest(self._registry)
            elif path == "/healthz":
                code, ctype, body = 200, "text/plain", b"ok\n"
            elif path == "/readyz":
                ok, why = self._ready()
                code, ctype, body = (200 if ok else 503), "text/plain", (why + "\n").encode()
            else:
                code, ctype, body = 404, "text/plain", b"not found\n"
            reason = {
                200: "OK",
                403: "Forbidden",
                404: "Not Found",
                405: "Method Not Allowed",
                409: "Conflict",
                503: "Service Unavailable",
            }[code]
            writer.write(
                f"HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, OSError):
            pass
        finally:
            writer.close()
