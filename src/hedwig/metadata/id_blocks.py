"""Ledger ids handed out from blocks a hub takes from its metadata store.

A ledger id must be unique in the region for good (a replica may still hold a deleted
ledger's entries). A store write per id was a sixth of a claim's etcd transactions and, on
ZooKeeper (a sequential znode per ledger), made a topic's first ledger and the record naming
it two requests. So a hub takes a block of ids with one compare-and-set of a counter in the
store and hands them out itself; ids it does not use (it stops) are never used.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


class IdBlocks:
    """Ids from blocks: ``take`` claims the next block in the store (one compare-and-set,
    tried again until it wins) and returns its first id and the id past its last."""

    def __init__(self, take: Callable[[], Awaitable[tuple[int, int]]]) -> None:
        self._take = take
        self._next = self._end = 0
        self._taking: asyncio.Task[None] | None = None

    async def next(self) -> int:
        """An id no other ledger of the region has had or will have."""
        while self._next >= self._end:
            # One block taken at a time, whoever asks meanwhile waits for it.
            if self._taking is None or self._taking.done():
                self._taking = asyncio.get_running_loop().create_task(self._refill())
            await asyncio.shield(self._taking)
        lid = self._next
        self._next += 1
        return lid

    async def _refill(self) -> None:
        self._next, self._end = await self._take()
