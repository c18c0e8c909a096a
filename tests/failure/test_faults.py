"""Fault scenarios under load; each checks the full history (see ``history.py``).

Three hubs with 3/3/2 replication, a 2 s ZooKeeper session, publishers and subscribers running
throughout. With ack quorum 2 of 3, no scenario may lose an acknowledged message.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import urllib.request
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import Permissions as KazooPermissions

from hedwig.client import HedwigClient, RetryPolicy
from hedwig.devcluster.cluster import DevCluster, HubProcess
from hedwig.devcluster.zookeeper import free_port
from hedwig.errors import DeadlineExceededError, HedwigError
from hedwig.metadata import LedgerMetadata, open_store
from hedwig.metadata.layout import Layout
from hedwig.security import ClientSecurity
from tests.cluster_helpers import eventually, owner_of
from tests.failure.clusters import SESSION, admin, cluster_332
from tests.failure.history import History, Workload, check, read_all, under_load

pytestmark = pytest.mark.integration

TOPICS = ["f/a", "f/b", "f/c"]
# ``run`` or ``run_secure``: a fault under load, the history checked.
Runner = Callable[..., Awaitable[None]]


async def run(
    cluster: DevCluster,
    fault: Callable[[], Awaitable[object]],
    *,
    before: float = 2.0,
    after: float = 4.0,
) -> None:
    # One client sends (no future per message, flushed every few): its flushed messages are
    # held to the same checks.
    work = Workload(cluster.addresses, TOPICS, senders=1)
    history = await under_load(work, fault, before=before, after=after)
    assert history.flushed, "no flush of the sender succeeded"


def test_the_checker_finds_sent_messages_lost_or_out_of_order() -> None:
    """What ``check`` holds a sender to, on a made-up history."""
    history = History()
    history.log["t"] = [(1, b"pub-s0:0"), (2, b"pub-s0:2"), (3, b"pub-s0:1")]
    history.flushed["t"] = [b"pub-s0:0", b"pub-s0:1", b"pub-s0:2"]
    with pytest.raises(AssertionError, match="before a message sent earlier"):
        check(history)
    history.log["t"] = [(1, b"pub-s0:0"), (2, b"pub-s0:1")]
    with pytest.raises(AssertionError, match="sent and flushed but is not in the log"):
        check(history)
    history.log["t"].append((3, b"pub-s0:2"))
    check(history)


def test_the_checker_finds_a_publishers_messages_swapped_or_acknowledged_out_of_order() -> None:
    """What ``check`` holds a publisher to, on made-up histories: its messages in the log in
    the order published, even when the answers came back in log order, and its answers in
    that order."""
    swapped = History()
    swapped.log["t"] = [(1, b"pub0:0"), (2, b"pub0:2"), (3, b"pub1:0"), (4, b"pub0:1")]
    swapped.acked["t"] = [(b"pub0:0", 1), (b"pub0:2", 2), (b"pub1:0", 3), (b"pub0:1", 4)]
    with pytest.raises(AssertionError, match=r"'pub0:1' \(at 4\) is in the log after a message"):
        check(swapped)
    late = History()
    late.log["t"] = [(1, b"pub0:0"), (2, b"pub0:1"), (3, b"pub0:2")]
    late.acked["t"] = [(b"pub0:0", 1), (b"pub0:2", 3), (b"pub0:1", 2)]
    with pytest.raises(AssertionError, match=r"acknowledged after a later message \(b'pub0:2'"):
        check(late)
    late.acked["t"] = [(b"pub0:0", 1), (b"pub0:1", 2), (b"pub0:2", 3)]
    check(late)


def scrape(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        return str(r.read().decode())


def summed(hubs: Sequence[HubProcess], series: str) -> float:
    """The value of one metric series (``name{labels}`` as exposed), summed over ``hubs``."""
    total = 0.0
    for h in hubs:
        for line in scrape(h.metrics_url).splitlines():
            if line.startswith(series + " "):
                total += float(line.rsplit(" ", 1)[1])
    return total


async def victim_owner(cluster: DevCluster) -> str:
    owner = await owner_of(cluster.zk, cluster.region, TOPICS[0])
    assert owner is not None
    return owner


def fences_answered(hubs: Sequence[HubProcess]) -> float:
    """FENCE_LEDGERS requests these hubs answered: a take-over fences the old ledger on the
    replicas with them (READ_LAC with fence only to a hub from before the frame)."""
    return summed(hubs, 'hedwig_requests_total{op="fence_ledgers",status="ok"}')


async def test_kill9_owner_under_load(cluster: DevCluster) -> None:
    victim: list[str] = []

    async def fault() -> None:
        victim.append(await victim_owner(cluster))
        cluster.hub_at(victim[0]).kill()

    await run(cluster, fault, after=SESSION + 4)
    # The victim's topics were taken over, their ledgers fenced on the survivors in batches.
    assert fences_answered([h for h in cluster.hub_procs if h.address != victim[0]]) >= 1


async def test_kill9_storage_replica_under_load(cluster: DevCluster) -> None:
    async def fault() -> None:
        owner = await victim_owner(cluster)
        replica = next(h for h in cluster.hub_procs if h.address != owner)
        replica.kill()

    await run(cluster, fault, after=SESSION + 3)


async def test_owner_frozen_past_session_timeout(cluster: DevCluster) -> None:
    await owner_frozen_past_its_session(cluster, take_over_s=SESSION * 5, after=3)


async def owner_frozen_past_its_session(
    cluster: DevCluster, *, take_over_s: float, after: float
) -> None:
    """The owner frozen until another hub has taken its topic over (within ``take_over_s``),
    and a second more; thawed, it must notice its session (or lease) is gone, acknowledge
    nothing more, and step down."""
    frozen: list[str] = []

    async def fault() -> None:
        owner = await victim_owner(cluster)
        hub = cluster.hub_at(owner)
        hub.freeze()
        frozen.append(owner)

        async def taken_over() -> bool:
            now = await owner_of(cluster.zk, cluster.region, TOPICS[0])
            return now is not None and now != owner

        await eventually(taken_over, timeout=take_over_s)
        await asyncio.sleep(1.0)  # the test: frozen on past the take-over
        hub.thaw()

    await run(cluster, fault, after=after)
    # The old owner stepped down on waking: it counted the topics it lost, and any topic it
    # owns now it claimed afresh (a new epoch), never by carrying on with the old ledger.
    hub = cluster.hub_at(frozen[0])
    metrics = await asyncio.get_running_loop().run_in_executor(None, scrape, hub.metrics_url)
    losses = [
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("hedwig_topic_losses_total{")
    ]
    assert sum(losses) >= 1, "the frozen owner never noticed it lost its topics"


async def test_owner_znode_deleted_by_third_party(cluster: DevCluster) -> None:
    async def fault() -> None:
        store = open_store(cluster.zk, region=cluster.region)
        await store.start()
        try:
            for topic in TOPICS:
                got = await store.ownership.read_owner_info(topic)
                if got is not None:
                    await store.ownership.delete_owner_info(topic, got.version)
        finally:
            await store.close()

    await run(cluster, fault)


async def test_hub_data_lost_and_restarted_empty(cluster: DevCluster) -> None:
    async def fault() -> None:
        owner = await victim_owner(cluster)
        replica = next(h for h in cluster.hub_procs if h.address != owner)
        replica.kill()
        shutil.rmtree(replica.data_dir + "/ledgers", ignore_errors=True)
        await asyncio.sleep(0.5)  # the test: down a moment, its data gone
        replica.start()

    await run(cluster, fault, after=SESSION + 3)


async def published_once_come_back(
    cluster: DevCluster,
    runner: Runner,
    *,
    freeze: bool = False,
    security: ClientSecurity | None = None,
) -> None:
    """Topics published to once are the cheapest a hub owns: no log reader until one is
    read or published to again, and each replica's ledger one int (entry 0 alone).

    Their owner killed under load and started again: each reads back its one message once at
    its new owner and takes the next publish after it; the hub back, its entry log read into
    that form again, stores replicas as before. ``freeze``: the owner is frozen instead, past
    its session or lease, and every topic is published to again meanwhile (its topics taken
    over: their one-int ledgers fenced on the two live replicas, the frozen one's fence left
    pending); thawed, it steps down, and its own copies, fenced or written to late, unpack
    from their one int without taking anything the new owners wrote."""
    once = [f"once/{i}" for i in range(60)]
    retry = RetryPolicy(deadline_s=30)

    async def contents(c: HedwigClient, topic: str) -> list[bytes]:
        got = await c.read(topic, 1, max_messages=10)
        return [m.value for b in got.batches for m in b.delivered()]

    async with HedwigClient(cluster.addresses, retry=retry, security=security) as c:
        for t in once:
            assert (await c.publish(t, t.encode())).seq == 1

    async def fault() -> None:
        owner = await owner_of(cluster.zk, cluster.region, TOPICS[0])
        assert owner is not None
        victim = cluster.hub_at(owner)
        if not freeze:
            victim.kill()
            await asyncio.sleep(SESSION + 1)  # the test: down past its session
            victim.start()
            return
        victim.freeze()

        async def taken_over() -> bool:
            now = await owner_of(cluster.zk, cluster.region, TOPICS[0])
            return now is not None and now != owner

        try:
            await eventually(taken_over, timeout=SESSION * 8)
            live = [a for a in cluster.addresses if a != owner]
            async with HedwigClient(live, retry=retry, security=security) as c:
                for t in once:
                    assert (await c.publish(t, b"again")).seq == 2, t
        finally:
            victim.thaw()

    await runner(cluster, fault, after=SESSION + 4)
    async with HedwigClient(cluster.addresses, retry=retry, security=security) as c:
        for t in once:
            if freeze:
                assert await contents(c, t) == [t.encode(), b"again"], t
                assert (await c.publish(t, b"after")).seq == 3
                assert await contents(c, t) == [t.encode(), b"again", b"after"], t
            else:
                assert await contents(c, t) == [t.encode()], t
                assert (await c.publish(t, b"again")).seq == 2
                assert await contents(c, t) == [t.encode(), b"again"], t


async def test_topics_published_once_come_back_whole_after_their_owner_dies(
    cluster: DevCluster,
) -> None:
    await published_once_come_back(cluster, run)


async def test_topics_published_once_come_back_whole_after_their_owner_froze(
    cluster: DevCluster,
) -> None:
    await published_once_come_back(cluster, run, freeze=True)


async def test_zookeeper_restarted_under_load(cluster: DevCluster) -> None:
    async def fault() -> None:
        assert cluster.zk_server is not None
        await asyncio.get_running_loop().run_in_executor(None, cluster.zk_server.restart)

    await run(cluster, fault, after=SESSION + 4)


async def test_zookeeper_down_in_the_middle_of_a_claim(cluster: DevCluster) -> None:
    """The owner is killed; the moment another hub's owner record appears (its claim has
    begun: recovering the log, a new ledger, the ledger list still to write), ZooKeeper is
    killed for two sessions, so the claim is cut between its metadata writes. When ZooKeeper
    is back the claim is finished or made again, by whichever hub; nothing acknowledged is lost
    or doubled."""
    assert cluster.zk_server is not None
    zk = cluster.zk_server
    loop = asyncio.get_running_loop()

    async def fault() -> None:
        owner = await victim_owner(cluster)
        store = open_store(cluster.zk, region=cluster.region)
        await store.start()
        try:
            cluster.hub_at(owner).kill()
            async with asyncio.timeout(SESSION * 10):
                while True:
                    got = await store.ownership.read_owner_info(TOPICS[0])
                    if got is not None and got.value.address != owner:
                        break
                    await asyncio.sleep(0.002)
            zk.kill()  # at once: a stop would let the claim finish first
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(store.close(), 5)
        await asyncio.sleep(SESSION * 2)  # the test: ZooKeeper down two sessions
        await loop.run_in_executor(None, zk.start)

    await run(cluster, fault, after=SESSION + 5)


async def test_two_of_three_hubs_down_then_one_back(cluster: DevCluster) -> None:
    """3/3/2 with two hubs gone: no ack quorum anywhere, so nothing can be written, and no
    topic can be recovered (recovery needs two answers), so nothing can be read either; clients
    wait (SERVICE_UNAVAILABLE, retried). When one hub comes back, everything resumes and no
    acknowledged message is lost."""
    work = Workload(cluster.addresses, TOPICS, retry_deadline_s=90)
    await work.start()
    await asyncio.sleep(2.0)  # load before the fault
    survivor, *victims = cluster.hub_procs
    for hub in victims:
        hub.kill()
    await asyncio.sleep(SESSION + 2)  # the dead hubs' sessions end; writes in flight settle
    stalled_at = work.history.acked_count
    await asyncio.sleep(3.0)  # the test: a window in which nothing may be acked
    assert work.history.acked_count == stalled_at, "acknowledged with one replica of three"
    reader = HedwigClient([survivor.address], retry=RetryPolicy(deadline_s=2))
    try:
        with pytest.raises(DeadlineExceededError):
            await reader.read(TOPICS[0], 1)
    finally:
        await reader.close()
    await asyncio.get_running_loop().run_in_executor(None, victims[0].start)
    await asyncio.sleep(SESSION + 4)  # load with the hub back
    history = await work.finish()
    assert history.acked_count > stalled_at, "publishing did not resume when a hub came back"
    check(history)


@pytest.mark.alone  # compares the rate during the outage with the rate before
async def test_publishing_goes_on_through_a_zookeeper_outage(cluster: DevCluster) -> None:
    """ZooKeeper down for four session timeouts under load: owners keep acknowledging on their
    open ledgers the whole time (no owner could have been replaced: nobody reaches ZooKeeper,
    and no hub that asks the others whether its session is over hears that it is), and
    everything catches up when it is back.

    Meanwhile another client publishes to 600 new topics, over and over: each publish is a
    claim, a ZooKeeper request that can only wait. Past 278 waiting, the ZooKeeper client of
    then (kazoo, on its wake-up socket pair) blocked each hub's event loop until ZooKeeper was
    back (owned topics included); now the claims are refused as unavailable and retried, and
    the new topics are claimed once it is back. (An outage without the claims was a test of
    its own, of nothing this one does not check.)"""
    await publishing_goes_on_through_a_zookeeper_outage(cluster, 600)


async def publishing_goes_on_through_a_zookeeper_outage(
    cluster: DevCluster, new_topics: int, security: ClientSecurity | None = None
) -> None:
    assert cluster.zk_server is not None
    zk = cluster.zk_server
    work = Workload(cluster.addresses, TOPICS, security=security)
    await work.start()
    await asyncio.sleep(2.0)  # load before the fault
    up_at = work.history.acked_count
    await asyncio.sleep(SESSION * 4)  # the same length with ZooKeeper up, to compare with
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, zk.stop)
    fresh = [f"outage/{i}" for i in range(new_topics)]
    claimer = HedwigClient(
        cluster.addresses, retry=RetryPolicy(deadline_s=SESSION * 3), security=security
    )

    async def claim(topic: str) -> None:
        with contextlib.suppress(HedwigError):
            await claimer.publish(topic, b"during")

    claims = [asyncio.create_task(claim(t)) for t in fresh]
    try:
        down_at = work.history.acked_count
        before = down_at - up_at
        await asyncio.sleep(SESSION * 4)  # the test: load through the outage
        during = work.history.acked_count - down_at
    finally:
        await loop.run_in_executor(None, zk.start)
    # As much acknowledged with ZooKeeper down as just before with it up (give or take what a
    # busy machine takes away).
    assert during > 0.7 * before, f"{during} acknowledged during the outage, {before} before"
    await asyncio.gather(*claims)
    for topic in fresh:  # each claimed once ZooKeeper is back
        await asyncio.wait_for(claimer.publish(topic, b"after"), timeout=30)
    await claimer.close()
    await asyncio.sleep(SESSION + 2)  # load on after it, writes settle
    history = await work.finish()
    check(history)


# The same faults on a secured cluster: TLS, ACLs, and every storage write and recovery
# going over the hubs' internal listeners (mutual TLS), found through their alive records.


@pytest.mark.alone  # compares the rate during the outage with the rate before
async def test_secure_publishing_goes_on_through_a_zookeeper_outage_with_claims_waiting(
    secure_cluster: DevCluster,
) -> None:
    """The ZooKeeper outage with claims waiting, on a secured cluster (TLS, client
    certificates, ACLs, ZooKeeper digest authentication): its session comes back as the same
    authenticated user, the waiting claims are refused as unavailable meanwhile, and claimed
    once it is back, and nothing acknowledged is lost. 300 new topics, not 600: more than the
    requests the ZooKeeper client lets out at once (``slots.MAX_IN_FLIGHT``), but each
    refused claim is retried within half a second over TLS, from the process that also runs
    the checked publishers (600 took a third of their rate away)."""
    await publishing_goes_on_through_a_zookeeper_outage(
        secure_cluster, 300, security=admin(secure_cluster)
    )


async def run_secure(
    cluster: DevCluster, fault: Callable[[], Awaitable[object]], *, after: float
) -> None:
    work = Workload(cluster.addresses, TOPICS, security=admin(cluster), senders=1)
    await under_load(work, fault, before=2.0, after=after)


# Left-over ledgers looked for every 2 s, among ledgers 2 s old, while ledgers roll over
# every 4 KB: a sweep that took a ledger a log names, or is about to, would lose messages.
SWEEPING = ["--audit-interval", "0.5", "--audit-full-interval", "2", "--ledger-max-bytes", "4096"]


async def left_over_ledgers_go(cluster: DevCluster, runner: Runner) -> None:
    """A ledger left by a claim of a topic that died before naming it goes once the topic's
    record has been written since (here by the take-over after its owner is killed); the
    sweeps, every 2 s through roll-overs, the kill and the take-overs, take nothing else (the
    history is checked)."""
    store = open_store(cluster.zk, region=cluster.region)
    await store.start()
    left: list[int] = []
    try:

        async def fault() -> None:
            ids = tuple(sorted(h.storage_id for h in await store.hubs.list_hubs() if h.alive))
            claim = LedgerMetadata(0, TOPICS[0], 3, 3, 2, ((0, ids),), owner="gone:1")
            left.append((await store.ledgers.create_ledger(claim)).value.ledger_id)
            cluster.hub_at(await victim_owner(cluster)).kill()

        await runner(cluster, fault, after=SESSION + 6)

        async def collected() -> bool:
            return await store.ledgers.read_ledger(left[0]) is None

        await eventually(collected, timeout=20)
        deleted = 0.0
        for hub in cluster.hub_procs:
            if hub.running:
                text = await asyncio.get_running_loop().run_in_executor(
                    None, scrape, hub.metrics_url
                )
                deleted += sum(
                    float(line.rsplit(" ", 1)[1])
                    for line in text.splitlines()
                    if line.startswith("hedwig_left_over_ledgers_deleted_total ")
                )
        assert deleted >= 1
        rolled = len(await store.ledgers.list_ledgers())
        assert rolled > 3 * len(TOPICS), f"{rolled} ledgers: too few roll-overs to race with"
    finally:
        await store.close()


@pytest.fixture
def sweeping_cluster(tmp_path: Path) -> Iterator[DevCluster]:
    with cluster_332(tmp_path, "faults-sweeping", hub_args=SWEEPING) as c:
        yield c


async def test_left_over_ledgers_go_and_nothing_else_does(sweeping_cluster: DevCluster) -> None:
    await left_over_ledgers_go(sweeping_cluster, run)


async def test_secure_kill9_owner_under_load(secure_cluster: DevCluster) -> None:
    victim: list[str] = []

    async def fault() -> None:
        victim.append(await victim_owner(secure_cluster))
        secure_cluster.hub_at(victim[0]).kill()

    await run_secure(secure_cluster, fault, after=SESSION + 4)
    # Fenced over the internal listeners (TLS, hub certificates) in batches.
    survivors = [h for h in secure_cluster.hub_procs if h.address != victim[0]]
    assert fences_answered(survivors) >= 1


async def test_secure_kill9_storage_replica_under_load(secure_cluster: DevCluster) -> None:
    async def fault() -> None:
        owner = await victim_owner(secure_cluster)
        next(h for h in secure_cluster.hub_procs if h.address != owner).kill()

    await run_secure(secure_cluster, fault, after=SESSION + 3)


async def test_secure_zookeeper_restarted_under_load(secure_cluster: DevCluster) -> None:
    """ZooKeeper restarted under a secured cluster's load: the hubs authenticate again with
    their digest on the new connection, the records written after the restart carry the same
    ACLs (readable by all, changed only with the digest), and nothing is lost."""
    zk = secure_cluster.zk_server
    assert zk is not None

    async def fault() -> None:
        await asyncio.get_running_loop().run_in_executor(None, zk.restart)

    await run_secure(secure_cluster, fault, after=SESSION + 4)
    layout = Layout(secure_cluster.region)
    outsider = KazooClient(hosts=secure_cluster.zk)
    outsider.start(timeout=10)
    try:
        for topic in TOPICS:
            owner = layout.owner(topic)
            acls, _ = outsider.get_acls(owner)
            assert {a.id.scheme for a in acls} == {"digest", "world"}, acls
            world = next(a for a in acls if a.id.scheme == "world")
            assert world.perms == KazooPermissions.READ, acls
            with pytest.raises(NoAuthError):
                outsider.delete(owner)
    finally:
        outsider.stop()
        outsider.close()


@pytest.mark.parametrize("store", ["zookeeper", "etcd"])
async def test_a_hub_back_on_another_address_keeps_its_replicas(tmp_path: Path, store: str) -> None:
    """Ledgers name replicas by hub id, not address. Two of four hubs are killed in turn
    under load and come back with their data on new ports: nothing acknowledged is lost,
    every earlier message stays readable, and no replica is re-created elsewhere (before ids,
    reads failed with "cannot connect to hub OLD-ADDRESS" and the audit copied every ledger).
    On either metadata store: both publish the id in the hub's registry record."""
    with DevCluster(
        hubs=4,
        region="faults-moved",
        session_timeout_s=SESSION,
        replication="3/3/2",
        secure=True,
        base_dir=str(tmp_path / "cluster"),
        hub_args=["--audit-interval", "1", "--rereplication-delay", "120"],
        store=store,
    ) as cluster:
        security = admin(cluster)
        work = Workload(cluster.addresses, TOPICS, security=security)
        await work.start()
        await asyncio.sleep(2.0)  # load before the fault
        loop = asyncio.get_running_loop()
        ids: dict[str, str] = {}
        for hub in cluster.hub_procs[:2]:
            old = hub.address
            ids[old] = (Path(hub.data_dir) / "hub-id").read_text().strip()
            hub.kill()
            await asyncio.sleep(SESSION + 1)  # the test: down past its session
            hub.port, hub.metrics_port, hub.internal_port = free_port(), free_port(), free_port()
            await loop.run_in_executor(None, hub.start)
            assert hub.address != old
            assert (Path(hub.data_dir) / "hub-id").read_text().strip() == ids[old]
            await asyncio.sleep(2.0)  # load on the moved hub before the next move
        history = await work.finish()
        check(history)
        # Read everything again through a fresh client: some of it lives only on the moved hubs'
        # replicas (under their ids), which other hubs now find at the new addresses.
        async with HedwigClient(
            [h.address for h in cluster.hub_procs], security=security
        ) as reader:
            for topic in TOPICS:
                assert await read_all(reader, topic) == history.log[topic]
        assert replaced_bytes(cluster) == 0, "a replica was re-created elsewhere"


def replaced_bytes(cluster: DevCluster) -> float:
    """Bytes the hubs' audits copied to replace replicas of hubs they took for gone."""
    return summed(cluster.hub_procs, 'hedwig_rereplicated_bytes_total{kind="replace"}')


def compactions(hubs: list[HubProcess]) -> float:
    """Entry logs these hubs compacted since they started."""
    return summed(hubs, "hedwig_storage_compactions_total")


@pytest.mark.parametrize(
    ("fault", "store"),
    [("kill9", "zookeeper"), ("freeze", "etcd")],
    ids=["kill9-zk", "freeze-etcd"],
)
async def test_replica_killed_or_frozen_while_entry_logs_are_compacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str, store: str
) -> None:
    """Every ledger a hub stores shares its entry logs. Topics created and deleted beside the
    checked ones leave closed logs mostly dead, which compaction copies forward and removes
    while the checked topics are written; a replica is killed (``kill -9``) in the middle of
    it and started again on its data, so it reads its logs back with their copies and delete
    records; or (on etcd) frozen past its lease and thawed, its compaction resuming on a hub
    that lost its session meanwhile. Nothing acknowledged is lost, every message reads back,
    and the hub goes on compacting. Secured (TLS, client certificates, ACLs)."""
    with DevCluster(
        hubs=3,
        region="faults-compact",
        session_timeout_s=SESSION,
        replication="3/3/2",
        secure=True,
        store=store,
        base_dir=str(tmp_path / "cluster"),
        hub_args=["--entry-log-bytes", "32768"],
    ) as cluster:
        if store == "etcd":
            assert cluster.security is not None
            for name, value in cluster.security.store_env().items():
                monkeypatch.setenv(name, value)  # this process reads owners as the hubs do
        security = admin(cluster)
        stop = asyncio.Event()
        churned: list[str] = []

        async def churn() -> None:
            async with HedwigClient(
                cluster.addresses,
                security=security,
                retry=RetryPolicy(initial_delay_s=0.05, max_delay_s=0.5, deadline_s=60),
            ) as client:
                n = 0
                while not stop.is_set():
                    topic = f"churn/{n}"
                    for i in range(8):
                        await client.publish(topic, b"%d." % i + b"c" * 1000)
                    await client.delete_topic(topic, force=True)
                    churned.append(topic)
                    n += 1

        churner = asyncio.create_task(churn())

        try:
            work = Workload(cluster.addresses, TOPICS, security=security)
            await work.start()
            await asyncio.sleep(2.0)  # load before the fault

            owner = await victim_owner(cluster)
            replica = next(h for h in cluster.hub_procs if h.address != owner)

            async def compacted() -> bool:
                return await asyncio.to_thread(compactions, [replica]) > 0

            await eventually(compacted, timeout=60)
            if fault == "kill9":
                replica.kill()
                await asyncio.sleep(0.5)  # the test: killed, down a moment
                await asyncio.to_thread(replica.start)
                await asyncio.sleep(SESSION + 3)  # load on the restarted hub
                # The restarted hub compacts too (its counter began again at its start).
                await eventually(compacted, timeout=60)
            else:
                before = await asyncio.to_thread(compactions, [replica])
                replica.freeze()
                await asyncio.sleep(SESSION + 3)  # its lease is gone: its topics moved
                replica.thaw()

                async def compacted_again() -> bool:
                    return await asyncio.to_thread(compactions, [replica]) > before

                await eventually(compacted_again, timeout=60)
            history = await work.finish()
        finally:
            stop.set()
            await churner
        check(history)
        assert len(churned) >= 10, churned
        async with HedwigClient(cluster.addresses, security=security) as reader:
            for topic in TOPICS:
                assert await read_all(reader, topic) == history.log[topic]
