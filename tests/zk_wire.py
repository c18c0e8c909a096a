"""What tests of the ZooKeeper client see of its connections: the bytes it writes and reads.

``WireTap`` is an ``Opener`` (the seam ``ZkClient`` connects through) that opens real TCP
connections and stands between each and the client's ``Connection``: it counts the writes
the client makes and the reads the loop hands it, and can drop the connection when a write
matches a test's condition (``drop_when``), as a network failing under it would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

from hedwig.metadata.zookeeper.client.framing import REQUEST_TYPES


def opcodes(data: bytes) -> list[int]:
    """The operation codes of the request frames in ``data`` (a client's write)."""
    out, pos = [], 0
    while pos + 12 <= len(data):
        size = int.from_bytes(data[pos : pos + 4], "big", signed=True)
        out.append(int.from_bytes(data[pos + 8 : pos + 12], "big", signed=True))
        pos += 4 + size
    return out


def kinds(data: bytes) -> list[str]:
    """The request records' names in a client's write."""
    return [REQUEST_TYPES[c].__name__ if c in REQUEST_TYPES else str(c) for c in opcodes(data)]


class _Transport(asyncio.Transport):
    def __init__(self, tap: WireTap, inner: asyncio.Transport) -> None:
        super().__init__()
        self._tap = tap
        self._inner = inner

    def write(self, data: Any) -> None:
        tap = self._tap
        tap.writes += 1
        data = bytes(data)
        if tap.drop_when is not None and tap.drop_when(data):
            tap.drop_when = None
            tap.dropped += 1
            self._inner.abort()
            return
        self._inner.write(data)

    def is_closing(self) -> bool:
        return self._inner.is_closing()

    def close(self) -> None:
        self._inner.close()

    def abort(self) -> None:
        self._inner.abort()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._inner.get_extra_info(name, default)


class _Protocol(asyncio.Protocol):
    def __init__(self, tap: WireTap, inner: asyncio.Protocol) -> None:
        self._tap = tap
        self._inner = inner

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._inner.connection_made(_Transport(self._tap, cast(asyncio.Transport, transport)))

    def data_received(self, data: bytes) -> None:
        self._tap.reads += 1
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._inner.connection_lost(exc)


class WireTap:
    """A counting, droppable opener (see the module docstring)."""

    def __init__(self) -> None:
        self.writes = 0
        self.reads = 0
        self.dropped = 0
        self.connections = 0
        # Called with each write; True drops the connection instead (once).
        self.drop_when: Callable[[bytes], bool] | None = None

    async def __call__(self, host: str, port: int, protocol: asyncio.Protocol) -> None:
        self.connections += 1
        loop = asyncio.get_running_loop()
        await loop.create_connection(lambda: _Protocol(self, protocol), host, port)
