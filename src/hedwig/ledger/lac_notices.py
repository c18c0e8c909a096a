"""Telling replicas the last confirmed entry of ledgers whose writer went idle (BookKeeper's
explicit LAC).

Every add carries the LAC of the entries before it, so a replica only learns that a ledger's
last entry was confirmed from a later add. Most topics of a large region publish now and then
and sit idle between: their last entry is confirmed on an ack quorum, but no replica knows it.
A recovery (every take-over after a crash) must then treat that entry as possibly
unacknowledged: read it, write it back on every replica and only then close the ledger on it.
At a failover of a hub owning 100,000 topics that is 100,000 reads and 300,000 write-backs
that change nothing.

So a writer whose adds have all been confirmed is noted here, and once a second the hub tells
each replica the LACs of every ledger noted since, many to a frame (WRITE_LACS): a dictionary
entry per idle writer and a request per replica a second, not a request per topic, and
nothing at all while every topic is idle. Each replica is told on its own, one frame in
flight at a time: a frozen one holds back only its own notices (they wait, merged, for its
answer). A replica answers a fence with the LAC it was told; recovery reads forward only past
it. A notice lost (a replica down, a frame dropped) only leaves recovery as it was.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from hedwig.clock import Clock, SystemClock
from hedwig.ledger.replicas import Replicas

if TYPE_CHECKING:
    from hedwig.ledger.handle import LedgerWriter

log = logging.getLogger(__name__)

# How long after a writer goes idle its replicas are told (and how often at most a replica
# receives a frame): long enough to gather the ledgers of a wave of first publishes into a
# few frames, short against the lease a take-over waits out anyway.
EXPLICIT_LAC_S = 1.0
# Ledgers per frame: 16 bytes each, so about 128 KiB.
LACS_PER_FRAME = 8_192


class LacNotices:
    """The idle writers of one hub, and the task that tells their replicas."""

    def __init__(
        self, replicas: Replicas, *, clock: Clock | None = None, delay_s: float = EXPLICIT_LAC_S
    ) -> None:
        self._replicas = replicas
        self._clock = clock or SystemClock()
        self._delay = delay_s
        self._idle: set[LedgerWriter] = set()
        self._task: asyncio.Task[None] | None = None
        # One frame (or run of frames) in flight per replica; what comes for a replica
        # meanwhile waits here, merged, and goes when it is answered: a replica that is
        # frozen or cut off (each frame waits out the storage timeout) delays only itself.
        self._sending: dict[str, asyncio.Task[None]] = {}
        self._waiting: dict[str, dict[int, int]] = {}
        self.sent = 0  # ledger LACs told, counted per replica
        self.failed = 0  # ... whose frame failed

    def idle(self, writer: LedgerWriter) -> None:
        """``writer`` has no adds in flight; tell its replicas its LAC at the next round."""
        self._idle.add(writer)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            while self._idle:
                await self._clock.sleep(self._delay)
                self._round()  # not awaited: each replica's frames go on their own
        finally:
            self._task = None

    async def tell(self) -> None:
        """Tell the replicas of every writer noted so far its LAC now; returns once each
        replica has answered (or failed)."""
        await asyncio.gather(*self._round())

    def _round(self) -> list[asyncio.Task[None]]:
        writers, self._idle = self._idle, set()
        by_replica: dict[str, list[tuple[int, int]]] = {}
        for writer in writers:
            lac = writer.untold_lac()
            if lac is None:
                continue
            writer.lac_told = lac
            for address in writer.metadata.fragments[-1][1]:
                by_replica.setdefault(address, []).append((writer.ledger_id, lac))
        return [self._send(a, lacs) for a, lacs in by_replica.items()]

    def _send(self, address: str, lacs: list[tuple[int, int]]) -> asyncio.Task[None]:
        running = self._sending.get(address)
        if running is not None:
            waiting = self._waiting.setdefault(address, {})
            for ledger_id, lac in lacs:
                if lac > waiting.get(ledger_id, -1):
                    waiting[ledger_id] = lac
            return running
        task = asyncio.get_running_loop().create_task(self._tell(address, lacs))
        self._sending[address] = task
        task.add_done_callback(lambda t: self._sent(address, t))
        return task

    def _sent(self, address: str, task: asyncio.Task[None]) -> None:
        if self._sending.get(address) is task:
            del self._sending[address]
        waiting = self._waiting.pop(address, None)
        if waiting and not task.cancelled():
            self._send(address, list(waiting.items()))

    async def _tell(self, address: str, lacs: list[tuple[int, int]]) -> None:
        node = self._replicas.node(address)
        for i in range(0, len(lacs), LACS_PER_FRAME):
            part = lacs[i : i + LACS_PER_FRAME]
            try:
                await node.write_lacs(part)
            except Exception as exc:
                # A recovery of these ledgers writes their ends back, as without the notice.
                self.failed += len(part)
                log.debug("telling replica %s %d LACs failed: %s", address, len(part), exc)
                return
            self.sent += len(part)

    async def close(self) -> None:
        """Stop; what is not told yet is not needed for correctness."""
        self._idle.clear()
        self._waiting.clear()
        tasks = list(self._sending.values())
        if self._task is not None:
            tasks.append(self._task)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None
        self._sending.clear()
