"""The conformance suite against a real ZooKeeper server."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionDropped,
    ConnectionLoss,
    UnimplementedError,
)
from kazoo.protocol.states import KeeperState
from kazoo.security import make_digest_acl
from msgspec.structs import replace

from hedwig.devcluster.zookeeper import ZooKeeperServer
from hedwig.errors import BadVersionError, MetadataError, MetadataUnavailableError
from hedwig.metadata import MetadataStore, SessionState
from hedwig.metadata.layout import Layout
from hedwig.metadata.plans import TopicPlan
from hedwig.metadata.records import NEW_VERSION, HubInfo, LedgerMetadata
from hedwig.metadata.topic_logs import first_ranges
from hedwig.metadata.zookeeper import ZkMetadataStore
from hedwig.metadata.zookeeper import store as zk_store
from hedwig.metadata.zookeeper.bridge import MAX_IN_FLIGHT, NodeExists, NoNode, Op, _Slots
from hedwig.metadata.zookeeper.multiread import MULTI_READ
from hedwig.metadata.zookeeper.sending import BatchingConnection, call
from tests.cycle_garbage import frames_left_for_the_collector
from tests.ledger_id_crash import ledger_ids_stay_unique_through_a_crash
from tests.metadata_conformance import MetadataConformance

pytestmark = pytest.mark.integration


@pytest.fixture
async def store(zk_server: ZooKeeperServer, region: str) -> AsyncIterator[MetadataStore]:
    s = ZkMetadataStore(zk_server.address, region, session_timeout=2.0)
    await s.start()
    yield s
    await s.close()


@pytest.fixture
async def other(zk_server: ZooKeeperServer, region: str) -> AsyncIterator[MetadataStore]:
    s = ZkMetadataStore(zk_server.address, region, session_timeout=2.0)
    await s.start()
    yield s
    await s.close()


async def expire_session(store: ZkMetadataStore) -> None:
    """Expire a session the way ZooKeeper's own tests do: a second client with its id closes."""
    sid, passwd = store.zk._client.client_id
    loop = asyncio.get_running_loop()

    def kill() -> None:
        twin = KazooClient(hosts=store.zk.hosts, client_id=(sid, passwd), timeout=2.0)
        twin.start(timeout=10)
        twin.stop()
        twin.close()

    await loop.run_in_executor(None, kill)


class TestZooKeeperStore(MetadataConformance):
    claims_read = False

    async def expire(self, store: MetadataStore) -> None:
        assert isinstance(store, ZkMetadataStore)
        await expire_session(store)

    async def test_layout_paths(self, store: MetadataStore, zk_server: ZooKeeperServer) -> None:
        """The tree is the one docs/zookeeper-layout.md describes."""
        assert isinstance(store, ZkMetadataStore)
        await store.topics.ensure_topic("a/b")
        base = store.layout.base
        names = await store.zk.children(f"{base}/topics")
        assert names == ["a%2Fb"]
        assert await store.zk.children(f"{base}/topics/a%2Fb") == ["subscribers"]

    async def test_plans_from_before_the_index_are_marked(
        self, store: MetadataStore, other: MetadataStore
    ) -> None:
        """A region written before ``planned/`` existed has plans under their topics and no
        marks: the first ``planned_topics`` marks them, once, and later deletions keep the
        index true."""
        assert isinstance(store, ZkMetadataStore)
        assert isinstance(other, ZkMetadataStore)
        layout = store.layout
        for t in ("old/1", "old/2", "plain"):
            await store.topics.ensure_topic(t)
            if t != "plain":  # as an older version wrote them: no mark
                await store.zk.create(
                    layout.plan(t), TopicPlan.fan_out(["h:1"], generation=1).to_json()
                )
        assert await store.zk.exists(layout.planned) is None
        assert await other.plans.planned_topics() == {"old/1", "old/2"}
        data, _ = await store.zk.get(layout.planned)
        assert data == b"indexed"
        got = await store.plans.read_plan("old/1")
        assert got is not None
        await store.plans.delete_plan("old/1", got.version)
        assert await store.plans.planned_topics() == {"old/2"}
        assert await store.zk.children(layout.planned) == ["old%2F2"]

    async def test_a_plan_is_never_left_without_its_mark(self, store: MetadataStore) -> None:
        """Plans created and deleted by two writers at once, over and over: whenever a plan
        exists, its topic is marked in ``planned/`` (hubs would not see it otherwise)."""
        assert isinstance(store, ZkMetadataStore)
        await store.topics.ensure_topic("race")
        plan = TopicPlan.fan_out(["h:1"], generation=1)

        rng = random.Random(7)

        async def churn(times: int) -> None:
            for _ in range(times):
                if rng.random() < 0.5:
                    with contextlib.suppress(BadVersionError, MetadataError):
                        await store.plans.write_plan("race", plan, NEW_VERSION)
                    continue
                got = await store.plans.read_plan("race")
                if got is not None:
                    with contextlib.suppress(BadVersionError, MetadataError):
                        await store.plans.delete_plan("race", got.version)

        ends = set()
        for _ in range(25):
            await asyncio.gather(churn(8), churn(8), churn(8))
            planned = await store.plans.read_plan("race") is not None
            ends.add(planned)
            if planned:
                assert "race" in await store.plans.planned_topics()
        assert ends == {True, False}  # both ends were reached

    async def test_ledger_ids_come_in_blocks_unique_across_hubs(
        self, store: MetadataStore, other: MetadataStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Two hubs making ledgers at once take blocks of ids from ``ledger-ids`` with
        compare-and-set: every id is unique, a hub takes a new block only when its own is used
        up, and the blocks start past every id the sequential znodes of the earlier scheme
        can give, so a hub of that scheme running beside them (a rolling upgrade) takes none
        of theirs."""
        assert isinstance(store, ZkMetadataStore) and isinstance(other, ZkMetadataStore)
        ledger = LedgerMetadata(0, "t", 1, 1, 1, ((0, ("h:1",)),), owner="h:1", owner_epoch=3)
        monkeypatch.setattr(zk_store, "LEDGER_ID_BLOCK", 8)
        old_path, _ = await store.zk.create(
            f"{store.layout.ledgers}/L", ledger.to_json(), sequence=True
        )
        old = Layout.ledger_id_of(old_path)
        made = await asyncio.gather(
            *(s.ledgers.create_ledger(ledger) for _ in range(20) for s in (store, other))
        )
        ids = [m.value.ledger_id for m in made]
        assert len(set(ids)) == 40 and old not in ids
        assert min(ids) == zk_store.FIRST_BLOCK_ID > old
        # 40 ids from blocks of 8: each hub took 3 blocks (24 ids for its 20), 6 in all.
        data, _ = await store.zk.get(store.layout.ledger_ids)
        assert int(data) == zk_store.FIRST_BLOCK_ID + 6 * 8
        assert sorted(await other.ledgers.list_ledgers()) == sorted([old, *ids])
        # A long listing is parsed on a thread (a region's: 1.3 million ledgers), the same way.
        monkeypatch.setattr(zk_store, "LEDGER_IDS_ON_THREAD", 1)
        assert await other.ledgers.list_ledgers() == sorted([old, *ids])
        for m in made:
            got = await other.ledgers.read_ledger(m.value.ledger_id)
            assert got is not None and got.value == m.value

    async def test_a_topic_log_starts_in_one_multi(self, store: MetadataStore) -> None:
        """The first ledger and the record naming it are made together: both or neither (a
        second start finds the record and fails as a compare-and-set does, leaving no ledger
        behind), and the record is not younger than its ledger (no sweep takes it)."""
        assert isinstance(store, ZkMetadataStore)
        first = LedgerMetadata(0, "t", 1, 1, 1, ((0, ("h:1",)),), owner="h:1", owner_epoch=3)
        await store.topics.ensure_topic("t")
        md, version = await store.persistence.start_topic_log("t", first)
        ranges = await store.persistence.read_topic_persistence_info("t")
        assert ranges is not None and ranges.version == version
        assert ranges.value == first_ranges(md.value.ledger_id)
        got = await store.ledgers.read_ledger(md.value.ledger_id)
        assert got is not None and got.value == md.value and got.version == md.version
        assert not await store.ledgers.left_over(md.value.ledger_id, "t")
        before = await store.ledgers.list_ledgers()
        with pytest.raises(BadVersionError):
            await store.persistence.start_topic_log("t", first)
        assert await store.ledgers.list_ledgers() == before


async def test_pools_with_their_own_digests_share_one_ensemble(tmp_path: Path) -> None:
    """Two secured pools (regions, each with its own ZooKeeper digest) on one ensemble: the
    first to start makes ``/hedwig`` so that the second may create its region beside it, and
    neither can change the other's tree. A ``/hedwig`` made only for the first pool's digest
    (as before) is opened up by that pool's next start."""
    with ZooKeeperServer(data_dir=str(tmp_path / "zk")) as zk:
        # As an older version left it: only pool a's digest may create under /hedwig.
        old = KazooClient(hosts=zk.address, auth_data=[("digest", "hedwig:a")])
        old.start(timeout=10)
        old.create("/hedwig", b"", acl=[make_digest_acl("hedwig", "a", all=True)])
        old.stop()
        old.close()
        a = ZkMetadataStore(zk.address, "pool-a", session_timeout=2.0, digest="hedwig:a")
        b = ZkMetadataStore(zk.address, "pool-b", session_timeout=2.0, digest="hedwig:b")
        await a.start()
        try:
            await b.start()  # refused (NoAuth at /hedwig/pool-b) before the root was opened
            try:
                await b.topics.ensure_topic("b-topic")
                assert await b.topics.topic_exists("b-topic")
                with pytest.raises(MetadataError, match="NoAuth"):
                    await b.zk.create("/hedwig/pool-a/topics/intruder")
                with pytest.raises(MetadataError, match="NoAuth"):
                    await b.zk.delete("/hedwig/pool-a/topics")
            finally:
                await b.close()
        finally:
            await a.close()


async def test_a_slot_given_back_passes_to_the_first_waiting_request() -> None:
    """A request takes a free slot without waiting (almost every one does); a slot given back
    while requests wait passes to the first of them, so a request arriving meanwhile cannot
    jump the queue; a waiter cancelled after a slot passed to it passes it on; when the
    connection drops, the waiters are refused."""
    bridge: Any = SimpleNamespace(state=SessionState.CONNECTED)
    slots = _Slots(2)
    assert slots.take_now() and slots.take_now()
    assert not slots.take_now()
    waiting = [asyncio.create_task(slots.take(bridge, f"/{i}")) for i in range(4)]
    await asyncio.sleep(0)
    slots.give()
    assert not slots.take_now()  # passed to the first waiter, which has not run yet
    await asyncio.sleep(0)
    assert [t.done() for t in waiting] == [True, False, False, False]
    assert slots.used == 2
    slots.give()
    waiting[1].cancel()  # passed a slot, cancelled before it runs: to the next one
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert waiting[1].cancelled() and waiting[2].done() and not waiting[3].done()
    assert slots.used == 2
    bridge.state = SessionState.SUSPENDED
    slots.wake_all()
    with pytest.raises(MetadataUnavailableError):
        await waiting[3]
    slots.give()
    slots.give()
    assert slots.used == 0 and slots.take_now()


async def test_requests_while_zookeeper_is_gone_never_block_the_event_loop(
    tmp_path: Path,
) -> None:
    """kazoo wakes its connection thread with a byte per request on a socket pair that holds
    278 of them; while ZooKeeper is unreachable nothing reads them, and the next request's
    send blocked the event loop for as long as the outage lasted (a 100,000-topic region whose
    ZooKeeper died had every hub stuck so). Now requests in flight when the connection drops
    are refused as unavailable, as before; later ones are refused at once while it is down
    (never handed to kazoo); watches wait here, unfired, and are set once it is back; the
    loop runs on throughout."""
    server = ZooKeeperServer(data_dir=str(tmp_path / "zk"))
    server.start()
    store = ZkMetadataStore(server.address, "gone", session_timeout=30.0)
    gaps: list[float] = []
    stop = asyncio.Event()

    async def heartbeat() -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while not stop.is_set():
            await asyncio.sleep(0.01)
            now = loop.time()
            gaps.append(now - last)
            last = now

    def reads() -> list[asyncio.Task[bool]]:
        return [
            asyncio.create_task(store.topics.topic_exists("here")) for _ in range(3 * MAX_IN_FLIGHT)
        ]

    try:
        await store.start()
        await store.topics.ensure_topic("here")
        beat = asyncio.create_task(heartbeat())
        cut = reads()  # some answered, some in flight when it goes, some waiting for a slot
        await asyncio.sleep(0)
        await asyncio.to_thread(server.kill)
        answers = await asyncio.wait_for(asyncio.gather(*cut, return_exceptions=True), 10)
        assert all(a is True or isinstance(a, MetadataUnavailableError) for a in answers)
        assert any(isinstance(a, MetadataUnavailableError) for a in answers)
        await asyncio.sleep(0.5)
        refused = await asyncio.wait_for(asyncio.gather(*reads(), return_exceptions=True), 1)
        assert all(isinstance(a, MetadataUnavailableError) for a in refused)
        # Watches too (each owned topic's owner record has one): set once ZooKeeper is back,
        # not fired meanwhile; these records do not exist, so each fires once it is set.
        fired: list[int] = []
        for i in range(3 * MAX_IN_FLIGHT):
            store.zk.watch(f"{store.layout.base}/none/{i}", functools.partial(fired.append, i))
        await asyncio.sleep(1.0)
        assert not fired
        assert max(gaps) < 0.5, f"the event loop stood still {max(gaps):.1f} s"
        await asyncio.to_thread(server.start)
        for _ in range(300):
            with contextlib.suppress(MetadataUnavailableError):
                if await store.topics.topic_exists("here"):
                    break
            await asyncio.sleep(0.1)
        assert all(await asyncio.gather(*reads()))
        assert await store.topics.topic_exists("here")
        for _ in range(300):
            if len(fired) == 3 * MAX_IN_FLIGHT:
                break
            await asyncio.sleep(0.1)
        assert sorted(fired) == list(range(3 * MAX_IN_FLIGHT))
        stop.set()
        await beat
    finally:
        stop.set()
        await store.close()
        server.stop()


async def test_ledger_ids_stay_unique_through_a_zookeeper_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tests/ledger_id_crash.py`` on ZooKeeper (the ``ledger-ids`` znode)."""
    monkeypatch.setattr(zk_store, "LEDGER_ID_BLOCK", 3)
    server = ZooKeeperServer(data_dir=str(tmp_path / "zk"))
    server.start()
    try:
        await ledger_ids_stay_unique_through_a_crash(
            [ZkMetadataStore(server.address, "ids", session_timeout=20.0) for _ in range(2)],
            server.kill,
            server.start,
        )
    finally:
        server.stop()


async def test_claims_are_tried_the_way_the_last_one_needed(
    store: MetadataStore, other: MetadataStore
) -> None:
    """After a claim of an existing topic the next claim writes the owner record alone (a
    transaction of one operation), no ``multi`` making the topic first (a failover's
    take-overs each made one that failed); a new topic met then is still created, and claims
    go back to the ``multi`` after it."""
    assert isinstance(store, ZkMetadataStore)
    for name in ("old-1", "old-2"):
        await other.topics.ensure_topic(name)
    multis: list[int] = []
    real = store.zk.transaction

    async def counted(ops: Sequence[Op]) -> list[BaseException | None]:
        multis.append(len(ops))
        return await real(ops)

    store.zk.transaction = counted  # type: ignore[method-assign]
    owner = HubInfo("127.0.0.1:9", 3)
    first = await store.ownership.claim_topic("old-1", owner)
    assert first.version is not None and not first.new and multis == [3, 1]
    second = await store.ownership.claim_topic("old-2", owner)
    assert second.version is not None and not second.new and multis == [3, 1, 1], "no multi"
    made = await store.ownership.claim_topic("new-1", owner)
    assert made.version is not None and made.new and multis == [3, 1, 1, 1, 3]
    assert await other.topics.topic_exists("new-1")
    await store.ownership.claim_topic("new-2", owner)
    assert multis == [3, 1, 1, 1, 3, 3], "after a new topic, the multi first again"
    refused = await other.ownership.claim_topic("old-1", HubInfo("h2:1", 4))
    assert refused.version is None and refused.owner is not None
    assert refused.owner.value == owner
    # A first ledger rides along: the topic, its record, ledger and log in one multi.
    md = LedgerMetadata(0, "new-3", 1, 1, 1, ((0, ("h:1",)),), owner="127.0.0.1:9", owner_epoch=3)
    started = await store.ownership.claim_topic("new-3", owner, md)
    assert started.new and started.log is not None and multis == [3, 1, 1, 1, 3, 3, 5]


async def test_a_claim_whose_first_ledger_id_is_taken_claims_alone(store: MetadataStore) -> None:
    """An id given twice (never, unless ledger id blocks overlap) puts the first ledger's node
    in the way of a claim that carries it: the claim goes alone, the topic is claimed and new,
    it has no log yet (its take-over starts one in steps), and the ledger there is untouched."""
    assert isinstance(store, ZkMetadataStore)
    owner = HubInfo("127.0.0.1:9", 3)
    md = LedgerMetadata(0, "twice", 1, 1, 1, ((0, ("h:1",)),), owner="127.0.0.1:9", owner_epoch=3)
    there = await store.ledgers.create_ledger(replace(md, topic="someone-else"))
    real = store.ledgers.new_id
    given = [there.value.ledger_id]

    async def twice() -> int:
        return given.pop() if given else await real()

    store.ledgers.new_id = twice  # type: ignore[method-assign]
    claim = await store.ownership.claim_topic("twice", owner, md)
    assert claim.version is not None and claim.new and claim.log is None
    assert await store.persistence.read_topic_persistence_info("twice") is None
    still = await store.ledgers.read_ledger(there.value.ledger_id)
    assert still is not None and still.value == there.value
    owned = await store.ownership.read_owner_info("twice")
    assert owned is not None and owned.value == owner


async def _existence_asked_at_once(store: MetadataStore, prefix: str, counted: str) -> int:
    """Asks whether 150 topics exist, all at once (every other one made first), checks each
    answer, and says how many times the connection's method ``counted`` ran meanwhile."""
    assert isinstance(store, ZkMetadataStore)
    names = [f"{prefix}-{i}" for i in range(150)]
    for name in names[1::2]:
        await store.topics.ensure_topic(name)
    connection = store.zk._client._connection
    real = getattr(connection, counted)
    calls = 0

    def counting(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        return real(*args)

    setattr(connection, counted, counting)
    try:
        got = await asyncio.gather(*(store.topics.topic_exists(n) for n in names))
    finally:
        delattr(connection, counted)
    assert got == [i % 2 == 1 for i in range(len(names))]
    return calls


async def test_answers_that_arrive_together_are_read_together(store: MetadataStore) -> None:
    """Answers to requests made at once are read from the socket as they arrive, several to
    a ``recv``, not two ``recv`` calls each (kazoo read each answer's length, then its body,
    each after a ``poll``), and each request still gets its own answer."""
    receives = await _existence_asked_at_once(store, "read-together", "_receive")
    # ZooKeeper answers as it goes, so how many arrive together varies (64 reads here on a
    # quiet machine); kazoo read each answer in two.
    assert receives < 150, f"{receives} reads for 150 answers"


async def _owners_read_at_once(
    store: ZkMetadataStore, prefix: str, count: int
) -> tuple[list[Any], int]:
    """Reads the owner records of ``count`` topics at once, every other one written first;
    checks what was read, returns it and the number of requests the reads took."""
    names = [f"{prefix}-{i}" for i in range(count)]
    for name in names[1::2]:
        await store.topics.ensure_topic(name)
        await store.ownership.write_owner_info(name, HubInfo(f"h:{name}", 1), NEW_VERSION)
    connection = store.zk._client._connection
    before = connection._xid
    got = await asyncio.gather(
        *(store.ownership.read_owner_info(n) for n in names), return_exceptions=True
    )
    requests = connection._xid - before
    for i, (name, read) in enumerate(zip(names, got, strict=True)):
        if isinstance(read, BaseException):
            continue
        if i % 2:
            assert read is not None and read.value == HubInfo(f"h:{name}", 1), (name, read)
        else:
            assert read is None, (name, read)
    return got, requests


async def test_reads_made_together_go_to_zookeeper_in_one_request(store: MetadataStore) -> None:
    """Records read in one turn of the loop (a survivor of a failover reads three for each of
    hundreds of topics at once) are read with one ``multiRead`` per 64, not a request each
    (``hedwig.metadata.zookeeper.multiread``); a record that does not exist is ``None`` and
    the others are still read; a read alone is one request too."""
    assert isinstance(store, ZkMetadataStore)
    got, requests = await _owners_read_at_once(store, "together-read", 150)
    assert not any(isinstance(r, BaseException) for r in got)
    assert requests == 3  # 64 + 64 + 22
    connection = store.zk._client._connection
    before = connection._xid
    assert await store.ownership.read_owner_info("together-read-1") is not None
    assert connection._xid - before == 1


async def test_a_record_read_missing_leaves_nothing_for_the_cycle_collector(
    store: MetadataStore,
) -> None:
    """A missing record is read as ``None``, not as an exception set on the read's future:
    the reader's frame held the future, the future the exception and its traceback, and the
    traceback the frame, a cycle for the cycle collector (a claim wave reads thousands of
    missing records a second)."""
    assert isinstance(store, ZkMetadataStore)
    with frames_left_for_the_collector() as frames:
        missing = [f"never-{i}" for i in range(20)]
        got = await asyncio.gather(*(store.ownership.read_owner_info(n) for n in missing))
        alone = await store.ownership.read_owner_info("never-alone")
    assert got == [None] * 20 and alone is None
    assert frames == []


async def test_reads_go_one_by_one_to_a_zookeeper_that_cannot_read_together(
    store: MetadataStore,
) -> None:
    """A ZooKeeper older than 3.6 refuses a ``multiRead`` as unimplemented: the reads it held
    are sent again one by one, and so is every later one (the refusal is played here on the
    client's side: the server under test knows ``multiRead``)."""
    assert isinstance(store, ZkMetadataStore)
    client = store.zk._client
    real = client._call
    refused = 0

    def old_server(request: Any, answer: Any) -> Any:
        nonlocal refused
        if request.type == MULTI_READ:
            refused += 1
            answer.set_exception(UnimplementedError())
            return None
        return real(request, answer)

    client._call = old_server  # type: ignore[method-assign,assignment]
    try:
        got, requests = await _owners_read_at_once(store, "old-server", 100)
        assert requests == 100  # one by one (the refused two never reached the connection)
        assert not any(isinstance(r, BaseException) for r in got)
        assert refused == 2  # 64 and 36, both sent before the first refusal came back
        got, requests = await _owners_read_at_once(store, "old-server-later", 20)
        assert requests == 20
        assert not any(isinstance(r, BaseException) for r in got)
        assert refused == 2
    finally:
        del client._call


async def test_reads_together_when_the_connection_drops_each_end(
    zk_server: ZooKeeperServer, region: str
) -> None:
    """The connection drops while reads sent together are in flight: each ends, read or
    unavailable; none waits for good, and reads together work on the next connection."""
    store = ZkMetadataStore(zk_server.address, region, session_timeout=10.0)
    await store.start()
    connection = store.zk._client._connection
    real = connection._write
    dropped = threading.Event()

    def failing(msg: bytes, timeout: float) -> None:
        if not dropped.is_set() and msg[8:12] == MULTI_READ.to_bytes(4, "big"):
            dropped.set()
            raise ConnectionDropped("dropped by the test")
        real(msg, timeout)

    try:
        for i in range(1, 80, 2):
            await store.topics.ensure_topic(f"drop-{i}")
        connection._write = failing
        names = [f"drop-{i}" for i in range(80)]
        got = await asyncio.wait_for(
            asyncio.gather(
                *(store.ownership.read_owner_info(n) for n in names), return_exceptions=True
            ),
            20,
        )
        assert dropped.is_set()
        assert all(r is None or isinstance(r, MetadataUnavailableError) for r in got), got
        assert any(isinstance(r, MetadataUnavailableError) for r in got)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while True:
            try:
                got, _ = await _owners_read_at_once(store, "drop-again", 80)
                if not any(isinstance(r, BaseException) for r in got):
                    break
            except MetadataUnavailableError:
                pass
            assert loop.time() < deadline, "the client never read again"
            await asyncio.sleep(0.1)
    finally:
        with contextlib.suppress(AttributeError):
            del connection._write
        await store.close()


def test_an_answer_is_cut_from_what_arrived_whatever_the_pieces() -> None:
    """Bytes arrive as the network splits them: an answer spread over several reads is put
    together, several in one read are handed out one by one, and a whole answer is known to
    be there before the socket is waited on again."""
    frames = [b"a" * 7, b"", b"b" * 300, b"c"]
    wire = b"".join(len(f).to_bytes(4, "big") + f for f in frames)
    pieces = [wire[:3], wire[3:9], wire[9:200], wire[200:]]

    class Socket:
        def recv(self, n: int) -> bytes:
            return pieces.pop(0)

    class Handler:
        def select(
            self, r: list[object], w: object, x: object, timeout: float
        ) -> tuple[list[object], list[object], list[object]]:
            return r, [], []

    connection = object.__new__(BatchingConnection)
    connection._socket = Socket()
    connection.handler = Handler()
    got = []
    for _ in frames:
        length = int.from_bytes(connection._read(4, 1.0), "big")
        got.append(connection._read(length, 1.0))
        if pieces == [] and len(got) < len(frames):
            assert connection._whole_answer_read()
    assert got == frames and not pieces
    assert not connection._whole_answer_read()
    pieces.append(b"\0\0\0\2xy")
    assert connection._read(4, 1.0) == b"\0\0\0\2"  # "xy" left unread: the connection drops
    connection._socket = Socket()  # a new one: nothing of the old one is handed out
    pieces.append(b"\0\0\0\1z")
    assert connection._read(4, 1.0) == b"\0\0\0\1" and connection._read(1, 1.0) == b"z"


async def test_a_wake_up_that_finds_the_client_closing_answers_its_request_once() -> None:
    """The byte that wakes kazoo's thread is written once the turn that queued a request
    ends; by then the client may be closing. The request is failed there only if it is still
    queued: kazoo fails what is queued as a connection closes, and a request answered twice
    gave its ZooKeeper slot back twice. (The race with kazoo's closing thread cannot be
    timed against a server; the client's queue and socket pair stand in here.)"""

    class Closed:
        def send(self, data: bytes) -> int:
            raise OSError("closed")

    class Answers:
        def __init__(self) -> None:
            self.errors: list[BaseException] = []

        def set_exception(self, exc: BaseException) -> None:
            self.errors.append(exc)

    def client() -> Any:
        connection = SimpleNamespace(armed=True, _write_sock=Closed())
        return SimpleNamespace(_state=KeeperState.CONNECTED, _queue=deque(), _connection=connection)

    def closing(c: Any) -> None:  # what kazoo does to what is queued when a connection closes
        while c._queue:
            _, answer = c._queue.popleft()
            answer.set_exception(ConnectionLoss())

    # Still queued when the wake-up fails: failed there, taken out of the queue.
    c, first, second = client(), Answers(), Answers()
    call(c, "first", first)
    call(c, "second", second)  # the same turn: no wake-up of its own
    await asyncio.sleep(0)
    closing(c)
    assert [type(e) for e in first.errors] == [ConnectionClosedError]
    assert [type(e) for e in second.errors] == [ConnectionLoss]
    assert c._connection.armed  # the next request tries to wake the thread again
    # Failed by kazoo before the wake-up ran: not answered again.
    c, only = client(), Answers()
    call(c, "only", only)
    closing(c)
    await asyncio.sleep(0)
    assert [type(e) for e in only.errors] == [ConnectionLoss]


async def test_requests_made_together_go_to_zookeeper_together(store: MetadataStore) -> None:
    """Requests the event loop makes at once reach ZooKeeper in a few writes, not one each
    (``hedwig.metadata.zookeeper.sending``), and each gets its own answer."""
    writes = await _existence_asked_at_once(store, "together", "_write")
    assert writes <= 150 // 3, f"{writes} writes for 150 requests"


async def test_a_connection_lost_while_a_batch_is_written_leaves_the_client_sending(
    zk_server: ZooKeeperServer, region: str
) -> None:
    """The connection drops while kazoo's thread writes a batch of requests, and more are
    queued meanwhile, writing no wake-up byte (``hedwig.metadata.zookeeper.sending``). Every
    request of both waves ends (answered, or unavailable: kazoo fails what is pending or
    queued when a connection is lost), none waits for good, and on the next connection
    requests made at once are sent and answered: the thread is not left unarmed. The
    session lives on."""
    store = ZkMetadataStore(zk_server.address, region, session_timeout=10.0)
    await store.start()
    try:
        for i in range(0, 60, 2):
            await store.topics.ensure_topic(f"w/{i}")
        connection = store.zk._client._connection
        real = connection._write
        dropped = threading.Event()

        def failing(msg: bytes, timeout: float) -> None:
            if not dropped.is_set() and len(msg) > 500:  # the first batch of many
                dropped.set()
                time.sleep(0.3)  # the event loop queues the second wave meanwhile
                raise ConnectionDropped("dropped by the test")
            real(msg, timeout)

        connection._write = failing
        names = [f"w/{i}" for i in range(60)]
        expected = [i % 2 == 0 for i in range(60)]
        first = asyncio.gather(
            *(store.topics.topic_exists(n) for n in names[:40]), return_exceptions=True
        )
        await asyncio.to_thread(dropped.wait, 5)
        second = asyncio.gather(
            *(store.topics.topic_exists(n) for n in names[40:]), return_exceptions=True
        )
        got = [*await asyncio.wait_for(first, 20), *await asyncio.wait_for(second, 20)]
        assert dropped.is_set()
        assert any(isinstance(r, MetadataUnavailableError) for r in got)
        for i, r in enumerate(got):
            assert isinstance(r, MetadataUnavailableError) or r == expected[i], (i, r)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while True:
            try:
                again = await asyncio.gather(*(store.topics.topic_exists(n) for n in names))
                break
            except MetadataUnavailableError:
                assert loop.time() < deadline, "the client never sent again"
                await asyncio.sleep(0.1)
        assert again == expected
        assert store.session.state is SessionState.CONNECTED
    finally:
        with contextlib.suppress(AttributeError):
            del store.zk._client._connection._write
        await store.close()


async def _transactions_at_once(
    bridge: Any, transactions: Sequence[Sequence[Op]]
) -> tuple[list[list[BaseException | None]], int]:
    """Makes every transaction in one turn; their outcomes and the requests they took."""
    connection = bridge._client._connection
    before = connection._xid
    got = await asyncio.gather(*(bridge.transaction(ops) for ops in transactions))
    return list(got), connection._xid - before


async def test_transactions_made_together_go_to_zookeeper_together(
    store: MetadataStore, region: str
) -> None:
    """Transactions made in one turn of the loop (a wave of claims or take-overs) go as one
    ``multi`` per 128 operations, not a request each
    (``hedwig.metadata.zookeeper.multiwrite``); each takes effect; one alone goes alone."""
    assert isinstance(store, ZkMetadataStore)
    base = f"/writes-together-{region}"
    await store.zk.ensure_path(base)
    transactions = [
        [Op("create", f"{base}/t{i}", value=b"x"), Op("create", f"{base}/t{i}/c", value=b"y")]
        for i in range(100)
    ]
    got, requests = await _transactions_at_once(store.zk, transactions)
    assert got == [[None, None]] * 100
    assert requests == 2  # 64 transactions of two operations, then 36
    assert sorted(await store.zk.children(base)) == sorted(f"t{i}" for i in range(100))
    assert (await store.zk.get(f"{base}/t99/c"))[0] == b"y"
    got, requests = await _transactions_at_once(store.zk, [[Op("delete", f"{base}/t0/c")]])
    assert got == [[None]] and requests == 1


async def test_a_transaction_that_fails_among_others_fails_alone(
    store: MetadataStore, region: str
) -> None:
    """Sent together, transactions stay independent: one that fails (its node exists, a
    version moved on, its parent is missing) gets the answer it would have had alone, with its
    other operations rolled back, and every other one takes effect. Two in one turn that race
    for one node: exactly one wins."""
    assert isinstance(store, ZkMetadataStore)
    base = f"/writes-apart-{region}"
    await store.zk.ensure_path(base)
    await store.zk.create(f"{base}/taken", b"old")
    await store.zk.create(f"{base}/versioned", b"v0")
    transactions: list[list[Op]] = [[Op("create", f"{base}/ok{i}", value=b"ok")] for i in range(20)]
    transactions[3] = [
        Op("create", f"{base}/before-taken", value=b"z"),
        Op("create", f"{base}/taken", value=b"new"),
    ]
    transactions[7] = [Op("set", f"{base}/versioned", version=5, value=b"v?")]
    transactions[11] = [Op("create", f"{base}/no-parent/child", value=b"z")]
    transactions[15] = [Op("create", f"{base}/raced", value=b"first")]
    transactions[16] = [Op("create", f"{base}/raced", value=b"second")]
    got, requests = await _transactions_at_once(store.zk, transactions)
    assert isinstance(got[3][0], MetadataError) and "rolled back" in str(got[3][0])
    assert isinstance(got[3][1], NodeExists)
    assert isinstance(got[7][0], BadVersionError)
    assert isinstance(got[11][0], NoNode)
    # The two for one znode never share a request: the one sent first in time wins.
    won = [i for i in (15, 16) if got[i] == [None]]
    assert len(won) == 1 and isinstance(got[31 - won[0]][0], NodeExists), got[15:17]
    apart = {3, 7, 11, 15, 16}
    assert all(got[i] == [None] for i in range(20) if i not in apart), got
    # Each failure settles its own and the rest go again together: 0-15 in a request, 16-19
    # in another (16 and 15 make one znode), then 0-15 without 3, without 7, without 11.
    assert 5 <= requests <= 6
    names = set(await store.zk.children(base))
    assert names == {"taken", "versioned", "raced"} | {
        f"ok{i}" for i in range(20) if i not in apart
    }
    assert (await store.zk.get(f"{base}/taken"))[0] == b"old"
    assert (await store.zk.get(f"{base}/versioned"))[0] == b"v0"
    assert (await store.zk.get(f"{base}/raced"))[0] == (b"first" if won == [15] else b"second")


async def test_transactions_together_when_the_connection_drops_each_end(
    zk_server: ZooKeeperServer, region: str
) -> None:
    """The connection drops while transactions sent together are in flight: each ends,
    made or unavailable (its outcome unknown, as any request's in flight); none waits for
    good, and transactions go together again on the next connection."""
    store = ZkMetadataStore(zk_server.address, region, session_timeout=10.0)
    await store.start()
    base = f"/writes-dropped-{region}"
    await store.zk.ensure_path(base)
    connection = store.zk._client._connection
    real = connection._write
    dropped = threading.Event()

    def failing(msg: bytes, timeout: float) -> None:
        if not dropped.is_set() and msg[8:12] == (14).to_bytes(4, "big"):  # multi
            dropped.set()
            raise ConnectionDropped("dropped by the test")
        real(msg, timeout)

    try:
        connection._write = failing
        transactions = [[Op("create", f"{base}/d{i}", value=b"x")] for i in range(40)]
        got = await asyncio.wait_for(
            asyncio.gather(
                *(store.zk.transaction(t) for t in transactions), return_exceptions=True
            ),
            20,
        )
        assert dropped.is_set()
        assert all(isinstance(r, MetadataUnavailableError) for r in got), got
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        attempt = 0
        while True:
            attempt += 1  # names of its own: a failed attempt may have made some
            try:
                again = [[Op("create", f"{base}/a{attempt}-{i}", value=b"x")] for i in range(40)]
                made, requests = await _transactions_at_once(store.zk, again)
                break
            except MetadataUnavailableError:
                pass
            assert loop.time() < deadline, "the client never wrote again"
            await asyncio.sleep(0.1)
        assert made == [[None]] * 40 and requests == 1
    finally:
        with contextlib.suppress(AttributeError):
            del connection._write
        await store.close()
