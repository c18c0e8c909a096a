"""The entry log: the files every ledger stored on a hub shares (BookKeeper's entry logger).

Rules this module keeps:

- A record is ``u32 payload_len | u32 crc32 | u64 ledger_id | u64 entry_id | i64 lac |
  payload``, the CRC covering everything after it; a log begins with ``MAGIC``, its format's
  version. Two entry ids name no entry: ``FENCE_ENTRY`` (the ledger is fenced; no payload)
  and ``DELETE_ENTRY`` (the ledger was deleted here; its LAC field names the oldest log that
  held the ledger's records).
- Only the current log is written, a whole group at a time (``append_and_sync``, on a worker
  thread: one write and one ``fdatasync`` however many ledgers the group holds). A log is
  closed at ``log_bytes`` (64 MiB) and the next one begun; a hub also begins a new one at each
  start, so a log never ends in a tail a crash may have torn, once it is closed. A group the
  disk refused is cut back off the log if it can be, and the next group begins a new log
  (``roll``): a log whose sync failed is not trusted to be written again (Linux may have
  dropped the failed pages).
- On start every log is scanned in order (``replay``): a torn or corrupt tail of the newest
  (a crash mid-write) is cut off, nothing after it was acknowledged; a bad record in an older
  log is damage, and what follows it is left unread (its replicas on other hubs serve it).
- Where a record is, is a ``Place``: its log, the position of its payload there and its
  length, in one int (a tuple would cost a hub 64 bytes more per stored entry). ``live``
  counts, per log, the bytes of records still live (entries and fences of ledgers still
  stored): what compaction chooses by.

Ledgers had a file each before: a claim created a file on every replica, and creating a file
costs 130-480 us of CPU on this project's ext4 (3 us to open one that exists), a third of a
claim's CPU; each group synced every file it wrote (one journal commit each); and a hub
owning 100,000 idle topics held a replica of 100,000 files it had to open and close again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from hedwig.errors import CorruptEntryError

log = logging.getLogger(__name__)

RECORD = struct.Struct(">IIQQq")  # payload_len, crc, ledger_id, entry_id, lac
_CRC_PART = struct.Struct(">QQq")
MAGIC = b"HWENTLG1"  # the first bytes of every entry log (its format's version)
# The entry id of a fence record: the ledger is fenced (no entry has this id).
FENCE_ENTRY = (1 << 64) - 1
# The entry id of a delete record: the ledger was deleted here.
DELETE_ENTRY = (1 << 64) - 2
ENTRY_LOG_BYTES = 64 << 20  # a log is closed, and the next begun, past this size
_LOG_NAME = re.compile(r"(\d+)\.entrylog")

# Where a record is: ``log_id << 64 | payload position << 32 | payload length``.
Place: TypeAlias = int
_LENGTH = (1 << 32) - 1
_POSITION = (1 << 32) - 1
# A scanned record: ledger, entry, lac, payload position, payload length.
ScannedRecord: TypeAlias = tuple[int, int, int, int, int]


def encode_record(ledger_id: int, entry_id: int, lac: int, payload: bytes = b"") -> bytes:
    crc = zlib.crc32(payload, zlib.crc32(_CRC_PART.pack(ledger_id, entry_id, lac)))
    return RECORD.pack(len(payload), crc, ledger_id, entry_id, lac) + payload


def place(log_id: int, position: int, length: int) -> Place:
    """Where a payload of ``length`` bytes at ``position`` of log ``log_id`` is."""
    return log_id << 64 | position << 32 | length


def log_of(where: Place) -> int:
    return where >> 64


def record_bytes(where: Place) -> int:
    """The size of the whole record at ``where``, header and payload."""
    return RECORD.size + (where & _LENGTH)


@dataclass(slots=True)
class Scanned:
    """What a scan of one entry log found."""

    records: list[ScannedRecord]
    end: int  # where the good records end
    size: int  # the file's size


class EntryLogs:
    """The entry logs of one directory: their descriptors, sizes and live bytes, the current
    log and where it ends."""

    def __init__(self, directory: Path, log_bytes: int = ENTRY_LOG_BYTES) -> None:
        self.dir = directory
        # A string, not a ``Path``: pathlib interns every part of every path it parses.
        self.dir_name = str(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.log_bytes = log_bytes
        self.fds: dict[int, int] = {}
        self.sizes: dict[int, int] = {}
        self.live: dict[int, int] = {}
        self.current = 0  # the log written to, and where it ends
        self.tail = 0
        self.roll = False  # the next group begins a new log

    def found(self) -> list[int]:
        """The ids of the logs in the directory, oldest first."""
        return sorted(
            int(m.group(1)) for p in self.dir.iterdir() if (m := _LOG_NAME.fullmatch(p.name))
        )

    def replay(self, log_id: int, newest: int) -> Scanned:
        """Open and scan log ``log_id`` at start, cutting a torn tail off if it is the newest."""
        fd = os.open(self.path(log_id), os.O_RDWR | os.O_APPEND)
        scanned = scan_log(os.pread(fd, os.fstat(fd).st_size, 0))
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
        self.fds[log_id] = fd
        self.sizes[log_id] = max(scanned.end, len(MAGIC))
        self.live[log_id] = 0  # counted once every log is indexed
        return scanned

    def begin_now(self) -> None:
        """Close the current log (synced) and begin the next, on this thread: at start."""
        current = self.fds.get(self.current)
        if current is not None:
            os.fdatasync(current)
        self.current += 1
        fd = os.open(
            self.path(self.current), os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644
        )
        os.write(fd, MAGIC)
        os.fdatasync(fd)
        fsync_dir(self.dir)
        self.fds[self.current] = fd
        self.sizes[self.current] = self.tail = len(MAGIC)
        self.live[self.current] = 0

    def next_group(self) -> tuple[int, int, str | None]:
        """Where the next group goes: its log, where in it, and the path of that log if the
        group begins it (then the group's data begins with ``MAGIC``)."""
        if self.roll or self.tail >= self.log_bytes:
            log_id = self.current + 1
            return log_id, len(MAGIC), self.path(log_id)
        return self.current, self.tail, None

    def wrote(self, log_id: int, fd: int, end: int) -> bool:
        """A group is durable in log ``log_id`` (descriptor ``fd``) up to ``end``; whether it
        began that log (closing the one before)."""
        began = log_id != self.current
        if began:
            self.fds[log_id] = fd
            self.live[log_id] = 0
            self.current, self.roll = log_id, False
        self.tail = self.sizes[log_id] = end
        return began

    def read(self, where: Place, ledger_id: int, entry_id: int) -> bytes:
        """The payload at ``where``, checked to be entry ``entry_id`` of ledger ``ledger_id``."""
        plen = where & _LENGTH
        raw = os.pread(
            self.fds[where >> 64], RECORD.size + plen, (where >> 32 & _POSITION) - RECORD.size
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

    def remove(self, log_id: int) -> None:
        fd = self.fds.pop(log_id)
        os.close(fd)
        del self.sizes[log_id], self.live[log_id]
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path(log_id))

    def path(self, log_id: int) -> str:
        return f"{self.dir_name}/{log_id:012d}.entrylog"

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


def scan_log(data: bytes) -> Scanned:
    """The records of an entry log, up to the first torn or corrupt one."""
    records: list[ScannedRecord] = []
    if not data.startswith(MAGIC):
        return Scanned(records, 0, len(data))
    pos, size, head = len(MAGIC), len(data), RECORD.size
    unpack, crc32, part = RECORD.unpack_from, zlib.crc32, _CRC_PART.pack
    while pos + head <= size:
        plen, crc, lid, eid, lac = unpack(data, pos)
        end = pos + head + plen
        if end > size or crc32(data[pos + head : end], crc32(part(lid, eid, lac))) != crc:
            break
        records.append((lid, eid, lac, pos + head, plen))
        pos = end
    return Scanned(records, pos, size)


def read_and_scan(fd: int) -> tuple[bytes, Scanned]:
    """A whole log and its records (for compaction, on a worker thread)."""
    data = os.pread(fd, os.fstat(fd).st_size, 0)
    return data, scan_log(data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def append_and_sync(
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
            fsync_dir(directory)
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


def fsync_dir(path: str | os.PathLike[str]) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
