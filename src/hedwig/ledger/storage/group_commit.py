"""Group commit: nothing is acknowledged before it is on disk, and one write and one sync
make a whole group durable (BookKeeper's journal, written straight into the entry log).

Rules this module keeps:

- Adds, fences, deletions and compaction's copies wait in memory for the next group. One
  flusher at a time takes everything waiting as a group, writes it to the current entry log
  and syncs it on a worker thread, so the event loop keeps accepting work; whatever arrives
  meanwhile forms the next group.
- Until its group is written an entry lives in memory only, readable there (``unwritten``);
  nothing of it was acknowledged, so a crash before that loses nothing.
- A group writes deletions and copies first, then the entries and fences, so an entry added
  after its ledger was deleted (a late write that makes it again) follows the delete record,
  in the log as in memory. A copy of a ledger deleted since compaction read it is dropped.
- A group is applied to the index only once it is durable: entries placed, fences set to
  their log, copies moved only if the entry (or fence) is still where compaction read it;
  then the writers, the fences' recoveries and compaction are answered.
- A group the disk refused is acknowledged to nobody: its fences are undone (not durably
  set: the recovery that asked fails, another replica answers it), the next group begins a
  new log (``EntryLogs.roll``), and what of the group stayed in the old one is an orphan at
  most. Deletions in it are not written again (their ledgers come back at a restart, as
  orphans the auditor deletes).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from enum import Enum
from typing import TypeAlias

from hedwig.errors import LedgerError, NoSuchEntryError
from hedwig.ledger.storage import entry_log
from hedwig.ledger.storage.entry_log import (
    DELETE_ENTRY,
    FENCE_ENTRY,
    MAGIC,
    RECORD,
    EntryLogs,
    encode_record,
    log_of,
    place,
)
from hedwig.ledger.storage.index import (
    FENCING,
    NOT_FENCED,
    EntryIndex,
    StoredLedger,
    place_of,
    set_place,
)

log = logging.getLogger(__name__)

# An add or a fence waiting for its group: its entry id (``FENCE_ENTRY`` for a fence), its
# record, and the future of its write.
Waiting: TypeAlias = tuple[int, bytes, asyncio.Future[None]]


class Carry(Enum):
    """What a record no writer waits for is."""

    DELETE = "delete"  # a delete record
    MOVE = "move"  # an entry compaction copies forward
    MOVE_FENCE = "move fence"  # a fence record compaction copies forward


_DELETE, _MOVE_FENCE = Carry.DELETE, Carry.MOVE_FENCE  # read for every record carried


# A record no writer waits for, a deletion or a copy compaction makes: what it is, its ledger
# and entry, where it was (a copied entry: its place; a copied fence: its log; a deletion: 0),
# and the record. A tuple: a retention wave deletes thousands of ledgers a second.
Carried: TypeAlias = tuple[Carry, int, int, int, bytes]


class GroupCommit:
    """What waits for the next group, what is being written, and the flusher writing it."""

    def __init__(self, index: EntryIndex, logs: EntryLogs, *, compact: Callable[[], None]) -> None:
        self._index = index
        self._ledgers = index.ledgers
        self._logs = logs
        # Told to look for a log to compact: at the first group (logs left from before this
        # start), and whenever a group begins a new log (the one closed may be mostly gone).
        self._compact = compact
        self._looked = False
        # Entries and fences waiting for the next group, by ledger (in the order they came).
        self.pending: dict[int, list[Waiting]] = {}
        # The group being written, by ledger, for reads and retries meanwhile.
        self._writing: dict[int, list[Waiting]] = {}
        # Fences asked and not yet on disk.
        self.fencing: dict[int, asyncio.Future[None]] = {}
        self._carried: list[Carried] = []
        self._carried_waiters: list[asyncio.Future[None]] = []  # for copies to be durable
        self._flusher: asyncio.Task[None] | None = None
        self.bytes_written = 0
        self.syncs = 0

    def add(self, ledger_id: int, entry_id: int, record: bytes) -> asyncio.Future[None]:
        """Queue ``record`` (entry ``entry_id`` of the ledger, or its fence) for the next
        group; its future is its write."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiting = self.pending.get(ledger_id)
        if waiting is None:
            self.pending[ledger_id] = waiting = []
        waiting.append((entry_id, record, fut))
        self.kick()
        return fut

    def fence(self, ledger_id: int) -> asyncio.Future[None]:
        """Queue the ledger's fence record, after the entries waiting before it."""
        fut = self.add(ledger_id, FENCE_ENTRY, encode_record(ledger_id, FENCE_ENTRY, -1))
        self.fencing[ledger_id] = fut
        return fut

    def carry(self, records: list[Carried]) -> asyncio.Future[None]:
        """Queue compaction's copies; the future is done once they are durable."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._carried.extend(records)
        self._carried_waiters.append(done)
        self.kick()
        return done

    def deleted(self, ledger_id: int, oldest: int) -> None:
        """The ledger is deleted (gone from the index): what waits for it fails, and a delete
        record naming ``oldest``, the oldest log holding its records, goes with the next
        group. Entries in the group being written land before it, and are not read back."""
        for _, _, fut in self.pending.pop(ledger_id, ()):
            _fail(fut, NoSuchEntryError(f"ledger {ledger_id} was deleted"))
        self.fencing.pop(ledger_id, None)
        record = encode_record(ledger_id, DELETE_ENTRY, oldest)
        self._carried.append((_DELETE, ledger_id, 0, 0, record))
        self.kick()

    def unwritten(
        self, ledger_id: int, entry_id: int, *, newest_first: bool = False
    ) -> tuple[bytes, asyncio.Future[None]] | None:
        """Entry ``entry_id`` of the ledger while it waits for its group or is being
        written: its record and the future of its write. With ``newest_first`` (an add)
        a table whose last entry is older is not searched: a writer adds in order, and a
        duplicate that slips past (a write-back out of order) is written but not placed."""
        for table in (self.pending, self._writing):
            items = table.get(ledger_id)
            if not items or (newest_first and items[-1][0] < entry_id):
                continue
            for e, record, fut in items:
                if e == entry_id:
                    return record, fut
        return None

    def kick(self) -> None:
        # One flusher at a time: whatever arrives while it syncs is picked up by its next round.
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())
        if not self._looked:
            self._looked = True
            self._compact()

    async def _flush_loop(self) -> None:
        loop = asyncio.get_running_loop()
        logs, ledgers = self._logs, self._ledgers
        while self.pending or self._carried:
            group, self._writing, self.pending = self.pending, self.pending, {}
            carried, self._carried = self._carried, []
            waiters, self._carried_waiters = self._carried_waiters, []
            log_id, start, new_log = logs.next_group()
            # Each record's payload position, in the order written: deletions and copies
            # first (see the rules).
            chunks: list[bytes] = [MAGIC] if new_log is not None else []
            at: list[int] = []
            pos = start
            moved: list[Carried] = []
            for item in carried:
                kind, lid, _, _, record = item
                if kind is not _DELETE and lid not in ledgers:
                    continue  # a copy of a ledger deleted since compaction read it
                moved.append(item)
                chunks.append(record)
                at.append(pos + RECORD.size)
                pos += len(record)
            for items in group.values():
                for _, record, _ in items:
                    chunks.append(record)
                    at.append(pos + RECORD.size)
                    pos += len(record)
            data = b"".join(chunks)
            try:
                # Through the module: tests stand a failing disk in for it.
                fd = await loop.run_in_executor(
                    None,
                    entry_log.append_and_sync,
                    logs.fds[logs.current],
                    start if new_log is None else None,
                    new_log,
                    logs.dir_name,
                    data,
                )
            except OSError as exc:
                self._failed(exc, group, waiters)
                continue
            finally:
                self._writing = {}
            began = logs.wrote(log_id, fd, pos)
            self.bytes_written += len(data)
            self.syncs += 1
            self._apply(log_id, group, moved, at)
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)
            if began:
                self._compact()  # the log just closed may be mostly gone already

    def _apply(
        self,
        log_id: int,
        group: dict[int, list[Waiting]],
        moved: list[Carried],
        at: list[int],
    ) -> None:
        """A group is durable: place its entries and fences, answer their writers."""
        index, ledgers, live = self._index, self._ledgers, self._logs.live
        i = 0
        for kind, lid, eid, was, record in moved:
            pos = at[i]
            i += 1
            if kind is _DELETE or lid not in ledgers:
                continue
            lf = index.mutable(lid)
            if kind is _MOVE_FENCE:
                if lf.fence == was:
                    lf.fence = log_id
                    live[was] -= RECORD.size
                    live[log_id] += RECORD.size
            elif place_of(lf, eid) == was:
                set_place(lf, eid, place(log_id, pos, len(record) - RECORD.size))
                live[log_of(was)] -= len(record)
                live[log_id] += len(record)
            index.pack(lid, lf)
        fencing = self.fencing
        for lid, items in group.items():
            gl = index.mutable(lid) if lid in ledgers else None
            for eid, record, fut in items:
                pos = at[i]
                i += 1
                if gl is not None:  # else deleted meanwhile: the delete record follows
                    if eid == FENCE_ENTRY:
                        if gl.fence == FENCING:
                            gl.fence = log_id
                            live[log_id] += RECORD.size
                        if fencing.get(lid) is fut:
                            del fencing[lid]
                    elif place_of(gl, eid) is None:
                        set_place(gl, eid, place(log_id, pos, len(record) - RECORD.size))
                        live[log_id] += len(record)
                if not fut.done():
                    fut.set_result(None)
            if gl is not None:
                index.pack(lid, gl)

    def _failed(
        self, exc: OSError, group: dict[int, list[Waiting]], waiters: list[asyncio.Future[None]]
    ) -> None:
        """A group the disk refused: nothing of it is acknowledged (see the rules). The log
        was cut back to where the group began (``append_and_sync`` tries)."""
        log.error("ledger storage write failed: %s", exc)
        failed = LedgerError(f"storage write failed: {exc}")
        self._logs.roll = True
        for lid, items in group.items():
            lf = self._ledgers.get(lid)
            for eid, _, fut in items:
                if eid == FENCE_ENTRY and isinstance(lf, StoredLedger) and lf.fence == FENCING:
                    lf.fence = NOT_FENCED  # not durably: the recovery that asked fails
                    if self.fencing.get(lid) is fut:
                        del self.fencing[lid]
                _fail(fut, failed)
        for waiter in waiters:
            _fail(waiter, failed)

    async def close(self) -> None:
        """Once every group begun is written."""
        while self._flusher is not None and not self._flusher.done():
            await asyncio.shield(self._flusher)


def _fail(fut: asyncio.Future[None], exc: Exception) -> None:
    if not fut.done():
        fut.set_exception(exc)
        fut.exception()  # retrieved: a waiter cancelled meanwhile is no error
