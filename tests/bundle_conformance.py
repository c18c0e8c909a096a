"""The bundles part of the conformance suite (``hedwig.metadata.bundles``): the bundle map's
compare-and-set and watch, and bundles' owner records, claimed test-and-set, listed, watched,
released, and gone with their claimer's session. Every store's test class takes it with
``MetadataConformance`` (and the ``expire`` the suite asks of it)."""

from __future__ import annotations

import asyncio

import pytest

from hedwig.errors import BadVersionError, NoTopicOwnerInfoError, UsageError
from hedwig.metadata import NEW_VERSION, HubInfo, MetadataStore, SessionState
from hedwig.metadata.bundles import BundleMap


class BundleConformance:
    async def expire(self, store: MetadataStore) -> None:
        raise NotImplementedError

    async def test_bundle_map_cas_and_watch(
        self, store: MetadataStore, other: MetadataStore
    ) -> None:
        assert await store.bundles.read_bundle_map() is None
        changed = asyncio.Event()
        assert await other.bundles.read_bundle_map(watch=changed.set) is None
        first = BundleMap.uniform(4)
        v0 = await store.bundles.write_bundle_map(first, NEW_VERSION)
        await asyncio.wait_for(changed.wait(), 10)  # creation fires a watch set on none
        with pytest.raises(BadVersionError):
            await other.bundles.write_bundle_map(first, NEW_VERSION)
        got = await other.bundles.read_bundle_map()
        assert got is not None and got.value == first and got.version == v0
        # Two hubs split from the same version: the second's compare-and-set fails.
        changed.clear()
        assert await other.bundles.read_bundle_map(watch=changed.set) is not None
        split = first.split(first.bundles[0])
        v1 = await store.bundles.write_bundle_map(split, v0)
        with pytest.raises(BadVersionError):
            await other.bundles.write_bundle_map(first.split(first.bundles[1]), v0)
        await asyncio.wait_for(changed.wait(), 10)
        got = await other.bundles.read_bundle_map()
        assert got is not None and got.value == split and got.version == v1
        assert len(got.value) == 5 and got.value.generation == 1

    async def test_bundle_claim_is_test_and_set_and_listed(
        self, store: MetadataStore, other: MetadataStore
    ) -> None:
        bundles = BundleMap.uniform(4).bundles
        a, b = bundles[0].name, bundles[1].name
        assert await store.bundles.bundle_owners() == {}
        listed = asyncio.Event()
        await other.bundles.bundle_owners(watch=listed.set)
        won = await store.bundles.claim_bundle(a, HubInfo("h1:1", 7))
        assert won.claimed and won.owner is None
        await asyncio.wait_for(listed.wait(), 10)  # a claim changes the set of owned bundles
        lost = await other.bundles.claim_bundle(a, HubInfo("h2:1", 8))
        assert not lost.claimed
        assert lost.owner is not None and lost.owner.value == HubInfo("h1:1", 7)
        assert lost.owner.version == won.version
        assert (await other.bundles.claim_bundle(b, HubInfo("h2:1", 8))).claimed
        owners = await other.bundles.bundle_owners()
        assert {n: o.value for n, o in owners.items()} == {
            a: HubInfo("h1:1", 7),
            b: HubInfo("h2:1", 8),
        }
        read = await store.bundles.read_bundle_owner(a)
        assert read is not None and read.value == HubInfo("h1:1", 7)
        assert await store.bundles.read_bundle_owner(bundles[2].name) is None

    async def test_bundle_release_at_its_version_and_watched(
        self, store: MetadataStore, other: MetadataStore
    ) -> None:
        name = BundleMap.uniform(2).bundles[1].name
        claim = await store.bundles.claim_bundle(name, HubInfo("h1:1", 1))
        assert claim.version is not None
        gone: list[str] = []
        fired = asyncio.Event()

        def seen(bundle: str) -> None:
            gone.append(bundle)
            fired.set()

        store.bundles.watch_bundle_owner(name, seen, claim.version)
        listed = asyncio.Event()
        assert name in await other.bundles.bundle_owners(watch=listed.set)
        await asyncio.sleep(0.2)  # nothing has changed: no watch fires
        assert not fired.is_set() and not listed.is_set()
        await store.bundles.release_bundle(name, claim.version)
        await asyncio.wait_for(fired.wait(), 10)
        await asyncio.wait_for(listed.wait(), 10)
        assert gone == [name]
        with pytest.raises(NoTopicOwnerInfoError):
            await store.bundles.release_bundle(name, claim.version)
        # A watch set on a record that is gone fires at once.
        fired.clear()
        store.bundles.watch_bundle_owner(name, seen)
        await asyncio.wait_for(fired.wait(), 10)
        again = await other.bundles.claim_bundle(name, HubInfo("h2:1", 2))
        assert again.claimed

    async def test_bundle_owner_records_go_with_the_session(
        self, store: MetadataStore, other: MetadataStore
    ) -> None:
        name = BundleMap.uniform(8).bundles[5].name
        assert (await store.bundles.claim_bundle(name, HubInfo("127.0.0.1:9", 1))).claimed
        listed = asyncio.Event()
        assert name in await other.bundles.bundle_owners(watch=listed.set)
        lost = asyncio.Event()
        store.session.add_listener(lambda s: lost.set() if s is SessionState.LOST else None)
        await self.expire(store)
        await asyncio.wait_for(lost.wait(), 30)
        await asyncio.wait_for(listed.wait(), 30)
        assert await other.bundles.read_bundle_owner(name) is None
        assert (await other.bundles.claim_bundle(name, HubInfo("h2:1", 2))).claimed

    async def test_names_that_are_not_bundles_are_refused(self, store: MetadataStore) -> None:
        for bad in ("", "../x", "00000000_", "0000000g_3fffffff", "40000000_3fffffff"):
            with pytest.raises(UsageError):
                await store.bundles.claim_bundle(bad, HubInfo("h1:1", 1))
            with pytest.raises(UsageError):
                await store.bundles.read_bundle_owner(bad)
