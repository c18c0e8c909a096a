"""The storage role on a real disk: the entry log shared by every ledger stored on a hub, its
group commit, fences, deletions, compaction, crashes and failed writes."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from hedwig.errors import HedwigError, LedgerFencedError, NoSuchEntryError
from hedwig.ledger import LocalStorage
from hedwig.ledger.storage import entry_log
from hedwig.ledger.storage.entry_log import FENCE_ENTRY, MAGIC, RECORD, encode_record
from hedwig.ledger.storage.index import StoredLedger


def _logs(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "ledgers").glob("*.entrylog"))


_PAYLOAD = b"p" * 200


def _entry(lid: int, e: int) -> bytes:
    return _PAYLOAD + b"%d.%d" % (lid, e)


async def _three_entries_each(storage: LocalStorage, ledgers: range) -> None:
    for lid in ledgers:
        for e in range(3):
            await storage.add_entry(lid, e, e - 1, _entry(lid, e))


async def _restarted_with(tmp_path: Path, kept: list[int]) -> LocalStorage:
    """The storage started again on ``tmp_path``: it holds ``kept`` alone, each reading
    back its three entries."""
    again = LocalStorage(tmp_path, "h:1", log_bytes=4096)
    assert again.ledgers() == kept
    for lid in kept:
        assert [await again.read_entry(lid, e) for e in range(3)] == [
            _entry(lid, e) for e in range(3)
        ]
    return again


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the storage syncs, in order: ``data`` for a log, ``dir`` for the directory."""
    done: list[str] = []
    real_data, real_dir = os.fdatasync, entry_log.fsync_dir

    def data(fd: int) -> None:
        done.append("data")
        real_data(fd)

    def directory(path: str | os.PathLike[str]) -> None:
        done.append("dir")
        real_dir(path)

    monkeypatch.setattr(os, "fdatasync", data)
    monkeypatch.setattr(entry_log, "fsync_dir", directory)
    return done


async def test_torn_tail_is_cut(tmp_path: Path) -> None:
    """A crash mid-write leaves a torn record at the end of the newest log: a restart cuts it
    off (nothing after it was acknowledged) and keeps everything before it."""
    storage = LocalStorage(tmp_path, "h:1")
    for i in range(3):
        await storage.add_entry(7, i, i - 1, b"payload%d" % i)
    await storage.add_entry(8, 0, -1, b"other")
    await storage.close()
    (path,) = _logs(tmp_path)
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(RECORD.pack(100, 0, 7, 3, 2) + b"short")  # a write cut by a crash
    storage = LocalStorage(tmp_path, "h:1")
    assert path.stat().st_size == size
    assert await storage.read_entry(7, 2) == b"payload2"
    assert await storage.read_lac(7, fence=False) == (1, 2)
    await storage.close()
    # A corrupt byte in a record of the newest log: cut there, the records before it kept.
    newest = _logs(tmp_path)[-1]
    assert newest != path
    storage = LocalStorage(tmp_path, "h:1")
    await storage.add_entry(9, 0, -1, b"kept")
    await storage.add_entry(9, 1, 0, b"damaged")
    await storage.close()
    newest = _logs(tmp_path)[-1]
    data = newest.read_bytes()
    with open(newest, "r+b") as f:
        f.seek(data.index(b"damaged"))
        f.write(b"X")
    storage = LocalStorage(tmp_path, "h:1")
    assert await storage.read_lac(9, fence=False) == (-1, 0)
    assert await storage.read_entry(9, 0) == b"kept"
    assert await storage.read_entry(8, 0) == b"other"
    await storage.close()


async def test_a_claim_wave_creates_no_file_and_syncs_once_per_group(
    tmp_path: Path, syncs: list[str]
) -> None:
    """A claim wave makes a ledger per topic on every replica: they all go to the one entry
    log, a group is one write and one ``fdatasync`` whatever the number of ledgers, and no
    file is created (creating one cost 130-480 us of CPU here). An entry is readable while
    its group is written, a ledger deleted meanwhile is gone, and a restart finds the rest."""
    storage = LocalStorage(tmp_path, "h:1")
    logs = _logs(tmp_path)
    syncs.clear()
    adds = [asyncio.ensure_future(storage.add_entry(lid, 0, -1, b"e%d" % lid)) for lid in range(50)]
    await asyncio.sleep(0)  # all fifty queued; the first group is being written
    assert await storage.read_entry(7, 0) == b"e7"  # served from memory meanwhile
    await storage.delete_ledger(9)
    results = await asyncio.gather(*adds, return_exceptions=True)
    assert [r for i, r in enumerate(results) if i != 9] == [None] * 49
    assert isinstance(results[9], NoSuchEntryError)
    assert syncs == ["data"] * len(syncs) and 1 <= len(syncs) <= 2
    assert _logs(tmp_path) == logs and len(logs) == 1
    assert storage.syncs == len(syncs)
    await storage.close()
    again = LocalStorage(tmp_path, "h:1")
    assert again.ledgers() == [i for i in range(50) if i != 9]
    assert await again.read_entry(49, 0) == b"e49"
    # Fencing a ledger no entry reached yet writes its fence record, so a restart knows it.
    assert await again.read_lac(77, fence=True) == (-1, -1)
    await again.close()
    last = LocalStorage(tmp_path, "h:1")
    assert 77 in last.ledgers() and last.is_fenced(77)
    await last.close()


async def test_the_fences_of_a_failover_share_a_sync_and_survive_a_restart(
    tmp_path: Path, syncs: list[str]
) -> None:
    """A hub taking over many topics fences a ledger per topic on each replica: the fences
    are records written by the flushing thread, many to a sync. A fenced ledger refuses adds
    at once and stays fenced across a restart; a recovery's write-back still goes in."""
    storage = LocalStorage(tmp_path, "h:1")
    for lid in range(40):
        await storage.add_entry(lid, 0, -1, b"x")
    syncs.clear()
    fences = [asyncio.ensure_future(storage.read_lac(lid, fence=True)) for lid in range(40)]
    await asyncio.sleep(0)
    with pytest.raises(LedgerFencedError):
        await storage.add_entry(39, 1, 0, b"late")  # refused before the record is on disk
    assert await asyncio.gather(*fences) == [(-1, 0)] * 40
    assert 1 <= len(syncs) <= 2
    assert await storage.read_lac(3, fence=True) == (-1, 0)  # asked again: answered at once
    await storage.close()
    again = LocalStorage(tmp_path, "h:1")
    assert all(again.is_fenced(lid) for lid in range(40))
    with pytest.raises(LedgerFencedError):
        await again.add_entry(5, 1, 0, b"late")
    assert await again.read_entry(5, 0) == b"x"
    await again.add_entry(5, 1, 0, b"written back", recovery=True)
    assert await again.read_entry(5, 1) == b"written back"
    await again.close()
    again = LocalStorage(tmp_path, "h:1")
    assert again.is_fenced(5) and await again.read_lac(5, fence=False) == (0, 1)
    await again.close()


async def test_deleted_ledgers_stay_deleted_and_their_logs_are_compacted(
    tmp_path: Path,
) -> None:
    """Retention deletes ledgers whose entries share logs with ledgers still kept: a closed
    log mostly of deleted records is compacted (what is live copied forward, then the log
    removed), reads go on during and after it, fences move with their ledgers, and after a
    restart deleted ledgers do not come back while kept ones read the same."""
    storage = LocalStorage(tmp_path, "h:1", log_bytes=4096)
    await _three_entries_each(storage, range(60))
    await storage.read_lac(1, fence=True)
    await storage.read_lac(2, fence=True)
    closed = [p.name for p in _logs(tmp_path)][:-1]
    assert len(closed) >= 10  # rolled over at 4 KiB
    kept = [lid for lid in range(60) if lid % 10 in (1, 2)]
    for lid in range(60):
        if lid not in kept:
            await storage.delete_ledger(lid)
    for _ in range(200):
        if not storage.compaction.running:
            break
        await asyncio.sleep(0.01)
    assert storage.compactions >= len(closed) // 2
    assert not set(closed) & {p.name for p in _logs(tmp_path)[:2]}  # the oldest went
    for lid in kept:
        assert await storage.read_entry(lid, 2) == _entry(lid, 2)
    assert storage.is_fenced(1) and storage.is_fenced(2)
    assert storage.ledgers() == kept
    with pytest.raises(NoSuchEntryError):
        await storage.read_entry(0, 0)
    await storage.close()
    again = await _restarted_with(tmp_path, kept)
    for lid in kept:
        assert await again.read_lac(lid, fence=False) == (1, 2)
    assert again.is_fenced(1) and again.is_fenced(2) and not again.is_fenced(11)
    await again.close()


async def test_a_delete_record_outlives_no_log_it_shadows(tmp_path: Path) -> None:
    """A delete record is what keeps a deleted ledger's entries in an older log from coming
    back at a restart: compaction copies it forward while such a log exists, not after."""
    storage = LocalStorage(tmp_path, "h:1", log_bytes=2048)
    big = b"k" * 1500
    await storage.add_entry(1, 0, -1, big)  # ledger 1 keeps the first logs alive
    await storage.add_entry(2, 0, -1, b"deleted later")
    await storage.add_entry(1, 1, 0, big)
    await storage.add_entry(1, 2, 1, big)
    await storage.delete_ledger(2)
    for lid in range(10, 20):  # logs of deleted ledgers, to compact
        await storage.add_entry(lid, 0, -1, big)
    for lid in range(10, 20):
        await storage.delete_ledger(lid)
    for _ in range(200):
        if not storage.compaction.running:
            break
        await asyncio.sleep(0.01)
    await storage.close()
    again = LocalStorage(tmp_path, "h:1", log_bytes=2048)
    assert again.ledgers() == [1]
    assert await again.read_entry(1, 2) == big
    await again.close()


async def test_a_fence_the_disk_refuses_fails_and_leaves_the_ledger_writable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fence whose record cannot be written is an error to the recovery that asked (it
    needs another replica's answer), not a fence: adds go on, and a later fence works."""
    storage = LocalStorage(tmp_path, "h:1")
    await storage.add_entry(1, 0, -1, b"x")
    real = entry_log.append_and_sync

    def full_disk(*args: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(entry_log, "append_and_sync", full_disk)
    with pytest.raises(HedwigError, match="No space left"):
        await storage.read_lac(1, fence=True)
    assert not storage.is_fenced(1)
    monkeypatch.setattr(entry_log, "append_and_sync", real)
    await storage.add_entry(1, 1, 0, b"y")
    assert await storage.read_lac(1, fence=True) == (0, 1)
    assert storage.is_fenced(1)
    assert [await storage.read_entry(1, e) for e in (0, 1)] == [b"x", b"y"]
    await storage.close()
    again = LocalStorage(tmp_path, "h:1")
    assert again.is_fenced(1) and [await again.read_entry(1, e) for e in (0, 1)] == [b"x", b"y"]
    await again.close()


async def test_entries_after_a_failed_write_are_placed_where_they_land(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group the disk refused may have reached the log in part: the log is cut back where
    the group began and the next group begins a new log, so later entries read back, and a
    restart finds what was acknowledged and not the failed entry."""
    storage = LocalStorage(tmp_path, "h:1")
    await storage.add_entry(1, 0, -1, b"first")
    real = entry_log.append_and_sync

    def torn(fd: int, start: int | None, new_log: str | None, d: str, data: bytes) -> int:
        os.write(fd, data[: len(data) // 2])  # half of the group, then the disk fails
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(entry_log, "append_and_sync", torn)
    with pytest.raises(HedwigError, match="Input/output error"):
        await storage.add_entry(1, 1, 0, b"lost in a torn write")
    monkeypatch.setattr(entry_log, "append_and_sync", real)
    await storage.add_entry(1, 2, 0, b"after")
    assert len(_logs(tmp_path)) == 2
    assert await storage.read_entry(1, 2) == b"after"
    assert await storage.read_entry(1, 0) == b"first"
    await storage.close()
    again = LocalStorage(tmp_path, "h:1")
    assert [await again.read_entry(1, e) for e in (0, 2)] == [b"first", b"after"]
    assert await again.read_lac(1, fence=False) == (0, 2)
    with pytest.raises(NoSuchEntryError):
        await again.read_entry(1, 1)
    await again.close()


async def test_a_retried_add_waits_for_the_first_to_be_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An add retried while the first is still being written is answered when that one is
    durable, not at once, and is written once."""
    storage = LocalStorage(tmp_path, "h:1")
    release = asyncio.Event()
    real = entry_log.append_and_sync
    loop = asyncio.get_running_loop()

    def slow(*args: Any) -> int:
        asyncio.run_coroutine_threadsafe(release.wait(), loop).result(5)
        return real(*args)

    monkeypatch.setattr(entry_log, "append_and_sync", slow)
    first = asyncio.ensure_future(storage.add_entry(4, 0, -1, b"once"))
    await asyncio.sleep(0.05)
    retry = asyncio.ensure_future(storage.add_entry(4, 0, -1, b"once"))
    await asyncio.sleep(0.05)
    assert not first.done() and not retry.done()
    release.set()
    await asyncio.gather(first, retry)
    await storage.close()
    assert sum(p.read_bytes().count(b"once") for p in _logs(tmp_path)) == 1


async def test_a_new_start_begins_a_new_log_and_removes_empty_ones(tmp_path: Path) -> None:
    """Each start begins a log of its own (the previous one may end in a cut tail); a log
    begun and never written to is removed at the next start."""
    for _ in range(3):
        await LocalStorage(tmp_path, "h:1").close()
    assert len(_logs(tmp_path)) == 1
    assert _logs(tmp_path)[0].read_bytes() == MAGIC


async def test_a_damaged_closed_log_is_read_up_to_the_damage_and_not_cut(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A bad record in a log that is not the newest is damage, not a crash's torn tail (a
    closed log was synced before the next began): the records before it are read, the file
    is left as it is for an operator (their replicas on other hubs still serve the rest)
    until nothing read from it is live, when compaction removes it."""
    storage = LocalStorage(tmp_path, "h:1")
    await storage.add_entry(1, 0, -1, b"before")
    await storage.add_entry(2, 0, -1, b"damaged")
    await storage.add_entry(3, 0, -1, b"after")
    await storage.close()
    (first,) = _logs(tmp_path)
    data = first.read_bytes()
    storage = LocalStorage(tmp_path, "h:1")
    assert storage.ledgers() == [1, 2, 3]  # read before the damage
    await storage.add_entry(4, 0, -1, b"newer log")
    await storage.close()
    with open(first, "r+b") as f:
        f.seek(data.index(b"damaged"))
        f.write(b"X")
    storage = LocalStorage(tmp_path, "h:1")
    assert "torn or corrupt record" in caplog.text
    assert first.read_bytes() != data and len(first.read_bytes()) == len(data)
    assert storage.ledgers() == [1, 4]
    assert await storage.read_entry(1, 0) == b"before"
    # Once nothing before the damage is live, compaction removes the log.
    await storage.delete_ledger(1)
    for _ in range(200):
        if first.exists() is False:
            break
        await asyncio.sleep(0.01)
    assert not first.exists()
    await storage.close()


async def test_a_ledger_written_again_after_its_deletion_reads_the_same_after_a_restart(
    tmp_path: Path,
) -> None:
    """A late add to a deleted ledger makes it again (an orphan the auditor deletes later):
    its delete record goes before the late entry in the log, even in one group, so a restart
    finds what memory held, not the old entries nor nothing."""
    storage = LocalStorage(tmp_path, "h:1")
    await storage.add_entry(6, 0, -1, b"old")
    await storage.delete_ledger(6)  # the record waits for the next group...
    await storage.add_entry(6, 1, 0, b"late")  # ...and so does this: one group
    assert storage.ledgers() == [6]
    await storage.close()
    again = LocalStorage(tmp_path, "h:1")
    assert again.ledgers() == [6]
    assert await again.read_entry(6, 1) == b"late"
    with pytest.raises(NoSuchEntryError):
        await again.read_entry(6, 0)
    await again.close()


async def test_a_fence_torn_by_a_crash_is_no_fence(tmp_path: Path) -> None:
    """A crash while a fence record was being written: the fence was never answered (it is
    answered once synced), so nothing depends on it; a restart cuts the torn record off, the
    ledger is not fenced and its entries are whole, and fencing it again works."""
    storage = LocalStorage(tmp_path, "h:1")
    await storage.add_entry(3, 0, -1, b"kept")
    await storage.close()
    newest = _logs(tmp_path)[-1]
    fence = encode_record(3, FENCE_ENTRY, -1)
    with open(newest, "ab") as f:
        f.write(fence[: len(fence) - 5])  # the crash cut it
    storage = LocalStorage(tmp_path, "h:1")
    assert not storage.is_fenced(3)
    assert await storage.read_entry(3, 0) == b"kept"
    assert await storage.read_lac(3, fence=True) == (-1, 0)
    await storage.close()
    again = LocalStorage(tmp_path, "h:1")
    assert again.is_fenced(3)
    await again.close()


async def test_a_compaction_whose_copies_the_disk_refuses_keeps_its_log_and_tries_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk refuses the group that carries a compaction's copies (full): the log being
    compacted stays, reads of what it holds go on from it, nothing is lost at a restart, and
    the next deletion compacts it."""
    storage = LocalStorage(tmp_path, "h:1", log_bytes=4096)
    await _three_entries_each(storage, range(40))
    await storage.read_lac(1, fence=True)
    kept = [lid for lid in range(40) if lid % 10 == 1]
    real = entry_log.append_and_sync
    refused: list[int] = []

    def full_for_copies(
        fd: int, start: int | None, new_log: str | None, d: str, data: bytes
    ) -> int:
        if _PAYLOAD in data:  # entries copied forward (the deletions carry no payload)
            refused.append(len(data))
            raise OSError(28, "No space left on device")
        return real(fd, start, new_log, d, data)

    monkeypatch.setattr(entry_log, "append_and_sync", full_for_copies)
    before = {p.name for p in _logs(tmp_path)}
    for lid in range(40):
        if lid not in kept and lid != 39:
            await storage.delete_ledger(lid)
    for _ in range(300):
        if refused and (not storage.compaction.running):
            break
        await asyncio.sleep(0.01)
    assert refused, "a compaction tried to copy"
    assert storage.compactions == 0
    assert before <= {p.name for p in _logs(tmp_path)}  # every log still there
    for lid in kept:
        assert [await storage.read_entry(lid, e) for e in range(3)] == [
            _entry(lid, e) for e in range(3)
        ]
    assert storage.is_fenced(1)
    monkeypatch.setattr(entry_log, "append_and_sync", real)
    await storage.delete_ledger(39)  # the next deletion: compaction runs again
    for _ in range(300):
        if storage.compactions and (not storage.compaction.running):
            break
        await asyncio.sleep(0.01)
    assert storage.compactions >= 1
    assert len(_logs(tmp_path)) < len(before)
    await storage.close()
    again = await _restarted_with(tmp_path, kept)
    assert again.is_fenced(1) and not again.is_fenced(11)
    await again.close()


async def test_a_ledger_of_entry_0_alone_is_kept_as_an_int_and_behaves_as_any(
    tmp_path: Path,
) -> None:
    """Most ledgers a region's hub stores hold entry 0 alone (a topic published to once): one
    int each instead of an object while the LAC is -1 or 0 and no fence is set. Reads, LAC
    notices, a second entry, a fence, compaction's copies, a restart and a deletion see the
    same ledger either way."""
    storage = LocalStorage(tmp_path, "h:1", log_bytes=4096)
    packed = storage._ledgers
    for lid in range(1, 21):
        await storage.add_entry(lid, 0, -1, _entry(lid, 0))
    assert all(isinstance(packed[lid], int) for lid in range(1, 21))
    assert await storage.read_lac(1, fence=False) == (-1, 0)
    assert await storage.read_entry(7, 0) == _entry(7, 0)
    with pytest.raises(NoSuchEntryError):
        await storage.read_entry(7, 1)
    await storage.write_lacs([(1, 0), (2, 0), (3, 5), (99, 0)])
    await storage.write_lacs([(1, -1), (3, 2)])
    assert isinstance(packed[1], int) and await storage.read_lac(1, fence=False) == (0, 0)
    assert isinstance(packed[3], StoredLedger), "a LAC past entry 0: not packed"
    await storage.add_entry(8, 1, 0, _entry(8, 1))
    await storage.write_lacs([(8, 0)])
    await storage.write_lacs([(8, 1)])
    assert await storage.read_lac(8, fence=False) == (1, 1)
    await storage.write_lacs([(9, 0)])
    await storage.write_lacs([(9, 3)])  # its writer confirmed entries this one missed
    assert await storage.read_lac(9, fence=False) == (3, 0)
    assert await storage.read_lac(3, fence=False) == (5, 0)
    assert 99 not in packed, "a notice makes no ledger"
    await storage.add_entry(2, 0, -1, _entry(2, 0))  # a retry: nothing changes
    assert isinstance(packed[2], int)
    await storage.add_entry(2, 1, 0, _entry(2, 1))
    assert isinstance(packed[2], StoredLedger)
    assert [await storage.read_entry(2, e) for e in (0, 1)] == [_entry(2, 0), _entry(2, 1)]
    assert await storage.read_lac(4, fence=True) == (-1, 0)
    assert storage.is_fenced(4) and not storage.is_fenced(5)
    with pytest.raises(LedgerFencedError):
        await storage.add_entry(4, 1, 0, _entry(4, 1))
    await storage.delete_ledger(6)
    with pytest.raises(NoSuchEntryError):
        await storage.read_entry(6, 0)
    # Enough more to roll the log over and compact the first (its ledgers deleted but the
    # packed ones, which compaction copies).
    for lid in range(100, 130):
        await storage.add_entry(lid, 0, -1, _entry(lid, 0))
    for lid in range(100, 130):
        await storage.delete_ledger(lid)
    for _ in range(50):
        if storage.compactions:
            break
        await asyncio.sleep(0.05)
    assert storage.compactions
    kept = [lid for lid in range(1, 21) if lid != 6]
    for lid in kept:
        assert await storage.read_entry(lid, 0) == _entry(lid, 0)
    assert isinstance(packed[7], int), "moved by compaction, still packed"
    await storage.close()
    again = LocalStorage(tmp_path, "h:1", log_bytes=4096)
    assert again.ledgers() == kept
    assert isinstance(again._ledgers[7], int) and again.is_fenced(4)
    assert await again.read_lac(7, fence=False) == (-1, 0)
    assert [await again.read_entry(2, e) for e in (0, 1)] == [_entry(2, 0), _entry(2, 1)]
    for lid in kept:
        assert await again.read_entry(lid, 0) == _entry(lid, 0)
    await again.close()
