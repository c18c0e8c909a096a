"""Real ZooKeeper, real hub processes: redirects, claims, crashes, restarts, bad input."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
from collections.abc import Iterator

import pytest

from hedwig.client import HedwigClient, RetryPolicy, SubscribeMode
from hedwig.devcluster.cluster import DevCluster
from hedwig.devcluster.zookeeper import ZooKeeperServer
from hedwig.errors import (
    InvalidRequestError,
    InvalidTopicError,
    MessageTooLargeError,
    NoSuchSubscriptionError,
    NotResponsibleError,
    ServiceUnavailableError,
    SubscriptionExistsError,
)
from hedwig.hub import Hub, HubConfig
from hedwig.protocol import (
    Connection,
    EncodedMessages,
    Error,
    Publish,
    Reply,
    Role,
    error_from_frame,
)
from hedwig.protocol.wire import HEADER
from hedwig.settings import ConnectionSettings, StorageSettings
from tests import scratch
from tests.cluster_helpers import eventually, hedwig, lone_hub, owner_of

pytestmark = pytest.mark.integration

SESSION = 2.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[DevCluster]:
    with DevCluster(hubs=3, region="it", session_timeout_s=SESSION) as c:
        yield c


@pytest.fixture
def fresh_cluster() -> Iterator[DevCluster]:
    """A cluster of its own, for tests that kill or restart hubs."""
    with DevCluster(hubs=3, region="crash", session_timeout_s=SESSION) as c:
        yield c


def lying_publish(topic: str, *, count: int, values: list[bytes]) -> bytes:
    """A PUBLISH frame whose batch count is not the number of messages it holds."""
    honest = Connection(Role.CLIENT).send(
        Publish(
            request_id=1,
            topic=topic,
            publisher_id="p",
            publisher_seq=0,
            messages=EncodedMessages.of_values(values),
        )
    )
    payload = EncodedMessages.of_values(values).payload
    count_at = len(honest) - len(payload) - 4
    return honest[:count_at] + struct.pack(">I", count) + honest[count_at + 4 :]


async def raw_request(address: str, frame: bytes) -> Reply:
    """Send bytes on a connection of their own; the answer, or its error raised."""
    host, port = address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(frame)
        conn = Connection(Role.CLIENT)
        while True:
            chunk = await asyncio.wait_for(reader.read(65536), 10)
            assert chunk, "the hub closed the connection instead of answering"
            conn.receive_data(chunk)
            frames = conn.next_frames()
            if frames:
                answer = frames[0]
                if isinstance(answer, Error):
                    raise error_from_frame(answer)
                assert not isinstance(answer, tuple)
                return answer  # type: ignore[return-value]
    finally:
        writer.close()


async def test_publish_through_one_hub_subscribe_through_another(cluster: DevCluster) -> None:
    a, b = cluster.addresses[0], cluster.addresses[1]
    async with HedwigClient(a) as pub, HedwigClient(b) as subc:
        sub = await subc.subscribe("redirects/1", "s1")
        results = [await pub.publish("redirects/1", b"m%d" % i) for i in range(100)]
        assert [r.seq for r in results] == list(range(1, 101))
        got = [await sub.next(10) for _ in range(100)]
        assert [m.value for m in got] == [b"m%d" % i for i in range(100)]
        assert [m.seq for m in got] == list(range(1, 101))
        owner = await owner_of(cluster.zk, cluster.region, "redirects/1")
        assert owner in cluster.addresses
        # Both clients end up talking to the owner, so at least one of them was redirected.
        assert pub.owner_of("redirects/1") == owner == subc.owner_of("redirects/1")
        assert owner != a or owner != b


async def test_lazy_creation_and_cli_listing(cluster: DevCluster) -> None:
    async with HedwigClient(cluster.addresses) as c:
        for i in range(6):
            await c.publish(f"lazy-{i}", b"x")
    out = hedwig("topics", "--zk", cluster.zk, "--region", cluster.region, "--json")
    assert out.returncode == 0, out.stderr
    rows = {r["topic"]: r for r in json.loads(out.stdout)}
    for i in range(6):
        assert rows[f"lazy-{i}"]["owner"] in cluster.addresses
        assert rows[f"lazy-{i}"]["last_seq"] == 1
    hubs = json.loads(
        hedwig("hubs", "--zk", cluster.zk, "--region", cluster.region, "--json").stdout
    )
    assert sorted(h["hub"] for h in hubs if h["alive"]) == sorted(cluster.addresses)
    table = hedwig("topics", "--zk", cluster.zk, "--region", cluster.region).stdout
    assert table.splitlines()[0].split() == [
        "TOPIC",
        "OWNER",
        "SUBSCRIBERS",
        "LAST_SEQ",
        "BACKLOG",
        "MODE",
    ]


def test_cli_pub_and_sub(cluster: DevCluster) -> None:
    hub = cluster.addresses[2]
    pub = hedwig("pub", "--hub", hub, "cli topic", input="hello\nworld\n")
    assert pub.returncode == 0, pub.stderr
    assert pub.stdout.splitlines() == ["1\thello", "2\tworld"]
    # A subscriber created now starts after the current end; attach mode needs it to exist.
    sub = hedwig(
        "sub",
        "--hub",
        hub,
        "cli topic",
        "nobody",
        "--mode",
        "attach",
        "--count",
        "1",
        "--timeout",
        "2",
    )
    assert sub.returncode == 1 and "no subscription" in sub.stderr.lower()
    sub = hedwig("sub", "--hub", hub, "cli topic", "cli-sub", "--count", "1", "--timeout", "1")
    assert sub.returncode == 1  # nothing new was published after it subscribed
    hedwig("pub", "--hub", hub, "cli topic", input="third\nfourth\n")
    sub = hedwig("sub", "--hub", hub, "cli topic", "cli-sub", "--count", "2", "--timeout", "10")
    assert sub.returncode == 0, sub.stderr
    assert sub.stdout.splitlines() == ["3\tthird", "4\tfourth"]


async def test_claim_race_exactly_one_wins(zk_server: ZooKeeperServer) -> None:
    hubs = []
    for _ in range(2):
        h = Hub(
            HubConfig(
                connection=ConnectionSettings(
                    metadata_url=zk_server.address,
                    region="race",
                    listen="127.0.0.1:0",
                    metadata_session_timeout_s=SESSION,
                ),
                storage=StorageSettings(data_dir=scratch.mkdtemp(), replication="2/2/2"),
            )
        )
        await h.start()
        hubs.append(h)
    try:
        for i in range(20):
            topic = f"race-{i}"
            results = await asyncio.gather(
                *(h.topics.acquire(topic, redirected=True) for h in hubs), return_exceptions=True
            )
            winners = [
                h for h, r in zip(hubs, results, strict=True) if not isinstance(r, Exception)
            ]
            assert len(winners) == 1, results
            loser = results[0] if isinstance(results[0], Exception) else results[1]
            assert isinstance(loser, NotResponsibleError | ServiceUnavailableError)
            if isinstance(loser, NotResponsibleError):
                assert loser.owner == winners[0].address
    finally:
        for h in hubs:
            await h.stop()


async def test_bad_input_gets_clear_errors_and_harms_nothing(cluster: DevCluster) -> None:
    hub = cluster.addresses[0]
    async with HedwigClient(hub) as c:
        await c.publish("bad-input", b"before")
        # oversized message: the client refuses before sending
        with pytest.raises(Exception, match="exceeds the limit"):
            await c.publish("bad-input", b"x" * (2 * 1024 * 1024))
        # invalid topic names are refused by the hub as well as locally
        conn = await c.connection(hub)

        def publish(rid: int, topic: str, value: bytes) -> Publish:
            return Publish(
                request_id=rid,
                topic=topic,
                publisher_id="p",
                publisher_seq=0,
                messages=EncodedMessages.of_values([value]),
            )

        for bad in ["", "new\nline", "x" * 300]:
            with pytest.raises(InvalidTopicError):
                await conn.request(publish(conn.next_id(), bad, b"x"))
        # a message over the hub's limit, sent raw
        owner = await owner_of(cluster.zk, cluster.region, "bad-input")
        assert owner is not None
        oconn = await c.connection(owner)
        with pytest.raises(MessageTooLargeError):
            await oconn.request(publish(oconn.next_id(), "bad-input", b"y" * 1_100_000))
        # a batch whose count lies (built by hand: the frame's constructor refuses it)
        with pytest.raises(InvalidRequestError):
            await raw_request(owner, lying_publish("bad-input", count=5, values=[b"y"]))
        # unknown subscribers and existing ones
        with pytest.raises(NoSuchSubscriptionError):
            await c.subscribe("bad-input", "ghost", mode=SubscribeMode.ATTACH)
        s = await c.subscribe("bad-input", "real", mode=SubscribeMode.CREATE)
        await s.close()
        with pytest.raises(SubscriptionExistsError):
            await c.subscribe("bad-input", "real", mode=SubscribeMode.CREATE)
        # garbage on a raw socket closes that connection only
        host, port = owner.rsplit(":", 1)
        with socket.create_connection((host, int(port))) as raw:
            raw.sendall(HEADER.pack(8, 42, 1, 0, 1))  # protocol version 42
            raw.settimeout(5)
            assert raw.recv(100) == b""  # closed by the hub
        with socket.create_connection((host, int(port))) as raw:
            raw.sendall(struct.pack(">I", 20) + os.urandom(20))
            raw.settimeout(5)
            assert raw.recv(100) == b""
        # and the hub still serves everyone else
        r = await c.publish("bad-input", b"after")
        assert r.seq == 2


async def test_kill9_owner_then_restart_loses_nothing(fresh_cluster: DevCluster) -> None:
    c = fresh_cluster
    topic = "crash/kill9"
    retry = RetryPolicy(deadline_s=60)
    async with (
        HedwigClient(c.addresses, retry=retry) as pub,
        HedwigClient(c.addresses, retry=retry) as subc,
    ):
        sub = await subc.subscribe(topic, "survivor")
        acked = [(await pub.publish(topic, b"a%d" % i)).seq for i in range(200)]
        owner = await owner_of(c.zk, c.region, topic)
        assert owner is not None
        victim = c.hub_at(owner)
        victim.kill()
        # keep publishing through the outage: these succeed once the topic is back
        more = asyncio.gather(*(pub.publish(topic, b"b%d" % i) for i in range(50)))
        await asyncio.sleep(SESSION + 1)  # the fault: the owner stays down past its session
        victim.start()
        acked += [r.seq for r in await more]
        assert acked == list(range(1, 251))
        seen: list[int] = []
        while len(seen) < 250:
            m = await sub.next(30)
            seen.append(m.seq)
            sub.consume(m.seq)
        assert seen == list(range(1, 251))
        assert sub.resubscriptions >= 1


async def test_consume_marks_survive_restart(fresh_cluster: DevCluster) -> None:
    c = fresh_cluster
    topic = "marks"
    async with HedwigClient(c.addresses) as client:
        sub = await client.subscribe(topic, "m")
        for i in range(100):
            await client.publish(topic, b"%d" % i)
        for _ in range(60):
            m = await sub.next(10)
            sub.consume(m.seq)
        await sub.close()
        owner = await owner_of(c.zk, c.region, topic)
        assert owner is not None
        c.hub_at(owner).restart()  # SIGTERM: hands over, then comes back on the same data dir
    async with HedwigClient(c.addresses) as client:
        sub = await client.subscribe(topic, "m", mode=SubscribeMode.ATTACH)
        first = await sub.next(20)
        assert first.seq == 61
        assert first.value == b"60"
        info = await client.topic_info(topic)
        assert info.last_seq == 100


async def test_sigterm_hands_topics_over_quickly(fresh_cluster: DevCluster) -> None:
    c = fresh_cluster
    async with HedwigClient(c.addresses) as client:
        sub = await client.subscribe("handover", "h")
        await client.publish("handover", b"one")
        m = await sub.next(10)
        assert m.value == b"one"
        sub.consume(m.seq)
        assert await sub.sync()  # consumes are sent without waiting for an answer
        owner = await owner_of(c.zk, c.region, "handover")
        assert owner is not None
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await loop.run_in_executor(None, c.hub_at(owner).stop)

        async def released() -> bool:
            return await owner_of(c.zk, c.region, "handover") != owner

        await eventually(released, timeout=SESSION)  # sooner than a session expiry
        r = await client.publish("handover", b"two")
        assert r.seq == 2
        assert (await sub.next(10)).value == b"two"
        assert loop.time() - t0 < 10


def test_sync_client(cluster: DevCluster) -> None:
    from hedwig.client import SyncClient

    with SyncClient(cluster.addresses) as c:
        sub = c.subscribe("sync-topic", "s")
        results = c.publish_batch("sync-topic", [b"a", b"b", b"c"])
        assert [r.seq for r in results] == [1, 2, 3]
        got = [sub.next(10) for _ in range(3)]
        assert [m.value for m in got] == [b"a", b"b", b"c"]
        sub.consume(3)
        assert c.topic_info("sync-topic").last_seq == 3
        assert c.read("sync-topic", 1).batches[0].first_seq == 1


async def test_cli_move_and_rebalance(cluster: DevCluster) -> None:
    async with HedwigClient(cluster.addresses) as c:
        await c.publish("cli-move", b"x")
    owner = await owner_of(cluster.zk, cluster.region, "cli-move")
    dest = next(a for a in cluster.addresses if a != owner)
    out = hedwig("move", "--zk", cluster.zk, "--region", cluster.region, "cli-move", "--to", dest)
    assert out.returncode == 0, out.stderr

    async def moved() -> bool:
        return await owner_of(cluster.zk, cluster.region, "cli-move") == dest

    await eventually(moved, timeout=10)
    out = hedwig("rebalance", "--zk", cluster.zk, "--region", cluster.region, "--dry-run")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(("balanced", "would move"))
    out = hedwig("ledgers", "--zk", cluster.zk, "--region", cluster.region, "--json")
    assert out.returncode == 0, out.stderr
    assert any(r["topic"] == "cli-move" for r in json.loads(out.stdout))
    sim = hedwig("sim", "--scenario", "skewed")
    assert sim.returncode == 0 and json.loads(sim.stdout)["imbalance"][-1] <= 1.25


async def test_drain_hands_everything_over(fresh_cluster: DevCluster) -> None:
    c = fresh_cluster
    async with HedwigClient(c.addresses) as client:
        for i in range(6):
            await client.publish(f"drain-{i}", b"x")
        owner = await owner_of(c.zk, c.region, "drain-0")
        assert owner is not None
        hub = c.hub_at(owner)
        loop = asyncio.get_running_loop()
        out = await loop.run_in_executor(
            None, lambda: hedwig("drain", "--metrics-port", str(hub.metrics_port))
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("released ")
        for i in range(6):
            assert await owner_of(c.zk, c.region, f"drain-{i}") != owner
            r = await client.publish(f"drain-{i}", b"y")
            assert r.seq == 2
        assert await owner_of(c.zk, c.region, "drain-0") not in (None, owner)


async def test_orphan_ledger_replicas_are_collected(zk_server: ZooKeeperServer) -> None:
    hub = lone_hub(zk_server.address, "orphans")
    await hub.start()
    try:
        async with HedwigClient(hub.address) as client:
            # "drop" first: a replica is only collected once a later ledger exists, so that one
            # being created right now is never mistaken for an orphan
            await client.publish("drop", b"x")
            await client.publish("keep", b"x")
        await hub.topics.release("drop", "test")
        ledgers = (await hub.store.persistence.read_topic_persistence_info("drop")).value  # type: ignore[union-attr]
        await hub.store.topics.delete_topic("drop")
        for r in ledgers.ranges:
            got = await hub.store.ledgers.read_ledger(r.ledger_id)
            assert got is not None
            await hub.store.ledgers.delete_ledger(r.ledger_id, got.version)
        dropped = await hub.auditor.collect_orphans()
        assert sorted(dropped) == sorted(
            r.ledger_id for r in ledgers.ranges if r.ledger_id in dropped
        )
        assert dropped and all(lid not in hub.storage.ledgers() for lid in dropped)
        async with HedwigClient(hub.address) as client:
            assert (await client.publish("keep", b"y")).seq == 2
    finally:
        await hub.stop()


async def test_pipelined_first_publishes_to_new_topics_stay_in_order(cluster: DevCluster) -> None:
    """The owner is unknown at first: the client must not let a later batch reach some hub
    that claims the topic ahead of an earlier batch sent elsewhere."""
    async with HedwigClient(cluster.addresses, max_batch_messages=100) as c:
        topics = [f"order-new-{i}" for i in range(8)]
        futures = {t: [c.publish_nowait(t, b"%d" % n) for n in range(1000)] for t in topics}
        for t, futs in futures.items():
            seqs = [(await f).seq for f in futs]
            assert seqs == list(range(1, 1001)), t


async def test_stop_without_zookeeper_is_bounded(zk_server: ZooKeeperServer) -> None:
    """SIGTERM while ZooKeeper is gone: the hand-off cannot finish, the stop still does."""
    zk = ZooKeeperServer().start()
    hub = lone_hub(zk.address, "nozk", session_timeout_s=2.0)
    await hub.start()
    try:
        async with HedwigClient(hub.address) as c:
            await c.publish("nozk", b"x")
        zk.kill()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await asyncio.wait_for(hub.stop(), 30)
        assert loop.time() - t0 < 15
    finally:
        zk.stop()
