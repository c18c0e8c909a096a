"""How hubs and clients reach each other: one small interface, over TCP or in memory.

Both ends of a Hedwig connection are ``asyncio.Protocol`` objects wrapping the sans-IO
``hedwig.protocol.Connection``: ``HubConnection`` on the side that asks, the hub's
``ClientConnection`` on the side that answers. ``Network`` is all they need from the outside
world: open a connection to an address, or listen on one. ``TcpNetwork`` is the real thing;
``hedwig.net.memory.MemoryNetwork`` wires the same two protocol objects together in memory, so
the real client and the real hub code can be tested against each other in milliseconds, with
faults (a hub that stops answering, a cut connection) made on purpose.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Protocol, TypeVar

from hedwig.clock import Clock, SystemClock
from hedwig.errors import ConnectionLostError, TlsClosedError, TlsError, UsageError
from hedwig.net.tls_listener import HandshakeLimits, TlsListener

P = TypeVar("P", bound=asyncio.Protocol)


class Listener(Protocol):
    @property
    def address(self) -> str:
        """The address connections reach this listener at (with the port it was given)."""
        ...

    def close(self) -> None: ...


class Network(Protocol):
    async def connect(self, address: str, factory: Callable[[], P], *, timeout_s: float) -> P:
        """Open a connection to ``address``, with ``factory()`` as this end's protocol;
        ``ConnectionLostError`` if it cannot be made within ``timeout_s``."""
        ...

    async def listen(self, address: str, factory: Callable[[], asyncio.Protocol]) -> Listener:
        """Accept connections on ``address`` (port 0: any free port)."""
        ...


def split_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` to its parts; ``UsageError`` if it is not one."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"a hub address is HOST:PORT, got {address!r}")
    return host, int(port)


class _TcpListener:
    def __init__(self, server: asyncio.Server, host: str) -> None:
        self._server = server
        self._host = host

    @property
    def address(self) -> str:
        return f"{self._host}:{self._server.sockets[0].getsockname()[1]}"

    def close(self) -> None:
        self._server.close()


class TcpNetwork:
    """Connections over TCP (uvloop's or asyncio's), with TLS when given contexts.

    ``client_tls`` is used for the connections this end opens (checking the hub's certificate
    against the address dialled, and presenting one if it holds a certificate); ``server_tls``
    for the connections it accepts, on a ``TlsListener`` that tells plaintext clients so.
    """

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        client_tls: ssl.SSLContext | None = None,
        server_tls: ssl.SSLContext | None = None,
        before_connect: Callable[[], object] | None = None,
        handshake_limits: HandshakeLimits | None = None,
    ) -> None:
        self._clock = clock or SystemClock()
        # How many connections its TLS listeners hold before their handshakes are done.
        self.handshake_limits = handshake_limits
        self.client_tls = client_tls
        self.server_tls = server_tls
        # Called before each connection is opened (reloading a renewed client certificate).
        self._before_connect = before_connect

    async def resolve(self, host: str) -> str:
        """The host to dial for ``host``: itself, unless a subclass knows names the system's
        resolver does not. TLS still checks the certificate against ``host``, the name asked
        for, not what it resolved to."""
        return host

    async def connect(self, address: str, factory: Callable[[], P], *, timeout_s: float) -> P:
        host, port = split_address(address)
        loop = asyncio.get_running_loop()
        if self._before_connect is not None:
            self._before_connect()
        tls = self.client_tls
        try:
            dial = await self.resolve(host)
            _, proto = await self._clock.wait_for(
                loop.create_connection(
                    factory,
                    dial,
                    port,
                    ssl=tls,
                    server_hostname=host if tls is not None else None,
                ),
                timeout_s,
            )
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError) as exc:
            raise TlsClosedError(
                f"hub {address} closed the connection during the TLS handshake: it does not "
                f"accept this end's certificate, or it went away ({exc})"
            ) from exc
        except ssl.SSLError as exc:
            raise TlsError(f"TLS handshake with hub {address} failed: {exc}") from exc
        except ssl.CertificateError as exc:
            raise TlsError(f"hub {address} has a certificate this client refuses: {exc}") from exc
        except (OSError, TimeoutError) as exc:
            raise ConnectionLostError(f"cannot connect to hub {address}: {exc}") from exc
        return proto

    async def listen(self, address: str, factory: Callable[[], asyncio.Protocol]) -> Listener:
        host, port = split_address(address)
        if self.server_tls is not None:
            return await TlsListener.start(
                host, port, factory, self.server_tls, self.handshake_limits
            )
        server = await asyncio.get_running_loop().create_server(factory, host, port)
        return _TcpListener(server, host)


TCP = TcpNetwork()
