"""The storage role on this hub's disk: what its own writers and other hubs ask of the
replicas it stores (a ``StorageNode``), over one component each (BookKeeper's bookie and its
ledger storage): the entry log (``entry_log``), the index of where each entry is
(``index``), group commit (``group_commit``) and compaction (``compaction``).

Rules this module keeps:

- An entry is acknowledged only once its group is on disk; until then it is read from memory.
- An add of an entry held already (a recovery's write-back, a retry) is not written again; a
  retry of one still waiting for its group is answered when that one is durable.
- Fencing is durable: a fence is a record written and synced with the next group before the
  fence is answered, so a storage node that restarts is still fenced; the ledger refuses adds
  from the moment it is asked, except the recovery writer's write-back. A fence asked again
  is answered with the first (the same end), once that one is on disk.
- Deleting a ledger forgets it at once and writes a delete record (naming the oldest log that
  held the ledger's records), so a restart does not bring it back from logs that still hold
  its entries; compaction may then have a log to remove.
- A LAC a writer tells about its idle ledger is kept in memory only: it is never more than
  the writer confirmed, so forgetting it (a restart) only makes a later recovery write the
  ledger's end back, as it did before replicas were told. A notice for a ledger not stored
  here is ignored: it can arrive after the ledger was deleted, and would bring it back as an
  empty replica.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path

from hedwig.errors import LedgerFencedError, NoSuchEntryError
from hedwig.ledger.storage.compaction import Compactor
from hedwig.ledger.storage.entry_log import (
    ENTRY_LOG_BYTES,
    MAGIC,
    RECORD,
    EntryLogs,
    encode_record,
    log_of,
    record_bytes,
)
from hedwig.ledger.storage.group_commit import GroupCommit
from hedwig.ledger.storage.index import (
    FENCING,
    NOT_FENCED,
    EntryIndex,
    place_of,
    places,
    unpacked,
)


class LocalStorage:
    """The ledger replicas stored on this hub's disk."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        address: str = "local",
        *,
        log_bytes: int = ENTRY_LOG_BYTES,
    ) -> None:
        self.address = address
        self.dir = Path(data_dir) / "ledgers"
        self._index = EntryIndex()
        self._ledgers = self._index.ledgers  # read on every add and read
        self._logs = EntryLogs(self.dir, log_bytes)
        self._commit = GroupCommit(self._index, self._logs, compact=self._compact_soon)
        self.compaction = Compactor(self._index, self._logs, self._commit)
        self._load()

    def _load(self) -> None:
        """Index every entry log, oldest first, and begin a new one."""
        logs = self._logs
        found = logs.found()
        newest = found[-1] if found else 0
        empty = []
        for log_id in found:
            scanned = logs.replay(log_id, newest)
            self._index.replay(log_id, scanned.records)
            if scanned.size == len(MAGIC):
                empty.append(log_id)
        logs.current = newest
        logs.begin_now()
        self._index.replayed(logs.live)
        for log_id in empty:
            logs.remove(log_id)  # begun and never written to

    def _compact_soon(self) -> None:
        self.compaction.maybe_compact()

    @property
    def log_bytes(self) -> int:
        return self._logs.log_bytes

    @property
    def bytes_written(self) -> int:
        return self._commit.bytes_written

    @property
    def syncs(self) -> int:
        return self._commit.syncs

    @property
    def compactions(self) -> int:
        return self.compaction.compactions

    def ledgers(self) -> list[int]:
        return sorted(self._ledgers)

    def logs(self) -> list[int]:
        """The entry logs on disk, oldest first."""
        return sorted(self._logs.sizes)

    # StorageNode --------------------------------------------------------------------------

    async def add_entry(
        self, ledger_id: int, entry_id: int, lac: int, payload: bytes, *, recovery: bool = False
    ) -> None:
        held = self._ledgers.get(ledger_id)
        if held is not None:
            lf = unpacked(held)
            if lf.fence != NOT_FENCED and not recovery:
                raise LedgerFencedError(f"ledger {ledger_id} is fenced")
            if place_of(lf, entry_id) is not None:
                return  # a write-back or retry of an entry we hold already
        earlier = self._commit.unwritten(ledger_id, entry_id, newest_first=True)
        if earlier is not None:
            await asyncio.shield(earlier[1])  # a retry of one still being made durable
            return
        await self._queue_add(ledger_id, entry_id, lac, payload)

    def add_entry_soon(
        self, ledger_id: int, entry_id: int, lac: int, payload: bytes
    ) -> asyncio.Future[None] | None:
        """``add_entry`` (a writer's, not a recovery's) as a future, started now: a writer
        adds to this hub's own replica without a task for it (one per entry). ``None``: the
        entry is a retry or held already, for ``add_entry`` to settle."""
        held = self._ledgers.get(ledger_id)
        if held is not None:
            lf = unpacked(held)
            if lf.fence != NOT_FENCED:
                refused: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                refused.set_exception(LedgerFencedError(f"ledger {ledger_id} is fenced"))
                return refused
            if place_of(lf, entry_id) is not None:
                return None
        if self._commit.unwritten(ledger_id, entry_id, newest_first=True) is not None:
            return None
        return self._queue_add(ledger_id, entry_id, lac, payload)

    def _queue_add(
        self, ledger_id: int, entry_id: int, lac: int, payload: bytes
    ) -> asyncio.Future[None]:
        """The entry, checked, waiting for the flusher's next group: its future is its write."""
        lf = self._index.mutable(ledger_id)
        if lac > lf.lac:
            lf.lac = lac
        return self._commit.add(
            ledger_id, entry_id, encode_record(ledger_id, entry_id, lac, payload)
        )

    async def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        held = self._ledgers.get(ledger_id)
        if held is None:
            raise NoSuchEntryError(f"ledger {ledger_id} is not stored here")
        where = place_of(held, entry_id)
        if where is None:
            unwritten = self._commit.unwritten(ledger_id, entry_id)
            if unwritten is None:
                raise NoSuchEntryError(f"ledger {ledger_id} entry {entry_id} is not stored here")
            return unwritten[0][RECORD.size :]
        return self._logs.read(where, ledger_id, entry_id)

    async def read_lac(self, ledger_id: int, *, fence: bool) -> tuple[int, int]:
        if not fence:
            return self._index.lac(ledger_id)
        return await self.fence_soon(ledger_id)

    def fence_soon(self, ledger_id: int) -> asyncio.Future[tuple[int, int]]:
        """``read_lac(ledger_id, fence=True)`` as a future, started now: a recovery fences
        this hub's own replica with the others without a task for it (one per take-over)."""
        lf = self._index.mutable(ledger_id)
        if lf.fence == NOT_FENCED:
            # Refused from now on, answered once the record is on disk: the flusher writes
            # it with the next group, after the entries waiting before it.
            lf.fence = FENCING
            self._commit.fence(ledger_id)
        out: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()
        fencing = self._commit.fencing.get(ledger_id)
        if fencing is None:
            out.set_result((lf.lac, lf.last_entry))
            return out

        def fenced(done: asyncio.Future[None]) -> None:
            # Entries that came after the fence were refused; those before it are on disk.
            # (The fence's own future is shared: a caller giving up cancels only its own.)
            if out.done():
                return
            if done.cancelled():
                out.cancel()
            elif (exc := done.exception()) is not None:
                out.set_exception(exc)
            else:
                out.set_result((lf.lac, lf.last_entry))

        fencing.add_done_callback(fenced)
        return out

    async def write_lacs(self, lacs: Sequence[tuple[int, int]]) -> None:
        self._index.learn_lacs(lacs)

    def is_fenced(self, ledger_id: int) -> bool:
        return self._index.is_fenced(ledger_id)

    async def fenced(self, ledger_id: int) -> bool:
        return self.is_fenced(ledger_id)

    async def delete_ledger(self, ledger_id: int) -> None:
        held = self._ledgers.pop(ledger_id, None)
        if held is None:
            return
        lf = unpacked(held)
        live = self._logs.live
        logs = []
        for where in places(lf):
            logs.append(log_of(where))
            live[logs[-1]] -= record_bytes(where)
        if lf.fence >= 0:
            live[lf.fence] -= RECORD.size
            logs.append(lf.fence)
        self._commit.deleted(ledger_id, min(logs, default=self._logs.current))
        self.compaction.maybe_compact()

    async def close(self) -> None:
        await self.compaction.close()
        await self._commit.close()
        self._logs.close()
        self._ledgers.clear()
