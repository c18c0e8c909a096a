"""Hub behaviour with hubs in this process: flow control, bounds, duplicates, losing ownership.

The hubs listen on real loopback sockets and clients talk to them over TCP; the metadata store
is the in-memory one (so sessions can be expired at will) or a real ZooKeeper.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from hedwig.client import HedwigClient, RetryPolicy, SubscribeMode, Subscriber
from hedwig.devcluster.zookeeper import ZooKeeperServer
from hedwig.errors import (
    DeadlineExceededError,
    MessagesUnavailableError,
    ServiceUnavailableError,
    TopicMovingError,
)
from hedwig.hub import Hub, HubConfig
from hedwig.hub.owning.topic import TopicState
from hedwig.metadata.memory import MemoryBackend, MemoryMetadataStore
from hedwig.metadata.records import HubLoad
from hedwig.protocol import EncodedMessages, Publish, Published, Subscribe
from hedwig.security.principal import ANONYMOUS
from hedwig.settings import ConnectionSettings, StorageSettings
from tests import scratch
from tests.cluster_helpers import eventually
from tests.test_metadata_zookeeper import expire_session

# Two hubs replicate each ledger on both: the storage role is exercised on every write.
BASE = HubConfig(
    connection=ConnectionSettings(listen="127.0.0.1:0", metadata_session_timeout_s=2.0),
    storage=StorageSettings(data_dir="unused", replication="2/2/2"),
)


def config(replication: str = "2/2/2", **connection: object) -> HubConfig:
    return replace(
        BASE,
        connection=replace(BASE.connection, **connection),  # type: ignore[arg-type]
        storage=replace(BASE.storage, data_dir=scratch.mkdtemp("hub-"), replication=replication),
    )


@pytest.fixture
async def hubs() -> AsyncIterator[list[Hub]]:
    backend = MemoryBackend()
    started = []
    for _ in range(2):
        hub = Hub(config(), store=MemoryMetadataStore(backend, "mem"))
        await hub.start()
        started.append(hub)
    yield started
    for hub in started:
        await hub.stop()


async def test_message_window_limits_unconsumed(hubs: list[Hub]) -> None:
    async with HedwigClient(hubs[0].address) as c:
        sub = await c.subscribe("window", "w", message_window=5)
        for i in range(20):
            await c.publish("window", b"%d" % i)
        got = [await sub.next(5) for _ in range(5)]
        assert [m.seq for m in got] == [1, 2, 3, 4, 5]
        with pytest.raises(DeadlineExceededError):
            await sub.next(0.5)  # the window is full until we consume
        sub.consume(3)
        more = [await sub.next(5) for _ in range(3)]
        assert [m.seq for m in more] == [6, 7, 8]
        with pytest.raises(DeadlineExceededError):
            await sub.next(0.3)


async def test_message_bound_skips_the_oldest(hubs: list[Hub]) -> None:
    async with HedwigClient(hubs[0].address) as c:
        sub = await c.subscribe("bound", "b", message_bound=10)
        await sub.close()
        for i in range(50):
            await c.publish("bound", b"%d" % i)
        sub = await c.subscribe("bound", "b", mode=SubscribeMode.ATTACH, message_bound=10)
        first = await sub.next(5)
        assert first.seq == 41


async def test_duplicate_publish_is_not_stored_twice(hubs: list[Hub]) -> None:
    async with HedwigClient(hubs[0].address) as c:
        await c.publish("dups", b"warm-up")
        owner = c.owner_of("dups")
        assert owner is not None
        conn = await c.connection(owner)
        messages = EncodedMessages.of_values([b"a", b"b"])

        def publish() -> Publish:
            return Publish(
                request_id=conn.next_id(),
                topic="dups",
                publisher_id="pub-x",
                publisher_seq=1,
                messages=messages,
            )

        first = await conn.request(publish())
        again = await conn.request(publish())
        assert isinstance(first, Published) and isinstance(again, Published)
        assert not first.duplicate and again.duplicate
        assert (again.first_seq, again.last_seq) == (first.first_seq, first.last_seq) == (2, 3)
        info = await c.topic_info("dups")
        assert info.last_seq == 3


async def one_consumed(
    c: HedwigClient, hubs: list[Hub], topic: str, name: str
) -> tuple[Subscriber, Hub]:
    """``name`` subscribed to ``topic``, one message published and consumed, the mark
    synced; the subscriber and the topic's owner."""
    sub = await c.subscribe(topic, name)
    await c.publish(topic, b"one")
    m = await sub.next(5)
    sub.consume(m.seq)
    assert await sub.sync()
    return sub, next(h for h in hubs if topic in h.topics.topics)


async def test_session_expiry_drops_topics_and_clients_move(hubs: list[Hub]) -> None:
    async with HedwigClient([h.address for h in hubs], retry=RetryPolicy(deadline_s=20)) as c:
        sub, owner = await one_consumed(c, hubs, "expiry", "e")
        owned = owner.topics.topics["expiry"]
        assert isinstance(owner.store, MemoryMetadataStore)
        owner.store.expire()  # as ZooKeeper does after a partition longer than the session
        assert owned.state is TopicState.CLOSED
        assert "expiry" not in owner.topics.topics
        # Until it has a new session the old owner claims nothing: it refuses at once (on
        # etcd, out of reach, a claim would wait for a call's timeout) and is not ready.
        with pytest.raises(ServiceUnavailableError, match="cannot reach the metadata store"):
            await owner.topics.acquire("expiry", redirected=True)
        assert owner.readiness() == (False, "metadata store session suspended or lost")
        # Clients find the topic again (maybe on the same hub, once it has a new session) and
        # carry on where they were.
        await owner.store.start()
        assert not owner.topics.suspended
        r = await c.publish("expiry", b"two")
        assert r.seq == 2
        assert (await sub.next(10)).value == b"two"


async def test_owner_record_deleted_from_outside(hubs: list[Hub]) -> None:
    async with HedwigClient([h.address for h in hubs]) as c:
        sub, owner = await one_consumed(c, hubs, "forced", "f")
        got = await owner.store.ownership.read_owner_info("forced")
        assert got is not None
        losses = owner.topics.stats.losses
        await owner.store.ownership.delete_owner_info("forced", got.version)

        async def dropped() -> bool:
            # (the topic may be claimed again at once, even by the same hub)
            return owner.topics.stats.losses > losses

        await eventually(dropped, timeout=5)
        r = await c.publish("forced", b"two")
        assert r.seq == 2
        assert (await sub.next(10)).value == b"two"
    # The metrics say the same: one loss, and a claim for each time a hub took the topic.
    claims = sum(
        h.metrics.registry.get_sample_value("hedwig_topic_claims_total") or 0 for h in hubs
    )
    assert claims == sum(h.topics.stats.claims for h in hubs) >= 2
    losses_seen = sum(
        h.metrics.registry.get_sample_value(
            "hedwig_topic_losses_total", {"reason": "ownership-removed"}
        )
        or 0
        for h in hubs
    )
    assert losses_seen == 1


async def test_retention_collects_consumed_ledgers(hubs: list[Hub]) -> None:
    hub = hubs[0]
    async with HedwigClient(hub.address) as c:
        sub = await c.subscribe("gc", "g", message_window=0)
        for i in range(5):
            await c.publish("gc", b"%d" % i)
        owner = next(h for h in hubs if "gc" in h.topics.topics)
        owned = owner.topics.topics["gc"]
        owned.log.settings = replace(owned.log.settings, ledger_max_bytes=1)
        owned.config = replace(owned.config, retention_ms=0)
        for i in range(5, 15):
            await c.publish("gc", b"%d" % i)

        async def rolled_over() -> bool:  # roll-overs run in the background
            return len(owned.log.ranges.ranges) > 5

        await eventually(rolled_over, timeout=5)
        assert len(owned.log.ranges.ranges) > 5
        await owner.loops.collect_garbage()
        assert len(owned.log.ranges.ranges) > 5  # nothing consumed yet: nothing collected
        last = None
        for _ in range(15):
            last = await sub.next(5)
        assert last is not None
        sub.consume(last.seq - 3)
        assert await sub.sync()
        await owner.loops.collect_garbage()
        assert owned.log.first_seq > 1
        assert owned.log.first_seq <= last.seq - 2  # never past what the subscriber still needs
        with pytest.raises(MessagesUnavailableError):
            await c.read("gc", 1)  # collected: a clear error, not a silent gap
        earliest = await c.read("gc", 0)  # 0 means "from the first kept message"
        assert earliest.first_available == owned.log.first_seq
        assert earliest.batches[0].first_seq == owned.log.first_seq


async def test_the_collector_reads_a_quiet_topic_once_until_something_changes(
    hubs: list[Hub],
) -> None:
    """A taken-over or rolled-over topic has a closed ledger the collector looks at every
    round. With nobody subscribed it reads it once, then nothing (and makes no subscriptions
    table) until the ranges change or the ledger is old enough to go, which it then collects.
    A hub owning 100,000 taken-over topics read 200,000 records a minute for nothing."""
    async with HedwigClient(hubs[0].address) as c:
        await c.publish("quiet-gc", b"0")
        owner = next(h for h in hubs if "quiet-gc" in h.topics.topics)
        owned = owner.topics.topics["quiet-gc"]
        owned.config = replace(owned.config, retention_ms=1500)
        owned.log.settings = replace(owned.log.settings, ledger_max_bytes=1)
        await c.publish("quiet-gc", b"1")

        async def rolled_over() -> bool:
            return len(owned.log.ranges.ranges) >= 2

        await eventually(rolled_over, timeout=5)
        reads: list[str] = []
        store = owner.store
        read_ledger, read_subs = store.ledgers.read_ledger, store.subscriptions.read_subscriptions

        async def counted_ledger(lid: int) -> Any:
            reads.append(f"ledger {lid}")
            return await read_ledger(lid)

        async def counted_subs(topic: str) -> Any:
            reads.append(f"subscriptions {topic}")
            return await read_subs(topic)

        store.ledgers.read_ledger = counted_ledger  # type: ignore[method-assign,assignment]
        store.subscriptions.read_subscriptions = counted_subs  # type: ignore[method-assign]
        await owner.loops.collect_garbage()
        assert reads and owned.log.first_seq == 1, "too young to go"
        reads.clear()
        await owner.loops.collect_garbage()
        assert reads == [] and owned._subs is None
        await asyncio.sleep(1.6)  # the test: the ledger ages past its retention (1.5 s)
        await owner.loops.collect_garbage()
        assert reads and owned.log.first_seq == 3, "old enough: collected"
        assert [m.value for b in (await c.read("quiet-gc", 0)).batches for m in b.delivered()] == []


class _AwayAtFirst(MemoryMetadataStore):
    """A store whose connection drops as soon as it is made, and comes back a second later:
    a hub restarted into a network blip, or while its store restarts."""

    async def start(self) -> None:
        await super().start()
        self.disconnect()
        asyncio.get_running_loop().call_later(1.0, self.reconnect)


async def test_a_hub_starting_while_its_store_is_away_waits_for_it() -> None:
    """Found by the nemesis: a hub restarted into an outage exited at its first read of the
    store, and its replicas stayed down. It waits, registers once the store answers, and
    serves."""
    backend = MemoryBackend()
    hub = Hub(config(replication="1/1/1"), store=_AwayAtFirst(backend, "mem"))
    await asyncio.wait_for(hub.start(), 30)
    try:
        assert hub.readiness() == (True, "ready")
        async with MemoryMetadataStore(backend, "mem") as look:
            assert [h.address for h in await look.list_hubs() if h.alive] == [hub.address]
        async with HedwigClient(hub.address) as c:
            await c.publish("after-the-blip", b"x")
    finally:
        await hub.stop()


class _ExpiresOnRegistering(MemoryMetadataStore):
    """A store whose session expires right after the hub registers, and which has a new
    session at once: all of it before the hub's startup is over."""

    async def register_hub(self, address: str, load: HubLoad) -> int:
        epoch = await super().register_hub(address, load)
        if not getattr(self, "expired_once", False):
            self.expired_once = True
            self.expire()
            await self.start()
        return epoch


async def test_a_hub_whose_session_ends_while_it_starts_registers_again() -> None:
    backend = MemoryBackend()
    hub = Hub(config(replication="1/1/1"), store=_ExpiresOnRegistering(backend, "mem"))
    await asyncio.wait_for(hub.start(), 30)
    try:
        async with MemoryMetadataStore(backend, "mem") as look:

            async def registered() -> bool:
                return [h.address for h in await look.list_hubs() if h.alive] == [hub.address]

            await eventually(registered, timeout=10)
    finally:
        await hub.stop()


@pytest.fixture
async def zk_hub(zk_server: ZooKeeperServer, region: str) -> AsyncIterator[Hub]:
    hub = Hub(config(metadata_url=zk_server.address, region=region, replication="1/1/1"))
    await hub.start()
    yield hub
    await hub.stop()


@pytest.mark.integration
async def test_zookeeper_session_expiry(zk_hub: Hub) -> None:
    """A real ZooKeeper session expired under a hub: it drops its topics and re-registers."""
    async with HedwigClient(zk_hub.address, retry=RetryPolicy(deadline_s=30)) as c:
        await c.publish("zk-expiry", b"one")
        epoch = zk_hub.topics.epoch
        from hedwig.metadata.zookeeper import ZkMetadataStore

        assert isinstance(zk_hub.store, ZkMetadataStore)
        await expire_session(zk_hub.store)

        async def dropped() -> bool:
            return "zk-expiry" not in zk_hub.topics.topics

        await eventually(dropped, timeout=15)
        r = await c.publish("zk-expiry", b"two")
        assert r.seq == 2
        assert zk_hub.topics.epoch != epoch
        hubs = await zk_hub.store.hubs.list_hubs()
        assert [h.alive for h in hubs if h.address == zk_hub.address] == [True]


class _Peer:
    """A connection as a subscription table sees it, for attaching without a socket."""

    name = "late"
    principal = ANONYMOUS
    closed = False

    def send(self, frame: object) -> None:
        pass

    async def writable(self) -> None:
        pass


async def test_nobody_attaches_to_a_topic_after_it_was_handed_off(hubs: list[Hub]) -> None:
    """A SUBSCRIBE that waited on the store (the subscription's owner read, under a slow
    store) while its topic was handed off finds the subscription in memory, needing no read:
    it is refused as moving, not attached to a topic its hub no longer serves, where it would
    wait for ever."""
    async with HedwigClient([h.address for h in hubs]) as c:
        _, owner = await one_consumed(c, hubs, "handed", "h")
        owned = owner.topics.topics["handed"]
        await owned.release("handed off by the test")
        assert owned.state is TopicState.CLOSED
        request = Subscribe(request_id=1, topic="handed", subscriber="h", force_attach=True)
        with pytest.raises(TopicMovingError):
            await owned.subs.subscribe(_Peer(), request)
        assert not owned.subs.any_attached()
