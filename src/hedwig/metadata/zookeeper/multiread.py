"""Many znodes read in one ZooKeeper request: ``multiRead`` (ZooKeeper 3.6 and later).

A take-over reads three records of its topic one after the other (its configuration, its
ledger list, its open ledger), and a survivor of a failover takes hundreds of topics over at
once: thousands of reads a second, each a request of its own to send, to queue and answer on
the server, to read back on kazoo's thread and to hand across to the event loop. Reads made
in one turn of the loop go together instead (``ZkBridge.get_or_none``): one request, one
answer, one crossing. Unlike a ``multi``, a ``multiRead`` is not atomic and does not fail as a
whole: each read gets its data or its own error (a missing znode is one).

kazoo (2.11) has no record for it; ``MultiRead`` is one, in kazoo's form (``type``,
``serialize``, ``deserialize``), so kazoo's connection sends it and reads its answer as it
does its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from kazoo.exceptions import EXCEPTIONS
from kazoo.protocol.serialization import (
    GetData,
    MultiHeader,
    int_struct,
    multiheader_struct,
    read_buffer,
    stat_struct,
)
from kazoo.protocol.states import ZnodeStat

# ZooKeeper's ``OpCode.multiRead``; its answer marks a failed read with ``OpCode.error``.
MULTI_READ = 22
_ERROR = -1
_END = multiheader_struct.pack(-1, True, -1)


class MultiRead:
    """The data of every path (rooted, as kazoo sends paths), no watches."""

    __slots__ = ("paths",)
    type = MULTI_READ

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = paths

    def serialize(self) -> bytearray:
        out = bytearray()
        for path in self.paths:
            out += MultiHeader(GetData.type, False, -1).serialize()
            out += GetData(path, None).serialize()
        out += _END
        return out

    @classmethod
    def deserialize(cls, data: bytes, offset: int) -> list[tuple[bytes, ZnodeStat] | Exception]:
        """Each read's data and stat, or the exception kazoo gives its error code."""
        results: list[tuple[bytes, ZnodeStat] | Exception] = []
        header, offset = MultiHeader.deserialize(data, offset)
        while not header.done:
            if header.type == GetData.type:
                value, offset = read_buffer(data, offset)
                stat = ZnodeStat._make(stat_struct.unpack_from(data, offset))
                offset += stat_struct.size
                results.append((value or b"", stat))
            elif header.type == _ERROR:
                code = int_struct.unpack_from(data, offset)[0]
                offset += int_struct.size
                results.append(EXCEPTIONS[code]())
            else:
                raise ValueError(f"multiRead answered with an operation of type {header.type}")
            header, offset = MultiHeader.deserialize(data, offset)
        return results


# Reads sent together at most. Every record read so is small (a topic's configuration, ledger
# list or ledger metadata; an owner record); ZooKeeper does not bound an answer's size, and a
# bound keeps one answer's decoding on kazoo's thread short.
MAX_READS = 64


class GroupAnswer:
    """What kazoo's connection thread completes for a request made for many callers (a
    ``MultiRead``, or transactions together: ``hedwig.metadata.zookeeper.multiwrite``): the
    results cross to the loop together (``deliver``), where each caller gets its own."""

    __slots__ = ("_crossing", "_deliver")

    def __init__(
        self,
        crossing: Any,
        deliver: Callable[[list[Any] | None, BaseException | None], None],
    ) -> None:
        self._crossing = crossing
        self._deliver = deliver

    def set(self, value: Any = None) -> None:
        self._crossing.call(self._deliver, value, None)

    def set_exception(self, exc: BaseException) -> None:
        self._crossing.call(self._deliver, None, exc)


class PendingRead(NamedTuple):
    """A read waiting for its turn to end (``ZkBridge.get_or_none``)."""

    path: str
    fut: asyncio.Future[tuple[bytes, ZnodeStat] | None]  # None: the znode does not exist
