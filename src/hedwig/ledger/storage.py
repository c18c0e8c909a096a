"""The storage role: ledger entries on a hub's disk (BookKeeper's bookie, in miniature).

Rules this module keeps:

- An entry is acknowledged only after it is on disk: writes are grouped and made durable with
  one ``fdatasync`` per dirty ledger file per group (group commit), run on a worker thread so
  the event loop keeps accepting work while the disk flushes. Everything that arrives during a
  flush forms the next group. A group that wrote to many ledger files (many topics active at
  once, each a message now and then) is made durable with one ``syncfs`` of the data
  directory's file system instead: each ``fdatasync`` is a journal commit of its own, so 300
  files took 50-60 ms where one ``syncfs`` takes 2-4 ms (measured on this project's ext4),
  and a hub with thousands of active topics spent its groups syncing. ``syncfs`` reports the
  file system's write-back errors since the descriptor it is given was opened (Linux 5.8 on),
  so that descriptor is opened once, when the storage starts.
- A new ledger's file is created by that worker too, and the directory is synced once per
  group however many files it created (a claim wave creates a ledger per topic: creating and
  syncing each on the event loop took a fifth of a hub's time, and stalled everything else).
  Until its first group is written a ledger lives in memory only; nothing of it was
  acknowledged, so a crash before that loses nothing.
- At most ``MAX_OPEN_FILES`` ledger files are open at once, the most recently used: a hub that
  owns 100,000 idle topics holds a replica of 100,000 ledgers or more, and a descriptor each
  ran into the process's limit (and costs the kernel memory for files nobody writes). A file
  closed that way is opened again, on the event loop (no sync: it exists), when a group
  writes to it or a read needs it; never while the flushing thread is writing it.
- Each ledger is one append-only file of records
  ``u32 payload_len | u32 crc32 | u64 entry_id | i64 lac | payload``; the CRC covers entry id,
  LAC and payload. On start every file is scanned; a torn or corrupt tail (a crash mid-write) is
  cut off at the last good record. Nothing after it was ever acknowledged.
- Fencing is durable: a fence is a record in the ledger's own file (entry id ``FENCE_ENTRY``,
  no payload), written and synced with the next group before the fence is answered, so a
  storage node that restarts is still fenced; the ledger refuses adds from the moment it is
  asked. A fenced ledger refuses every add except the recovery writer's write-back. (Fences
  were marker files beside the ledgers: creating a file cost 130-480 us of CPU on this
  project's ext4, and a failover fenced a ledger per topic taken over on every replica.
  Markers from before are still read.)
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import resource
import struct
import sys
import zlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, cast

from hedwig.errors import CorruptEntryError, LedgerError, LedgerFencedError, NoSuchEntryError

log = logging.getLogger(__name__)

# A group that wrote to at least this many ledger files is synced with one ``syncfs``.
SYNCFS_FROM_FILES = 8


def _load_syncfs() -> Callable[[int], int] | None:
    """libc's ``syncfs`` (Linux), or ``None`` where there is none: then every file is synced."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.syncfs
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int]
    call.restype = ctypes.c_int
    return cast("Callable[[int], int]", call)


_syncfs = _load_syncfs()


def _syncs_file_system(files: int) -> bool:
    """Whether a group that wrote to ``files`` ledger files is synced by one ``syncfs``."""
    return _syncfs is not None and files >= SYNCFS_FROM_FILES


RECORD = struct.Struct(">IIQq")  # payload_len, crc, entry_id, lac
_CRC_PART = struct.Struct(">Qq")
# The entry id of a fence record: the ledger is fenced (no entry has this id).
FENCE_ENTRY = (1 << 64) - 1
_FENCE_RECORD = RECORD.pack(
    0, zlib.crc32(b"", zlib.crc32(_CRC_PART.pack(FENCE_ENTRY, -1))), FENCE_ENTRY, -1
)
DELETED = -2  # the descriptor of a deleted ledger's file
CLOSED = -3  # the file exists, closed to keep the open files bounded
# Ledger files open at once, at most (least recently used closed first); and at most half of
# the process's descriptor limit, the rest being for connections.
MAX_OPEN_FILES = 4096


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

    async def fenced(self, ledger_id: int) -> bool:
        """Whether this replica has fenced the ledger (a recovery has begun)."""
        ...

    async def write_lacs(self, lacs: Sequence[tuple[int, int]]) -> None:
        """Learn the last-add-confirmed entry of ledgers (ledger id, LAC) whose writer went
        idle; ledgers not stored here are ignored."""
        ...

    async def delete_ledger(self, ledger_id: int) -> None: ...


@dataclass(slots=True)
class _LedgerFile:
    """A ledger stored here. A hub of a region stores a replica of most of the region's
    ledgers (a million, at a million topics), so it keeps little: no path (made from the id
    when the file is opened), each entry's place as one int, no table for a ledger of one
    entry (most of them: a topic published to once), no empty pending list."""

    ledger_id: int
    fd: int = -1  # -1: not created on disk yet (its first group is under way)
    size: int = 0
    # Where the entries are (``_place``: position << 32 | length): None for none, the place of
    # ``last_entry`` alone while it is the only one, else a table by entry id. A table of one
    # entry costs 160 bytes more than its int, on every replica of most ledgers.
    offsets: int | dict[int, int] | None = None
    last_entry: int = -1
    lac: int = -1
    fenced: bool = False
    # Entries waiting for the next group (None: none)
    pending: list[tuple[int, bytes, asyncio.Future[None]]] | None = None
    # The group being written (entry id, record), for reads meanwhile; None between groups
    # (an empty table would stay allocated on every stored ledger).
    writing: list[tuple[int, bytes]] | None = None
    # Set while the fence record is being written; fencing answers once it is done.
    fencing: asyncio.Future[None] | None = None


_LENGTH = (1 << 32) - 1


def _place(position: int, length: int) -> int:
    """Where an entry's payload is in its file, as one int (a tuple would cost a hub 64 bytes
    more per stored entry)."""
    return position << 32 | length


def _place_of(lf: _LedgerFile, entry_id: int) -> int | None:
    """Where entry ``entry_id`` of ``lf`` is, or None if it is not stored here."""
    offsets = lf.offsets
    if offsets is None:
        return None
    if isinstance(offsets, int):
        return offsets if entry_id == lf.last_entry else None
    return offsets.get(entry_id)


def _add_place(lf: _LedgerFile, entry_id: int, place: int) -> None:
    """Record where entry ``entry_id`` is, then make it the last entry if it is."""
    offsets = lf.offsets
    if offsets is None:
        lf.offsets = place
    elif isinstance(offsets, int):
        lf.offsets = {lf.last_entry: offsets, entry_id: place}
    else:
        offsets[entry_id] = place
    if entry_id > lf.last_entry:
        lf.last_entry = entry_id


class LocalStorage:
    """The ledger replicas stored on this hub's disk."""

    def __init__(self, data_dir: str | os.PathLike[str], address: str = "local") -> None:
        self.address = address
        self.dir = Path(data_dir) / "ledgers"
        self._dir = str(self.dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._ledgers: dict[int, _LedgerFile] = {}
        self._dirty: set[int] = set()
        self._flusher: asyncio.Task[None] | None = None
        self.bytes_written = 0
        self.syncs = 0
        # Groups made durable by one ``syncfs`` (of ``_fs_fd``'s file system) instead of a
        # sync per file.
        self.fs_syncs = 0
        self._fs_fd = os.open(self.dir, os.O_RDONLY)
        # Ledgers whose file is open, least recently used first.
        self._open: OrderedDict[int, None] = OrderedDict()
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.max_open_files = max(64, min(MAX_OPEN_FILES, soft // 2))
        self._load()

    # startup ------------------------------------------------------------------------------

    def _load(self) -> None:
        for path in sorted(self.dir.glob("*.log")):
            try:
                lid = int(path.stem)
            except ValueError:
                continue
            self._ledgers[lid] = self._scan(lid, path)

    def _scan(self, lid: int, path: Path) -> _LedgerFile:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        lf = _LedgerFile(lid, fd, fenced=path.with_suffix(".fenced").exists())
        data = path.read_bytes()
        pos = 0
        while pos + RECORD.size <= len(data):
            plen, crc, eid, lac = RECORD.unpack_from(data, pos)
            end = pos + RECORD.size + plen
            if end > len(data):
                break
            body = data[pos + RECORD.size : end]
            if zlib.crc32(body, zlib.crc32(_CRC_PART.pack(eid, lac))) != crc:
                log.warning("ledger %d: corrupt record at byte %d, cutting the tail", lid, pos)
                break
            if eid == FENCE_ENTRY:
                lf.fenced = True
                pos = end
                continue
            _add_place(lf, eid, _place(pos + RECORD.size, plen))
            lf.lac = max(lf.lac, lac)
            pos = end
        if pos != len(data):
            log.warning("ledger %d: dropping %d bytes of torn tail", lid, len(data) - pos)
            os.ftruncate(fd, pos)
            os.fsync(fd)
        lf.size = pos
        os.close(fd)
        lf.fd = CLOSED  # opened when used
        return lf

    def ledgers(self) -> list[int]:
        return sorted(self._ledgers)

    def _path(self, ledger_id: int) -> str:
        # A string, not a ``Path``: pathlib interns every part of every path it parses, and a
        # hub makes a file per ledger, hundreds of thousands of them in a claim wave; the
        # interpreter's table of interned strings grew by a megabyte per 18,000 and stays so.
        return f"{self._dir}/{ledger_id}.log"

    def _remove_files(self, ledger_id: int) -> None:
        path = self._path(ledger_id)
        for p in (path, _marker(path)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)

    # StorageNode --------------------------------------------------------------------------

    def _file(self, ledger_id: int, create: bool) -> _LedgerFile:
        lf = self._ledgers.get(ledger_id)
        if lf is None:
            if not create:
                raise NoSuchEntryError(f"ledger {ledger_id} is not stored here")
            lf = _LedgerFile(ledger_id)
            self._ledgers[ledger_id] = lf
        return lf

    async def add_entry(
        self, ledger_id: int, entry_id: int, lac: int, payload: bytes, *, recovery: bool = False
    ) -> None:
        lf = self._file(ledger_id, create=True)
        if lf.fenced and not recovery:
            raise LedgerFencedError(f"ledger {ledger_id} is fenced")
        if _place_of(lf, entry_id) is not None:
            return  # a write-back or retry of an entry we hold already
        crc = zlib.crc32(payload, zlib.crc32(_CRC_PART.pack(entry_id, lac)))
        record = RECORD.pack(len(payload), crc, entry_id, lac) + payload
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        _add_place(lf, entry_id, _place(lf.size + RECORD.size, len(payload)))
        lf.size += len(record)
        lf.lac = max(lf.lac, lac)
        if lf.pending is None:
            lf.pending = []
        lf.pending.append((entry_id, record, fut))
        self._dirty.add(ledger_id)
        self._kick()
        await fut

    async def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        lf = self._file(ledger_id, create=False)
        loc = _place_of(lf, entry_id)
        if loc is None:
            raise NoSuchEntryError(f"ledger {ledger_id} entry {entry_id} is not stored here")
        for e, record, _ in lf.pending or ():
            if e == entry_id:
                return record[RECORD.size :]
        for e, record in lf.writing or ():
            if e == entry_id:
                return record[RECORD.size :]
        pos, plen = loc >> 32, loc & _LENGTH
        raw = os.pread(self._opened(lf), RECORD.size + plen, pos - RECORD.size)
        got_len, crc, eid, lac = RECORD.unpack_from(raw)
        body = raw[RECORD.size :]
        if (
            got_len != plen
            or eid != entry_id
            or zlib.crc32(body, zlib.crc32(_CRC_PART.pack(eid, lac))) != crc
        ):
            raise CorruptEntryError(f"ledger {ledger_id} entry {entry_id} failed its checksum")
        return body

    async def read_lac(self, ledger_id: int, *, fence: bool) -> tuple[int, int]:
        lf = self._ledgers.get(ledger_id)
        if lf is None:
            if not fence:
                return -1, -1
            lf = self._file(ledger_id, create=True)
        if fence:
            if not lf.fenced:
                # Refused from now on, answered once the marker is on disk: the flusher writes
                # it with the next group. (A failover fences a ledger per topic it takes over;
                # a marker and two syncs each, on the event loop, took a quarter of the
                # taking hub's time.)
                lf.fenced = True
                fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                lf.fencing = fut
                # In order with the entries before it: their places in the file are set.
                if lf.pending is None:
                    lf.pending = []
                lf.pending.append((FENCE_ENTRY, _FENCE_RECORD, fut))
                lf.size += len(_FENCE_RECORD)
                self._dirty.add(ledger_id)
                self._kick()
            fencing = lf.fencing
            if fencing is not None:
                try:
                    await asyncio.shield(fencing)
                finally:
                    if lf.fencing is fencing and fencing.done():
                        lf.fencing = None
            # Entries still waiting for their flush were never acknowledged; they may still
            # land, which recovery then finds, or not: both are correct.
        return lf.lac, lf.last_entry

    async def write_lacs(self, lacs: Sequence[tuple[int, int]]) -> None:
        # In memory only: a LAC is never more than the writer confirmed, so forgetting it (a
        # restart) only makes a later recovery write the ledger's end back, as it did before
        # replicas were told. Unknown ledgers are not created: a notice can arrive after a
        # ledger was deleted, and would bring it back as an empty replica.
        ledgers = self._ledgers
        for ledger_id, lac in lacs:
            lf = ledgers.get(ledger_id)
            if lf is not None and lac > lf.lac:
                lf.lac = lac

    def is_fenced(self, ledger_id: int) -> bool:
        lf = self._ledgers.get(ledger_id)
        return lf is not None and lf.fenced

    async def fenced(self, ledger_id: int) -> bool:
        return self.is_fenced(ledger_id)

    async def delete_ledger(self, ledger_id: int) -> None:
        lf = self._ledgers.pop(ledger_id, None)
        if lf is None:
            return
        for _, _, fut in lf.pending or ():
            if not fut.done():
                fut.set_exception(NoSuchEntryError(f"ledger {ledger_id} was deleted"))
        self._dirty.discard(ledger_id)
        if lf.fd >= 0:
            os.close(lf.fd)
        self._open.pop(ledger_id, None)
        lf.fd = DELETED  # a group being written that creates the file removes it again
        self._remove_files(ledger_id)

    def _reload(self, lf: _LedgerFile) -> None:
        """After a group of ``lf`` failed to be written: how much of it reached the file is
        not known, so the file is read again (a torn tail cut off, as at a start) and the
        records still waiting are placed after what it holds. Without this the places of
        later entries counted the failed records' bytes, and reading them failed their
        checksums."""
        if lf.fd == DELETED:  # deleted meanwhile: whatever the failed group created goes too
            self._remove_files(lf.ledger_id)
            return
        if lf.fd >= 0:
            os.close(lf.fd)
            self._open.pop(lf.ledger_id, None)
        path = Path(self._path(lf.ledger_id))
        waiting_fence = any(e == FENCE_ENTRY for e, _, _ in lf.pending or ())
        if path.exists():
            disk = self._scan(lf.ledger_id, path)
            lf.fd, lf.size, lf.offsets, lf.last_entry = (
                CLOSED,
                disk.size,
                disk.offsets,
                disk.last_entry,
            )
            lf.fenced = disk.fenced or waiting_fence
            lf.lac = max(lf.lac, disk.lac)
        else:
            lf.fd, lf.size, lf.offsets, lf.last_entry = -1, 0, None, -1
            lf.fenced = waiting_fence
        for e, record, _ in lf.pending or ():
            if e != FENCE_ENTRY:
                _add_place(lf, e, _place(lf.size + RECORD.size, len(record) - RECORD.size))
            lf.size += len(record)

    # open files ---------------------------------------------------------------------------

    def _opened(self, lf: _LedgerFile) -> int:
        """``lf``'s descriptor, its file opened again if it was closed; marks it used."""
        if lf.fd == CLOSED:
            lf.fd = os.open(self._path(lf.ledger_id), os.O_RDWR | os.O_APPEND)
            self._track(lf)
        elif lf.fd >= 0:
            self._open[lf.ledger_id] = None
            self._open.move_to_end(lf.ledger_id)
        return lf.fd

    def _track(self, lf: _LedgerFile) -> None:
        """``lf``'s file is open now (and the most recently used)."""
        self._open[lf.ledger_id] = None
        self._open.move_to_end(lf.ledger_id)
        self._trim(lf)

    def _trim(self, keep: _LedgerFile | None = None) -> None:
        """Close the least recently used files beyond the bound: never ``keep``, nor one the
        flushing thread is writing (its descriptor is in that thread's hands); those are
        trimmed after their group."""
        busy: list[int] = []
        while len(self._open) > self.max_open_files:
            lid, _ = self._open.popitem(last=False)
            old = self._ledgers.get(lid)
            if old is None or old.fd < 0:
                continue
            if old.writing is not None or old is keep:
                busy.append(lid)
                continue
            os.close(old.fd)
            old.fd = CLOSED
        for lid in busy:
            self._open[lid] = None

    # group commit -------------------------------------------------------------------------

    def _kick(self) -> None:
        # One flusher at a time: whatever arrives while it syncs is picked up by its next round.
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())

    async def _flush_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while self._dirty:
            groups: list[tuple[_LedgerFile, bytes, list[tuple[int, asyncio.Future[None]]]]] = []
            for lid in list(self._dirty):
                lf = self._ledgers.get(lid)
                if lf is None or not lf.pending:
                    continue
                pending, lf.pending = lf.pending, None
                lf.writing = [(e, r) for e, r, _ in pending]
                if lf.fd == CLOSED:
                    self._opened(lf)
                groups.append(
                    (lf, b"".join(r for _, r, _ in pending), [(e, f) for e, _, f in pending])
                )
            self._dirty.clear()
            if not groups:
                break
            # Ledgers with no file yet, written to or fenced (a restart finds a fenced ledger
            # by the fence record in its file).
            new = [lf for lf, _, _ in groups if lf.fd == -1]
            try:
                created = await loop.run_in_executor(
                    None,
                    _write_and_sync,
                    self.dir,
                    [self._path(lf.ledger_id) for lf in new],
                    [(lf.fd, self._path(lf.ledger_id), b) for lf, b, _ in groups],
                    self._fs_fd,
                )
            except OSError as exc:
                log.error("ledger storage write failed: %s", exc)
                failed = LedgerError(f"storage write failed: {exc}")
                for lf, _, done in groups:
                    lf.writing = None
                    for e, f in done:
                        if e == FENCE_ENTRY:
                            lf.fenced = False  # not durably: the recovery that asked fails
                            lf.fencing = None
                        _fail(f, failed)
                    self._reload(lf)
                continue
            for lf, fd in zip(new, created, strict=True):
                if lf.fd == -1:
                    lf.fd = fd
                    self._track(lf)
                    continue
                os.close(fd)  # deleted while its file was being created
                self._remove_files(lf.ledger_id)
            self.syncs += len(groups)
            if _syncs_file_system(len(groups)):
                self.fs_syncs += 1
            for lf, data, done in groups:
                self.bytes_written += len(data)
                lf.writing = None
                for _, f in done:
                    if not f.done():
                        f.set_result(None)
            self._trim()

    async def close(self) -> None:
        while self._flusher is not None and not self._flusher.done():
            await asyncio.shield(self._flusher)
        for lf in self._ledgers.values():
            if lf.fd >= 0:
                os.close(lf.fd)
        self._ledgers.clear()
        if self._fs_fd >= 0:
            os.close(self._fs_fd)
            self._fs_fd = -1


def _fail(fut: asyncio.Future[None], exc: Exception) -> None:
    if not fut.done():
        fut.set_exception(exc)
        fut.exception()  # retrieved: a waiter cancelled meanwhile is no error


def _marker(path: str) -> str:
    """The fence marker's file beside the ledger file ``path`` (``N.log`` -> ``N.fenced``)."""
    return path.removesuffix(".log") + ".fenced"


def _write_and_sync(
    directory: Path,
    new: list[str],
    batches: list[tuple[int, str, bytes]],
    fs_fd: int,
) -> list[int]:
    """Create the new ledgers' files, append every batch (entries and fence records), and
    make it all durable: each written file synced and the directory once if files were
    created, or, when that is ``SYNCFS_FROM_FILES`` syncs or more, one ``syncfs`` of the file
    system ``fs_fd`` is on (a take-over fences a ledger on every replica: a failover of
    thousands of topics gives a replica groups of dozens of fences). Returns the new files'
    descriptors, in the order of ``new``."""
    created = [os.open(p, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644) for p in new]
    fds = dict(zip(new, created, strict=True))
    written = []
    for fd, path, data in batches:
        fd = fds.get(path, fd)
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        written.append(fd)
    if _syncs_file_system(len(written)):
        assert _syncfs is not None
        if _syncfs(fs_fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs: {os.strerror(err)}")
    else:
        if created:
            _fsync_dir(directory)
        for fd in written:
            os.fdatasync(fd)
    return created


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
