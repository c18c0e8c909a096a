"""Compaction: closed entry logs mostly of deleted ledgers are copied forward and removed
(BookKeeper's entry log compactor).

Rules this module keeps:

- One compaction at a time, of the closed log with the smallest share of live records
  (entries and fences of ledgers still stored), if that share is below ``COMPACT_BELOW``.
  It is looked for when a ledger is deleted, when a group begins a new log, and at the first
  group after a start.
- The log is read on a worker thread; its live records are copied to the current log as a
  group's carried records (``GroupCommit.carry``), each moved in the index only if it is still
  where this read found it (a later add or copy wins). Once the copies are durable the log is
  removed.
- A delete record is copied only while a log it may shadow (from the oldest it names to the
  one compacted) still exists: it is what keeps the deleted ledger's entries in those logs
  from coming back at a restart. (A copy of a deleted ledger's entries that survives
  somewhere, as after a write the disk refused, is an orphan replica: the auditor deletes
  replicas whose ledger metadata is gone.)
- A log whose live records could not all be read (damage) keeps what is live in it and is
  not tried again; one whose copies the disk refused stays and is tried again later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from hedwig.errors import LedgerError
from hedwig.ledger.storage.entry_log import (
    DELETE_ENTRY,
    FENCE_ENTRY,
    MAGIC,
    RECORD,
    EntryLogs,
    encode_record,
    place,
    read_and_scan,
)
from hedwig.ledger.storage.group_commit import Carried, Carry, GroupCommit
from hedwig.ledger.storage.index import EntryIndex, place_of, unpacked

log = logging.getLogger(__name__)

# A closed log whose live records fill less than this share of it is compacted.
COMPACT_BELOW = 0.5
_COMPACT_CHUNK = 5000  # records checked between yields to the event loop


class Compactor:
    """The compaction of one storage's entry logs."""

    def __init__(self, index: EntryIndex, logs: EntryLogs, commit: GroupCommit) -> None:
        self._ledgers = index.ledgers
        self._logs = logs
        self._commit = commit
        self._task: asyncio.Task[None] | None = None
        self._kept: set[int] = set()  # logs compaction could not empty (damaged): not tried again
        self.compactions = 0

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def maybe_compact(self) -> None:
        """Compact the closed log with the smallest share of live records, if it is below
        ``COMPACT_BELOW`` (one at a time)."""
        if self._task is not None and not self._task.done():
            return  # (not ``running``: asked at every deletion)
        logs = self._logs
        best, share = None, COMPACT_BELOW
        for log_id, size in logs.sizes.items():
            if log_id == logs.current or log_id in self._kept:
                continue
            ratio = logs.live[log_id] / max(1, size - len(MAGIC))
            if ratio < share:
                best, share = log_id, ratio
        if best is not None:
            self._task = asyncio.get_running_loop().create_task(self._compact(best))

    async def _compact(self, log_id: int) -> None:
        loop = asyncio.get_running_loop()
        logs = self._logs
        try:
            data, scanned = await loop.run_in_executor(None, read_and_scan, logs.fds[log_id])
            copies: list[Carried] = []
            ledgers = self._ledgers
            for n, (lid, eid, lac, pos, plen) in enumerate(scanned.records):
                if n % _COMPACT_CHUNK == _COMPACT_CHUNK - 1:
                    await asyncio.sleep(0)
                held = ledgers.get(lid)
                lf = None if held is None else unpacked(held)
                if eid == DELETE_ENTRY:
                    if lf is None and any(lac <= i < log_id for i in logs.sizes):
                        copies.append((Carry.DELETE, lid, eid, 0, encode_record(lid, eid, lac)))
                elif lf is None:
                    continue
                elif eid == FENCE_ENTRY:
                    if lf.fence == log_id:
                        record = encode_record(lid, eid, lac)
                        copies.append((Carry.MOVE_FENCE, lid, eid, log_id, record))
                elif place_of(lf, eid) == (here := place(log_id, pos, plen)):
                    record = data[pos - RECORD.size : pos + plen]
                    copies.append((Carry.MOVE, lid, eid, here, record))
            if copies:
                await self._commit.carry(copies)
            if logs.live[log_id] > 0:  # entries this scan could not read (a damaged log)
                self._kept.add(log_id)
                log.warning(
                    "entry log %d: %d live bytes left after compaction; kept",
                    log_id,
                    logs.live[log_id],
                )
                return
            logs.remove(log_id)
            self.compactions += 1
            log.info("entry log %d compacted: %d records copied", log_id, len(copies))
        except (OSError, LedgerError) as exc:
            log.warning("entry log %d: compaction failed, tried again later: %s", log_id, exc)
            return
        self._task = None  # this one is done: the next may begin
        self.maybe_compact()

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
