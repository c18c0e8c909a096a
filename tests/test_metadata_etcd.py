"""The conformance suite against a real etcd server (lease-bound ownership)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aetcd import rpc  # type: ignore[import-untyped]

from hedwig.client import HedwigClient
from hedwig.devcluster.etcd import EtcdServer
from hedwig.errors import BadVersionError, MetadataError, MetadataUnavailableError
from hedwig.metadata import HubInfo, HubLoad, MetadataStore, SessionState
from hedwig.metadata.etcd import EtcdMetadataStore, batches, connection, kv, lease_keeper
from hedwig.metadata.etcd import ledgers as etcd_ledgers
from hedwig.metadata.etcd import watches as etcd_watches
from hedwig.metadata.etcd.wire import put
from hedwig.metadata.records import NEW_VERSION, LedgerMetadata
from tests.bundle_conformance import BundleConformance
from tests.cluster_helpers import hedwig, lone_hub
from tests.metadata_conformance import MetadataConformance
from tests.namespace_conformance import NamespaceConformance
from tests.store_outage import (
    a_hub_started_in_an_outage_waits_and_serves,
    ledger_ids_stay_unique_through_a_crash,
)
from tests.waiting import eventually, succeeds, until

pytestmark = pytest.mark.integration

LEDGER = LedgerMetadata(0, "t", 1, 1, 1, ((0, ("h:1",)),), owner="h:1", owner_epoch=3)


async def _started(etcd_server: EtcdServer, region: str) -> AsyncIterator[MetadataStore]:
    async with EtcdMetadataStore(etcd_server.address, region, session_timeout=2.0) as s:
        yield s


# Two stores of one region: a hub's and another's.
store = pytest.fixture(_started, name="store")
other = pytest.fixture(_started, name="other")


def own_etcd(tmp_path: Path) -> EtcdServer:
    """An etcd of the test's own (to kill, freeze or restart), started."""
    (tmp_path / "etcd").mkdir()
    server = EtcdServer(data_dir=str(tmp_path / "etcd"))
    server.start()
    return server


class TestEtcdStore(MetadataConformance, BundleConformance, NamespaceConformance):
    async def expire(self, store: MetadataStore) -> None:
        """Expire the lease the way an etcd operator would: revoke it from outside."""
        assert isinstance(store, EtcdMetadataStore)
        await store.etcd.revoke_elsewhere(store.etcd.lease)

    async def test_an_owner_that_stops_refreshing_loses_its_records(
        self, store: MetadataStore, other: MetadataStore
    ) -> None:
        """A frozen owner: its lease is not refreshed, etcd expires it after the TTL, the
        owner record goes, and another hub may claim; the frozen one learns it lost."""
        assert isinstance(store, EtcdMetadataStore)
        await store.topics.ensure_topic("frozen")
        await store.hubs.register_hub("127.0.0.1:7", HubLoad())
        await store.ownership.write_owner_info("frozen", HubInfo("127.0.0.1:7", 1), NEW_VERSION)
        states: list[SessionState] = []
        store.session.add_listener(states.append)
        await store.etcd.keeper.stop()  # frozen: no more refreshes

        async def gone() -> bool:
            return await other.ownership.read_owner_info("frozen") is None

        await eventually(gone, timeout=10, interval=0.1, what="the frozen owner's record gone")
        assert await other.ownership.read_owner_info("frozen") is None
        await other.ownership.write_owner_info("frozen", HubInfo("127.0.0.1:8", 2), NEW_VERSION)
        assert not {h.address: h for h in await other.hubs.list_hubs()}["127.0.0.1:7"].alive

    async def test_keys_are_the_documented_ones(self, store: MetadataStore) -> None:
        assert isinstance(store, EtcdMetadataStore)
        await store.topics.ensure_topic("a/b")
        items, _ = await store.etcd.range(store.keys.family("topics"), keys_only=True)
        assert [i.key.decode() for i in items] == [f"{store.keys.base}/topics/a%2Fb"]


async def test_a_hub_and_the_cli_on_etcd(etcd_server: EtcdServer, region: str) -> None:
    """A hub picks etcd from its store URL; publishing, subscribing and ``hedwig topics``
    work as on ZooKeeper."""
    hub = lone_hub(etcd_server.url, region)
    await hub.start()
    try:
        assert isinstance(hub.store, EtcdMetadataStore)
        async with HedwigClient(hub.address) as client:
            sub = await client.subscribe("on-etcd", "s")
            for i in range(5):
                await client.publish("on-etcd", b"%d" % i)
            got = [await sub.next(5) for _ in range(5)]
            assert [m.value for m in got] == [b"%d" % i for i in range(5)]
        listed = await asyncio.get_running_loop().run_in_executor(
            None, lambda: hedwig("topics", "--zk", etcd_server.url, "--region", region, "--json")
        )
        assert listed.returncode == 0, listed.stderr
        assert "on-etcd" in listed.stdout
    finally:
        await hub.stop()


class TestBatches:
    """Concurrent transactions go to etcd together (``hedwig.metadata.etcd.batches``), and
    each still behaves as if sent alone."""

    async def test_concurrent_operations_share_requests_and_keep_their_outcomes(
        self, store: MetadataStore
    ) -> None:
        assert isinstance(store, EtcdMetadataStore)
        batcher = store.etcd.batcher
        requests, transactions, refused = batcher.requests, batcher.transactions, batcher.refused
        names = [f"batch/{i:03d}" for i in range(200)]
        created = await asyncio.gather(*(store.topics.ensure_topic(n) for n in names))
        assert all(created)
        assert not any(await asyncio.gather(*(store.topics.ensure_topic(n) for n in names)))
        sent = batcher.transactions - transactions
        assert sent == 400 and batcher.requests - requests < sent / 4, "not batched"
        # One key written by many at once: one batch may write it once only, so they are
        # spread over requests; exactly one compare-and-set wins.
        await store.hubs.register_hub("127.0.0.1:7", HubLoad())
        claims = await asyncio.gather(
            *(
                store.ownership.write_owner_info(
                    "batch/000", HubInfo("127.0.0.1:7", e), NEW_VERSION
                )
                for e in range(20)
            ),
            return_exceptions=True,
        )
        won = [c for c in claims if not isinstance(c, BaseException)]
        assert len(won) == 1
        assert all(isinstance(c, BadVersionError) for c in claims if c not in won)
        # Ledger ids allocated all at once stay unique (one block taken for all of them).
        made = await asyncio.gather(*(store.ledgers.create_ledger(LEDGER) for _ in range(50)))
        ids = [m.value.ledger_id for m in made]
        assert len(set(ids)) == 50
        assert batcher.refused == refused  # no batch wrote a key twice
        for m in made:
            got = await store.ledgers.read_ledger(m.value.ledger_id)
            assert got is not None and got.version == m.version

    async def test_a_batch_refused_as_a_whole_is_sent_one_by_one(
        self, store: MetadataStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An etcd with a lower operation limit than the default refuses a big batch: each
        transaction is then sent alone, and succeeds."""
        assert isinstance(store, EtcdMetadataStore)
        monkeypatch.setattr(batches, "MAX_TXN_OPS", 1_000)  # more than etcd's 128
        batcher = store.etcd.batcher
        requests, refused = batcher.requests, batcher.refused
        names = [f"refused/{i:03d}" for i in range(300)]
        assert all(await asyncio.gather(*(store.topics.ensure_topic(n) for n in names)))
        assert set(names) <= set(await store.topics.list_topics())
        assert batcher.refused > refused
        assert batcher.requests - requests >= 300  # the refused batch, then each alone


async def test_an_owner_watch_after_a_compaction_waits_for_a_change(
    store: MetadataStore, other: MetadataStore
) -> None:
    """etcd forgets history it has compacted (production etcd compacts it periodically, and
    so does the development one), and a watch asked from a revision it has compacted is
    cancelled at once. An owner's watch started from its record's own revision: for a record
    written before the last compaction, it fired at once, the owner read the record (still
    its own) and watched again from the same revision, for good. It starts from the revision
    of a read now, and fires at the record's next change only."""
    assert isinstance(store, EtcdMetadataStore)
    await store.topics.ensure_topic("compacted")
    await store.hubs.register_hub("127.0.0.1:7", HubLoad())
    v = await store.ownership.write_owner_info("compacted", HubInfo("127.0.0.1:7", 1), NEW_VERSION)
    for i in range(3):  # later revisions, so the owner record's is compacted away
        await store.topics.ensure_topic(f"compacted-{i}")
    etcd = store.etcd
    head = await etcd.txn((), ())
    await etcd.call(
        etcd.connection.kv.Compact, rpc.CompactionRequest(revision=head.revision), "compact"
    )
    fired = asyncio.Event()
    store.ownership.watch_owner("compacted", lambda _t: fired.set(), v)
    await asyncio.sleep(0.5)  # the test: no spurious fire in this window
    assert not fired.is_set()
    await other.ownership.delete_owner_info("compacted", v)
    await asyncio.wait_for(fired.wait(), 10)


async def test_owner_watches_share_one_watch_of_the_prefix(
    store: MetadataStore, other: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Owner watches ride one etcd watch of the owners' prefix: a change fires the watches of
    its key only. A watch from a revision the stream has already gone past fires at once if
    the stream's window of the keys it delivered lately shows a change of its key since, and
    is served by the stream if it shows none; one from before the window (a change of its
    key may have gone by unseen) is set on its own, and sees that change."""
    assert isinstance(store, EtcdMetadataStore)
    watches = store.ownership.watches
    await store.hubs.register_hub("127.0.0.1:7", HubLoad())
    me = HubInfo("127.0.0.1:7", 1)
    versions = {}
    for name in ("p3", "p4", "p5"):
        await store.topics.ensure_topic(name)
    for name in ("p4", "p5"):
        versions[name] = await store.ownership.write_owner_info(name, me, NEW_VERSION)
    fired = {name: asyncio.Event() for name in ("p3", "p4", "p5")}
    store.ownership.watch_owner("p4", lambda _t: fired["p4"].set(), versions["p4"])
    store.ownership.watch_owner("p5", lambda _t: fired["p5"].set(), versions["p5"])
    await until(
        lambda: watches._watch is not None and watches._watch.id != -1,
        what="the owners' prefix watch created",
    )
    before = (await store.etcd.txn((), ())).revision
    await other.ownership.write_owner_info("p3", HubInfo("127.0.0.1:8", 2), NEW_VERSION)
    await other.ownership.delete_owner_info("p4", versions["p4"])  # after p3's write
    await asyncio.wait_for(fired["p4"].wait(), 10)
    assert not fired["p5"].is_set()
    # The stream has delivered past p5's revision: its callback is kept, its revision not.
    tail = store.keys.owner("p5")[len(store.keys.family("owners")) :]
    assert tail in watches._callbacks and tail not in watches._after
    fallbacks = watches.fallbacks
    watches.add(store.keys.owner("p3"), before, fired["p3"].set)
    await asyncio.wait_for(fired["p3"].wait(), 10)  # p3's write, which the stream had passed
    unchanged = asyncio.Event()
    watches.add(store.keys.owner("p5"), before, unchanged.set)
    assert watches.fallbacks == fallbacks
    await asyncio.sleep(0.3)  # the test: no wrong fire in this window
    assert not unchanged.is_set()
    # A window of two keys, past p3's write once three more keys have changed.
    monkeypatch.setattr(etcd_watches, "RECENT_KEYS", 2)
    for name in ("q1", "q2", "q3"):
        await other.topics.ensure_topic(name)
        last = await other.ownership.write_owner_info(name, HubInfo("127.0.0.1:8", 2), NEW_VERSION)
    await until(lambda: watches._delivered >= int(last), what="q3's write delivered")
    p3 = store.keys.owner("p3")[len(store.keys.family("owners")) :]
    assert p3 not in watches._recent and len(watches._recent) == 2
    again = asyncio.Event()
    watches.add(store.keys.owner("p3"), before, again.set)
    assert watches.fallbacks == fallbacks + 1
    await asyncio.wait_for(again.wait(), 10)  # its own watch, from before p3's write
    await other.ownership.delete_owner_info("p5", versions["p5"])
    await asyncio.wait_for(fired["p5"].wait(), 10)
    await asyncio.wait_for(unchanged.wait(), 10)

    # A claim's own write is watched from its revision with no read: the stream has not gone
    # past it. The change after it fires the watch.
    await store.topics.ensure_topic("p6")
    v6 = await store.ownership.write_owner_info("p6", me, NEW_VERSION)
    requests = store.etcd.batcher.requests
    fired6 = asyncio.Event()
    store.ownership.watch_owner("p6", lambda _t: fired6.set(), v6)
    await asyncio.sleep(0.1)  # the test: no read sent in this window
    assert store.etcd.batcher.requests == requests
    await other.ownership.delete_owner_info("p6", v6)
    await asyncio.wait_for(fired6.wait(), 10)

    # A key watched twice (a watch is kept alone, several in a list): both fire, once.
    await store.topics.ensure_topic("p7")
    v7 = await store.ownership.write_owner_info("p7", me, NEW_VERSION)
    calls: list[str] = []
    both = asyncio.Event()

    def called(name: str) -> None:
        calls.append(name)
        if len(calls) == 2:
            both.set()

    store.ownership.watch_owner("p7", lambda _t: called("a"), v7)
    store.ownership.watch_owner("p7", lambda _t: called("b"), v7)
    await other.ownership.delete_owner_info("p7", v7)
    await asyncio.wait_for(both.wait(), 10)
    await other.ownership.write_owner_info("p7", HubInfo("127.0.0.1:8", 2), NEW_VERSION)
    await asyncio.sleep(0.3)  # the test: no second fire in this window
    assert sorted(calls) == ["a", "b"]


async def test_a_prefix_stream_that_breaks_with_a_full_window_fires_every_watch_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """etcd goes while the owners' stream holds a full window of the keys it delivered: every
    watch fires, once (its holder reads again), and the window goes with the stream (what
    changed meanwhile is unknown), so no watch is served from it; with etcd back, a watch
    starts a stream of its own revision and sees the next change."""
    monkeypatch.setattr(etcd_watches, "RECENT_KEYS", 4)
    server = own_etcd(tmp_path)
    store = EtcdMetadataStore(server.address, "broken", session_timeout=10.0)
    other = EtcdMetadataStore(server.address, "broken", session_timeout=10.0)
    fired: dict[str, int] = {}

    def told(topic: str) -> None:
        fired[topic] = fired.get(topic, 0) + 1

    try:
        await store.start()
        await other.start()
        assert isinstance(store, EtcdMetadataStore)
        watches = store.ownership.watches
        await store.hubs.register_hub("127.0.0.1:7", HubLoad())
        me = HubInfo("127.0.0.1:7", 1)
        mine = [f"w{i}" for i in range(10)]
        versions = {}
        for name in mine:
            await store.topics.ensure_topic(name)
            versions[name] = await store.ownership.write_owner_info(name, me, NEW_VERSION)
        for name in mine:
            store.ownership.watch_owner(name, told, versions[name])
        last = 0
        for i in range(8):  # other topics change: the window fills, and slides
            await other.topics.ensure_topic(f"q{i}")
            at = await other.ownership.write_owner_info(
                f"q{i}", HubInfo("127.0.0.1:8", 2), NEW_VERSION
            )
            last = int(at)
        await until(lambda: watches._delivered >= last, what="the other topics' writes delivered")
        assert len(watches._recent) == 4 and watches.follows(last - 1)
        assert fired == {}

        await asyncio.to_thread(server.kill)
        await until(lambda: len(fired) == len(mine), what="every watch fired at the break")
        assert fired == dict.fromkeys(mine, 1)
        assert watches._recent == {} and not watches.follows(last)
        assert watches._callbacks == {}

        await asyncio.to_thread(server.start)  # the same data: the records are there
        again = asyncio.Event()
        now = await succeeds(
            lambda: store.ownership.read_owner_info("w0"), MetadataError, what="a read"
        )
        assert now is not None
        store.ownership.watch_owner("w0", lambda _t: again.set(), now.version)
        await asyncio.sleep(0.3)  # the test: no wrong fire in this window
        assert not again.is_set()
        await other.ownership.delete_owner_info("w0", now.version)
        await asyncio.wait_for(again.wait(), 10)
        assert fired == dict.fromkeys(mine, 1)
    finally:
        try:
            await store.close()
            await other.close()
        finally:
            server.stop()


async def test_owner_records_spread_over_leases_that_live_and_die_with_the_session(
    store: MetadataStore, other: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lease that expires deletes its keys in one raft entry, etcd applying nothing else
    meanwhile: owner records go on ``OWNER_LEASES`` leases of the session, not on its own.
    All are refreshed together (the records outlive several TTLs); when one of them is gone
    the session is lost, and every record of it is gone by the time the hub hears so."""
    assert isinstance(store, EtcdMetadataStore)
    monkeypatch.setattr(lease_keeper, "OWNER_LEASES", 4)
    topics = [f"spread/{i}" for i in range(40)]
    await store.hubs.register_hub("127.0.0.1:8", HubLoad())
    for t in topics:
        await store.topics.ensure_topic(t)
        await store.ownership.write_owner_info(t, HubInfo("127.0.0.1:8", 1), NEW_VERSION)

    async def owner_leases() -> set[int]:
        items = [await store.etcd.get(store.keys.owner(t)) for t in topics]
        return {i.lease for i in items if i is not None}

    leases = await owner_leases()
    assert len(leases) == 4 and store.etcd.lease not in leases
    assert set(store.etcd.leases) == {store.etcd.lease, *leases}
    await asyncio.sleep(3 * store.etcd.ttl)  # the test: well past the TTL, kept alive
    assert await owner_leases() == leases
    lost = asyncio.Event()
    store.session.add_listener(lambda s: lost.set() if s is SessionState.LOST else None)
    await store.etcd.revoke_elsewhere(sorted(leases)[0])  # a quarter of the records go
    await asyncio.wait_for(lost.wait(), 30)
    for t in topics:
        assert await other.ownership.read_owner_info(t) is None, t
    hubs = {h.address: h for h in await other.hubs.list_hubs()}
    assert not hubs["127.0.0.1:8"].alive


async def test_an_owner_lease_granted_as_the_session_is_lost_is_revoked(
    store: MetadataStore, other: MetadataStore
) -> None:
    """The session is lost while an owner record's lease is being granted: a record put on
    that lease would outlive the session (another hub could claim the topic while this one
    still held a record of it). The grant is revoked and the claim refused as retriable."""
    assert isinstance(store, EtcdMetadataStore)
    etcd = store.etcd
    granted: list[int] = []
    grant = etcd.keeper.grant

    async def grant_then_lose() -> int:
        lease = await grant()
        granted.append(lease)
        lost = etcd.lease
        await etcd.revoke_elsewhere(lost)  # the session's lease goes meanwhile
        # and the keeper moves on to a new session
        await until(lambda: etcd.lease != lost, what="a new session's lease")
        return lease

    etcd.keeper.grant = grant_then_lose  # type: ignore[method-assign]
    await store.topics.ensure_topic("raced")
    await store.hubs.register_hub("127.0.0.1:9", HubLoad())
    with pytest.raises(MetadataUnavailableError, match="lost while granting"):
        await store.ownership.write_owner_info("raced", HubInfo("127.0.0.1:9", 1), NEW_VERSION)
    etcd.keeper.grant = grant  # type: ignore[method-assign]
    (lease,) = granted
    assert lease not in etcd.leases
    ttl = await etcd.call(
        etcd.connection.lease_stub.LeaseTimeToLive, rpc.LeaseTimeToLiveRequest(ID=lease), "ttl"
    )
    assert int(ttl.TTL) == -1, "the lease granted for the lost session is revoked"
    assert await other.ownership.read_owner_info("raced") is None


async def test_ledger_ids_stay_unique_through_an_etcd_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tests/store_outage.py``'s ledger ids on etcd (the ``ledger-ids`` key)."""
    monkeypatch.setattr(etcd_ledgers, "LEDGER_ID_BLOCK", 3)
    server = own_etcd(tmp_path)
    await ledger_ids_stay_unique_through_a_crash(
        server, [EtcdMetadataStore(server.address, "ids", session_timeout=10.0) for _ in range(2)]
    )


def test_an_etcd_given_a_memory_budget_runs_its_collector_by_it(tmp_path: Path) -> None:
    """``memory_limit`` reaches etcd's Go runtime (its own metrics say what it runs with):
    the budget as GOMEMLIMIT and the lazier collector (``GOGC_WITH_LIMIT``); without one,
    Go's defaults."""
    import urllib.request

    from hedwig.devcluster.etcd import GOGC_WITH_LIMIT

    def runtime(server: EtcdServer) -> dict[str, float]:
        with urllib.request.urlopen(f"http://{server.address}/metrics", timeout=5) as r:
            lines = r.read().decode().splitlines()
        return {
            name: float(value)
            for name, _, value in (line.partition(" ") for line in lines)
            if name in ("go_gc_gogc_percent", "go_gc_gomemlimit_bytes")
        }

    for limit, expected in (
        ("256MiB", {"go_gc_gogc_percent": GOGC_WITH_LIMIT, "go_gc_gomemlimit_bytes": 256 << 20}),
        (None, {"go_gc_gogc_percent": 100, "go_gc_gomemlimit_bytes": float(2**63 - 1)}),
    ):
        (tmp_path / str(limit)).mkdir()
        server = EtcdServer(data_dir=str(tmp_path / str(limit)), memory_limit=limit)
        server.start()
        try:
            assert runtime(server) == expected
        finally:
            server.stop()


async def test_ledger_ids_come_in_blocks_unique_across_hubs(
    store: MetadataStore, other: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two hubs making ledgers at once take blocks of ids from one key with compare-and-set:
    every id is unique, and a hub takes a new block only when its block is used up (one
    store write per block, not per ledger). A ``ledger-ids`` key written by the revision
    scheme (empty value) starts the blocks after the last id that scheme gave."""
    assert isinstance(store, EtcdMetadataStore) and isinstance(other, EtcdMetadataStore)
    key = store.keys.ledger_ids
    res = await store.etcd.txn((), (put(key, b""),))
    old_scheme_last = res.revision  # the id that scheme's last write gave
    monkeypatch.setattr(etcd_ledgers, "LEDGER_ID_BLOCK", 8)
    made = await asyncio.gather(
        *(s.ledgers.create_ledger(LEDGER) for _ in range(20) for s in (store, other))
    )
    ids = [m.value.ledger_id for m in made]
    assert len(set(ids)) == 40
    assert min(ids) > old_scheme_last
    # 40 ids from blocks of 8: each hub took 3 blocks (24 ids for its 20), 6 writes in all.
    got = await store.etcd.get(key)
    assert got is not None and int(got.value) == old_scheme_last + 1 + 6 * 8


async def test_a_store_reaches_etcd_within_seconds_of_its_return_after_a_long_outage(
    tmp_path: Path,
) -> None:
    """gRPC waits longer and longer between attempts to reconnect (up to two minutes by
    default): after etcd was gone for 20 s, a store answered again only 5-10 s after etcd
    was back, and after a longer outage a whole session later. The wait is now 2 s at most."""
    server = own_etcd(tmp_path)
    store = EtcdMetadataStore(server.address, "outage", session_timeout=90.0)
    try:
        await store.start()
        await store.topics.ensure_topic("before")
        await asyncio.to_thread(server.kill)
        loop = asyncio.get_running_loop()
        gone = loop.time()
        while loop.time() - gone < 20:  # the test: an outage of 20 s, the store asking on
            with pytest.raises(MetadataUnavailableError):
                await store.topics.list_topics()
            await asyncio.sleep(0.5)
        await asyncio.to_thread(server.start)
        back = loop.time()
        await succeeds(lambda: store.topics.ensure_topic("after"), MetadataUnavailableError, 60)
        assert loop.time() - back < 4.0, f"answered {loop.time() - back:.1f} s after etcd's return"
        assert await store.topics.list_topics() == ["after", "before"]
        assert store.session.state is SessionState.CONNECTED, "its session outlived the outage"
    finally:
        await store.close()
        server.stop()


async def test_a_session_whose_refreshes_go_unanswered_is_lost_when_its_lease_ends(
    tmp_path: Path,
) -> None:
    """A lease refresh that etcd never answers (a partition that drops packets, a frozen
    etcd) held the session CONNECTED for the call's whole timeout, 10 s, long after etcd had
    expired the lease: in the failure suite an owner cut off from etcd went on serving a topic
    whose owner record was gone, and the other hubs, still seeing it alive for a moment, sent
    a client there; nobody claimed the topic while the cut lasted. The session is now lost
    when the lease ends by this process's clock; thawed, etcd grants a new one."""
    server = own_etcd(tmp_path)
    pid = server.pid
    assert pid is not None
    store = EtcdMetadataStore(server.address, "frozen", session_timeout=2.0)
    loop = asyncio.get_running_loop()
    states: list[tuple[SessionState, float]] = []
    thawed = False
    try:
        await store.start()
        store.session.add_listener(lambda s: states.append((s, loop.time())))
        await asyncio.sleep(store.etcd.ttl)  # the test: refreshed, the session is as always
        assert store.session.state is SessionState.CONNECTED
        os.kill(pid, signal.SIGSTOP)
        frozen = loop.time()
        await until(
            lambda: any(s is SessionState.LOST for s, _ in states),
            what=f"the session lost after etcd froze (still {store.session.state})",
        )
        lost = [at for s, at in states if s is SessionState.LOST]
        assert lost, f"still {store.session.state} 10 s after etcd froze"
        # The lease ends a TTL after the last answer, which came before the freeze.
        assert lost[0] - frozen <= store.etcd.ttl + 0.5, f"lost after {lost[0] - frozen:.1f} s"
        os.kill(pid, signal.SIGCONT)
        thawed = True
        await until(lambda: store.session.state is SessionState.CONNECTED, what="connected")
        assert store.session.state is SessionState.CONNECTED
        await store.topics.ensure_topic("after")
    finally:
        if not thawed:
            os.kill(pid, signal.SIGCONT)
        await store.close()
        server.stop()


async def test_a_frozen_etcd_fails_a_start_with_a_clear_error_in_bounded_time(
    tmp_path: Path,
) -> None:
    """etcd frozen (SIGSTOP) before a store starts: the kernel still completes the TCP
    handshake, but the connection is never set up (no HTTP/2 settings come back). The store's
    first lease waits for its connection at most ``CONNECT_TIMEOUT_MS`` (the session counts
    from the grant's sending, so not from before the connection), then says etcd is
    unreachable, and the start gives up at its deadline: a hub starting against a hung etcd
    fails and says why, rather than hanging."""
    server = own_etcd(tmp_path)
    pid = server.pid
    assert pid is not None
    store = EtcdMetadataStore(server.address, "frozen-start", session_timeout=2.0)
    os.kill(pid, signal.SIGSTOP)
    try:
        loop = asyncio.get_running_loop()
        began = loop.time()
        with pytest.raises(MetadataUnavailableError, match="no connection for leases"):
            await store.etcd.start(timeout=1.0)
        took = loop.time() - began
        wait_s = connection.CONNECT_TIMEOUT_MS / 1000
        assert wait_s - 0.5 <= took <= wait_s + 3, f"gave up after {took:.1f} s"
    finally:
        os.kill(pid, signal.SIGCONT)
        await store.close()
        server.stop()


async def test_a_claim_of_a_topic_deleted_between_its_two_requests_is_refused(
    store: MetadataStore, other: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An existing topic with no owner record takes ``claim_topic`` two transactions: the
    first finds the topic there, the second writes the record only if the topic still is.
    One deleted in between is refused as missing, and no owner record is left for it."""
    assert isinstance(store, EtcdMetadataStore)
    await store.topics.ensure_topic("deleted-meanwhile")
    etcd = store.etcd
    real = etcd.txn
    deleted = False

    async def txn(*args: Any, **kw: Any) -> kv.TxnResult:
        nonlocal deleted
        got = await real(*args, **kw)
        if not got.succeeded and not deleted:
            deleted = True
            await other.topics.delete_topic("deleted-meanwhile")
        return got

    monkeypatch.setattr(etcd, "txn", txn)
    with pytest.raises(MetadataError, match="does not exist"):
        await store.ownership.claim_topic("deleted-meanwhile", HubInfo("127.0.0.1:9", 3))
    monkeypatch.undo()
    assert deleted
    assert await store.ownership.read_owner_info("deleted-meanwhile") is None
    assert "deleted-meanwhile" not in await store.topics.list_topics()


async def test_a_hub_started_while_etcd_is_down_waits_for_it_and_serves(tmp_path: Path) -> None:
    """A hub restarted into an etcd outage (a pod rescheduled while etcd restarts) waits for
    the store at each startup step instead of exiting, registers once etcd is back, and
    serves: as on ZooKeeper (the nemesis found it there)."""
    server = own_etcd(tmp_path)
    await a_hub_started_in_an_outage_waits_and_serves(server, server.url)


async def test_claims_are_tried_the_way_the_last_one_needed(
    store: MetadataStore, other: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a claim of an existing topic the next claim is the owner record's
    compare-and-set alone (a failover's take-overs each made a creating transaction that
    failed first); a new topic met then is still created, and claims go back to creating
    first after it."""
    assert isinstance(store, EtcdMetadataStore)
    for name in ("old-1", "old-2"):
        await other.topics.ensure_topic(name)
    etcd = store.etcd
    real = etcd.txn
    txns = 0

    async def counted(*args: Any, **kw: Any) -> kv.TxnResult:
        nonlocal txns
        txns += 1
        return await real(*args, **kw)

    monkeypatch.setattr(etcd, "txn", counted)
    owner = HubInfo("127.0.0.1:9", 3)
    first = await store.ownership.claim_topic("old-1", owner)
    assert first.version is not None and not first.new and txns == 2
    second = await store.ownership.claim_topic("old-2", owner)
    assert second.version is not None and not second.new and txns == 3, "one transaction"
    assert second.config is not None, "the configuration read with it"
    made = await store.ownership.claim_topic("new-1", owner)
    assert made.version is not None and made.new and txns == 5
    assert await other.topics.topic_exists("new-1")
    await store.ownership.claim_topic("new-2", owner)
    assert txns == 6, "after a new topic, creating first again"
    refused = await other.ownership.claim_topic("old-1", HubInfo("h2:1", 4))
    assert refused.version is None and refused.owner is not None
    assert refused.owner.value == owner
