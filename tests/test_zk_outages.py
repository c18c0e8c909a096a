"""The ZooKeeper store through ZooKeeper's absences: requests refused at once and the loop
running on while it is gone, ledger ids unique through its crash, a store (and a hub) started
while it is away waiting for it, on a real ZooKeeper killed and started again."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from pathlib import Path

import pytest

from hedwig.client import HedwigClient
from hedwig.devcluster.zookeeper import ZooKeeperServer
from hedwig.errors import MetadataUnavailableError
from hedwig.hub import Hub, HubConfig
from hedwig.metadata import SessionState
from hedwig.metadata.zookeeper import ZkMetadataStore
from hedwig.metadata.zookeeper import ledgers as zk_ledgers
from hedwig.metadata.zookeeper.client.slots import MAX_IN_FLIGHT
from tests import scratch
from tests.ledger_id_crash import ledger_ids_stay_unique_through_a_crash

pytestmark = pytest.mark.integration


async def test_requests_while_zookeeper_is_gone_never_block_the_event_loop(
    tmp_path: Path,
) -> None:
    """A 100,000-topic region whose ZooKeeper died once had every hub's event loop stuck
    (the client then, kazoo, blocked it on a socket pair that filled while ZooKeeper was
    unreachable). Requests in flight when the connection drops are refused as unavailable;
    later ones are refused at once while it is down (nothing is sent, nothing waits); watches
    are kept, unfired, and set once it is back; the loop runs on throughout."""
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
    monkeypatch.setattr(zk_ledgers, "LEDGER_ID_BLOCK", 3)
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


async def test_a_hub_started_while_zookeeper_is_down_waits_for_it_and_serves(
    tmp_path: Path,
) -> None:
    """A hub restarted into a ZooKeeper outage (found by the nemesis) waits for the store at
    each startup step instead of exiting, registers once ZooKeeper is back, and serves."""
    server = ZooKeeperServer(data_dir=str(tmp_path / "zk"))
    server.start()
    await asyncio.to_thread(server.kill)
    hub = Hub(
        HubConfig(
            zk=server.address,
            region="startup-outage",
            listen="127.0.0.1:0",
            data_dir=scratch.mkdtemp("hub-"),
            replication="1/1/1",
            zk_session_timeout_s=4.0,
        )
    )
    starting = asyncio.create_task(hub.start())
    try:
        await asyncio.sleep(3.0)
        assert not starting.done(), "the hub gave up (or started) without its store"
        await asyncio.to_thread(server.start)
        await asyncio.wait_for(starting, 60)
        assert hub.readiness() == (True, "ready")
        async with ZkMetadataStore(server.address, "startup-outage") as look:
            assert [h.address for h in await look.hubs.list_hubs() if h.alive] == [hub.address]
        async with HedwigClient(hub.address) as client:
            await client.publish("after-the-outage", b"x")
    finally:
        if not starting.done():
            starting.cancel()
        await hub.stop()
        server.stop()


async def test_a_store_whose_start_gave_up_starts_again(tmp_path: Path) -> None:
    """A start that found no ZooKeeper in its time gives up (the hub retries it while the
    store is away, ``hedwig.hub.hub.STARTUP_STORE_WAIT_S``); started again once ZooKeeper is
    there, the same store connects, with a new session, and works."""
    server = ZooKeeperServer(data_dir=str(tmp_path / "zk"))
    server.start()
    await asyncio.to_thread(server.kill)
    store = ZkMetadataStore(server.address, "start-again", session_timeout=4.0)
    try:
        with pytest.raises(MetadataUnavailableError):
            await store.zk.start(timeout=1.0)
        await asyncio.to_thread(server.start)
        await asyncio.wait_for(store.start(), 30)
        assert store.session.state is SessionState.CONNECTED and store.zk.session_id
        await store.topics.ensure_topic("again")
        assert await store.topics.topic_exists("again")
        await store.start()  # started already: nothing to do
    finally:
        await store.close()
        server.stop()
