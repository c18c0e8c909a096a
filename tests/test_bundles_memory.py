"""Hubs that own topics by bundle (``BundleSettings.enabled``), in memory: one owner record per
bundle and none per topic, every topic served by its bundle's owner whichever hub a client
asks, a dead owner's bundles taken over with nothing acknowledged lost, and a stopping hub's
bundles released after its logs are closed."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from hedwig.client import HedwigClient
from hedwig.errors import HedwigError, UsageError
from hedwig.hub import Hub
from hedwig.hub.owning.bundle_claims import BundleClaims
from hedwig.hub.owning.choices import HUBS_CACHE_S
from hedwig.metadata.bundles import BundleMap
from hedwig.metadata.memory import MemoryMetadataStore
from hedwig.metadata.records import HubInfo
from hedwig.settings import BundleSettings, HubConfig
from tests.memory_region import FAST_RETRY, Region, answered, memory_region
from tests.waiting import until

BUNDLES = BundleSettings(enabled=True, initial_bundles=8)
TOPICS = [f"b/{i}" for i in range(60)]


async def values(client: HedwigClient, topic: str) -> list[bytes]:
    answer = await client.read(topic, 1, max_messages=1_000)
    return [m.value for b in answer.batches for m in b.delivered()]


async def owners_by_bundle(region: Region) -> dict[str, str]:
    store = region.hubs[0].store
    return {n: o.value.address for n, o in (await store.bundles.bundle_owners()).items()}


async def the_map(region: Region) -> BundleMap:
    got = await region.hubs[0].store.bundles.read_bundle_map()
    assert got is not None
    return got.value


def busiest(region: Region, owners: dict[str, str]) -> Hub:
    """The hub owning the most bundles."""
    return region.hub_at(Counter(owners.values()).most_common(1)[0][0])


def kill(region: Region, hub: Hub) -> Callable[[], None]:
    """``hub`` killed: unreachable, and its session over in the store; what brings it back
    (for the region's teardown)."""
    store = hub.store
    assert isinstance(store, MemoryMetadataStore)
    region.network.freeze(hub.address)
    store.disconnect()
    store.expire()

    def back() -> None:
        region.network.thaw(hub.address)
        store.reconnect()

    return back


def owner_of(region: Region, topic: str, hubs: list[Hub]) -> Hub:
    owner = region.owner_among(topic, hubs)
    assert owner is not None, topic
    return owner


async def test_topics_are_owned_by_their_bundles_owner_with_no_record_of_their_own() -> None:
    async for region in memory_region(3, bundles=BUNDLES):
        async with region.client() as c:
            await asyncio.gather(*(c.publish(t, b"a") for t in TOPICS))
        store = region.hubs[0].store
        assert [await store.ownership.read_owner_info(t) for t in TOPICS] == [None] * len(TOPICS)
        m = await the_map(region)
        assert len(m) == 8 and m.generation == 0
        owners = await owners_by_bundle(region)
        assert set(owners) <= {b.name for b in m.bundles}
        for t in TOPICS:
            assert owner_of(region, t, region.hubs).address == owners[m.bundle_of(t).name]
        # Spread by the ring over the three hubs, not all on the first one asked.
        assert len(set(owners.values())) >= 2
        # A client that knows one hub only reaches every topic through its redirects.
        for hub in region.hubs:
            async with HedwigClient([hub.address], network=region.network, retry=FAST_RETRY) as c:
                assert await values(c, TOPICS[7]) == [b"a"]


async def test_a_dead_owners_bundles_are_taken_over_with_nothing_lost() -> None:
    async for region in memory_region(3, bundles=BUNDLES):
        async with region.client() as c:
            await asyncio.gather(*(c.publish(t, b"a") for t in TOPICS))
        victim = busiest(region, await owners_by_bundle(region))
        lost = {t for t in TOPICS if t in victim.topics.topics}
        assert lost
        back = kill(region, victim)
        await asyncio.sleep(HUBS_CACHE_S + 0.1)  # the others see it gone from the registry
        rest = [h for h in region.hubs if h is not victim]
        async with HedwigClient(
            [h.address for h in rest], network=region.network, retry=FAST_RETRY
        ) as c:
            await asyncio.gather(*(c.publish(t, b"b") for t in TOPICS))
            for t in TOPICS:
                assert await values(c, t) == [b"a", b"b"], t
        after = await owners_by_bundle(region)
        assert victim.address not in after.values()
        m = await the_map(region)
        for t in lost:
            assert owner_of(region, t, rest).address == after[m.bundle_of(t).name]
        back()


async def test_a_won_bundles_topics_a_dead_owner_left_open_are_recovered_at_once() -> None:
    async for region in memory_region(3, bundles=BUNDLES):
        async with region.client() as c:
            await asyncio.gather(*(c.publish(t, b"a") for t in TOPICS))
            victim = busiest(region, await owners_by_bundle(region))
            theirs = sorted(victim.topics.topics)
            # Some of its topics let go cleanly (their ledgers closed), the rest in use.
            await victim.topics.unload_idle(0)
            idle = set(theirs[::4])
            await asyncio.gather(*(c.publish(t, b"b") for t in theirs if t not in idle))
        assert set(victim.topics.topics) == set(theirs) - idle
        back = kill(region, victim)
        rest = [h for h in region.hubs if h is not victim]
        m = await the_map(region)
        first = next(t for t in theirs if t not in idle)
        bundle = m.bundle_of(first)
        async with HedwigClient(
            [h.address for h in rest], network=region.network, retry=FAST_RETRY
        ) as c:
            await c.publish(first, b"c")  # the one request: it wins the bundle
            heir = owner_of(region, first, rest)
            left_open = {t for t in theirs if bundle.holds(t) and t not in idle}
            assert len(left_open) > 1

            def recovered(hub: Hub = heir, topics: set[str] = left_open) -> bool:
                return topics <= set(hub.topics.topics)

            await until(
                recovered,
                what="the bundle's open topics taken over without a request",
            )
            # Those let go cleanly wait for their first request.
            assert not {t for t in idle if bundle.holds(t)} & set(heir.topics.topics)
            await asyncio.gather(*(c.publish(t, b"d") for t in theirs))
            for t in theirs:
                want = [b"a", b"d"] if t in idle else [b"a", b"b", b"d"]
                assert await values(c, t) == [*want[:-1], *([b"c"] if t == first else []), b"d"]
        back()


async def test_a_new_topic_of_an_owned_bundle_costs_one_store_request() -> None:
    """Its first publish makes the topic with its first ledger and the record naming it in
    one request (``create_topic_with_log``): no owner record, no separate creation, no read."""
    async for region in memory_region(2, bundles=BUNDLES):
        async with region.client() as c:
            await asyncio.gather(*(c.publish(t, b"a") for t in TOPICS))  # every bundle owned
            calls: Counter[str] = Counter()
            for hub in region.hubs:
                for manager, name in (
                    (hub.store.topics, "ensure_topic"),
                    (hub.store.topics, "read_topic_config"),
                    (hub.store.persistence, "read_topic_persistence_info"),
                    (hub.store.persistence, "start_topic_log"),
                    (hub.store.persistence, "create_topic_with_log"),
                    (hub.store.ownership, "claim_topic"),
                ):
                    real = getattr(manager, name)

                    async def counted(
                        *args: Any, _real: Any = real, _name: str = name, _calls: Any = calls
                    ) -> Any:
                        _calls[_name] += 1
                        return await _real(*args)

                    setattr(manager, name, counted)
            fresh = [f"fresh/{i}" for i in range(40)]
            for t in fresh:
                await c.publish(t, b"x")
            assert calls == Counter({"create_topic_with_log": len(fresh)})
            for t in fresh:
                assert await values(c, t) == [b"x"]


async def test_a_stopping_hub_releases_its_bundles_after_closing_its_logs() -> None:
    async for region in memory_region(3, bundles=BUNDLES):
        async with region.client() as c:
            await asyncio.gather(*(c.publish(t, b"a") for t in TOPICS))
        leaving = region.hubs[1]
        mine = {n for n, h in (await owners_by_bundle(region)).items() if h == leaving.address}
        assert mine
        await leaving.stop()
        region.hubs.remove(leaving)
        assert not set(await owners_by_bundle(region)) & mine
        stay = region.hubs[0]
        async with HedwigClient([stay.address], network=region.network, retry=FAST_RETRY) as c:
            for t in TOPICS:
                await c.publish(t, b"b")
                assert await values(c, t) == [b"a", b"b"]
        assert set((await owners_by_bundle(region)).values()) <= {h.address for h in region.hubs}


def test_the_settings_come_from_flags_over_variables_and_refuse_bad_values() -> None:
    def bundles(env: dict[str, str], **given: object) -> BundleSettings:
        return HubConfig.from_env(env, **given).bundles

    assert bundles({}) == BundleSettings()
    env = {"HEDWIG_BUNDLES": "yes", "HEDWIG_INITIAL_BUNDLES": "64"}
    assert bundles(env) == BundleSettings(enabled=True, initial_bundles=64)
    assert bundles(env, enabled=False, initial_bundles=4) == BundleSettings(
        enabled=False, initial_bundles=4
    )
    assert bundles({"HEDWIG_UNLOAD_IDLE_S": "2.5"}).unload_idle_s == 2.5
    for bad in (
        {"HEDWIG_BUNDLES": "maybe"},
        {"HEDWIG_INITIAL_BUNDLES": "x"},
        {"HEDWIG_UNLOAD_IDLE_S": "soon"},
        {"HEDWIG_UNLOAD_IDLE_S": "0"},
    ):
        with pytest.raises(UsageError):
            bundles(bad)
    with pytest.raises(UsageError):
        BundleSettings(initial_bundles=12)


async def test_idle_topics_are_unloaded_and_loaded_again_whole_on_their_next_request() -> None:
    async for region in memory_region(3, bundles=BUNDLES):
        async with region.client() as c:
            watched = TOPICS[3]
            sub = await c.subscribe(watched, "s")
            await asyncio.gather(*(c.publish(t, b"a") for t in TOPICS))
            assert (await sub.next(5)).value == b"a"
            loaded = sum(len(h.topics.topics) for h in region.hubs)
            assert loaded == len(TOPICS)
            unloaded = sum([await h.topics.unload_idle(0) for h in region.hubs])
            # Every topic but the one a subscriber is attached to.
            assert unloaded == len(TOPICS) - 1
            assert [t for h in region.hubs for t in h.topics.topics] == [watched]
            owners = await owners_by_bundle(region)
            m = await the_map(region)
            await asyncio.gather(*(c.publish(t, b"b") for t in TOPICS))
            for t in TOPICS:
                assert await values(c, t) == [b"a", b"b"], t
                # Loaded again by its bundle's owner: the bundles stayed where they were.
                assert owner_of(region, t, region.hubs).address == owners[m.bundle_of(t).name]
            assert (await sub.next(5)).value == b"b"
        # Topic by topic, nothing is unloaded.
    async for region in memory_region(2):
        async with region.client() as c:
            await c.publish("one", b"a")
        assert [await h.topics.unload_idle(0) for h in region.hubs] == [0, 0]


async def test_a_joining_hub_takes_its_bundles_from_the_ring_with_every_history_whole() -> None:
    async for region in memory_region(2, bundles=BundleSettings(enabled=True, initial_bundles=16)):
        async with region.client() as c:
            await asyncio.gather(*(c.publish(t, b"a") for t in TOPICS))
            joined = await region.add_hub()
            await asyncio.sleep(HUBS_CACHE_S + 0.1)  # every hub sees it in the registry
            moved = [m for h in region.hubs[:2] for m in await h.loops.balance_bundles_once()]
            assert moved and {move.destination for move in moved} == {joined.address}
            owners = await owners_by_bundle(region)
            # The moved bundles are no longer their sources' (the destination claims each at
            # its clients' first request).
            assert all(owners.get(move.bundle) != move.source for move in moved)
            await asyncio.gather(*(c.publish(t, b"b") for t in TOPICS))
            for t in TOPICS:
                assert await values(c, t) == [b"a", b"b"], t
        owners = await owners_by_bundle(region)
        bmap = await the_map(region)
        took = {move.bundle for move in moved}
        assert took <= {n for n, h in owners.items() if h == joined.address}
        for t in TOPICS:
            if bmap.bundle_of(t).name in took:
                assert owner_of(region, t, region.hubs) is joined
        # Applied, the policy asks for nothing more.
        assert [x for h in region.hubs for x in await h.loops.balance_bundles_once()] == []


async def test_a_client_sends_new_topics_to_their_bundles_owner_without_a_redirect() -> None:
    async for region in memory_region(3, bundles=BUNDLES):
        async with region.client() as c:
            await asyncio.gather(*(c.publish(t, b"a") for t in TOPICS))  # every bundle owned
        redirects = sum(answered(h, "publish", "not_responsible_for_topic") for h in region.hubs)
        async with region.client() as c:
            await c.publish(TOPICS[0], b"b")  # the first hub reached names the map and owners
            await asyncio.sleep(0.05)
            assert c.router.bundle_map is not None and len(c.router.bundle_map) == 8
            fresh = [f"new/{i}" for i in range(60)]
            await asyncio.gather(*(c.publish(t, b"x") for t in fresh))
            for t in fresh:
                assert await values(c, t) == [b"x"]
        after = sum(answered(h, "publish", "not_responsible_for_topic") for h in region.hubs)
        assert after - redirects <= 1  # (the first publish, sent before the map was known)


async def test_a_bundle_record_left_by_an_earlier_session_of_the_hub_is_replaced() -> None:
    async for region in memory_region(3, bundles=BUNDLES):
        async with region.client() as c:
            await c.publish(TOPICS[0], b"a")
        owner = region.owner(TOPICS[0])
        bmap = await the_map(region)
        name = bmap.bundle_of(TOPICS[0]).name
        # The owner's record as an earlier life of it left it: its address, an older epoch,
        # on another session that is still alive (its own is gone with it in practice).
        ghost = MemoryMetadataStore(region.backend, "mem")
        await ghost.start()
        await owner.topics.release_all("test")  # the owner lets go of everything it owns
        assert name not in await owners_by_bundle(region)
        stale = HubInfo(owner.address, owner.topics.epoch - 1)
        assert (await ghost.bundles.claim_bundle(name, stale)).claimed
        # Its next claim of the bundle finds its own old record, removes it, claims afresh.
        by_bundle = owner.topics.claims
        assert isinstance(by_bundle, BundleClaims)
        bundles = by_bundle.bundles
        assert await bundles.claim(bmap.bundle_of(TOPICS[0])) == owner.address
        got = await ghost.bundles.read_bundle_owner(name)
        assert got is not None and got.value == HubInfo(owner.address, owner.topics.epoch)
        await ghost.close()


async def test_a_bundle_whose_record_is_deleted_from_outside_loses_its_topics() -> None:
    async for region in memory_region(3, bundles=BUNDLES):
        async with region.client() as c:
            await asyncio.gather(*(c.publish(t, b"a") for t in TOPICS))
            owner = region.owner(TOPICS[0])
            bmap = await the_map(region)
            bundle = bmap.bundle_of(TOPICS[0])
            inside = [t for t in TOPICS if bundle.holds(t)]
            got = await owner.store.bundles.read_bundle_owner(bundle.name)
            assert got is not None
            await owner.store.bundles.release_bundle(bundle.name, got.version)
            async with asyncio.timeout(5):
                while any(t in owner.topics.topics for t in inside):
                    await asyncio.sleep(0.01)
            claims = owner.topics.claims
            assert isinstance(claims, BundleClaims)
            assert bundle.name not in claims.bundles.owned
            # Its topics come back whole wherever the bundle goes next.
            await asyncio.gather(*(c.publish(t, b"b") for t in inside))
            for t in inside:
                assert await values(c, t) == [b"a", b"b"]


async def test_no_claim_while_the_region_mixes_hubs_of_both_kinds() -> None:
    async for region in memory_region(2, bundles=BUNDLES):
        async with region.client() as c:
            await c.publish(TOPICS[0], b"a")
        # A hub owning topics one by one joins: neither kind claims while both are alive.
        region.bundles = BundleSettings()
        odd = await region.add_hub()
        await asyncio.sleep(HUBS_CACHE_S + 0.1)
        for hub in region.hubs:
            async with HedwigClient(
                [hub.address], network=region.network, retry=FAST_RETRY.with_deadline(0.5)
            ) as c:
                with pytest.raises(HedwigError, match="mixes the two"):
                    await c.publish(f"fresh/{hub.address}", b"x")
        # The topic already owned is still served.
        async with region.client() as c:
            assert await values(c, TOPICS[0]) == [b"a"]
        await odd.stop()
        region.hubs.remove(odd)
        await asyncio.sleep(HUBS_CACHE_S + 0.1)
        async with region.client() as c:
            await c.publish("fresh/after", b"x")
