"""An in-memory ``Network``: the two protocol ends of a connection wired together.

Bytes one end writes reach the other end's ``data_received`` on a later turn of the event loop,
in order, as they would over a socket, and what one end writes within one turn arrives in one
piece (a socket's reads coalesce writes the same way, which is how a delivery can arrive in the
same read as the answer before it); closing one end tells both. Nothing is simulated beyond
the transport: on each side runs the real protocol object (the client's ``HubConnection``, the
hub's ``ClientConnection``).

Faults, for tests:

- ``freeze(address)``: the listener at ``address`` stops answering; bytes to and from it are
  held (a hub stopped with SIGSTOP keeps its TCP connections open too). ``thaw`` delivers them.
- ``sever(address)``: every connection to ``address`` is cut (a killed hub); with
  ``refuse=True`` new connections are refused until ``restore``.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any, TypeVar

from hedwig.errors import ConnectionLostError
from hedwig.net.transport import split_address

P = TypeVar("P", bound=asyncio.Protocol)


class _End(asyncio.Transport):
    """One end of an in-memory connection; ``peer`` is the other end."""

    def __init__(self, network: MemoryNetwork, address: str, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self._network = network
        self.address = address  # the listener this connection belongs to
        self._protocol = protocol
        self.peer: _End | None = None
        self._closed = False
        self._inbox = bytearray()
        self._peername = ("memory", next(network.ports))

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._peername if name == "peername" else default

    def is_closing(self) -> bool:
        return self._closed

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        return None

    def get_write_buffer_size(self) -> int:
        return 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closed or self.peer is None:
            return
        self._network.carry(self.address, self.peer, bytes(data))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        loop = asyncio.get_running_loop()
        loop.call_soon(self._lost)
        if self.peer is not None and not self.peer._closed:
            self.peer._closed = True
            loop.call_soon(self.peer._lost)

    def abort(self) -> None:
        self.close()

    def _deliver(self, data: bytes) -> None:
        """Queue bytes for this end; they arrive, with all others queued this turn, next turn."""
        if not self._inbox:
            asyncio.get_running_loop().call_soon(self._receive)
        self._inbox += data

    def _receive(self) -> None:
        data, self._inbox = bytes(self._inbox), bytearray()
        if data and not self._closed:
            self._protocol.data_received(data)

    def _lost(self) -> None:
        self._network.forget(self)
        self._protocol.connection_lost(None)


class MemoryNetwork:
    """A network of in-memory listeners, addressed ``HOST:PORT`` like TCP ones."""

    def __init__(self, host: str = "memory") -> None:
        self._host = host
        self._listeners: dict[str, Callable[[], asyncio.Protocol]] = {}
        self._ends: set[_End] = set()
        self._frozen: dict[str, list[tuple[_End, bytes]]] = {}
        self._refused: set[str] = set()
        self.ports = itertools.count(40000)

    # Network ----------------------------------------------------------------------------

    async def listen(self, address: str, factory: Callable[[], asyncio.Protocol]) -> _Listener:
        host, port = split_address(address)
        if port == 0:
            address = f"{host}:{next(self.ports)}"
        if address in self._listeners:
            raise OSError(f"address {address} is in use")
        self._listeners[address] = factory
        return _Listener(self, address)

    async def connect(self, address: str, factory: Callable[[], P], *, timeout_s: float) -> P:
        server_factory = self._listeners.get(address)
        if server_factory is None or address in self._refused:
            raise ConnectionLostError(f"cannot connect to hub {address}: connection refused")
        client_proto = factory()
        server_proto = server_factory()
        client = _End(self, address, client_proto)
        server = _End(self, address, server_proto)
        client.peer, server.peer = server, client
        self._ends |= {client, server}
        server_proto.connection_made(server)
        client_proto.connection_made(client)
        await asyncio.sleep(0)
        return client_proto

    # carrying bytes -------------------------------------------------------------------------

    def carry(self, address: str, to: _End, data: bytes) -> None:
        held = self._frozen.get(address)
        if held is not None:
            held.append((to, data))
            return
        to._deliver(data)

    def forget(self, end: _End) -> None:
        self._ends.discard(end)

    # faults ---------------------------------------------------------------------------------

    def freeze(self, address: str) -> None:
        """Hold every byte to and from ``address`` until ``thaw``."""
        self._frozen.setdefault(address, [])

    def thaw(self, address: str) -> None:
        for to, data in self._frozen.pop(address, []):
            to._deliver(data)

    def sever(self, address: str, *, refuse: bool = False) -> None:
        """Cut every connection to ``address``; with ``refuse``, refuse new ones too."""
        self._frozen.pop(address, None)
        if refuse:
            self._refused.add(address)
        for end in [e for e in self._ends if e.address == address]:
            end.close()

    def restore(self, address: str) -> None:
        self._refused.discard(address)

    def unlisten(self, address: str) -> None:
        self._listeners.pop(address, None)


class _Listener:
    def __init__(self, network: MemoryNetwork, address: str) -> None:
        self._network = network
        self._address = address

    @property
    def address(self) -> str:
        return self._address

    def close(self) -> None:
        self._network.unlisten(self._address)
