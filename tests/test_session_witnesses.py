"""A hub cut off from its store: HUB_ALIVE, learning from the others that its session ended,
and asking its replicas whether the ledgers of the topics read there were fenced.

Real hubs on the in-memory network and store: the memory store loses its connection and
keeps its session as a ZooKeeper client does (``disconnect``), and the session can be ended
behind its back (``MemoryBackend.expire``), which the hub learns only when it gets through
again, or from another hub (``hedwig.hub.owning.witnesses``). The network lab runs the same with
ZooKeeper itself (``tests/failure/test_partitions.py``,
``test_owner_cut_off_from_zookeeper_asked_after_its_session`` and its secured twin); the
witnesses' read on etcd, where the session is a lease, runs here against etcd itself.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hedwig.devcluster.etcd import EtcdServer
from hedwig.errors import MetadataUnavailableError, ServiceUnavailableError
from hedwig.hub import HubConfig
from hedwig.hub.process.hub import Hub
from hedwig.ledger.remote import RemoteStorage
from hedwig.metadata import SessionState
from hedwig.metadata.etcd.store import EtcdMetadataStore
from hedwig.metadata.memory import MemoryMetadataStore
from hedwig.net.connection import HubConnection
from hedwig.protocol import Ok, StorageHello, TailTopic
from hedwig.settings import ConnectionSettings, StorageSettings
from tests import scratch
from tests.memory_region import answered, memory_region
from tests.waiting import until


def memory_store(hub: Hub) -> MemoryMetadataStore:
    assert isinstance(hub.store, MemoryMetadataStore)
    return hub.store


async def test_a_hub_says_whether_another_is_alive_in_its_session() -> None:
    async for region in memory_region(2):
        asked, other = region.hubs
        node = region.storage_client(asked)
        try:
            epoch = other.topics.epoch
            assert await node.hub_alive(other.address, epoch, 1.0) is True
            assert await node.hub_alive(other.address, epoch + 1, 1.0) is False
            assert await node.hub_alive("127.0.0.1:9", epoch, 1.0) is False
            assert answered(asked, "hub_alive") == 3
            memory_store(other).expire()  # its registration goes with its session
            assert await node.hub_alive(other.address, epoch, 1.0) is False
        finally:
            node.close()


async def test_a_hub_that_cannot_reach_the_store_either_tells_nothing() -> None:
    async for region in memory_region(2):
        asked, other = region.hubs
        node = region.storage_client(asked)
        try:
            memory_store(asked).disconnect()
            assert await node.hub_alive(other.address, other.topics.epoch, 1.0) is None
            assert answered(asked, "hub_alive") == 0
            memory_store(asked).reconnect()
            assert await node.hub_alive(other.address, other.topics.epoch, 1.0) is True
        finally:
            node.close()


async def test_a_hub_from_before_the_frame_is_not_asked() -> None:
    """A hub whose OK to STORAGE_HELLO lacks **answers hub alive** would close the connection
    (and every ledger write on it) on a frame it does not know: it is not sent one."""
    async for region in memory_region(2):
        asked, other = region.hubs
        hello = asked.requests.storage.storage_hello

        async def old_hello(conn: object, req: StorageHello, hello: Any = hello) -> Ok:
            await hello(conn, req)
            return Ok(request_id=req.request_id, fences_batched=True)

        asked.client_routes._routes[StorageHello] = old_hello
        node = region.storage_client(asked)
        try:
            assert await node.hub_alive(other.address, other.topics.epoch, 1.0) is None
            assert answered(asked, "hub_alive") == 0
            await node.add_entry(7, 0, -1, b"the connection still serves")
        finally:
            node.close()


async def test_a_hub_cut_off_from_the_store_drops_its_topics_once_another_finds_it_gone() -> None:
    """The owner loses its store connection; while its session lasts, it serves on (a store
    outage stops no publishing). Its session then ends in the store, which it cannot learn
    itself: another hub reads the registry for it, and it drops its topics and refuses what
    needs a claim, so its clients go to a hub that can take the topics over. Back in reach,
    it starts a new session and serves again."""
    async for region in memory_region(3, replication="2/2/2"):
        async with region.client() as client:
            for i in range(6):
                await client.publish(f"w{i}", b"before")
            owner = region.owner("w0")
            mine = [t for t in owner.topics.topics]
            store = memory_store(owner)
            store.disconnect()

            def asked(hubs: list[Hub] = region.hubs) -> bool:
                return sum(answered(h, "hub_alive") for h in hubs) >= 1

            # asked at least once: still alive, nothing changes
            await until(asked, what="another hub asked whether the owner's session lives")
            assert sorted(owner.topics.topics) == sorted(mine)
            await client.publish("w0", b"while the store is out of reach")

            store.expire()
            async with asyncio.timeout(3):
                while owner.topics.topics:
                    await asyncio.sleep(0.05)
            assert owner.topics.suspended
            assert store.state is SessionState.SUSPENDED  # the store itself has said nothing
            with pytest.raises(ServiceUnavailableError, match="cannot reach the metadata store"):
                await owner.topics.acquire("w0", redirected=True)
            # Its clients move on: another hub takes the topic over, history intact.
            await client.publish("w0", b"after")
            assert region.owner("w0") is not owner
            got = await client.read("w0", 1)
            assert [m.value for b in got.batches for m in b.delivered()] == [
                b"before",
                b"while the store is out of reach",
                b"after",
            ]

            epoch = owner.topics.epoch
            store.reconnect()  # learns its session ended
            assert memory_store(owner).state is SessionState.LOST
            await store.start()  # a new one (a ZooKeeper client makes it by itself)
            async with asyncio.timeout(5):
                while owner.topics.suspended or owner.topics.epoch == epoch:
                    await asyncio.sleep(0.05)
            async with region.client() as again:
                for t in mine:
                    await again.publish(t, b"with the owner back")


async def test_a_draining_hub_cut_off_from_the_store_is_not_told_its_session_ended() -> None:
    """A hub that drains takes its registration out before it hands its topics over. Cut off
    from the store in between, it must not take the registration's absence for the end of
    its session (dropping its topics then would leave them unserved until the session
    really ends, as nobody can claim them before): it does not ask, and serves on."""
    async for region in memory_region(3, replication="2/2/2"):
        async with region.client() as client:
            for i in range(4):
                await client.publish(f"d{i}", b"before")
            owner = region.owner("d0")
            mine = sorted(owner.topics.topics)
            owner.topics.accepting = False  # as ``Hub.drain`` does first
            await owner.store.hubs.unregister_hub(owner.address)
            store = memory_store(owner)
            store.disconnect()
            await asyncio.sleep(1.2)  # the test: two rounds of questions, had it asked
            assert sum(answered(h, "hub_alive") for h in region.hubs) == 0
            assert sorted(owner.topics.topics) == mine
            await client.publish("d0", b"while draining, cut off")
            store.reconnect()


def read_lacs(hubs: list[Hub]) -> float:
    return sum(answered(h, "read_lac") for h in hubs)


async def test_past_its_session_a_cut_off_hub_asks_about_the_ledgers_of_topics_read_only() -> None:
    """The owner cut off from the store, its session alive (no witness says otherwise), while
    another hub takes three of its topics over (their owner records deleted by hand, as an
    operator might): past the session timeout the owner asks the replicas whether its open
    ledgers were fenced, and drops the topics read here (a subscriber attached; a delivery
    hub's long poll), so the subscriber moves on and receives what is published through the
    new owner. It asks about those only: the idle one goes when a publish to it fails on its
    fenced ledger; asking about every owned topic every second was a cost of each idle one
    for as long as the store was out of reach."""
    async for region in memory_region(3):
        async with region.client() as client:
            await client.publish("read", b"r1")
            owner = region.owner("read")
            others = [h for h in region.hubs if h is not owner]
            idle = []
            for i in range(200):
                await client.publish(f"idle/{i}", b"i1")
                if region.owner(f"idle/{i}") is owner:
                    idle.append(f"idle/{i}")
            assert len(idle) >= 2, "the owner claimed fewer than two of the idle topics"
            tailed = idle.pop()  # long-polled once, as a delivery hub does: read too
            conn = await HubConnection.open(owner.address, network=region.network)
            try:
                await conn.request(
                    TailTopic(
                        request_id=conn.next_id(),
                        topic=tailed,
                        after_seq=1,
                        max_messages=10,
                        max_bytes=1 << 20,
                        wait_ms=200,
                    ),
                    timeout=5,
                )
            finally:
                conn.close()
            sub = await client.subscribe("read", "s")  # from the next message on
            await client.publish("read", b"r2")
            assert (await sub.next(5)).value == b"r2"

            memory_store(owner).disconnect()
            async with MemoryMetadataStore(region.backend, "mem") as operator:
                for topic in ("read", tailed, idle[0]):
                    record = await operator.read_owner_info(topic)
                    assert record is not None
                    await operator.delete_owner_info(topic, record.version)
            new = others[0]
            for topic in ("read", tailed, idle[0]):  # claimed there: the ledgers fenced
                await new.topics.acquire(topic, redirected=True)
            before = read_lacs(others)
            async with asyncio.timeout(10):
                while "read" in owner.topics.topics or tailed in owner.topics.topics:
                    await asyncio.sleep(0.05)
            await asyncio.sleep(2.5)  # the test: two more rounds of asking, counted
            asked = read_lacs(others) - before
            # The read topics' ledgers on their replicas, a few times; not 50-odd idle ones.
            assert asked <= 24, f"{asked} READ_LACs for two read topics"
            assert owner.topics.suspended and idle[0] in owner.topics.topics

            await client.publish("read", b"r3")  # through the new owner
            assert (await sub.next(10)).value == b"r3"
            assert region.owner("read") is new
            await client.publish(idle[0], b"i2")  # refused on its fenced ledger, then elsewhere
            got = await client.read(idle[0], 1)
            assert [m.value for b in got.batches for m in b.delivered()] == [b"i1", b"i2"]
            assert idle[0] not in owner.topics.topics
            memory_store(owner).reconnect()


async def test_a_witness_whose_store_read_fails_tells_nothing() -> None:
    """The asked hub reaches its store, but the read of the registry fails on the way (the
    connection drops mid-request): that is no answer, never a "not alive" that would make the
    asker drop every topic it owns. The next question, read whole, is answered."""
    async for region in memory_region(2):
        asked, other = region.hubs
        node = region.storage_client(asked)
        hubs = asked.store.hubs
        read = hubs.alive_epoch
        calls = 0

        async def failing(address: str, read: Any = read) -> int | None:
            nonlocal calls
            calls += 1
            await read(address)  # the read goes out; its answer is lost
            raise MetadataUnavailableError("connection lost while reading")

        try:
            hubs.alive_epoch = failing  # type: ignore[method-assign]
            assert await node.hub_alive(other.address, other.topics.epoch, 1.0) is None
            assert calls == 1 and answered(asked, "hub_alive") == 0
            assert answered(asked, "hub_alive", "service_unavailable") == 1
            # The asker's witnesses: no answer is no end of its session.
            witnesses = other.witnesses.session_over
            assert witnesses is not None
            assert await witnesses(other.address, other.topics.epoch) is False
            hubs.alive_epoch = read  # type: ignore[method-assign]
            assert await node.hub_alive(other.address, other.topics.epoch, 1.0) is True
        finally:
            node.close()


@pytest.mark.integration
async def test_hubs_on_etcd_witness_each_others_leases(
    etcd_server: EtcdServer, region: str
) -> None:
    """Two real hubs on a real etcd, over real connections: a hub's lease is its session, and
    the alive record on it carries the epoch (its create revision). A witness says "alive" for
    the epoch of the lease in force, "not alive" once that lease has gone (revoked here as etcd
    does at expiry), and "alive" again for the epoch of the lease the hub takes next."""
    hubs = [
        Hub(
            HubConfig(
                connection=ConnectionSettings(
                    metadata_url=etcd_server.url,
                    region=region,
                    listen="127.0.0.1:0",
                    metadata_session_timeout_s=4.0,
                ),
                storage=StorageSettings(data_dir=scratch.mkdtemp("hub-"), replication="1/1/1"),
            )
        )
        for _ in range(2)
    ]
    asked, other = hubs

    async def resolve(_member: str) -> str:
        return asked.address

    node = RemoteStorage(asked.storage.address, resolve=resolve)
    try:
        for hub in hubs:
            await hub.start()
        epoch = other.topics.epoch
        assert epoch
        assert await node.hub_alive(other.address, epoch, 2.0) is True
        assert await node.hub_alive(other.address, epoch + 1, 2.0) is False
        # What ``other`` would hear if it were cut off: its witnesses ask ``asked``, the one
        # other hub its last read of the registry found.
        await other.directory.refresh()
        assert other.directory.members(besides=(other.address, other.hub_id)) == [asked.hub_id]
        witnesses = other.witnesses.session_over
        assert witnesses is not None
        assert await witnesses(other.address, epoch) is False
        told = answered(asked, "hub_alive")
        assert told == 3

        store = other.store
        assert isinstance(store, EtcdMetadataStore)
        await store.etcd.revoke_elsewhere(store.etcd.lease)
        assert await node.hub_alive(other.address, epoch, 2.0) is False
        assert await witnesses(other.address, epoch) is True

        # it learns at its next refresh, and registers again
        await until(lambda: other.topics.epoch not in (0, epoch), 15, what="registered again")
        renewed = other.topics.epoch
        assert await node.hub_alive(other.address, renewed, 2.0) is True
        assert await node.hub_alive(other.address, epoch, 2.0) is False
        assert answered(asked, "hub_alive") == told + 4
    finally:
        node.close()
        for hub in hubs:
            await hub.stop()
