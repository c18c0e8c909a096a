"""Many znodes read in one ZooKeeper request: ``multiRead`` (ZooKeeper 3.6 and later).

A take-over reads three records of its topic one after the other (its configuration, its
ledger list, its open ledger), and a survivor of a failover takes hundreds of topics over at
once: thousands of reads a second, each a request of its own to send, to queue and answer on
the server. Reads made in one turn of the loop go together instead (``Reads.get_or_none``):
one request of up to ``MAX_READS``, one answer, one slot. Unlike a ``multi``, a
``multiRead`` is not atomic and does not fail as a whole: each read gets its data or its own
error (a missing znode is one, and is answered ``None``: an answer, not an exception, which
would hold the reader's frame in a cycle through its traceback). A read made alone goes
alone all the same, as a one-read request.

A ZooKeeper older than 3.6 answers ``multiRead`` as unimplemented: the reads it held are
read again one by one, and so is every later read (``together`` turns off for good).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from hedwig.errors import MetadataError
from hedwig.metadata.zookeeper.client.channel import Channel
from hedwig.metadata.zookeeper.client.codes import CONNECTION_LOSS, NO_NODE, error_for
from hedwig.metadata.zookeeper.client.multi import MultiReadRequest, MultiResponse
from hedwig.metadata.zookeeper.client.records import (
    ErrorResult,
    GetDataRequest,
    GetDataResponse,
    Stat,
)

log = logging.getLogger(__name__)

# Reads sent together at most. Every record read so is small (a topic's configuration, ledger
# list or ledger metadata; an owner record); ZooKeeper does not bound an answer's size, and a
# bound keeps one answer's decoding short.
MAX_READS = 64
UNIMPLEMENTED = -6

Read = tuple[bytes, Stat] | None  # None: the znode does not exist
# Each read of a group: its data and stat, None, or the exception of its own error.
GroupResult = list[Read | MetadataError]


class PendingRead(NamedTuple):
    """A read waiting for its turn to end (``Reads.get_or_none``)."""

    path: str
    fut: asyncio.Future[Read]


class Reads:
    """The reads of one session, gathered per turn of the loop."""

    def __init__(self, channel: Channel) -> None:
        self._channel = channel
        self._reads: list[PendingRead] = []
        self.together = True  # False once the server refused a multiRead

    def get_or_none(self, path: str) -> asyncio.Future[Read]:
        """``path``'s data and stat, ``None`` if it does not exist, read with the others of
        this turn."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Read] = loop.create_future()
        if not self.together:
            self._channel.spawn(self._alone(PendingRead(path, fut)))
            return fut
        reads = self._reads
        reads.append(PendingRead(path, fut))
        if len(reads) == 1:
            self._channel.at_turn_end(self._send_reads)
        elif len(reads) >= MAX_READS:
            self._send_reads()
        return fut

    def read_group(self, paths: Sequence[str], deliver: Callable[[GroupResult], None]) -> None:
        """``paths`` read in one request, however many, for a caller that wants them as one
        list (each a failure of the request if it failed as a whole): the read-back of the
        watches set in one request (``watches``)."""
        if not paths:
            deliver([])
        elif not self.together:
            self._channel.spawn(self._group_alone(paths, deliver))
        else:
            chunk = list(paths)

            def answered(err: int, results: Sequence[Any] | None) -> None:
                if err == UNIMPLEMENTED:
                    self._refused()
                    self._channel.spawn(self._group_alone(chunk, deliver))
                else:
                    deliver(_group_results(chunk, err, results))

            self._send(chunk, answered)

    def _send_reads(self) -> None:
        reads, self._reads = self._reads, []
        reads = [r for r in reads if not r.fut.done()]
        if not reads:  # sent already: the turn filled a request
            return
        paths = [r.path for r in reads]

        def answered(err: int, results: Sequence[Any] | None) -> None:
            if err == UNIMPLEMENTED:
                self._refused()
                for read in reads:
                    self._channel.spawn(self._alone(read))
                return
            for read, got in zip(reads, _group_results(paths, err, results), strict=True):
                if read.fut.done():
                    continue
                if isinstance(got, MetadataError):
                    read.fut.set_exception(got)
                else:
                    read.fut.set_result(got)

        self._send(paths, answered)

    def _send(
        self, paths: list[str], answered: Callable[[int, Sequence[Any] | None], None]
    ) -> None:
        channel = self._channel
        request = MultiReadRequest(tuple(GetDataRequest(p, False) for p in paths))

        def reply(err: int, result: Any) -> None:
            channel.slots.give()
            answered(err, result.results if isinstance(result, MultiResponse) else None)

        channel.send_group(
            paths[0],
            lambda: channel.send(request, reply),
            lambda exc: answered(CONNECTION_LOSS, None),
        )

    def _refused(self) -> None:
        if self.together:
            log.warning("ZooKeeper does not read many znodes at once (multiRead); one by one")
            self.together = False

    async def _alone(self, read: PendingRead) -> None:
        """One read as a request of its own (a ZooKeeper without ``multiRead``)."""
        try:
            got = await self._channel.call(
                GetDataRequest(read.path, False), read.path, missing=True
            )
        except MetadataError as exc:
            if not read.fut.done():
                read.fut.set_exception(exc)
            return
        if not read.fut.done():
            read.fut.set_result(None if got is None else (got.data, got.stat))

    async def _group_alone(
        self, paths: Sequence[str], deliver: Callable[[GroupResult], None]
    ) -> None:
        loop = asyncio.get_running_loop()
        reads = [PendingRead(p, loop.create_future()) for p in paths]
        await asyncio.gather(*(self._alone(r) for r in reads))
        out: GroupResult = []
        for read in reads:
            exc = read.fut.exception()
            out.append(exc if isinstance(exc, MetadataError) else read.fut.result())
        deliver(out)


def _group_results(paths: Sequence[str], err: int, results: Sequence[Any] | None) -> GroupResult:
    """Each read's outcome out of a ``multiRead``'s answer (all failed with ``err`` if the
    request failed as a whole)."""
    if err or results is None or len(results) != len(paths):
        failure = error_for(err or -1, paths[0])
        return [failure] * len(paths)
    out: GroupResult = []
    for path, result in zip(paths, results, strict=True):
        if isinstance(result, GetDataResponse):
            out.append((result.data, result.stat))
        elif isinstance(result, ErrorResult) and result.err == NO_NODE:
            out.append(None)
        elif isinstance(result, ErrorResult):
            out.append(error_for(result.err, path))
        else:
            out.append(error_for(-1, path))
    return out
