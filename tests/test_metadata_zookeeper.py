"""The conformance suite against a real ZooKeeper server."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from msgspec.structs import replace

from hedwig.devcluster.zookeeper import ZooKeeperServer
from hedwig.errors import BadVersionError, MetadataError, MetadataRefusedError
from hedwig.metadata import MetadataStore
from hedwig.metadata.layout import Layout
from hedwig.metadata.plans import TopicPlan
from hedwig.metadata.records import NEW_VERSION, HubInfo, LedgerMetadata
from hedwig.metadata.topic_logs import first_ranges
from hedwig.metadata.zookeeper import ZkMetadataStore
from hedwig.metadata.zookeeper import ledgers as zk_ledgers
from hedwig.metadata.zookeeper.client import NodeExists, NoNode, Op, ZkClient
from hedwig.metadata.zookeeper.client.connection import Answer
from hedwig.metadata.zookeeper.client.multi import MultiReadRequest
from hedwig.metadata.zookeeper.client.reads import UNIMPLEMENTED
from hedwig.metadata.zookeeper.client.records import Request
from hedwig.metadata.zookeeper.regions import make_region
from tests.bundle_conformance import BundleConformance
from tests.cycle_garbage import frames_left_for_the_collector
from tests.metadata_conformance import MetadataConformance
from tests.namespace_conformance import NamespaceConformance

pytestmark = pytest.mark.integration


async def _started(zk_server: ZooKeeperServer, region: str) -> AsyncIterator[MetadataStore]:
    async with ZkMetadataStore(zk_server.address, region, session_timeout=2.0) as s:
        yield s


# Two stores of one region: a hub's and another's.
store = pytest.fixture(_started, name="store")
other = pytest.fixture(_started, name="other")


async def expire_session(store: ZkMetadataStore) -> None:
    """Expire a session the way ZooKeeper's own tests do: a second client with its id closes."""
    twin = ZkClient(
        store.zk.hosts,
        session_timeout=2.0,
        session=(store.zk.session_id, store.zk.session_password),
    )
    await twin.start(timeout=10)
    await twin.close()


class TestZooKeeperStore(MetadataConformance, BundleConformance, NamespaceConformance):
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
        monkeypatch.setattr(zk_ledgers, "LEDGER_ID_BLOCK", 8)
        old_path, _ = await store.zk.create(
            f"{store.layout.ledgers}/L", ledger.to_json(), sequence=True
        )
        old = Layout.ledger_id_of(old_path)
        made = await asyncio.gather(
            *(s.ledgers.create_ledger(ledger) for _ in range(20) for s in (store, other))
        )
        ids = [m.value.ledger_id for m in made]
        assert len(set(ids)) == 40 and old not in ids
        assert min(ids) == zk_ledgers.FIRST_BLOCK_ID > old
        # 40 ids from blocks of 8: each hub took 3 blocks (24 ids for its 20), 6 in all.
        data, _ = await store.zk.get(store.layout.ledger_ids)
        assert int(data) == zk_ledgers.FIRST_BLOCK_ID + 6 * 8
        assert sorted(await other.ledgers.list_ledgers()) == sorted([old, *ids])
        # A long listing is parsed on a thread (a region's: 1.3 million ledgers), the same way.
        monkeypatch.setattr(zk_ledgers, "LEDGER_IDS_ON_THREAD", 1)
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
    """Two secured pools (regions, each with its own ZooKeeper digest) on one ensemble:
    ``/hedwig`` is closed to creation by others (the first pool's store makes it its own), so
    the second pool's store may not make its region there; the ensemble's admin digest
    (ZooKeeper's super-user, the operator's) makes it with that pool's digest, and neither
    pool can change the other's tree."""
    admin = "hedwig-admin:adm1n"
    with ZooKeeperServer(data_dir=str(tmp_path / "zk"), super_digest=admin) as zk:
        a = ZkMetadataStore(zk.address, "pool-a", session_timeout=2.0, digest="hedwig:a")
        await a.start()
        try:
            refused = ZkMetadataStore(zk.address, "pool-b", session_timeout=2.0, digest="hedwig:b")
            with pytest.raises(MetadataRefusedError, match="closed to its digest"):
                await refused.start()
            await refused.close()
            assert await make_region(
                zk.address, "pool-b", admin_digest=admin, region_digest="hedwig:b"
            )
            b = ZkMetadataStore(zk.address, "pool-b", session_timeout=2.0, digest="hedwig:b")
            await b.start()
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

    async def counted(ops: Sequence[Op]) -> list[MetadataError | None]:
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


async def _owners_read_at_once(
    store: ZkMetadataStore, prefix: str, count: int
) -> tuple[list[Any], int]:
    """Reads the owner records of ``count`` topics at once, every other one written first;
    checks what was read, returns it and the number of requests the reads took."""
    names = [f"{prefix}-{i}" for i in range(count)]
    for name in names[1::2]:
        await store.topics.ensure_topic(name)
        await store.ownership.write_owner_info(name, HubInfo(f"h:{name}", 1), NEW_VERSION)
    before = store.zk.requests
    got = await asyncio.gather(
        *(store.ownership.read_owner_info(n) for n in names), return_exceptions=True
    )
    requests = store.zk.requests - before
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
    (``hedwig.metadata.zookeeper.client.reads``); a record that does not exist is ``None``
    and the others are still read; a read alone is one request too."""
    assert isinstance(store, ZkMetadataStore)
    got, requests = await _owners_read_at_once(store, "together-read", 150)
    assert not any(isinstance(r, BaseException) for r in got)
    assert requests == 3  # 64 + 64 + 22
    before = store.zk.requests
    assert await store.ownership.read_owner_info("together-read-1") is not None
    assert store.zk.requests - before == 1


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
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ZooKeeper older than 3.6 refuses a ``multiRead`` as unimplemented: the reads it held
    are sent again one by one, and so is every later one (the refusal is played here on the
    client's side, where the connection would send it: the server under test knows
    ``multiRead``)."""
    assert isinstance(store, ZkMetadataStore)
    connection = store.zk.connection
    assert connection is not None
    real = connection.send
    refused = 0

    def old_server(request: Request, answer: Answer, *, flush: bool = True) -> None:
        nonlocal refused
        if isinstance(request, MultiReadRequest):
            refused += 1  # answered as a server would: later, not while it is sent
            asyncio.get_running_loop().call_soon(answer, UNIMPLEMENTED, None)
            return
        real(request, answer, flush=flush)

    monkeypatch.setattr(connection, "send", old_server)
    got, requests = await _owners_read_at_once(store, "old-server", 100)
    assert requests == 100  # one by one (the refused two never reached the connection)
    assert not any(isinstance(r, BaseException) for r in got)
    assert refused == 2  # 64 and 36, both sent before the first refusal came back
    assert not store.zk.reads_together
    got, requests = await _owners_read_at_once(store, "old-server-later", 20)
    assert requests == 20
    assert not any(isinstance(r, BaseException) for r in got)
    assert refused == 2


async def _transactions_at_once(
    client: ZkClient, transactions: Sequence[Sequence[Op]]
) -> tuple[list[list[MetadataError | None]], int]:
    """Makes every transaction in one turn; their outcomes and the requests they took."""
    before = client.requests
    got = await asyncio.gather(*(client.transaction(ops) for ops in transactions))
    return list(got), client.requests - before


async def test_transactions_made_together_go_to_zookeeper_together(
    store: MetadataStore, region: str
) -> None:
    """Transactions made in one turn of the loop (a wave of claims or take-overs) go as one
    ``multi`` per 128 operations, not a request each
    (``hedwig.metadata.zookeeper.client.writes``); each takes effect; one alone goes alone."""
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
