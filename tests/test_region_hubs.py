"""A client learns the region's hubs from the first hub it reaches (DESCRIBE_REGION), so losing
the one hub it was given never stops it: in memory, the owner it was given killed mid-stream
(unreachable, its session over) and every message still acknowledged once, in order, through
the hubs it learnt; a client whose hubs answer routes as before."""

from __future__ import annotations

import asyncio

from hedwig.client import HedwigClient
from hedwig.hub.owning.choices import HUBS_CACHE_S
from hedwig.metadata.memory import MemoryMetadataStore
from hedwig.net.connection import HubConnection
from hedwig.protocol import DescribeRegion, Region
from tests.memory_region import FAST_RETRY, answered, memory_region


async def test_any_hub_names_the_region_and_its_alive_hubs_itself_first() -> None:
    async for region in memory_region(3):
        for hub in region.hubs:
            conn = await HubConnection.open(hub.address, network=region.network)
            try:
                answer = await conn.request(DescribeRegion(request_id=conn.next_id()))
            finally:
                conn.close()
            assert isinstance(answer, Region)
            assert answer.region == hub.config.connection.region
            assert answer.hubs[0] == hub.address
            assert sorted(answer.hubs) == sorted(h.address for h in region.hubs)


async def test_a_client_given_one_hub_goes_on_when_that_hub_dies() -> None:
    async for region in memory_region(4):
        given = region.hubs[0]
        async with HedwigClient(
            [given.address], network=region.network, retry=FAST_RETRY, max_batch_messages=10
        ) as c:
            await c.publish("t", b"first")
            owner = region.owner("t")
            if owner is not given:
                # Make the given hub the owner, as in the account: `hedwig pub --hub H T`,
                # H the topic's owner.
                await owner.topics.release("t", "test", given.address)
                await c.publish("t", b"moved")
            assert region.owner("t") is given
            await asyncio.sleep(0)
            assert sorted(c.router.region_hubs) == sorted(h.address for h in region.hubs[1:])
            futures = [c.publish_nowait("t", b"m%04d" % i) for i in range(300)]
            await asyncio.sleep(0.01)  # some are acknowledged by the given hub
            store = given.store
            assert isinstance(store, MemoryMetadataStore)
            region.network.sever(given.address, refuse=True)  # kill -9: nothing answers
            store.disconnect()
            store.expire()
            seqs = [(await f).seq for f in futures]
            assert seqs == sorted(seqs) and len(set(seqs)) == 300
            answer = await c.read("t", 1, max_messages=1_000)
            values = [m.value for b in answer.batches for m in b.delivered()]
            assert values[-300:] == [b"m%04d" % i for i in range(300)]
        region.network.restore(given.address)
        await asyncio.sleep(HUBS_CACHE_S)


async def test_a_client_whose_hubs_answer_routes_as_before() -> None:
    async for region in memory_region(3):
        given = region.hubs[1]
        async with HedwigClient([given.address], network=region.network, retry=FAST_RETRY) as c:
            for i in range(10):
                await c.publish(f"r/{i}", b"x")
            assert c.router.region_hubs
        # Every topic's first publish went to the given hub (and on from there by redirects),
        # none to the hubs learnt.
        first = answered(given, "publish") + answered(given, "publish", "not_responsible_for_topic")
        assert first >= 10
