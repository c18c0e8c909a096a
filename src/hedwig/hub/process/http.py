"""``/metrics``, ``/healthz`` and ``/readyz`` on a small asyncio HTTP server.

Readiness means: registered in ZooKeeper and serving; liveness means the event loop answers.
Kubernetes uses them for the StatefulSet's probes. They are read-only and open to anyone who
can reach the port. ``POST /drain`` changes things: it is served only when ``drain_allowed``
says so for the caller (the hub allows its own machine, for a preStop hook, and an
``Authorization: Bearer`` token whose principal may administer the cluster); others get 403.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from hedwig.errors import HedwigError

log = logging.getLogger(__name__)


class HealthServer:
    def __init__(
        self,
        registry: CollectorRegistry,
        ready: Callable[[], tuple[bool, str]],
        *,
        before_scrape: Callable[[], None] | None = None,
        drain: Callable[[bool], Awaitable[int]] | None = None,
        drain_allowed: Callable[[str, str | None], Awaitable[bool]] | None = None,
    ) -> None:
        self._drain_allowed = drain_allowed
        self._registry = registry
        self._ready = ready
        self._before_scrape = before_scrape
        self._drain = drain
        self._server: asyncio.AbstractServer | None = None
        self.port = 0

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._handle, host, port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _may_drain(self, writer: asyncio.StreamWriter, request: bytes) -> bool:
        if self._drain_allowed is None:
            return True
        peer = writer.get_extra_info("peername")
        host = str(peer[0]) if peer else ""
        token = None
        for line in request.split(b"\r\n")[1:]:
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "authorization":
                scheme, _, credentials = value.strip().partition(" ")
                if scheme.lower() == "bearer":
                    token = credentials.strip()
        return await self._drain_allowed(host, token)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            line = request.split(b"\r\n", 1)[0].decode("latin-1").split()
            method = line[0] if line else "GET"
            path, _, query = (line[1] if len(line) >= 2 else "/").partition("?")
            if (
                path == "/drain"
                and method == "POST"
                and self._drain is not None
                and not await self._may_drain(writer, request)
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
