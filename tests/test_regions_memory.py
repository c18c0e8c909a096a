"""Two linked regions in memory: real hubs, each region with its own metadata store, one
network between them. A topic owned in both is replicated both ways by the hubs' replicators
(``hedwig.hub.replicating``): every message reaches the other region once, in its publisher's
order, nothing comes back, and moves and hand-offs on either side lose and repeat nothing."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from hedwig.client import HedwigClient
from hedwig.hub import Hub, HubConfig
from hedwig.hub.replicating.applying import origin_of
from hedwig.hub.replicating.topic_replication import APPEND_BYTES, subscription_name
from hedwig.metadata.memory import MemoryBackend, MemoryMetadataStore
from hedwig.metadata.records import NEW_VERSION, TopicConfig
from hedwig.net import MemoryNetwork
from hedwig.protocol import MoveKind
from hedwig.settings import BalanceSettings, ConnectionSettings, StorageSettings
from hedwig.settings.replication import ReplicationSettings
from tests.memory_region import FAST_RETRY, SCRATCH
from tests.waiting import eventually


@dataclass
class LinkedRegions:
    network: MemoryNetwork
    backends: dict[str, MemoryBackend]
    hubs: dict[str, list[Hub]] = field(default_factory=dict)
    dirs: list[str] = field(default_factory=list)

    async def add_hub(self, region: str, address: str, links: str) -> Hub:
        data_dir = tempfile.mkdtemp(prefix="hedwig-reg-", dir=SCRATCH)
        self.dirs.append(data_dir)
        config = HubConfig(
            connection=ConnectionSettings(
                listen=address, region=region, metadata_session_timeout_s=2.0
            ),
            storage=StorageSettings(data_dir=data_dir, replication="1/1/1"),
            balance=BalanceSettings(self_balance=False),
            replication=ReplicationSettings(region_links=links),
        )
        hub = Hub(
            config, store=MemoryMetadataStore(self.backends[region], region), network=self.network
        )
        await hub.start()
        self.hubs.setdefault(region, []).append(hub)
        return hub

    def client(self, region: str, **options: object) -> HedwigClient:
        options.setdefault("retry", FAST_RETRY)
        return HedwigClient(
            [h.address for h in self.hubs[region]],
            network=self.network,
            **options,  # type: ignore[arg-type]
        )


@pytest.fixture
async def regions() -> AsyncIterator[LinkedRegions]:
    r = LinkedRegions(MemoryNetwork(), {"a": MemoryBackend(), "b": MemoryBackend()})
    await r.add_hub("a", "a1:1", "b=b1:1,b2:1")
    await r.add_hub("a", "a2:1", "b=b1:1,b2:1")
    await r.add_hub("b", "b1:1", "a=a1:1,a2:1")
    await r.add_hub("b", "b2:1", "a=a1:1,a2:1")
    try:
        yield r
    finally:
        for hubs in r.hubs.values():
            for hub in hubs:
                await hub.stop()
        for d in r.dirs:
            shutil.rmtree(d, ignore_errors=True)


async def log_of(client: HedwigClient, topic: str) -> list[tuple[str, bytes]]:
    """``(publisher id as stored, value)`` of every message of ``topic``, in log order."""
    answer = await client.read(topic, 1, max_messages=100_000)
    return [(m.publisher_id, m.value) for b in answer.batches for m in b.delivered()]


def by_origin(log: list[tuple[str, bytes]]) -> dict[str, list[bytes]]:
    """The log's values by origin publisher (replicated ones under their origin's id)."""
    out: dict[str, list[bytes]] = {}
    for pid, value in log:
        origin = origin_of(pid)
        out.setdefault(pid if origin is None else origin[1], []).append(value)
    return out


async def test_both_ways_exactly_once_and_nothing_loops(regions: LinkedRegions) -> None:
    async with (
        regions.client("a", publisher_id="pa") as ca,
        regions.client("b", publisher_id="pb") as cb,
    ):
        sub = await cb.subscribe("orders", "reader")
        sent_a = [b"a%d" % i for i in range(200)]
        sent_b = [b"b%d" % i for i in range(80)]
        for i in range(0, 200, 10):
            await ca.publish_batch("orders", sent_a[i : i + 10])
        for v in sent_b:
            await cb.publish("orders", v)
        # A subscriber in B gets A's messages as they are applied there.
        got: list[bytes] = []
        while len(got) < 280:
            m = await sub.next(20)
            got.append(m.value)
            sub.consume(m.seq)
        want = {"pa": sent_a, "pb": sent_b}

        async def both_complete() -> bool:
            return [by_origin(await log_of(c, "orders")) for c in (ca, cb)] == [want, want]

        await eventually(both_complete, what="every message once in each region")
        # Replicated in B under A's origin, and not sent back to A.
        log_a, log_b = await log_of(ca, "orders"), await log_of(cb, "orders")
        assert {pid for pid, _ in log_a} == {"pa", "@b/pb"}
        assert {pid for pid, _ in log_b} == {"pb", "@a/pa"}
        assert sorted(got) == sorted(sent_a + sent_b)
        # The hub subscriptions exist in both regions under the other region's name.
        names_a = {s.name for s in (await ca.describe_topic("orders")).subscriptions}
        names_b = {s.name for s in (await cb.describe_topic("orders")).subscriptions}
        assert subscription_name("b") in names_a and subscription_name("a") in names_b
        # What each region's owner appended from the other, in its metrics.
        owner_b = next(h for h in regions.hubs["b"] if "orders" in h.topics.topics)
        replicated = owner_b.metrics.registry.get_sample_value(
            "hedwig_replicated_messages_total", {"region": "a"}
        )
        assert replicated == len(sent_a)
        # DESCRIBE_LINKS: each hub's links, and the owner's replication from a.
        links = await cb.describe_links(owner_b.address)
        assert links.region == "b" and links.regions == ("a",)
        assert links.endpoints == ("a1:1,a2:1",)
        assert links.topics == (1,) and links.replicated == (len(sent_a),)
        other_b = next(h for h in regions.hubs["b"] if h is not owner_b)
        idle = await cb.describe_links(other_b.address)
        assert idle.regions == ("a",) and idle.topics == (0,) and idle.replicated == (0,)


async def test_moves_on_either_side_lose_and_repeat_nothing(regions: LinkedRegions) -> None:
    async with (
        regions.client("a", publisher_id="pa") as ca,
        regions.client("b", publisher_id="pb") as cb,
    ):
        await cb.subscribe("moving", "reader")
        sent_a: list[bytes] = []
        sent_b: list[bytes] = []
        for round_ in range(6):
            for i in range(20):
                sent_a.append(b"a%d-%d" % (round_, i))
                ca.publish_nowait("moving", sent_a[-1])
                if i % 2:
                    sent_b.append(b"b%d-%d" % (round_, i))
                    cb.publish_nowait("moving", sent_b[-1])
            side = "a" if round_ % 2 else "b"
            hubs = regions.hubs[side]

            async def owned() -> bool:
                return any("moving" in h.topics.topics for h in hubs)  # noqa: B023

            await eventually(owned, what=f"an owner in region {side}")
            source = next(h for h in hubs if "moving" in h.topics.topics)
            dest = next(h for h in hubs if h is not source)
            await source.requests.moves.move("moving", dest.address, MoveKind.REQUESTED, "test")
        await ca.flush()
        await cb.flush()
        want = {"pa": sent_a, "pb": sent_b}

        async def both_complete() -> bool:
            return [by_origin(await log_of(c, "moving")) for c in (ca, cb)] == [want, want]

        await eventually(both_complete, what="every message once in each region")
        # Only the owners replicate, one replication per topic and linked region.
        for region in ("a", "b"):
            running = [k for h in regions.hubs[region] for k in h.replicator.running]
            assert running == [("moving", "b" if region == "a" else "a")]


async def test_a_topic_replicated_from_the_regions_its_record_names(
    regions: LinkedRegions,
) -> None:
    """In b the topic's record names no region: b pulls nothing of it, a still pulls b's."""
    store_b = regions.hubs["b"][0].store
    await store_b.topics.write_topic_config("island", TopicConfig(regions=()), NEW_VERSION)
    async with (
        regions.client("a", publisher_id="pa") as ca,
        regions.client("b", publisher_id="pb") as cb,
    ):
        await ca.subscribe("island", "reader")
        await cb.subscribe("island", "reader")
        await ca.publish("island", b"stays in a")
        await cb.publish("island", b"goes to a")

        async def a_has_both() -> bool:
            return by_origin(await log_of(ca, "island")) == {
                "pa": [b"stays in a"],
                "pb": [b"goes to a"],
            }

        await eventually(a_has_both, what="b's message in a")
        assert by_origin(await log_of(cb, "island")) == {"pb": [b"goes to a"]}
        assert not any(k[0] == "island" for h in regions.hubs["b"] for k in h.replicator.running)


async def test_large_messages_are_appended_in_bounded_batches(regions: LinkedRegions) -> None:
    async with regions.client("a", publisher_id="pa") as ca, regions.client("b") as cb:
        await cb.subscribe("big", "reader")
        values = [bytes([i]) * 400_000 for i in range(6)]
        await ca.publish_batch("big", values)

        async def all_in_b() -> bool:
            return by_origin(await log_of(cb, "big")).get("pa") == values

        await eventually(all_in_b, what="a's large messages in b, once, in order")
        answer = await cb.read("big", 1, max_messages=100)
        for batch in answer.batches:
            assert batch.publisher_id == "@a/pa"
            assert len(batch.payload) <= APPEND_BYTES + 1024
            # Each stored batch starts at its first message's sequence id in a.
            assert batch.publisher_seq == batch.first_seq
