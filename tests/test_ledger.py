"""The ledger layer in memory (metadata) and on a real disk (storage)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from msgspec.structs import replace

from hedwig.clock import ManualClock
from hedwig.errors import (
    BadVersionError,
    HedwigError,
    LedgerFencedError,
    MetadataError,
    MetadataUnavailableError,
    NotEnoughReplicasError,
)
from hedwig.ledger import (
    LacNotices,
    LocalFirstReplicas,
    LocalStorage,
    LogContext,
    LogSettings,
    TopicLog,
    recover_ledger,
)
from hedwig.ledger.auditor import DEPARTURE_AUDIT_AFTER_S, TAKE_OVERS_QUIET_S, Auditor
from hedwig.ledger.handle import write_set
from hedwig.ledger.health import inspect
from hedwig.ledger.log_reader import READ_AHEAD
from hedwig.ledger.reads import SPECULATIVE_READ_S, read_entry
from hedwig.ledger.recovery import FENCE_STRAGGLER_S, _enough_fenced, recovered_end
from hedwig.ledger.replicas import Unsuspecting
from hedwig.ledger.storage import StorageNode
from hedwig.metadata import LedgerState
from hedwig.metadata.memory import MemoryBackend, MemoryMetadataStore
from hedwig.metadata.records import (
    HubLoad,
    LedgerMetadata,
    LedgerRange,
    LedgerRanges,
    ReplicationConfig,
    Version,
    Versioned,
)
from hedwig.protocol import Batch, EncodedMessages


@pytest.fixture
async def store() -> MemoryMetadataStore:
    s = MemoryMetadataStore(MemoryBackend(), "r")
    await s.start()
    return s


def make_log(store: MemoryMetadataStore, storage: LocalStorage, **kw: int) -> TopicLog:
    return TopicLog(
        "t",
        LogContext(store, LocalFirstReplicas(storage), "h:1", 1),
        ensemble=[storage.address],
        settings=LogSettings(**kw),  # type: ignore[arg-type]
    )


async def test_append_read_and_reopen(store: MemoryMetadataStore, tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path, "h:1")
    log = make_log(store, storage)
    await log.open()
    for i in range(10):
        b = await log.append("p", 0, EncodedMessages.of_values([b"a%d" % i, b"b%d" % i]))
        assert b.first_seq == 2 * i + 1
    assert log.last_seq == 20
    got = await log.read(5, 100, 1 << 20)
    assert got[0].first_seq == 5 and sum(c.count for c in got) == 16
    # crash without closing; a new owner (same disk) recovers the open ledger
    await storage.close()
    storage2 = LocalStorage(tmp_path, "h:1")
    log2 = make_log(store, storage2)
    await log2.open()
    assert log2.last_seq == 20
    assert [r.end_seq for r in log2.ranges.ranges] == [20, None]
    got = await log2.read(1, 1000, 1 << 20)
    values = [m.value for c in got for m in c.messages.decode()]
    assert values[:2] == [b"a0", b"b0"] and len(values) == 20
    # the old writer is fenced
    with pytest.raises(LedgerFencedError):
        await storage2.add_entry(log.ranges.ranges[0].ledger_id, 99, -1, b"x")


async def test_stale_writer_cannot_ack_after_recovery(
    store: MemoryMetadataStore, tmp_path: Path
) -> None:
    storage = LocalStorage(tmp_path, "h:1")
    old = make_log(store, storage)
    await old.open()
    await old.append("p", 0, EncodedMessages.of_values([b"x"]))
    new = make_log(store, storage)
    await new.open()  # recovers and fences old's ledger
    with pytest.raises(LedgerFencedError):
        await old.append("p", 0, EncodedMessages.of_values([b"y"]))
    assert new.last_seq == 1
    md = await store.ledgers.read_ledger(old.ranges.ranges[0].ledger_id)
    assert md is not None and md.value.state is LedgerState.CLOSED


async def test_a_recovery_writes_the_ledger_once_and_a_writer_closing_first_keeps_its_close(
    store: MemoryMetadataStore, tmp_path: Path
) -> None:
    """Recovery does not mark the ledger IN_RECOVERY before fencing it (a store write and a
    round trip of every take-over): its one write is the close. A writer closing meanwhile
    compare-and-sets the same version: the second to write fails and reads what the first
    recorded, and the writer closes only on what it acknowledged."""
    storage = LocalStorage(tmp_path, "h:1")
    old = make_log(store, storage)
    await old.open()
    for i in range(3):
        await old.append("p", i + 1, EncodedMessages.of_values([b"m%d" % i]))
    lid = old.ranges.ranges[-1].ledger_id
    states: list[LedgerState] = []
    write = store.ledgers.write_ledger

    async def counted(md: LedgerMetadata, version: Any) -> Any:
        states.append(md.state)
        return await write(md, version)

    store.ledgers.write_ledger = counted  # type: ignore[method-assign,assignment]
    replicas = LocalFirstReplicas(storage)
    ended = await recovered_end(store.ledgers, replicas, lid, decode=Batch.from_stored)
    assert states == [] and ended.version is not None
    assert (ended.metadata.last_entry_id, ended.metadata.last_seq) == (2, 3)
    await old.close()  # the writer's close lands first
    assert states == [LedgerState.CLOSED]
    with pytest.raises(BadVersionError):
        await store.ledgers.write_ledger(ended.metadata, ended.version)
    again = await recover_ledger(store.ledgers, replicas, lid, decode=Batch.from_stored)
    assert again.version is None  # closed already: nothing to write
    assert (again.metadata.last_entry_id, again.metadata.last_seq) == (2, 3)
    with pytest.raises(LedgerFencedError):  # the replica refuses the old writer
        await storage.add_entry(lid, 3, 2, b"late")


async def test_reads_from_ledgers_ask_for_entries_ahead_but_return_what_was_asked(
    store: MemoryMetadataStore, tmp_path: Path
) -> None:
    """A new owner's reads (the index of a ledger it did not write, the batches of a read)
    ask for up to ``READ_AHEAD`` entries at once: one round trip at a time, reading back the
    end of a log of small batches took most of a second of a failover. What a read returns
    is unchanged: the batches holding ``start_seq`` on, up to its limits."""
    storage = LocalStorage(tmp_path, "h:1")
    log = make_log(store, storage)
    await log.open()
    for i in range(50):
        await log.append("p", 0, EncodedMessages.of_values([b"a%d" % i, b"b%d" % i]))
    await storage.close()
    storage2 = LocalStorage(tmp_path, "h:1")
    in_flight = [0, 0]  # now, most
    read = storage2.read_entry

    async def counted(ledger_id: int, entry_id: int) -> bytes:
        in_flight[0] += 1
        in_flight[1] = max(in_flight)
        try:
            await asyncio.sleep(0.001)
            return await read(ledger_id, entry_id)
        finally:
            in_flight[0] -= 1

    storage2.read_entry = counted  # type: ignore[method-assign]
    log2 = make_log(store, storage2)
    await log2.open()
    got = await log2.read(5, 7, 1 << 20)
    assert [b.first_seq for b in got] == [5, 7, 9, 11]
    assert 1 < in_flight[1] <= READ_AHEAD
    assert [b.first_seq for b in await log2.read(2, 1000, 1)] == [1]  # the size limit: one
    got = await log2.read(41, 1000, 1 << 20)
    assert [b.first_seq for b in got] == list(range(41, 101, 2))


async def test_a_take_over_reads_its_ledger_and_its_last_entries_once(
    store: MemoryMetadataStore, tmp_path: Path
) -> None:
    """A take-over recovers the last ledger, learns when its last message was published, and
    reads back the log's end for its publishers. It read the recovered ledger's metadata from
    the store again, and its last entry three more times; a failover of a hub owning very
    many topics pays each of those per topic. Now: the metadata once (recovery's), the last
    entry once, and after recovery each entry of the end at most once."""
    storage = LocalStorage(tmp_path, "h:1")
    log = make_log(store, storage)
    await log.open()
    for i in range(20):
        await log.append("p", 0, EncodedMessages.of_values([b"m%d" % i]))
    await storage.close()
    storage2 = LocalStorage(tmp_path, "h:1")
    new = make_log(store, storage2)
    ledger_reads: list[int] = []
    entry_reads: list[tuple[int, int]] = []
    read_ledger, read_entry = store.ledgers.read_ledger, storage2.read_entry

    async def counted_ledger(ledger_id: int):  # type: ignore[no-untyped-def]
        ledger_reads.append(ledger_id)
        return await read_ledger(ledger_id)

    async def counted_entry(ledger_id: int, entry_id: int) -> bytes:
        entry_reads.append((ledger_id, entry_id))
        return await read_entry(ledger_id, entry_id)

    store.ledgers.read_ledger = counted_ledger  # type: ignore[method-assign]
    storage2.read_entry = counted_entry  # type: ignore[method-assign]
    await new.open()
    recovered = new.ranges.ranges[0].ledger_id
    assert new.previous_end_ms is not None
    recovery = len(entry_reads)
    got = await new.read(18, 100, 1 << 20)  # the take-over's read-back of the end
    assert [b.first_seq for b in got] == [18, 19, 20]
    assert ledger_reads == [recovered], "the recovered ledger's metadata is read once"
    after = entry_reads[recovery:]
    assert len(after) == len(set(after)), f"an entry read twice after recovery: {after}"
    assert (recovered, 19) not in after, "the last entry was read by recovery already"
    # Recovery decodes the last entry it read (for its sequence) and hands it to the reader,
    # where learning the last message's time finds it.
    assert entry_reads[:recovery].count((recovered, 19)) == 1, entry_reads[:recovery]


async def test_a_take_over_from_a_ledger_list_its_claim_read_that_changed_since_starts_over(
    store: MemoryMetadataStore, tmp_path: Path
) -> None:
    """A take-over given the ledger list as its claim read it (etcd reads it in the claim's
    transaction) does not read it again; if the list changed after that read, the take-over's
    one request writes nothing, and it starts over from a fresh read, step by step, losing
    nothing."""
    storage = LocalStorage(tmp_path, "h:1")
    old = make_log(store, storage)
    await old.open()
    for i in range(5):
        await old.append("p", 0, EncodedMessages.of_values([b"m%d" % i]))
    claimed = await store.persistence.read_topic_persistence_info("t")
    assert claimed is not None
    # Written again after the claim's read (by the old owner, say): a new version.
    await store.persistence.write_topic_persistence_info("t", claimed.value, claimed.version)
    reads: list[str] = []
    read = store.persistence.read_topic_persistence_info

    async def counted(topic: str) -> Any:
        reads.append(topic)
        return await read(topic)

    store.persistence.read_topic_persistence_info = counted  # type: ignore[method-assign]
    together = store.persistence.continue_topic_log
    outcomes: list[str] = []

    async def watched(*args: Any) -> Any:
        try:
            result = await together(*args)
        except BadVersionError:
            outcomes.append("conflict")
            raise
        outcomes.append("written")
        return result

    store.persistence.continue_topic_log = watched  # type: ignore[method-assign,assignment]
    new = make_log(store, storage)
    await new.open(known=claimed)
    assert outcomes == ["conflict"], "the one request, from the list as the claim read it"
    assert reads == ["t"], "read once: for the start over, not before the first attempt"
    assert new.last_seq == 5
    record = await read("t")
    assert record is not None and record.value == new.ranges
    got = await new.read(1, 100, 1 << 20)
    assert [m.value for x in got for m in x.messages.decode()] == [b"m%d" % i for i in range(5)]


async def test_a_take_over_that_loses_a_race_to_close_the_ledger_goes_step_by_step(
    store: MemoryMetadataStore, tmp_path: Path
) -> None:
    """A take-over records the close of the recovered ledger, its new ledger and the ledger
    list in one store request. If another recoverer closed the ledger first, that request
    writes nothing; the take-over reads again and goes step by step, keeping the close the
    other recorded, and loses nothing."""
    storage = LocalStorage(tmp_path, "h:1")
    old = make_log(store, storage)
    await old.open()
    for i in range(5):
        await old.append("p", 0, EncodedMessages.of_values([b"m%d" % i]))
    tail = old.ranges.ranges[-1].ledger_id
    new = make_log(store, storage)
    together = store.persistence.continue_topic_log
    calls: list[str] = []

    async def raced(*args: Any) -> Any:
        calls.append("together")
        # Another recoverer closes the ledger between this take-over's fence and its write.
        await recover_ledger(
            store.ledgers, LocalFirstReplicas(storage), tail, decode=Batch.from_stored
        )
        return await together(*args)

    store.persistence.continue_topic_log = raced  # type: ignore[method-assign,assignment]
    await new.open()
    assert calls == ["together"]
    assert new.last_seq == 5
    first, following = new.ranges.ranges
    assert (first.ledger_id, first.end_seq, following.start_seq) == (tail, 5, 6)
    record = await store.persistence.read_topic_persistence_info("t")
    assert record is not None and record.value == new.ranges
    b = await new.append("p", 0, EncodedMessages.of_values([b"after"]))
    assert b.first_seq == 6
    got = await new.read(1, 100, 1 << 20)
    assert [m.value for x in got for m in x.messages.decode()] == [
        *(b"m%d" % i for i in range(5)),
        b"after",
    ]
    # Without a race: one read of the record and one request, no second try.
    third = make_log(store, storage)
    reads: list[str] = []
    read = store.persistence.read_topic_persistence_info

    async def counted(topic: str) -> Any:
        reads.append(topic)
        return await read(topic)

    async def once(*args: Any) -> Any:
        calls.append("together")
        return await together(*args)

    store.persistence.continue_topic_log = once  # type: ignore[method-assign,assignment]
    store.persistence.read_topic_persistence_info = counted  # type: ignore[method-assign]
    await third.open()
    assert third.last_seq == 6 and len(third.ranges.ranges) == 3
    assert (reads, calls) == (["t"], ["together", "together"])


async def test_an_append_made_as_a_roll_over_ends_goes_after_those_it_held(
    store: MemoryMetadataStore, tmp_path: Path
) -> None:
    """Appends made during a roll-over wait for it; one made just as it ends (before they
    are woken: each wake-up takes turns of the loop) must still go after them. It took its
    sequence ids first, so a publisher's batch stored ahead of its earlier one waiting there
    (a history under load found a sender's message stored before one it sent earlier, at the
    first two sequence ids of a new ledger)."""
    storage = LocalStorage(tmp_path, "h:1")
    log = make_log(store, storage, ledger_max_bytes=1)  # every append rolls over after it
    await log.open()
    write = store.persistence.write_topic_persistence_info
    late: list[asyncio.Task[Batch]] = []

    async def naming_the_new_ledger_then_an_append(
        topic: str, ranges: LedgerRanges, version: Version
    ) -> Version:
        await asyncio.sleep(0.01)  # the roll-over takes time: an append comes and waits
        written = await write(topic, ranges, version)
        if ranges.ranges[-1].end_seq is None and not late:
            late.append(asyncio.create_task(log.append("p", 3, EncodedMessages.of_values([b"c"]))))
        return written

    store.persistence.write_topic_persistence_info = naming_the_new_ledger_then_an_append  # type: ignore[method-assign]
    await log.append("p", 1, EncodedMessages.of_values([b"a"]))  # a roll-over begins
    held = await log.append("p", 2, EncodedMessages.of_values([b"b"]))
    made_late = await late[0]
    assert (held.first_seq, made_late.first_seq) == (2, 3)
    got = await log.read(1, 10, 1 << 20)
    assert [m.value for b in got for m in b.messages.decode()] == [b"a", b"b", b"c"]
    await log.close()


async def test_roll_over_and_collect(store: MemoryMetadataStore, tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path, "h:1")
    log = make_log(store, storage, ledger_max_bytes=200, cache_bytes=100)
    await log.open()
    for i in range(20):
        await log.append("p", 0, EncodedMessages.of_values([b"m%02d" % i + b"." * 40]))
    await log.close()
    assert len(log.ranges.ranges) > 3
    # reads span ledgers and come from disk (the cache is tiny)
    got = await log.read(1, 1000, 1 << 20)
    assert [c.first_seq for c in got] == list(range(1, 21))
    dropped = await log.collect(11, retention_ms=0, retention_bytes=None)
    assert dropped and log.first_seq <= 11
    assert all(r.end_seq is None or r.end_seq >= 11 or r.start_seq > 11 for r in log.ranges.ranges)
    for lid in dropped:
        assert lid not in storage.ledgers()
    got = await log.read(1, 1000, 1 << 20)
    assert got[0].first_seq == log.first_seq


async def test_recover_empty_ledger(store: MemoryMetadataStore, tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path, "h:1")
    log = make_log(store, storage)
    await log.open()
    lid = log.ledger_id
    md = (await recover_ledger(store.ledgers, LocalFirstReplicas(storage), lid)).metadata
    assert md.state is LedgerState.CLOSED and md.last_entry_id == -1


class Unreachable:
    """A storage replica that cannot be reached: every request fails at once, or hangs."""

    def __init__(self, address: str, *, hang: bool = False) -> None:
        self.address = address
        self.hang = hang

    async def _fail(self) -> None:
        if self.hang:
            await asyncio.Event().wait()
        raise NotEnoughReplicasError(f"storage replica {self.address}: unreachable")

    async def add_entry(
        self, ledger_id: int, entry_id: int, lac: int, payload: bytes, *, recovery: bool = False
    ) -> None:
        await self._fail()

    async def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        await self._fail()
        raise AssertionError

    async def read_lac(self, ledger_id: int, *, fence: bool) -> tuple[int, int]:
        await self._fail()
        raise AssertionError

    def fence_soon(self, ledger_id: int) -> asyncio.Future[tuple[int, int]]:
        return asyncio.ensure_future(self.read_lac(ledger_id, fence=True))

    async def fenced(self, ledger_id: int) -> bool:
        await self._fail()
        raise AssertionError

    async def write_lacs(self, lacs: Sequence[tuple[int, int]]) -> None:
        await self._fail()

    async def delete_ledger(self, ledger_id: int) -> None:
        await self._fail()


class Cluster(Unsuspecting):
    """Storage replicas on disk by address, some of which can be cut off."""

    def __init__(self, root: Path, count: int) -> None:
        self.disks = {f"h:{i}": LocalStorage(root / str(i), f"h:{i}") for i in range(1, count + 1)}
        self.cut: dict[str, Unreachable] = {}

    def node(self, address: str) -> StorageNode:
        return self.cut.get(address) or self.disks[address]

    async def choose(self, size: int, minimum: int, avoid: frozenset[str]) -> list[str]:
        healthy = [a for a in self.disks if a not in avoid and a not in self.cut]
        return healthy[:size]


async def test_two_replicas_failing_at_once_start_one_roll_over(
    store: MemoryMetadataStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = Cluster(tmp_path, 5)
    suspects: list[int] = []
    log = TopicLog(
        "t",
        LogContext(
            store,
            cluster,
            "h:1",
            1,
            choose_ensemble=cluster.choose,
            on_suspect=lambda lid, _fragments: suspects.append(lid),
        ),
        ensemble=["h:1", "h:2", "h:3"],
        settings=LogSettings(replication=ReplicationConfig(3, 3, 1)),
    )
    await log.open()
    await log.append("p", 1, EncodedMessages.of_values([b"before"]))
    first = log.ledger_id
    # Both fail in the same turn of the event loop: one roll-over, to h:1, h:4, h:5.
    cluster.cut = {a: Unreachable(a) for a in ("h:2", "h:3")}
    await log.append("p", 2, EncodedMessages.of_values([b"during"]))
    # The next append waits for the roll-over, then goes to the new ledger.
    await log.append("p", 3, EncodedMessages.of_values([b"after"]))
    assert log.broken is None
    assert len(log.ranges.ranges) == 2
    md = await store.ledgers.read_ledger(log.ledger_id)
    assert md is not None and md.value.fragments[-1][1] == ("h:1", "h:4", "h:5")
    got = await log.read(1, 10, 1 << 20)
    assert [m.value for b in got for m in b.messages.decode()] == [b"before", b"during", b"after"]
    # The ledger closed after its replicas failed is the auditor's to check, not the new one.
    assert suspects == [first]
    await asyncio.sleep(0)
    assert "never retrieved" not in caplog.text and "roll-over failed" not in caplog.text


async def test_recovery_needs_only_the_replicas_the_quorums_require(
    store: MemoryMetadataStore, tmp_path: Path
) -> None:
    """3/3/2: two answers are enough to fence and recover; a third that hangs is not awaited."""
    cluster = Cluster(tmp_path, 3)
    settings = LogSettings(replication=ReplicationConfig(3, 3, 2))
    old = TopicLog(
        "t", LogContext(store, cluster, "h:1", 1), ensemble=["h:1", "h:2", "h:3"], settings=settings
    )
    await old.open()
    for i in range(5):
        await old.append("p", i + 1, EncodedMessages.of_values([b"m%d" % i]))
    cluster.cut = {"h:1": Unreachable("h:1", hang=True)}  # the old owner's own disk: gone
    new = TopicLog(
        "t",
        LogContext(store, cluster, "h:2", 1),
        ensemble=["h:2", "h:3"],
        settings=LogSettings(replication=ReplicationConfig(2, 2, 2)),
    )
    await asyncio.wait_for(new.open(), 5)
    assert new.last_seq == 5


class Recorder:
    """A storage replica whose requests are recorded: (address, operation, ledger, entry)."""

    def __init__(self, node: StorageNode, calls: list[tuple[str, str, int, int]]) -> None:
        self.node = node
        self.address = node.address
        self.calls = calls

    async def add_entry(
        self, ledger_id: int, entry_id: int, lac: int, payload: bytes, *, recovery: bool = False
    ) -> None:
        op = "write_back" if recovery else "add"
        self.calls.append((self.address, op, ledger_id, entry_id))
        await self.node.add_entry(ledger_id, entry_id, lac, payload, recovery=recovery)

    async def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        self.calls.append((self.address, "read", ledger_id, entry_id))
        return await self.node.read_entry(ledger_id, entry_id)

    async def read_lac(self, ledger_id: int, *, fence: bool) -> tuple[int, int]:
        self.calls.append((self.address, "fence" if fence else "read_lac", ledger_id, -1))
        return await self.node.read_lac(ledger_id, fence=fence)

    def fence_soon(self, ledger_id: int) -> asyncio.Future[tuple[int, int]]:
        self.calls.append((self.address, "fence", ledger_id, -1))
        return self.node.fence_soon(ledger_id)

    async def fenced(self, ledger_id: int) -> bool:
        return await self.node.fenced(ledger_id)

    async def write_lacs(self, lacs: Sequence[tuple[int, int]]) -> None:
        self.calls.extend((self.address, "write_lac", lid, lac) for lid, lac in lacs)
        await self.node.write_lacs(lacs)

    async def delete_ledger(self, ledger_id: int) -> None:
        await self.node.delete_ledger(ledger_id)


class Recorded(Cluster):
    """A cluster whose replicas record every request."""

    def __init__(self, root: Path, count: int) -> None:
        super().__init__(root, count)
        self.calls: list[tuple[str, str, int, int]] = []

    def node(self, address: str) -> StorageNode:
        return Recorder(super().node(address), self.calls)


@pytest.mark.parametrize("told", [True, False], ids=["told", "not-told"])
async def test_replicas_told_an_idle_ledgers_lac_spare_its_recovery_the_write_back(
    store: MemoryMetadataStore, tmp_path: Path, told: bool
) -> None:
    """Each add carries the LAC of the entries before it, so the last entry of a topic that
    went idle was confirmed without any replica knowing it, and the recovery of every take-over
    after a crash read it and wrote it back on every replica. A writer with nothing in flight
    now tells its replicas its LAC (WRITE_LACS, many ledgers to a frame): recovery then reads
    nothing forward and writes nothing back. Either way, recovery stops at the last entry any
    answering replica stores instead of asking every replica for the entry after it."""
    cluster = Recorded(tmp_path, 3)
    notices = LacNotices(cluster, delay_s=0.01)
    ensemble = ["h:1", "h:2", "h:3"]
    settings = LogSettings(replication=ReplicationConfig(3, 3, 2))
    old = TopicLog(
        "t",
        LogContext(store, cluster, "h:1", 1, on_idle=notices.idle if told else None),
        ensemble=ensemble,
        settings=settings,
    )
    await old.open()
    for i in range(3):
        await old.append("p", i + 1, EncodedMessages.of_values([b"m%d" % i]))
    lid = old.ledger_id
    disks = cluster.disks.values()
    if told:
        async with asyncio.timeout(5):
            while [await d.read_lac(lid, fence=False) for d in disks] != [(2, 2)] * 3:
                await asyncio.sleep(0.01)
        assert notices.sent == 3 and notices.failed == 0
    else:
        # What the adds carried: the LAC before the last entry.
        assert {(await d.read_lac(lid, fence=False))[0] for d in disks} == {1}
    cluster.calls.clear()
    new = TopicLog("t", LogContext(store, cluster, "h:2", 1), ensemble=ensemble, settings=settings)
    await new.open()
    assert new.last_seq == 3
    on_old = [c for c in cluster.calls if c[2] == lid]
    write_backs = [c for c in on_old if c[1] == "write_back"]
    if told:
        assert write_backs == []
    else:  # on the replicas that answered the fence (two or three of them)
        assert len(write_backs) >= 2 and {c[3] for c in write_backs} == {2}
    assert not [c for c in on_old if c[1] == "read" and c[3] > 2], "read past the stored end"
    got = await new.read(1, 10, 1 << 20)
    assert [m.value for b in got for m in b.messages.decode()] == [b"m0", b"m1", b"m2"]
    await notices.close()


@pytest.mark.parametrize("others_answer", [True, False], ids=["others-answer", "one-cut"])
async def test_recovery_fences_a_replica_that_failed_lately_only_if_the_others_fall_short(
    store: MemoryMetadataStore, tmp_path: Path, others_answer: bool
) -> None:
    """After a hub died, each recovery of its topics asked it too (a request, a failure and a
    task each, for every topic). The quorum rule needs ``E - Qa + 1`` answers, whichever
    replicas give them: one that failed lately is asked only when the others cannot."""
    cluster = Recorded(tmp_path, 3)
    settings = LogSettings(replication=ReplicationConfig(3, 3, 2))
    ensemble = ["h:1", "h:2", "h:3"]
    old = TopicLog("t", LogContext(store, cluster, "h:1", 1), ensemble=ensemble, settings=settings)
    await old.open()
    for i in range(3):
        await old.append("p", i + 1, EncodedMessages.of_values([b"m%d" % i]))
    lid = old.ledger_id
    cluster.suspected = lambda address: address == "h:3"  # type: ignore[method-assign]
    if not others_answer:
        cluster.cut = {"h:1": Unreachable("h:1")}
    cluster.calls.clear()
    new = TopicLog("t", LogContext(store, cluster, "h:2", 1), ensemble=ensemble, settings=settings)
    await new.open()
    assert new.last_seq == 3
    asked = {c[0] for c in cluster.calls if c[2] == lid and c[1] == "fence"}
    assert asked == ({"h:1", "h:2"} if others_answer else {"h:1", "h:2", "h:3"})
    fenced = {a for a, disk in cluster.disks.items() if await disk.fenced(lid)}
    assert fenced == ({"h:1", "h:2"} if others_answer else {"h:2", "h:3"})


async def test_a_writer_tells_only_what_it_confirmed(
    store: MemoryMetadataStore, tmp_path: Path
) -> None:
    """A LAC told is a promise that every entry up to it is on an ack quorum: a writer with an
    add in flight, a broken or a closed one tells nothing, and a replica keeps the highest LAC
    it learnt, ignores ledgers it does not hold (a notice that arrives after a deletion must
    not bring the ledger back) and forgets what it was told when it restarts (recovery then
    writes the end back, as before)."""
    cluster = Cluster(tmp_path, 3)
    notices = LacNotices(cluster, delay_s=60)
    settings = LogSettings(replication=ReplicationConfig(3, 3, 2))
    log = TopicLog(
        "t",
        LogContext(store, cluster, "h:1", 1, on_idle=notices.idle),
        ensemble=["h:1", "h:2", "h:3"],
        settings=settings,
    )
    await log.open()
    await log.append("p", 1, EncodedMessages.of_values([b"confirmed"]))
    lid = log.ledger_id
    # Two replicas hang: the next entry cannot be confirmed, nothing is told of it.
    cluster.cut = {a: Unreachable(a, hang=True) for a in ("h:2", "h:3")}
    stuck = asyncio.ensure_future(log.append("p", 2, EncodedMessages.of_values([b"in flight"])))
    await asyncio.sleep(0.05)
    await notices.tell()
    assert notices.sent == 0, "an add in flight: its replicas learn the LAC from the next add"
    stuck.cancel()
    cluster.cut = {}
    disk = cluster.disks["h:1"]
    # Entry 1 reached this replica carrying LAC 0; told 1 (as a writer would once it is
    # confirmed), it answers 1.
    await disk.write_lacs([(lid, 1), (424242, 7)])
    assert await disk.read_lac(lid, fence=False) == (1, 1)
    assert 424242 not in disk.ledgers()
    await disk.write_lacs([(lid, 0)])
    assert (await disk.read_lac(lid, fence=False))[0] == 1, "a LAC never goes back"
    await disk.close()
    restarted = LocalStorage(tmp_path / "1", "h:1")
    assert (await restarted.read_lac(lid, fence=False))[0] == 0, "known in memory only"
    await restarted.close()
    await notices.close()


async def test_a_frozen_replica_holds_back_only_its_own_lac_notices(
    store: MemoryMetadataStore, tmp_path: Path
) -> None:
    """A replica that hangs (frozen, or cut off: each frame waits out the storage timeout)
    must not hold back what the other replicas are told: each replica is told on its own,
    and what comes for the frozen one meanwhile waits, merged, for its answer."""
    cluster = Cluster(tmp_path, 3)
    notices = LacNotices(cluster, delay_s=0.01)

    def topic_log(name: str, ensemble: list[str]) -> TopicLog:
        return TopicLog(
            name,
            LogContext(store, cluster, "h:1", 1, on_idle=notices.idle),
            ensemble=ensemble,
            settings=LogSettings(replication=ReplicationConfig(len(ensemble), len(ensemble), 2)),
        )

    first = topic_log("t1", ["h:1", "h:2", "h:3"])
    await first.open()
    await first.append("p", 1, EncodedMessages.of_values([b"a"]))
    await first.append("p", 2, EncodedMessages.of_values([b"b"]))
    cluster.cut = {"h:3": Unreachable("h:3", hang=True)}  # frozen before it is told
    disks = cluster.disks
    async with asyncio.timeout(5):
        while (await disks["h:2"].read_lac(first.ledger_id, fence=False))[0] != 1:
            await asyncio.sleep(0.01)
    # A later round, while the frame to h:3 still hangs: h:1 and h:2 are told at once.
    second = topic_log("t2", ["h:1", "h:2"])
    await second.open()
    await second.append("p", 1, EncodedMessages.of_values([b"c"]))
    await second.append("p", 2, EncodedMessages.of_values([b"d"]))
    async with asyncio.timeout(5):
        while [
            (await disks[a].read_lac(second.ledger_id, fence=False))[0] for a in ("h:1", "h:2")
        ] != [1, 1]:
            await asyncio.sleep(0.01)
    assert (await disks["h:3"].read_lac(first.ledger_id, fence=False))[0] == 0
    await notices.close()


async def test_recovery_writes_back_on_a_stand_in_when_a_replica_is_gone(
    store: MemoryMetadataStore, tmp_path: Path
) -> None:
    """2/2/2: an entry reached one replica before the other went away. It may have been
    acknowledged, so recovery must keep it, which needs two copies: it writes the entry back
    on a stand-in replica and records the new fragment, instead of failing until the lost
    replica returns."""
    cluster = Cluster(tmp_path, 3)
    settings = LogSettings(replication=ReplicationConfig(2, 2, 2))
    old = TopicLog(
        "t", LogContext(store, cluster, "h:1", 1), ensemble=["h:1", "h:2"], settings=settings
    )
    await old.open()
    await old.append("p", 1, EncodedMessages.of_values([b"acked"]))
    cluster.cut = {"h:2": Unreachable("h:2")}
    with pytest.raises(NotEnoughReplicasError):
        await old.append("p", 2, EncodedMessages.of_values([b"on one replica only"]))
    lid = old.ledger_id
    new = TopicLog(
        "t",
        LogContext(store, cluster, "h:1", 2, choose_ensemble=cluster.choose),
        ensemble=["h:1", "h:3"],
        settings=settings,
    )
    await new.open()
    assert new.last_seq == 2
    md = await store.ledgers.read_ledger(lid)
    assert md is not None and md.value.state is LedgerState.CLOSED
    assert md.value.fragments == ((0, ("h:1", "h:2")), (1, ("h:1", "h:3")))
    assert await cluster.disks["h:3"].read_entry(lid, 1)
    got = await new.read(1, 10, 1 << 20)
    assert [m.value for b in got for m in b.messages.decode()] == [
        b"acked",
        b"on one replica only",
    ]


async def test_a_striped_ledger_replica_missing_its_entries_is_caught_up(
    store: MemoryMetadataStore, tmp_path: Path
) -> None:
    """3/2/2 (striped): each entry goes to two of three replicas. A replica that missed the
    entries of its write sets from entry 3 on is reported lagging and caught up."""
    cluster = Cluster(tmp_path, 3)
    names = ("h:1", "h:2", "h:3")
    for name in names:
        await store.hubs.register_hub(name, HubLoad(hub_id=name))
    # h:3 was away from entry 3 on
    closed = await closed_ledger(
        store, cluster, names, 6, write_quorum=2, held=lambda n, e: n != "h:3" or e < 3
    )
    md = closed
    health = await inspect(closed, cluster, set(names), wanted=3)
    expected = [e for e in range(3, 6) if "h:3" in write_set(md, e)]
    assert health.lagging == {"h:3": len(expected)} and not health.dead
    auditors = [
        Auditor(
            address=name,
            store=store,
            replicas=cluster,
            local=cluster.disks[name],
            wanted_size=lambda _t: _three(),
        )
        for name in names
    ]
    for auditor in auditors:
        await auditor.run_once()
    for e in expected:
        assert await cluster.disks["h:3"].read_entry(md.ledger_id, e) == b"e%d" % e
    assert sum(a.copied_bytes["catch-up"] for a in auditors) == 2 * len(expected)
    assert sum(a.copied_bytes["replace"] for a in auditors) == 0


async def _three() -> int:
    return 3


async def _one() -> int:
    return 1


def counted_ledger_reads(store: MemoryMetadataStore) -> list[int]:
    """The ids of the ledgers read from ``store`` from now on."""
    reads: list[int] = []
    read_ledger = store.ledgers.read_ledger

    async def counted(lid: int) -> Any:
        reads.append(lid)
        return await read_ledger(lid)

    store.ledgers.read_ledger = counted  # type: ignore[method-assign,assignment]
    return reads


async def closed_ledger(
    store: MemoryMetadataStore,
    cluster: Cluster,
    names: tuple[str, ...],
    entries: int,
    *,
    write_quorum: int = 3,
    held: Callable[[str, int], bool] = lambda _name, _entry: True,
) -> LedgerMetadata:
    """A closed ledger of topic ``t`` on the ensemble ``names`` (3/``write_quorum``/2), of
    ``entries`` entries, each on the replicas of its write set for which ``held(name,
    entry)``."""
    created = await store.ledgers.create_ledger(
        LedgerMetadata(
            ledger_id=0,
            topic="t",
            ensemble_size=3,
            write_quorum=write_quorum,
            ack_quorum=2,
            fragments=((0, names),),
        )
    )
    lid = created.value.ledger_id
    for entry in range(entries):
        for name in write_set(created.value, entry):
            if held(name, entry):
                await cluster.disks[name].add_entry(lid, entry, entry - 1, b"e%d" % entry)
    closed = replace(created.value, state=LedgerState.CLOSED, last_entry_id=entries - 1)
    await store.ledgers.write_ledger(closed, created.version)
    return closed


def first_hubs_auditor(
    store: MemoryMetadataStore,
    cluster: Cluster,
    clock: ManualClock,
    *,
    delay_s: float = 0.0,
    full_interval_s: float = 3600.0,
    last_claim_at: Callable[[], float] | None = None,
) -> Auditor:
    """The auditor of hub ``h:1`` of ``cluster``, which wants three replicas of every ledger."""
    return Auditor(
        address="h:1",
        store=store,
        replicas=cluster,
        local=cluster.disks["h:1"],
        wanted_size=lambda _t: _three(),
        clock=clock,
        delay_s=delay_s,
        full_interval_s=full_interval_s,
        last_claim_at=last_claim_at,
    )


def lone_hubs_auditor(
    store: MemoryMetadataStore,
    disk: LocalStorage,
    clock: ManualClock,
    *,
    full_interval_s: float = 3600.0,
) -> Auditor:
    """The auditor of ``disk``'s hub ``h:1``, alone in its region (1/1/1: it audits every
    ledger)."""
    return Auditor(
        address="h:1",
        store=store,
        replicas=LocalFirstReplicas(disk),
        local=disk,
        wanted_size=lambda _t: _one(),
        clock=clock,
        full_interval_s=full_interval_s,
    )


async def test_the_auditor_reads_every_ledger_only_when_something_can_have_changed(
    store: MemoryMetadataStore, tmp_path: Path
) -> None:
    """A full audit (every ledger of the share read, its replicas asked) is made when the
    region's membership changes, after one that left work, and every ``full_interval_s``; in
    between only the ledgers the hub suspects are looked at. (Every round read every ledger:
    at 100,000 topics thousands of reads a second, for ledgers that had not changed.)"""
    cluster = Cluster(tmp_path, 3)
    names = ("h:1", "h:2", "h:3")
    for name in names:
        await store.hubs.register_hub(name, HubLoad(hub_id=name))
    for _ in range(4):
        await closed_ledger(store, cluster, names, 4)
    reads = counted_ledger_reads(store)
    clock = ManualClock()
    auditor = first_hubs_auditor(store, cluster, clock)
    report = await auditor.run_once()
    assert auditor.full_audits == 1 and report.checked == len(reads) > 0
    reads.clear()
    await auditor.run_once()
    assert auditor.full_audits == 1 and reads == []  # nothing changed, nothing suspected

    # h:3 missed the last two entries
    lagging = await closed_ledger(store, cluster, names, 4, held=lambda n, e: n != "h:3" or e < 2)
    auditor.suspect(lagging.ledger_id)  # the hub that closed it saw h:3 fail a write
    report = await auditor.run_once()
    assert auditor.full_audits == 1 and reads == [lagging.ledger_id]
    assert report.repaired == 1
    assert await cluster.disks["h:3"].read_entry(lagging.ledger_id, 3) == b"e3"
    await auditor.run_once()
    assert auditor.full_audits == 2  # a round that repaired something is checked in full

    reads.clear()
    await auditor.run_once()
    assert auditor.full_audits == 2 and reads == []
    await store.hubs.register_hub("h:2", HubLoad(hub_id="h:2"))  # h:2 restarted: a new session
    await auditor.run_once()
    assert auditor.full_audits == 3
    await auditor.run_once()
    assert auditor.full_audits == 3
    clock.advance(3600)
    await auditor.run_once()
    assert auditor.full_audits == 4


async def test_ledgers_waiting_for_a_gone_hub_are_read_again_when_its_delay_ends(
    store: MemoryMetadataStore, tmp_path: Path
) -> None:
    """A gone hub's replicas are re-created elsewhere only after the delay: the auditor reads
    its share once, reports the ledgers as waiting every round, and reads them again when the
    delay ends, not every round until then (each survivor of a hub of 100,000 topics read and
    asked the replicas of its share of every ledger every round, through the failover)."""
    cluster = Cluster(tmp_path, 3)
    names = ("h:1", "h:2", "h:3")
    for name in names[:2]:
        await store.hubs.register_hub(name, HubLoad(hub_id=name))  # h:3 is gone
    for _ in range(6):
        await closed_ledger(store, cluster, names, 3, held=lambda n, _e: n != "h:3")
    reads = counted_ledger_reads(store)
    clock = ManualClock()
    auditor = first_hubs_auditor(store, cluster, clock, delay_s=60)
    report = await auditor.run_once()
    waiting = report.waiting
    assert auditor.full_audits == 1 and waiting == len(reads) > 0 and report.repaired == 0
    for _ in range(2):
        reads.clear()
        clock.advance(29)
        report = await auditor.run_once()
        assert auditor.full_audits == 1 and reads == []
        assert report.waiting == waiting, "still reported as waiting"
    clock.advance(3)  # the delay is over: h:3's replicas are lost, every ledger read again
    report = await auditor.run_once()
    assert auditor.full_audits == 2 and len(reads) == waiting
    assert report.waiting == 0 and len(report.under_replicated) == waiting


async def test_a_hub_going_calls_for_a_full_audit_after_the_take_overs_not_at_once(
    store: MemoryMetadataStore, tmp_path: Path
) -> None:
    """Nothing of a gone hub's can be re-created before the delay ends: its going brings a
    full audit ``DEPARTURE_AUDIT_AFTER_S`` later, not at once, and a suspect naming it waits
    for the audits (after a hub of 100,000 topics died, each survivor read and asked the
    replicas of its share of every ledger, and of every ledger it recovered, while taking the
    topics over). A suspect naming only live hubs is read at once; a hub coming back is
    audited at once."""
    cluster = Cluster(tmp_path, 4)
    names = ("h:1", "h:2", "h:3", "h:4")
    for name in names:
        await store.hubs.register_hub(name, HubLoad(hub_id=name))
    on_gone = [await closed_ledger(store, cluster, names[:3], 3) for _ in range(4)]
    elsewhere = await closed_ledger(store, cluster, ("h:1", "h:2", "h:4"), 3)
    reads = counted_ledger_reads(store)
    clock = ManualClock()
    auditor = first_hubs_auditor(store, cluster, clock, delay_s=60)
    await auditor.run_once()
    assert auditor.full_audits == 1

    await store.hubs.unregister_hub("h:3")
    clock.advance(5)
    reads.clear()
    for md in (*on_gone, elsewhere):
        auditor.suspect(md.ledger_id, md.fragments)  # recovered by this hub, say
    report = await auditor.run_once()
    assert auditor.full_audits == 1, "no full audit while the survivors take over"
    assert reads == [elsewhere.ledger_id] and report.repaired == 0
    assert report.hubs_waiting == 1  # known at once
    reads.clear()
    clock.advance(DEPARTURE_AUDIT_AFTER_S - 1)
    await auditor.run_once()
    assert auditor.full_audits == 1 and reads == []
    clock.advance(2)  # the take-overs had their time: the share is read, h:3's ledgers wait
    report = await auditor.run_once()
    assert auditor.full_audits == 2 and report.waiting > 0 and report.repaired == 0
    for md in on_gone:
        auditor.suspect(md.ledger_id, md.fragments)
    reads.clear()
    clock.advance(10)
    await auditor.run_once()
    assert auditor.full_audits == 2 and reads == [], "suspects naming h:3 wait for its delay"
    clock.advance(60)  # h:3 has been gone for the delay: its replicas are re-created now
    report = await auditor.run_once()
    assert auditor.full_audits == 3 and report.repaired > 0 and report.hubs_waiting == 0
    assert set(reads) >= {md.ledger_id for md in on_gone if md.ledger_id % 3 == 0}

    await store.hubs.register_hub(
        "h:3", HubLoad(hub_id="h:3")
    )  # back (a new session): audited at once
    clock.advance(1)
    await auditor.run_once()
    assert auditor.full_audits == 4


async def test_a_departure_audit_waits_while_this_hub_takes_topics_over_up_to_the_delay(
    store: MemoryMetadataStore, tmp_path: Path
) -> None:
    """The full audit a hub's going calls for is put off while this hub is still claiming
    topics (the gone hub's, taken over): in a failover of 100,000 topics it read every ledger
    of the share halfway through and took the take-overs' pace away. Once no claim came for
    ``TAKE_OVERS_QUIET_S`` it runs; and a hub that never stops claiming has it at the end of
    the re-replication delay, as every hub would."""
    cluster = Cluster(tmp_path, 4)
    names = ("h:1", "h:2", "h:3", "h:4")
    for name in names:
        await store.hubs.register_hub(name, HubLoad(hub_id=name))
    for _ in range(3):
        await closed_ledger(store, cluster, names[:3], 3)
    clock = ManualClock()
    claimed = [float("-inf")]
    auditor = first_hubs_auditor(
        store, cluster, clock, delay_s=120, last_claim_at=lambda: claimed[0]
    )
    await auditor.run_once()
    assert auditor.full_audits == 1

    await store.hubs.unregister_hub("h:3")
    await auditor.run_once()  # seen going
    for _ in range(3):  # rounds 30 s apart, a claim just before each
        clock.advance(30)
        claimed[0] = clock.monotonic() - 1
        await auditor.run_once()
    assert auditor.full_audits == 1, "put off while this hub takes topics over"
    clock.advance(15)  # 105 s: the take-overs ended, the delay (120 s) is not over
    claimed[0] = clock.monotonic() - TAKE_OVERS_QUIET_S - 1
    report = await auditor.run_once()
    assert auditor.full_audits == 2 and report.waiting > 0 and report.repaired == 0

    await store.hubs.register_hub(
        "h:3", HubLoad(hub_id="h:3")
    )  # back: audited at once, busy or not
    claimed[0] = clock.monotonic()
    await auditor.run_once()
    assert auditor.full_audits == 3
    await store.hubs.unregister_hub("h:3")  # gone again, and this hub claims all along
    await auditor.run_once()
    for _ in range(4):
        clock.advance(29)
        claimed[0] = clock.monotonic()
        await auditor.run_once()
    assert auditor.full_audits == 3, "still claiming, the delay not over (116 s)"
    clock.advance(5)
    claimed[0] = clock.monotonic()
    await auditor.run_once()
    assert auditor.full_audits == 4, "the delay's end does not wait"


async def one_entry_then_a_hanging_replica(
    store: MemoryMetadataStore, cluster: Cluster
) -> Versioned[LedgerMetadata]:
    """A ledger on h:1 and h:2 holding one entry, then h:1 cut off: it hangs (not yet known
    to be cut off)."""
    writer = TopicLog(
        "t",
        LogContext(store, cluster, "h:1", 1),
        ensemble=["h:1", "h:2"],
        settings=LogSettings(replication=ReplicationConfig(2, 2, 2)),
    )
    await writer.open()
    await writer.append("p", 1, EncodedMessages.of_values([b"kept"]))
    md = await store.ledgers.read_ledger(writer.ledger_id)
    assert md is not None
    cluster.cut = {"h:1": Unreachable("h:1", hang=True)}
    return md


async def test_a_read_does_not_wait_for_a_replica_that_hangs(
    store: MemoryMetadataStore, tmp_path: Path
) -> None:
    """The first replica asked for an entry hangs (cut off, not yet known to be): the next one
    is asked after ``SPECULATIVE_READ_S`` and its answer is taken, instead of waiting out a
    storage timeout. (A new owner reading a log's end back waited so during partitions.)"""
    cluster = Cluster(tmp_path, 2)
    md = await one_entry_then_a_hanging_replica(store, cluster)
    started = asyncio.get_running_loop().time()
    raw = await asyncio.wait_for(read_entry(cluster, md.value, 0), 5)
    assert raw and asyncio.get_running_loop().time() - started < SPECULATIVE_READ_S + 1.0


async def test_a_replica_outrun_by_a_speculative_read_is_tried_last(
    store: MemoryMetadataStore, tmp_path: Path
) -> None:
    """Once a hanging replica has been outrun, the next reads go to the others first instead
    of waiting ``SPECULATIVE_READ_S`` for it on every entry."""
    cluster = Cluster(tmp_path, 2)
    suspects: list[str] = []
    cluster.suspect = suspects.append  # type: ignore[method-assign,assignment]
    md = await one_entry_then_a_hanging_replica(store, cluster)
    await asyncio.wait_for(read_entry(cluster, md.value, 0), 5)
    assert suspects == ["h:1"]


async def test_a_roll_over_whose_closing_answer_is_lost_goes_on(
    store: MemoryMetadataStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compare-and-set that closes the full ledger lands, but its answer is lost (the
    metadata store's connection dropped, as under heavy load): the roll-over tries the write
    again, finds the ledger closed exactly as it meant to close it, and goes on, instead of
    taking its own write for another hub's recovery and refusing every later publish."""
    storage = LocalStorage(tmp_path, "h:1")
    log = make_log(store, storage, ledger_max_bytes=200)
    await log.open()
    ledgers = store.ledgers
    write_ledger = ledgers.write_ledger
    lost: list[int] = []

    async def write_then_lose_the_answer(md: LedgerMetadata, version: Version) -> Version:
        written = await write_ledger(md, version)
        if md.state is LedgerState.CLOSED and len(lost) < 2:
            lost.append(md.ledger_id)
            raise MetadataUnavailableError("connection lost after the write")
        return written

    monkeypatch.setattr(ledgers, "write_ledger", write_then_lose_the_answer)
    for i in range(20):
        await log.append("p", 0, EncodedMessages.of_values([b"m%02d" % i + b"." * 40]))
    assert len(lost) == 2 and log.broken is None
    await log.close()
    assert len(log.ranges.ranges) > 3
    got = await log.read(1, 1000, 1 << 20)
    assert [c.first_seq for c in got] == list(range(1, 21))
    # A log really taken over by another owner still cannot close: its recovery closed the
    # ledger (here where this writer would have), and the topic's record moved on.
    other = make_log(store, storage, ledger_max_bytes=1 << 20)
    await other.open()
    await other.append("p", 0, EncodedMessages.of_values([b"x"]))
    taken = make_log(store, storage, ledger_max_bytes=1 << 20)
    await taken.open()
    with pytest.raises(HedwigError):
        await other.close()
    assert taken.last_seq == 21


def test_ledger_metadata_json_holds_every_field_and_reads_back() -> None:
    """Every field is written, as JSON any reader takes (compact, keys sorted, odd strings
    escaped as JSON needs), and reads back; a field of the wrong type, a missing one or
    quorums that cannot be are a corrupt record."""
    import json

    md = LedgerMetadata(
        7, "a/b", 3, 3, 2, ((0, ("h1", "h2", "h3")), (5, ("h1", "h4", "h3"))),
        LedgerState.CLOSED, 9, 12, 345, "127.0.0.1:1", 4, 1000, 2000,
    )  # fmt: skip
    raw = md.to_json()
    assert set(json.loads(raw)) == set(LedgerMetadata.__struct_fields__)
    assert LedgerMetadata.from_json(raw) == md
    odd = replace(md, topic='a"b\\c\u00e9\u2603\n', owner="h\t1", fragments=((0, ('"x"',)),))
    fields = {name: getattr(odd, name) for name in LedgerMetadata.__struct_fields__}
    fields["state"] = odd.state.value
    fields["fragments"] = [[f, list(e)] for f, e in odd.fragments]
    written = odd.to_json()
    assert json.loads(written) == fields
    assert list(json.loads(written)) == sorted(fields) and b" " not in written
    # Only what is not ASCII differs from what ``json`` writes (UTF-8, not escaped).
    plain = replace(odd, topic='a"b\\c\n')
    fields["topic"] = plain.topic
    assert plain.to_json() == json.dumps(fields, separators=(",", ":"), sort_keys=True).encode()
    assert LedgerMetadata.from_json(written) == odd
    assert LedgerMetadata.from_json(raw, ledger_id=8) == replace(md, ledger_id=8)
    assert LedgerMetadata.from_json(raw[:-1] + b',"later":[1]}') == md  # a later field
    for corrupt in (
        raw.replace(b'"ack_quorum":2', b'"ack_quorum":"2"'),
        raw.replace(b'"ack_quorum":2,', b""),
        raw.replace(b'"ack_quorum":2', b'"ack_quorum":4'),
        raw.replace(b'"CLOSED"', b'"SHUT"'),
        raw[:-1],
        b"[]",
        b"",
    ):
        with pytest.raises(MetadataError, match=r"corrupt ledger metadata|ledger needs"):
            LedgerMetadata.from_json(corrupt)


def test_a_ledger_list_is_stored_as_arrays_and_reads_back() -> None:
    """A topic's ledger list is stored as ``{"ranges": [[ledger_id, start_seq, end_seq],
    ...]}`` (as it always was: records written before read alike), and reads back; an entry
    of the wrong shape or type is a corrupt record, a later field is ignored. Nothing at
    all is an empty list."""
    ranges = LedgerRanges((LedgerRange(7, 1, 10), LedgerRange(9, 11, 10), LedgerRange(12, 11)))
    raw = ranges.to_json()
    assert raw == b'{"ranges":[[7,1,10],[9,11,10],[12,11,null]]}'
    assert LedgerRanges.from_json(raw) == ranges
    assert LedgerRanges.from_json(b'{"ranges": [[12, 11]]}') == LedgerRanges((LedgerRange(12, 11),))
    assert LedgerRanges.from_json(b"") == LedgerRanges() == LedgerRanges.from_json(b"{}")
    # A later field, of the record or of an entry, is ignored.
    later = b'{"later":1,"ranges":[[7,1,10,4]]}'
    assert LedgerRanges.from_json(later) == LedgerRanges((LedgerRange(7, 1, 10),))
    assert ranges.close_tail(20).ranges[-1] == LedgerRange(12, 11, 20)
    assert ranges.with_tail(13, 21).last_seq == 10
    for corrupt in (
        b'{"ranges":[[7,"1",10]]}',
        b'{"ranges":[[7]]}',
        b'{"ranges":[{"ledger_id":7,"start_seq":1}]}',
        b'{"ranges":7}',
        raw[:-1],
    ):
        with pytest.raises(MetadataError, match="corrupt ledger ranges"):
            LedgerRanges.from_json(corrupt)


async def test_orphans_are_replicas_whose_metadata_is_gone_whatever_their_ids(
    store: MemoryMetadataStore, tmp_path: Path
) -> None:
    """A ledger made while the auditor lists the ledgers' metadata is no orphan, even with a
    lower id than ledgers already listed (ids come in blocks per hub): its replica is kept.
    A replica whose metadata was deleted is collected."""
    disk = LocalStorage(tmp_path / "d", "h:1")
    md = LedgerMetadata(0, "t", 1, 1, 1, ((0, ("h:1",)),))
    gone = await store.ledgers.create_ledger(md)
    await disk.add_entry(gone.value.ledger_id, 0, -1, b"old")
    await store.ledgers.delete_ledger(gone.value.ledger_id, gone.version)
    high = await store.ledgers.create_ledger(md)
    await disk.add_entry(high.value.ledger_id, 0, -1, b"kept")
    list_ledgers = store.ledgers.list_ledgers
    made: list[int] = []

    async def listing_while_another_hub_makes_one() -> list[int]:
        listed = await list_ledgers()
        lid = high.value.ledger_id - 1  # from another hub's block, below the listed ones
        await disk.add_entry(lid, 0, -1, b"acknowledged")  # metadata written, not listed
        made.append(lid)
        return listed

    store.ledgers.list_ledgers = listing_while_another_hub_makes_one  # type: ignore[method-assign]
    auditor = lone_hubs_auditor(store, disk, ManualClock())
    assert await auditor.collect_orphans() == [gone.value.ledger_id]
    assert await disk.read_entry(made[0], 0) == b"acknowledged"
    assert await disk.read_entry(high.value.ledger_id, 0) == b"kept"
    await disk.close()


async def test_ledgers_no_log_can_name_are_deleted_at_most_every_full_interval(
    store: MemoryMetadataStore, tmp_path: Path
) -> None:
    """Ledgers left over by a claim that died before its log named its ledger, or by a
    collection that died between letting a ledger go and deleting it: their metadata and
    replicas are deleted once the topic's record was written after they were made (nobody
    can name them again). Kept: the ledgers the log names, one made after the record's last
    write (its maker's compare-and-set could still succeed), one of a topic without a record,
    and one younger than the full-audit interval, until a later sweep."""
    disk = LocalStorage(tmp_path / "d", "h:1")
    await store.hubs.register_hub("h:1", HubLoad(hub_id="h:1"))
    clock = ManualClock()
    auditor = lone_hubs_auditor(store, disk, clock, full_interval_s=60)
    await auditor.run_once()  # the first full audit: no sweep so soon after start
    clock.advance(61)
    md = LedgerMetadata(0, "t", 1, 1, 1, ((0, ("h:1",)),))
    first, version = await store.persistence.start_topic_log("t", md)
    let_go = first.value.ledger_id
    await disk.add_entry(let_go, 0, -1, b"let go")
    await store.ledgers.write_ledger(
        replace(first.value, state=LedgerState.CLOSED, last_entry_id=0), first.version
    )
    dead_claim = (await store.ledgers.create_ledger(md)).value.ledger_id
    young = (await store.ledgers.create_ledger(replace(md, created_ms=clock.wall_ms()))).value
    tail = (await store.ledgers.create_ledger(md)).value.ledger_id
    version = await store.persistence.write_topic_persistence_info(
        "t", LedgerRanges((LedgerRange(let_go, 1, 1), LedgerRange(tail, 2))), version
    )
    await disk.add_entry(tail, 0, -1, b"named")
    # A collection lets the first ledger go, and dies before deleting it.
    await store.persistence.write_topic_persistence_info(
        "t", LedgerRanges((LedgerRange(tail, 2),)), version
    )
    maybe_named = (await store.ledgers.create_ledger(md)).value.ledger_id
    no_record = (await store.ledgers.create_ledger(replace(md, topic="u"))).value.ledger_id

    report = await auditor.run_once()
    assert sorted(report.left_over_deleted) == sorted([let_go, dead_claim])
    for lid in (let_go, dead_claim):
        assert await store.ledgers.read_ledger(lid) is None
    assert let_go not in disk.ledgers()
    for lid in (tail, maybe_named, no_record, young.ledger_id):
        assert await store.ledgers.read_ledger(lid) is not None
    assert await disk.read_entry(tail, 0) == b"named"

    await store.hubs.register_hub(
        "h:1", HubLoad(hub_id="h:1")
    )  # a new session: a full audit, no sweep
    report = await auditor.run_once()
    assert auditor.full_audits == 3 and report.left_over_deleted == []
    clock.advance(61)
    report = await auditor.run_once()
    assert report.left_over_deleted == [young.ledger_id]
    assert await store.ledgers.read_ledger(maybe_named) is not None
    await disk.close()


async def test_a_log_abandoned_before_any_append_leaves_the_record_as_it_found_it(
    store: MemoryMetadataStore, tmp_path: Path
) -> None:
    """A take-over that cannot read back the log's end gives the topic up: the new ledger its
    open made is taken out of the record and deleted, so trying again and again does not grow
    the record by a ledger each time."""
    storage = LocalStorage(tmp_path, "h:1")
    log = make_log(store, storage)
    await log.open()
    await log.append("p", 0, EncodedMessages.of_values([b"a"]))
    await log.close()
    before = await store.persistence.read_topic_persistence_info("t")
    assert before is not None
    made = []
    for _ in range(3):
        again = make_log(store, storage)
        await again.open()
        made.append(again.ledger_id)
        await again.abandon()
        assert again.broken is not None
        got = await store.persistence.read_topic_persistence_info("t")
        assert got is not None and got.value == before.value
    assert [await store.ledgers.read_ledger(lid) for lid in made] == [None, None, None]
    # Once something is appended, abandoning closes as usual: nothing is taken out.
    last = make_log(store, storage)
    await last.open()
    await last.append("p", 0, EncodedMessages.of_values([b"b"]))
    await last.abandon()
    got = await store.persistence.read_topic_persistence_info("t")
    assert got is not None and got.value.last_seq == 2
    await storage.close()


async def test_recovery_goes_on_once_enough_replicas_are_fenced() -> None:
    """Recovery asks every replica to fence and goes on once the quorum rules are met, with
    whatever else answers within ``FENCE_STRAGGLER_S``; a replica that hangs is not waited
    for (its request goes on in the background), and one that fails counts as no answer."""
    loop = asyncio.get_running_loop()
    late: dict[str, asyncio.Future[tuple[int, int] | None]] = {}

    def fencing(at_once: dict[str, tuple[int, int] | None]) -> Any:
        async def fence(address: str) -> tuple[int, int] | None:
            if address in at_once:
                return at_once[address]
            late[address] = loop.create_future()
            return await late[address]

        return fence

    # Two of three answer: the third gets the straggler's time, then is left in the background.
    started = loop.time()
    got = await _enough_fenced(7, ["a", "b", "c"], 2, fencing({"a": (4, 5), "b": (3, 5)}))
    waited = loop.time() - started
    assert got == {"a": (4, 5), "b": (3, 5)}
    assert FENCE_STRAGGLER_S * 0.9 <= waited < FENCE_STRAGGLER_S + 1.0
    late.pop("c").set_result((4, 6))
    await asyncio.sleep(0)
    assert got == {"a": (4, 5), "b": (3, 5)}  # what was returned does not change after
    # A straggler that answers within its time is counted.
    answering = asyncio.ensure_future(
        _enough_fenced(7, ["a", "b", "c"], 2, fencing({"a": (4, 5), "b": (3, 5)}))
    )
    await asyncio.sleep(0.01)
    late.pop("c").set_result((4, 6))
    assert await answering == {"a": (4, 5), "b": (3, 5), "c": (4, 6)}
    # Every replica answered or failed: no wait, short of the quorum or not.
    started = loop.time()
    assert await _enough_fenced(7, ["a", "b"], 2, fencing({"a": (1, 1), "b": None})) == {
        "a": (1, 1)
    }
    assert await _enough_fenced(7, ["a"], 1, fencing({"a": (2, 2)})) == {"a": (2, 2)}
    assert await _enough_fenced(7, ["a"], 1, fencing({"a": None})) == {}
    assert loop.time() - started < FENCE_STRAGGLER_S
