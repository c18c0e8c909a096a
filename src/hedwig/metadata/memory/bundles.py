"""The memory store's bundles (``BundleManager``): the bundle map, one record watched by its
key, and the bundles' owner records, which die with their session; every claim and release
fires the watch of the set of owned bundles."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from hedwig.errors import BadVersionError, NoTopicOwnerInfoError
from hedwig.metadata.bundles import Bundle, BundleClaim, BundleMap
from hedwig.metadata.memory.backend import BUNDLE_OWNERS_CHANGED
from hedwig.metadata.memory.session import MemorySession
from hedwig.metadata.records import ANY_VERSION, NEW_VERSION, HubInfo, Version, Versioned
from hedwig.metadata.topic_call import TopicCall


class MemoryBundles(MemorySession):
    async def read_bundle_map(
        self, watch: Callable[[], None] | None = None
    ) -> Versioned[BundleMap] | None:
        key = self._k("bundle-map")
        e = self._get(key)
        if watch is not None:
            self._b.watches.setdefault(key, []).append(watch)
        return None if e is None else Versioned(e.value, Version(e.version))

    async def write_bundle_map(self, bundles: BundleMap, version: Version) -> Version:
        key = self._k("bundle-map")
        if version == NEW_VERSION or (version == ANY_VERSION and self._get(key) is None):
            return Version(self._create(key, bundles).version)
        missing = BadVersionError.at("bundle-map", version)
        return Version(self._set(key, bundles, version, missing))

    async def claim_bundle(self, bundle: str, owner: HubInfo) -> BundleClaim:
        key = self._k("bundle-owner", Bundle.parse(bundle).name)
        held = self._get(key)  # read in the claim, as etcd's transaction does
        if held is not None:
            return BundleClaim(None, Versioned(held.value, Version(held.version)))
        made = self._create(key, owner, ephemeral=True)
        self._b.fire(self._k(BUNDLE_OWNERS_CHANGED))
        return BundleClaim(Version(made.version))

    async def read_bundle_owner(self, bundle: str) -> Versioned[HubInfo] | None:
        e = self._get(self._k("bundle-owner", Bundle.parse(bundle).name))
        return None if e is None else Versioned(e.value, Version(e.version))

    async def release_bundle(self, bundle: str, version: Version) -> None:
        name = Bundle.parse(bundle).name
        self._delete(self._k("bundle-owner", name), version, NoTopicOwnerInfoError(name))
        self._b.fire(self._k(BUNDLE_OWNERS_CHANGED))

    async def bundle_owners(
        self, watch: Callable[[], None] | None = None
    ) -> dict[str, Versioned[HubInfo]]:
        self._check()
        if watch is not None:
            self._b.watches.setdefault(self._k(BUNDLE_OWNERS_CHANGED), []).append(watch)
        return {
            k[2]: Versioned(e.value, Version(e.version))
            for k, e in self._b.data.items()
            if len(k) == 3 and k[0] == self.region and k[1] == "bundle-owner"
        }

    def watch_bundle_owner(
        self, bundle: str, callback: Callable[[str], None], version: Version | None = None
    ) -> None:
        name = Bundle.parse(bundle).name
        call = TopicCall(callback, name)
        key = self._k("bundle-owner", name)
        e = self._b.data.get(key)
        if e is None or (version is not None and e.version != version):
            asyncio.get_running_loop().call_soon(call)  # gone, or changed since seen
            return
        self._b.watches.setdefault(key, []).append(call)
