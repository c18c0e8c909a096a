"""Hubs' external client listeners, in memory: a client that can reach only the hubs' external
addresses publishes, subscribes, follows redirects and moves, and learns the region, and is
never named an internal address; the names' rewriting frame by frame; the settings' checks.

The outside client's network is the region's ``MemoryNetwork`` seen through ``Outside``,
which connects to the external addresses alone and keeps every address it was asked for.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

import pytest

from hedwig.client import HedwigClient
from hedwig.clock import ManualClock
from hedwig.errors import ConnectionLostError, UsageError
from hedwig.hub import Hub, HubConfig
from hedwig.hub.front.outward import REFRESH_S, ExternalAddresses
from hedwig.metadata.memory import MemoryBackend, MemoryMetadataStore
from hedwig.metadata.records import HubLoad
from hedwig.net import MemoryNetwork
from hedwig.net.transport import Listener
from hedwig.protocol import Error, MoveKind, Region, SubscriptionMoved, TopicMoved
from hedwig.protocol.status import Status
from hedwig.settings import ConnectionSettings, StorageSettings
from tests.memory_region import FAST_RETRY, SCRATCH
from tests.waiting import until

P = TypeVar("P", bound=asyncio.Protocol)


class Outside:
    """The network as a client outside the hubs' network has it: only ``outside:`` hosts."""

    def __init__(self, network: MemoryNetwork) -> None:
        self._network = network
        self.asked: list[str] = []

    async def connect(self, address: str, factory: Callable[[], P], *, timeout_s: float) -> P:
        self.asked.append(address)
        if not address.startswith("outside:"):
            raise ConnectionLostError(f"cannot connect to hub {address}: no route to host")
        return await self._network.connect(address, factory, timeout_s=timeout_s)

    async def listen(self, address: str, factory: Callable[[], asyncio.Protocol]) -> Listener:
        raise AssertionError("the outside client listens nowhere")


@pytest.fixture
async def hubs() -> AsyncIterator[tuple[MemoryNetwork, list[Hub]]]:
    network, backend = MemoryNetwork(), MemoryBackend()
    dirs = [tempfile.mkdtemp(prefix="hedwig-ext-", dir=SCRATCH) for _ in range(2)]
    # One value for both hubs, by hub id, as a pool's shared settings give it.
    advertise = "hub-a=outside:7001,hub-b=outside:7002"
    started: list[Hub] = []
    for name, port, data_dir in zip(("hub-a", "hub-b"), (7001, 7002), dirs, strict=True):
        config = HubConfig(
            connection=ConnectionSettings(
                listen="memory:0",
                external_listen=f"outside:{port}",
                external_advertise=advertise,
                metadata_session_timeout_s=2.0,
            ),
            storage=StorageSettings(data_dir=data_dir, replication="2/2/2", hub_id=name),
        )
        hub = Hub(config, store=MemoryMetadataStore(backend, "mem"), network=network)
        await hub.start()
        started.append(hub)
    try:
        yield network, started
    finally:
        for hub in started:
            await hub.stop()
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)


async def test_an_outside_client_is_sent_to_external_addresses_only(
    hubs: tuple[MemoryNetwork, list[Hub]],
) -> None:
    network, (a, b) = hubs
    outside = Outside(network)
    topics = [f"t{i}" for i in range(12)]
    async with HedwigClient(["outside:7001"], network=outside, retry=FAST_RETRY) as client:
        for topic in topics:
            await client.publish(topic, b"one")
        # Some topics are b's: the client was redirected there, by b's external address.
        assert any(topic in b.topics.topics for topic in topics)
        assert any(topic in a.topics.topics for topic in topics)
        # The region as DESCRIBE_REGION names it: external addresses only.
        assert client.router.region_hubs == ["outside:7002"]

        sub = await client.subscribe("moving", "s", auto_consume=True)
        await client.publish("moving", b"before")
        assert (await sub.next(2)).value == b"before"
        source = a if "moving" in a.topics.topics else b
        dest = b if source is a else a
        await source.requests.moves.move("moving", dest.address, MoveKind.REQUESTED, "test")
        await client.publish("moving", b"after")
        assert (await sub.next(2)).value == b"after"
        assert "moving" in dest.topics.topics
    assert set(outside.asked) <= {"outside:7001", "outside:7002"}
    assert "outside:7002" in outside.asked
    # Both hubs registered their external addresses.
    alive = {h.address: h.load.external for h in await a.store.hubs.list_hubs() if h.load}
    assert alive == {a.address: "outside:7001", b.address: "outside:7002"}


async def test_inside_clients_keep_being_named_internal_addresses(
    hubs: tuple[MemoryNetwork, list[Hub]],
) -> None:
    network, (a, b) = hubs
    async with HedwigClient([a.address], network=network, retry=FAST_RETRY) as client:
        await client.publish("inside", b"x")
        assert client.router.region_hubs == [b.address]


# the rewriting, frame by frame ----------------------------------------------------------


async def names(known: dict[str, str]) -> tuple[ExternalAddresses, MemoryMetadataStore]:
    store = MemoryMetadataStore(MemoryBackend(), "mem")
    await store.start()
    for address, external in known.items():
        await store.hubs.register_hub(address, HubLoad(external=external))
    clock = ManualClock()
    got = ExternalAddresses(store, clock, own=("me:1", "outside:1"))
    await got.read()
    return got, store


async def test_every_frame_naming_a_hub_names_its_external_address() -> None:
    n, _ = await names({"other:1": "outside:2", "plain:1": ""})
    moved = TopicMoved(topic="t", new_owner="other:1", reason="r")
    assert n.rewrite(moved) == TopicMoved(topic="t", new_owner="outside:2", reason="r")
    error = Error(
        request_id=1, status=Status.NOT_RESPONSIBLE_FOR_TOPIC, message="m", address="me:1"
    )
    assert n.rewrite(error) == Error(
        request_id=1, status=Status.NOT_RESPONSIBLE_FOR_TOPIC, message="m", address="outside:1"
    )
    lane = Error(request_id=1, status=Status.USE_LANE, message="m", address="t.lane-1")
    assert n.rewrite(lane) is lane
    to_other = SubscriptionMoved(topic="t", subscriber="s", hub="other:1")
    assert n.rewrite(to_other) == SubscriptionMoved(topic="t", subscriber="s", hub="outside:2")
    region = Region(
        request_id=1,
        region="r",
        hubs=("me:1", "plain:1", "other:1"),
        boundaries=(0, 1),
        owners=("plain:1", "other:1"),
    )
    # A hub without an external address is never named by its internal one.
    assert n.rewrite(region) == Region(
        request_id=1,
        region="r",
        hubs=("outside:1", "outside:2"),
        boundaries=(0, 1),
        owners=("", "outside:2"),
    )
    to_plain = TopicMoved(topic="t", new_owner="plain:1", reason="r")
    assert n.rewrite(to_plain) == TopicMoved(topic="t", new_owner=None, reason="r")


async def test_a_hub_not_yet_known_is_read_from_the_registry() -> None:
    n, store = await names({})
    await store.hubs.register_hub("late:1", HubLoad(external="outside:9"))
    assert n.of("late:1") is None  # not read yet: named no one, and the registry read
    await until(lambda: n.of("late:1") == "outside:9")


def test_external_settings_are_checked() -> None:
    with pytest.raises(UsageError, match="needs external_advertise"):
        ConnectionSettings(external_listen="0.0.0.0:7001")
    with pytest.raises(UsageError, match="set external_listen"):
        ConnectionSettings(external_advertise="1.2.3.4:31000")
    with pytest.raises(UsageError, match="by hub id"):
        ConnectionSettings(external_listen="0.0.0.0:7001", external_advertise="a:1,b:2")
    with pytest.raises(UsageError, match="HOST:PORT"):
        ConnectionSettings(external_listen="0.0.0.0:7001", external_advertise="h-0=nohost")
    listed = ConnectionSettings(
        external_listen="0.0.0.0:7001", external_advertise="h-0=1.2.3.4:31000, h-1=1.2.3.4:31001"
    )
    assert listed.external_address("h-1") == "1.2.3.4:31001"
    assert listed.external_address("h-2") == ""
    single = ConnectionSettings(external_listen="0.0.0.0:7001", external_advertise="lb:7001")
    assert single.external_address("anyone") == "lb:7001"


async def test_a_hub_that_came_back_elsewhere_is_named_at_its_new_address() -> None:
    store = MemoryMetadataStore(MemoryBackend(), "mem")
    await store.start()
    await store.hubs.register_hub("moved:1", HubLoad(external="node-1:31000"))
    clock = ManualClock()
    n = ExternalAddresses(store, clock, own=("me:1", "outside:1"))
    await n.read()
    await store.hubs.update_load("moved:1", HubLoad(external="node-2:31000"))
    assert n.of("moved:1") == "node-1:31000"  # read less than REFRESH_S ago: kept
    await asyncio.sleep(0)
    assert n.of("moved:1") == "node-1:31000"
    clock.advance(REFRESH_S)
    assert n.of("moved:1") == "node-1:31000"  # the last known, while it is read again
    await until(lambda: n.of("moved:1") == "node-2:31000")
