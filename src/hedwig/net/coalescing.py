"""Frames written in one turn of the event loop, sent to the socket in one write.

A hub answers many requests in one turn of its event loop: answers from ZooKeeper and from
the replicas arrive many to a read and wake as many waiting requests at once, and each of
those wrote its frame to the socket on its own, a ``send`` system call each (with TLS, a TLS
record each as well). In a wave of first publishes those writes were 8 % of a hub's time. So
a connection's frames are gathered until the turn ends and written together, as Netty's
flush consolidation does; none waits longer than the rest of the turn it was written in.

What is gathered is bounded (``FLUSH_BYTES``): past it the frames go out at once, so a
sender that writes in a loop without yielding meets the transport's flow control
(``pause_writing``) as it did when every frame went out on its own.
"""

from __future__ import annotations

import asyncio

# Frames gathered past this many bytes are written at once, without waiting for the turn's
# end: far above what a turn's answers come to, far below a transport's high-water mark.
FLUSH_BYTES = 64 * 1024


class TurnWriter:
    """Gathers one connection's writes for ``transport`` until the turn ends (or
    ``FLUSH_BYTES``); ``flush`` writes what is gathered now (before a close)."""

    __slots__ = ("_chunks", "_scheduled", "_size", "_transport")

    def __init__(self, transport: asyncio.WriteTransport) -> None:
        self._transport = transport
        self._chunks: list[bytes] = []
        self._size = 0
        self._scheduled = False

    def write(self, data: bytes) -> None:
        self._chunks.append(data)
        self._size += len(data)
        if self._size >= FLUSH_BYTES:
            self.flush()
        elif not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._end_of_turn)

    def flush(self) -> None:
        chunks = self._chunks
        if not chunks:
            return
        self._chunks, self._size = [], 0
        if self._transport.is_closing():
            return
        self._transport.write(chunks[0] if len(chunks) == 1 else b"".join(chunks))

    def _end_of_turn(self) -> None:
        self._scheduled = False
        self.flush()
