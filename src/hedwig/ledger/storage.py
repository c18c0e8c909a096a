"""The storage role: ledger entries on a hub's disk (BookKeeper's bookie, in miniature).

Rules this module keeps:

- Every ledger stored here shares one append-only **entry log** (BookKeeper's): a record is
  ``u32 payload_len | u32 crc32 | u64 ledger_id | u64 entry_id | i64 lac | payload``, the CRC
  covering everything after it. Where each entry is, is kept in memory (an int per entry).
  Ledgers had a file each: a claim created a file on every replica, and creating a file costs
  130-480 us of CPU on this project's ext4 (3 us to open one that exists), a third of a
  claim's CPU; each group synced every file it wrote (one journal commit each); and a hub
  owning 100,000 idle topics held a replica of 100,000 files it had to open and close again.
  Now a claim creates nothing, and a group is one write and one ``fdatasync`` however many
  ledgers it holds.
- An entry is acknowledged only after it is on disk: writes are grouped (group commit), written
  and synced on a worker thread so the event loop keeps accepting work; everything that
  arrives meanwhile forms the next group. Until its group is written an entry lives in memory
  only (readable there); nothing of it was acknowledged, so a crash before that loses nothing.
- A log is closed at ``log_bytes`` (64 MiB) and the next one begun; a hub also begins a new
  one at each start. On start every log is scanned in order: a later copy of an entry wins
  (compaction copies entries forward), a torn or corrupt tail of the newest log (a crash
  mid-write) is cut off, nothing after it was acknowledged.
- Fencing is durable: a fence is a record (entry id ``FENCE_ENTRY``, no payload) written and
  synced with the next group before the fence is answered, so a storage node that restarts is
  still fenced; the ledger refuses adds from the moment it is asked, except the recovery
  writer's write-back.
- Deleting a ledger forgets it at once and writes a delete record (entry id
  ``DELETE_ENTRY``, its LAC field naming the oldest log that held the ledger's records), so a
  restart does not bring it back from logs that still hold its entries.
- **Compaction**: a closed log whose live records (entries and fences of ledgers still stored)
  fill less than half of it is read, its live records are copied to the current log, and once
  those are durable it is removed. A delete record is copied only while a log it may shadow
  (from the oldest it names to the one compacted) still exists. (A copy of a deleted ledger's
  entries that survives somewhere, as after a write the disk refused, is an orphan replica:
  the auditor deletes replicas whose ledger metadata is gone.)
- Per-ledger files (``N.log``, ``N.fenced``) from before the entry log are copied into it at
  start, then removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from hedwig.errors import CorruptEntryError, LedgerError, LedgerFencedError, NoSuchEntryError

log = logging.getLogger(__name__)

RECORD = struct.Struct(">IIQQq")  # payload_len, crc, ledger_id, entry_id, lac
_CRC_PART = struct.Struct(">QQq")
MAGIC = b"HWENTLG1"  # the first bytes of every entry log (its format's version)
# The entry id of a fence record: the ledger is fenced (no entry has this id).
FENCE_ENTRY = (1 << 64) - 1
# The entry id of a delete record: the ledger was deleted here.
DELETE_ENTRY = (1 << 64) - 2
ENTRY_LOG_BYTES = 64 << 20  # a log is closed, and the next begun, past this size
# A closed log whose live records fill less than this share of it is compacted.
COMPACT_BELOW = 0.5
_COMPACT_CHUNK = 5000  # records checked between yields to the event loop
_LOG_NAME = re.compile(r"(\d+)\.entrylog")

# Per-ledger files, before the entry log: ``u32 payload_len | u32 crc | u64 entry | i64 lac``.
LEDGER_FILE_RECORD = struct.Struct(">IIQq")
_LEDGER_FILE_CRC_PART = struct.Struct(">Qq")

_NOT_FENCED = -1
_FENCING = -2  # asked; its record is not on disk yet


def _record(ledger_id: int, entry_id: int, lac: int, payload: bytes = b"") -> bytes:
    crc = zlib.crc32(payload, zlib.crc32(_CRC_PART.pack(ledger_id, entry_id, lac)))
    return RECORD.pack(len(payload), crc, ledger_id, entry_id, lac) + payload


class StorageNode(Protocol):
    """What a ledger writer or reader needs from one storage replica."""

    address: str

    async def add_entry(
        self, ledger_id: int, entry_id: int, lac: int, payload: bytes, *, recovery: bool = False
    ) -> None: ...

    async def read_entry(self, ledger_id: int, entry_id: int) -> bytes: ...

    async def read_lac(self, ledger_id: int, *, fence: bool) -> tuple[int, int]:
        """``(lac, last_entry_id)`` known for the ledger; -1 for none. Fences if asked."""
        ...

    def fence_soon(self, ledger_id: int) -> asyncio.Future[tuple[int, int]]:
        """``read_lac(ledger_id, fence=True)`` started now, as a future: a recovery fences
        every replica of its ledger, and a failover is thousands of recoveries, so a replica
        may gather the fences of one turn (``RemoteStorage``) or answer without a task
        (``LocalStorage``)."""
        ...

    async def fenced(self, ledger_id: int) -> bool:
        """Whether this replica has fenced the ledger (a recovery has begun)."""
        ...

    async def write_lacs(self, lacs: Sequence[tuple[int, int]]) -> None:
        """Learn the last-add-confirmed entry of ledgers (ledger id, LAC) whose writer went
        idle; ledgers not stored here are ignored."""
        ...

    async def delete_ledger(self, ledger_id: int) -> None: ...


@dataclass(slots=True)
class _Ledger:
    """A ledger stored here. A hub of a region stores a replica of most of the region's
    ledgers (a million, at a million topics), so it keeps little: each entry's place as one
    int, no table for a ledger of one entry (most of them: a topic published to once), and
    what is waiting or being written in the storage's tables, not here. The commonest of
    all, entry 0 alone, its LAC -1 or 0 and no fence, is kept as one int instead of this
    (``_packed``: 64 bytes less on each replica, three per topic in a 3/3/2 region)."""

    # Where the entries are (``_place``): None for none, the place of ``last_entry`` alone
    # while it is the only one, else a table by entry id. A table of one entry costs 160
    # bytes more than its int, on every replica of most ledgers.
    offsets: int | dict[int, int] | None = None
    last_entry: int = -1
    lac: int = -1
    # _NOT_FENCED, _FENCING, or the log its fence record is in
    fence: int = _NOT_FENCED

    @property
    def fenced(self) -> bool:
        return self.fence != _NOT_FENCED


_LENGTH = (1 << 32) - 1
_POSITION = (1 << 32) - 1


def _place(log_id: int, position: int, length: int) -> int:
    """Where an entry's payload is: its log, its position there and its length, as one int
    (a tuple would cost a hub 64 bytes more per stored entry)."""
    return log_id << 64 | position << 32 | length


def _log_of(place: int) -> int:
    return place >> 64


def _record_bytes(place: int) -> int:
    return RECORD.size + (place & _LENGTH)


def _packed(lf: _Ledger) -> _Ledger | int:
    """``lf`` as an int if it holds entry 0 alone, its LAC is -1 or 0 and it is not fenced:
    the place of the entry, times two, plus one if the LAC is 0. Else ``lf`` itself."""
    offsets = lf.offsets
    if (
        isinstance(offsets, int)
        and lf.last_entry == 0
        and lf.fence == _NOT_FENCED
        and -1 <= lf.lac <= 0
    ):
        return offsets << 1 | (lf.lac + 1)
    return lf


def _unpacked(held: _Ledger | int) -> _Ledger:
    """What ``_packed`` made, as a ``_Ledger`` (a new one: writes to it are not kept)."""
    if isinstance(held, int):
        return _Ledger(held >> 1, 0, (held & 1) - 1)
    return held


def _places(lf: _Ledger) -> list[int]:
    offsets = lf.offsets
    if offsets is None:
        return []
    if isinstance(offsets, int):
        return [offsets]
    return list(offsets.values())


def _place_of(lf: _Ledger | int, entry_id: int) -> int | None:
    """Where entry ``entry_id`` of ``lf`` (or of what ``_packed`` made of it: read without
    making a ``_Ledger`` of it each time) is, or None if it is not stored here."""
    if isinstance(lf, int):
        return lf >> 1 if entry_id == 0 else None
    offsets = lf.offsets
    if offsets is None:
        return None
    if isinstance(offsets, int):
        return offsets if entry_id == lf.last_entry else None
    return offsets.get(entry_id)


def _set_place(lf: _Ledger, entry_id: int, place: int) -> int | None:
    """Record where entry ``entry_id`` is (then the last entry if it is); returns where it
    was before, if it was stored."""
    offsets = lf.offsets
    old: int | None = None
    if offsets is None:
        lf.offsets = place
    elif isinstance(offsets, int):
        if entry_id == lf.last_entry:
            old, lf.offsets = offsets, place
        else:
            lf.offsets = {lf.last_entry: offsets, entry_id: place}
    else:
        old = offsets.get(entry_id)
        offsets[entry_id] = place
    if entry_id > lf.last_entry:
        lf.last_entry = entry_id
    return old


# What a group writes: a record, and what to do once it is durable.
_ENTRY, _FENCE, _DELETE, _MOVE, _MOVE_FENCE = range(5)


@dataclass(slots=True)
class _Scanned:
    """What a scan of one entry log found."""

    records: list[tuple[int, int, int, int, int]]  # ledger, entry, lac, payload pos, length
    end: int  # where the good records end
    size: int  # the file's size


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
        self._dir = str(self.dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log_bytes = log_bytes
        self._ledgers: dict[int, _Ledger | int] = {}  # an int: ``_packed``
        # Entries waiting for the next group, by ledger (in the order they came).
        self._pending: dict[int, list[tuple[int, bytes, asyncio.Future[None]]]] = {}
        # The group being written, by ledger, for reads and retries meanwhile.
        self._writing: dict[int, list[tuple[int, bytes, asyncio.Future[None]]]] = {}
        # Fences asked and not yet on disk.
        self._fencing: dict[int, asyncio.Future[None]] = {}
        # Records no ledger waits for: deletions, and compaction's copies (kind, ledger,
        # entry, where it was, record).
        self._extra: list[tuple[int, int, int, int, bytes]] = []
        self._extra_waiters: list[asyncio.Future[None]] = []  # for copies to be durable
        self._flusher: asyncio.Task[None] | None = None
        self._compactor: asyncio.Task[None] | None = None
        self._kept: set[int] = set()  # logs compaction could not empty (damaged): not tried again
        self.bytes_written = 0
        self.syncs = 0
        self.compactions = 0
        # Entry logs: their descriptors, sizes and live bytes (records of ledgers stored).
        self._fds: dict[int, int] = {}
        self._sizes: dict[int, int] = {}
        self._live: dict[int, int] = {}
        self._roll = False  # the next group begins a new log
        self._log = 0  # the current log, and where it ends
        self._tail = 0
        self._compaction_looked = False  # for logs left from before this start
        self._load()

    # startup ------------------------------------------------------------------------------

    def _load(self) -> None:
        logs = sorted(
            int(m.group(1)) for p in self.dir.iterdir() if (m := _LOG_NAME.fullmatch(p.name))
        )
        newest = logs[-1] if logs else 0
        empty = [log_id for log_id in logs if self._replay(log_id, newest)]
        self._log = newest
        self._begin_log_now()
        self._migrate_ledger_files()
        self._count_live()
        ledgers = self._ledgers
        for lid, lf in ledgers.items():
            ledgers[lid] = _packed(_unpacked(lf))
        for log_id in empty:
            self._remove_log(log_id)  # begun and never written to

    def _replay(self, log_id: int, newest: int) -> bool:
        """Index entry log ``log_id``; whether it holds nothing but its magic."""
        path = self._log_path(log_id)
        fd = os.open(path, os.O_RDWR | os.O_APPEND)
        scanned = _scan_log(os.pread(fd, os.fstat(fd).st_size, 0))
        if scanned.end != scanned.size:
            if log_id == newest:
                log.warning(
                    "entry log %d: dropping %d bytes of torn tail",
                    log_id,
                    scanned.size - scanned.end,
                )
                os.ftruncate(fd, scanned.end)
                os.fsync(fd)
            else:  # a write the disk refused and could not be cut back, or damage
                log.warning(
                    "entry log %d: torn or corrupt record at byte %d; the %d bytes after it "
                    "are not read (their replicas on other hubs are)",
                    log_id,
                    scanned.end,
                    scanned.size - scanned.end,
                )
        self._fds[log_id] = fd
        self._sizes[log_id] = max(scanned.end, len(MAGIC))
        for lid, eid, lac, pos, plen in scanned.records:
            if eid == DELETE_ENTRY:
                self._ledgers.pop(lid, None)
                continue
            lf = self._mutable(lid)
            if eid == FENCE_ENTRY:
                lf.fence = log_id
                continue
            _set_place(lf, eid, _place(log_id, pos, plen))
            if lac > lf.lac:
                lf.lac = lac
        return scanned.size == len(MAGIC)

    def _count_live(self) -> None:
        live = self._live
        for log_id in self._sizes:
            live[log_id] = 0
        for held in self._ledgers.values():
            lf = _unpacked(held)
            for place in _places(lf):
                live[_log_of(place)] += _record_bytes(place)
            if lf.fence >= 0:
                live[lf.fence] += RECORD.size

    def _migrate_ledger_files(self) -> None:
        """Copy per-ledger files (and fence markers) from before the entry log into the
        current log, a ledger at a time (rolling over as a group would), sync it, then remove
        them. A crash in between copies them again: the later copy of an entry wins, and
        both are the same."""
        found: dict[int, list[Path]] = {}
        for p in self.dir.iterdir():
            if p.suffix in (".log", ".fenced") and p.stem.isdigit():
                found.setdefault(int(p.stem), []).append(p)
        if not found:
            return
        for lid in sorted(found):
            fenced = any(p.suffix == ".fenced" for p in found[lid])
            data = b""
            with contextlib.suppress(FileNotFoundError):
                data = (self.dir / f"{lid}.log").read_bytes()
            lf = self._mutable(lid)
            if self._tail >= self.log_bytes:
                self._begin_log_now()
            chunks = []
            pos = self._tail
            for eid, lac, payload, fence in _scan_ledger_file(lid, data):
                if fence:
                    fenced = True
                    continue
                chunks.append(_record(lid, eid, lac, payload))
                _set_place(lf, eid, _place(self._log, pos + RECORD.size, len(payload)))
                lf.lac = max(lf.lac, lac)
                pos += len(chunks[-1])
            if fenced:
                chunks.append(_record(lid, FENCE_ENTRY, -1))
                lf.fence = self._log
                pos += RECORD.size
            _write_all(self._fds[self._log], b"".join(chunks))
            self._tail = self._sizes[self._log] = pos
        os.fdatasync(self._fds[self._log])
        for paths in found.values():
            for p in paths:
                p.unlink(missing_ok=True)
        _fsync_dir(self.dir)
        log.info("copied %d per-ledger files into the entry log", len(found))

    def _begin_log_now(self) -> None:
        """Close the current log (synced) and begin the next, on this thread: at start."""
        current = self._fds.get(self._log)
        if current is not None:
            os.fdatasync(current)
        self._log += 1
        fd = os.open(
            self._log_path(self._log), os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644
        )
        os.write(fd, MAGIC)
        os.fdatasync(fd)
        _fsync_dir(self.dir)
        self._fds[self._log] = fd
        self._sizes[self._log] = self._tail = len(MAGIC)
        self._live[self._log] = 0

    def ledgers(self) -> list[int]:
        return sorted(self._ledgers)

    def _mutable(self, ledger_id: int) -> _Ledger:
        """Ledger ``ledger_id`` to change (made if it is not stored; unpacked if it was
        packed: whoever changes it packs it again where it may fit)."""
        held = self._ledgers.get(ledger_id)
        if held is None or isinstance(held, int):
            held = self._ledgers[ledger_id] = _Ledger() if held is None else _unpacked(held)
        return held

    def _pack(self, ledger_id: int, lf: _Ledger) -> None:
        if self._ledgers.get(ledger_id) is lf:
            self._ledgers[ledger_id] = _packed(lf)

    def logs(self) -> list[int]:
        """The entry logs on disk, oldest first."""
        return sorted(self._sizes)

    def _log_path(self, log_id: int) -> str:
        # A string, not a ``Path``: pathlib interns every part of every path it parses.
        return f"{self._dir}/{log_id:012d}.entrylog"

    # StorageNode --------------------------------------------------------------------------

    async def add_entry(
        self, ledger_id: int, entry_id: int, lac: int, payload: bytes, *, recovery: bool = False
    ) -> None:
        held = self._ledgers.get(ledger_id)
        if held is not None:
            lf = _unpacked(held)
            if lf.fence != _NOT_FENCED and not recovery:
                raise LedgerFencedError(f"ledger {ledger_id} is fenced")
            if _place_of(lf, entry_id) is not None:
                return  # a write-back or retry of an entry we hold already
        earlier = self._unwritten(ledger_id, entry_id, newest_first=True)
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
            lf = _unpacked(held)
            if lf.fence != _NOT_FENCED:
                refused: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                refused.set_exception(LedgerFencedError(f"ledger {ledger_id} is fenced"))
                return refused
            if _place_of(lf, entry_id) is not None:
                return None
        if self._unwritten(ledger_id, entry_id, newest_first=True) is not None:
            return None
        return self._queue_add(ledger_id, entry_id, lac, payload)

    def _queue_add(
        self, ledger_id: int, entry_id: int, lac: int, payload: bytes
    ) -> asyncio.Future[None]:
        """The entry, checked, waiting for the flusher's next group: its future is its write."""
        lf = self._mutable(ledger_id)
        if lac > lf.lac:
            lf.lac = lac
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiting = self._pending.get(ledger_id)
        if waiting is None:
            self._pending[ledger_id] = waiting = []
        waiting.append((entry_id, _record(ledger_id, entry_id, lac, payload), fut))
        self._kick()
        return fut

    def _unwritten(
        self, ledger_id: int, entry_id: int, *, newest_first: bool = False
    ) -> tuple[bytes, asyncio.Future[None]] | None:
        """Entry ``entry_id`` of the ledger while it waits for its group or is being
        written: its record and the future of its write. With ``newest_first`` (an add)
        a table whose last entry is older is not searched: a writer adds in order, and a
        duplicate that slips past (a write-back out of order) is written but not placed."""
        for table in (self._pending, self._writing):
            items = table.get(ledger_id)
            if not items or (newest_first and items[-1][0] < entry_id):
                continue
            for e, record, fut in items:
                if e == entry_id:
                    return record, fut
        return None

    async def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        held = self._ledgers.get(ledger_id)
        if held is None:
            raise NoSuchEntryError(f"ledger {ledger_id} is not stored here")
        loc = _place_of(held, entry_id)
        if loc is None:
            unwritten = self._unwritten(ledger_id, entry_id)
            if unwritten is None:
                raise NoSuchEntryError(f"ledger {ledger_id} entry {entry_id} is not stored here")
            return unwritten[0][RECORD.size :]
        plen = loc & _LENGTH
        raw = os.pread(
            self._fds[loc >> 64], RECORD.size + plen, (loc >> 32 & _POSITION) - RECORD.size
        )
        got_len, crc, lid, eid, lac = RECORD.unpack_from(raw)
        body = raw[RECORD.size :]
        if (
            got_len != plen
            or lid != ledger_id
            or eid != entry_id
            or zlib.crc32(body, zlib.crc32(_CRC_PART.pack(lid, eid, lac))) != crc
        ):
            raise CorruptEntryError(f"ledger {ledger_id} entry {entry_id} failed its checksum")
        return body

    async def read_lac(self, ledger_id: int, *, fence: bool) -> tuple[int, int]:
        if not fence:
            held = self._ledgers.get(ledger_id)
            if held is None:
                return -1, -1
            if isinstance(held, int):
                return (held & 1) - 1, 0  # as ``_unpacked`` reads it
            return held.lac, held.last_entry
        return await self.fence_soon(ledger_id)

    def fence_soon(self, ledger_id: int) -> asyncio.Future[tuple[int, int]]:
        """``read_lac(ledger_id, fence=True)`` as a future, started now: a recovery fences
        this hub's own replica with the others without a task for it (one per take-over)."""
        lf = self._mutable(ledger_id)
        loop = asyncio.get_running_loop()
        if lf.fence == _NOT_FENCED:
            # Refused from now on, answered once the record is on disk: the flusher writes
            # it with the next group, after the entries waiting before it.
            lf.fence = _FENCING
            fut: asyncio.Future[None] = loop.create_future()
            self._fencing[ledger_id] = fut
            waiting = self._pending.get(ledger_id)
            if waiting is None:
                self._pending[ledger_id] = waiting = []
            waiting.append((FENCE_ENTRY, _record(ledger_id, FENCE_ENTRY, -1), fut))
            self._kick()
        out: asyncio.Future[tuple[int, int]] = loop.create_future()
        fencing = self._fencing.get(ledger_id)
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
        # In memory only: a LAC is never more than the writer confirmed, so forgetting it (a
        # restart) only makes a later recovery write the ledger's end back, as it did before
        # replicas were told. Unknown ledgers are not created: a notice can arrive after a
        # ledger was deleted, and would bring it back as an empty replica.
        ledgers = self._ledgers
        for ledger_id, lac in lacs:
            held = ledgers.get(ledger_id)
            if held is None:
                continue
            if isinstance(held, int):
                if lac <= (held & 1) - 1:
                    continue
                if lac == 0:
                    ledgers[ledger_id] = held | 1
                    continue
                held = self._mutable(ledger_id)
            if lac > held.lac:
                held.lac = lac

    def is_fenced(self, ledger_id: int) -> bool:
        held = self._ledgers.get(ledger_id)
        return isinstance(held, _Ledger) and held.fence != _NOT_FENCED

    async def fenced(self, ledger_id: int) -> bool:
        return self.is_fenced(ledger_id)

    async def delete_ledger(self, ledger_id: int) -> None:
        held = self._ledgers.pop(ledger_id, None)
        if held is None:
            return
        lf = _unpacked(held)
        for _, _, fut in self._pending.pop(ledger_id, ()):
            _fail(fut, NoSuchEntryError(f"ledger {ledger_id} was deleted"))
        self._fencing.pop(ledger_id, None)
        live = self._live
        logs = []
        for place in _places(lf):
            logs.append(_log_of(place))
            live[logs[-1]] -= _record_bytes(place)
        if lf.fence >= 0:
            live[lf.fence] -= RECORD.size
            logs.append(lf.fence)
        # Entries in the group being written land after this, and are not read back: the
        # record goes with the next group, after them.
        oldest = min(logs, default=self._log)
        self._extra.append((_DELETE, ledger_id, 0, 0, _record(ledger_id, DELETE_ENTRY, oldest)))
        self._kick()
        self._maybe_compact()

    # group commit -------------------------------------------------------------------------

    def _kick(self) -> None:
        # One flusher at a time: whatever arrives while it syncs is picked up by its next round.
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())
        if not self._compaction_looked:
            self._compaction_looked = True
            self._maybe_compact()

    async def _flush_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending or self._extra:
            group, self._writing, self._pending = self._pending, self._pending, {}
            extra, self._extra = self._extra, []
            waiters, self._extra_waiters = self._extra_waiters, []
            log_id, start, new_log = self._log, self._tail, None
            if self._roll or start >= self.log_bytes:
                log_id, start = self._log + 1, len(MAGIC)
                new_log = self._log_path(log_id)
            # Each record's payload position, in the order written: deletions and copies
            # first, so an entry added after its ledger was deleted (a late write that makes
            # it again) follows the delete record, in the log as in memory.
            chunks: list[bytes] = [MAGIC] if new_log is not None else []
            at: list[int] = []
            pos = start
            moved: list[tuple[int, int, int, int, bytes]] = []
            for item in extra:
                kind, lid, _, _, record = item
                if kind != _DELETE and lid not in self._ledgers:
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
                fd = await loop.run_in_executor(
                    None,
                    _append_and_sync,
                    self._fds[self._log],
                    start if new_log is None else None,
                    new_log,
                    self._dir,
                    data,
                )
            except OSError as exc:
                self._failed(exc, group, waiters)
                continue
            finally:
                self._writing = {}
            closed = new_log is not None
            if closed:
                self._fds[log_id] = fd
                self._sizes[log_id] = len(MAGIC)
                self._live[log_id] = 0
                self._log, self._roll = log_id, False
            self._tail = self._sizes[log_id] = pos
            self.bytes_written += len(data)
            self.syncs += 1
            self._apply(log_id, group, moved, at)
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)
            if closed:
                self._maybe_compact()  # the log just closed may be mostly gone already

    def _apply(
        self,
        log_id: int,
        group: dict[int, list[tuple[int, bytes, asyncio.Future[None]]]],
        moved: list[tuple[int, int, int, int, bytes]],
        at: list[int],
    ) -> None:
        """A group is durable: place its entries and fences, answer their writers."""
        ledgers, live = self._ledgers, self._live
        i = 0
        for kind, lid, eid, was, record in moved:
            pos = at[i]
            i += 1
            if kind == _DELETE or lid not in ledgers:
                continue
            lf = self._mutable(lid)
            if kind == _MOVE_FENCE:
                if lf.fence == was:
                    lf.fence = log_id
                    live[was] -= RECORD.size
                    live[log_id] += RECORD.size
            elif _place_of(lf, eid) == was:
                _set_place(lf, eid, _place(log_id, pos, len(record) - RECORD.size))
                live[_log_of(was)] -= len(record)
                live[log_id] += len(record)
            self._pack(lid, lf)
        for lid, items in group.items():
            gl = self._mutable(lid) if lid in ledgers else None
            for eid, record, fut in items:
                pos = at[i]
                i += 1
                if gl is not None:  # else deleted meanwhile: the delete record follows
                    if eid == FENCE_ENTRY:
                        if gl.fence == _FENCING:
                            gl.fence = log_id
                            live[log_id] += RECORD.size
                        if self._fencing.get(lid) is fut:
                            del self._fencing[lid]
                    elif _place_of(gl, eid) is None:
                        _set_place(gl, eid, _place(log_id, pos, len(record) - RECORD.size))
                        live[log_id] += len(record)
                if not fut.done():
                    fut.set_result(None)
            if gl is not None:
                self._pack(lid, gl)

    def _failed(
        self,
        exc: OSError,
        group: dict[int, list[tuple[int, bytes, asyncio.Future[None]]]],
        waiters: list[asyncio.Future[None]],
    ) -> None:
        """A group the disk refused: nothing of it is acknowledged. The log was cut back to
        where the group began (``_append_and_sync`` tries), and the next group begins a new
        log all the same: a log whose sync failed is not trusted to be written again (Linux
        may have dropped the failed pages), and whatever of the group stayed in it is an
        orphan at most. Deletions in the group are not written again (their ledgers come
        back at a restart, as orphans the auditor deletes)."""
        log.error("ledger storage write failed: %s", exc)
        failed = LedgerError(f"storage write failed: {exc}")
        self._roll = True
        for lid, items in group.items():
            lf = self._ledgers.get(lid)
            for eid, _, fut in items:
                if eid == FENCE_ENTRY and isinstance(lf, _Ledger) and lf.fence == _FENCING:
                    lf.fence = _NOT_FENCED  # not durably: the recovery that asked fails
                    if self._fencing.get(lid) is fut:
                        del self._fencing[lid]
                _fail(fut, failed)
        for waiter in waiters:
            _fail(waiter, failed)

    # compaction ---------------------------------------------------------------------------

    def _maybe_compact(self) -> None:
        """Compact the closed log with the smallest share of live records, if it is below
        ``COMPACT_BELOW`` (one at a time)."""
        if self._compactor is not None and not self._compactor.done():
            return
        best, share = None, COMPACT_BELOW
        for log_id, size in self._sizes.items():
            if log_id == self._log or log_id in self._kept:
                continue
            ratio = self._live[log_id] / max(1, size - len(MAGIC))
            if ratio < share:
                best, share = log_id, ratio
        if best is not None:
            self._compactor = asyncio.get_running_loop().create_task(self._compact(best))

    async def _compact(self, log_id: int) -> None:
        loop = asyncio.get_running_loop()
        fd = self._fds[log_id]
        try:
            data, scanned = await loop.run_in_executor(None, _read_and_scan, fd)
            copies: list[tuple[int, int, int, int, bytes]] = []
            ledgers = self._ledgers
            for n, (lid, eid, lac, pos, plen) in enumerate(scanned.records):
                if n % _COMPACT_CHUNK == _COMPACT_CHUNK - 1:
                    await asyncio.sleep(0)
                held = ledgers.get(lid)
                lf = None if held is None else _unpacked(held)
                if eid == DELETE_ENTRY:
                    if lf is None and any(lac <= i < log_id for i in self._sizes):
                        copies.append((_DELETE, lid, eid, 0, _record(lid, eid, lac)))
                elif lf is None:
                    continue
                elif eid == FENCE_ENTRY:
                    if lf.fence == log_id:
                        copies.append((_MOVE_FENCE, lid, eid, log_id, _record(lid, eid, lac)))
                elif _place_of(lf, eid) == (here := _place(log_id, pos, plen)):
                    record = data[pos - RECORD.size : pos + plen]
                    copies.append((_MOVE, lid, eid, here, record))
            if copies:
                done: asyncio.Future[None] = loop.create_future()
                self._extra.extend(copies)
                self._extra_waiters.append(done)
                self._kick()
                await done
            if self._live[log_id] > 0:  # entries this scan could not read (a damaged log)
                self._kept.add(log_id)
                log.warning(
                    "entry log %d: %d live bytes left after compaction; kept",
                    log_id,
                    self._live[log_id],
                )
                return
            self._remove_log(log_id)
            self.compactions += 1
            log.info("entry log %d compacted: %d records copied", log_id, len(copies))
        except (OSError, LedgerError) as exc:
            log.warning("entry log %d: compaction failed, tried again later: %s", log_id, exc)
            return
        self._compactor = None  # this one is done: the next may begin
        self._maybe_compact()

    def _remove_log(self, log_id: int) -> None:
        fd = self._fds.pop(log_id)
        os.close(fd)
        del self._sizes[log_id], self._live[log_id]
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._log_path(log_id))

    async def close(self) -> None:
        if self._compactor is not None and not self._compactor.done():
            self._compactor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._compactor
        while self._flusher is not None and not self._flusher.done():
            await asyncio.shield(self._flusher)
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._ledgers.clear()


def _fail(fut: asyncio.Future[None], exc: Exception) -> None:
    if not fut.done():
        fut.set_exception(exc)
        fut.exception()  # retrieved: a waiter cancelled meanwhile is no error


def _scan_log(data: bytes) -> _Scanned:
    """The records of an entry log, up to the first torn or corrupt one."""
    records: list[tuple[int, int, int, int, int]] = []
    if not data.startswith(MAGIC):
        return _Scanned(records, 0, len(data))
    pos, size, head = len(MAGIC), len(data), RECORD.size
    unpack, crc32, part = RECORD.unpack_from, zlib.crc32, _CRC_PART.pack
    while pos + head <= size:
        plen, crc, lid, eid, lac = unpack(data, pos)
        end = pos + head + plen
        if end > size or crc32(data[pos + head : end], crc32(part(lid, eid, lac))) != crc:
            break
        records.append((lid, eid, lac, pos + head, plen))
        pos = end
    return _Scanned(records, pos, size)


def _read_and_scan(fd: int) -> tuple[bytes, _Scanned]:
    data = os.pread(fd, os.fstat(fd).st_size, 0)
    return data, _scan_log(data)


def _scan_ledger_file(lid: int, data: bytes) -> list[tuple[int, int, bytes, bool]]:
    """The good records of a per-ledger file from before the entry log: (entry, lac,
    payload, is a fence record)."""
    out: list[tuple[int, int, bytes, bool]] = []
    pos = 0
    head = LEDGER_FILE_RECORD.size
    while pos + head <= len(data):
        plen, crc, eid, lac = LEDGER_FILE_RECORD.unpack_from(data, pos)
        end = pos + head + plen
        body = data[pos + head : end]
        if (
            end > len(data)
            or zlib.crc32(body, zlib.crc32(_LEDGER_FILE_CRC_PART.pack(eid, lac))) != crc
        ):
            log.warning("ledger file %d: torn or corrupt record at byte %d, cut there", lid, pos)
            break
        out.append((eid, lac, body, eid == FENCE_ENTRY))
        pos = end
    return out


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _append_and_sync(
    fd: int, start: int | None, new_log: str | None, directory: str, data: bytes
) -> int:
    """Append a group to the current log (``fd``, which ends at ``start``) and ``fdatasync``
    it; or, with ``new_log``, create that log, write the group there (``data`` begins with
    the log's magic), and sync it and the directory. Returns the log's descriptor. On a
    failure the current log is cut back to ``start`` if it can be, the new one removed."""
    if new_log is not None:
        new_fd = os.open(new_log, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        try:
            _write_all(new_fd, data)
            os.fdatasync(new_fd)
            _fsync_dir(directory)
        except OSError:
            os.close(new_fd)
            with contextlib.suppress(OSError):
                os.unlink(new_log)
            raise
        return new_fd
    assert start is not None
    try:
        _write_all(fd, data)
        os.fdatasync(fd)
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, start)
        raise
    return fd


def _fsync_dir(path: str | os.PathLike[str]) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
