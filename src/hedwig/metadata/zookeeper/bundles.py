"""Bundles on ZooKeeper: the bundle map in ``bundle-map`` and each owned bundle's owner record,
the ephemeral znode ``bundle-owners/<bundle>`` of its owner's session.

A claim is a ``multi`` of one create, so the claims of a turn (a survivor of a failover claims
a dead hub's bundles together) go to ZooKeeper as one request
(``hedwig.metadata.zookeeper.client.writes``); a claim refused reads the record in the way
after (a ``multi`` cannot read). Listing the owners is the children of ``bundle-owners`` and
their records read in one turn, so in ``multiRead`` requests of 64; the listing's watch is a
child watch, which every claim and release fires (owner records are created and deleted,
never rewritten). ``bundle-owners`` is made by the first claim that finds it missing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from hedwig.errors import BadVersionError, NoTopicOwnerInfoError
from hedwig.metadata.bundles import Bundle, BundleClaim, BundleMap
from hedwig.metadata.layout import Layout
from hedwig.metadata.records import ANY_VERSION, NEW_VERSION, HubInfo, Version, Versioned
from hedwig.metadata.zookeeper.client import NodeExists, NoNode, Op, ZkClient
from hedwig.metadata.zookeeper.versions import zk_version


class ZkBundles:
    def __init__(self, zk: ZkClient, layout: Layout) -> None:
        self._zk = zk
        self._layout = layout

    async def read_bundle_map(
        self, watch: Callable[[], None] | None = None
    ) -> Versioned[BundleMap] | None:
        path = self._layout.bundle_map
        if watch is None:
            got = await self._zk.get_or_none(path)
        else:
            # A data watch when the record exists, else an exists watch (which also fires on
            # creation); whichever is set fires once.
            fire = self._zk.one_shot(watch)
            got = await self._zk.get_watched(path, fire)
            if got is None and await self._zk.exists_watched(path, fire) is not None:
                got = await self._zk.get_watched(path, fire)  # created meanwhile
        if got is None:
            return None
        return Versioned(BundleMap.from_json(got[0]), Version(got[1].version))

    async def write_bundle_map(self, bundles: BundleMap, version: Version) -> Version:
        path = self._layout.bundle_map
        if version in (NEW_VERSION, ANY_VERSION):
            try:
                _, stat = await self._zk.create(path, bundles.to_json())
                return Version(stat.version)
            except NodeExists as exc:
                if version == NEW_VERSION:
                    raise BadVersionError.at(path, version) from exc
        try:
            stat = await self._zk.set(path, bundles.to_json(), zk_version(version))
        except NoNode as exc:
            raise BadVersionError.at(path, version) from exc
        return Version(stat.version)

    async def claim_bundle(self, bundle: str, owner: HubInfo) -> BundleClaim:
        name = Bundle.parse(bundle).name
        path = self._layout.bundle_owner(name)
        op = Op("create", path, value=owner.to_json(), ephemeral=True)
        (made,) = await self._zk.transaction([op])
        if isinstance(made, NoNode):  # the first claim of the region
            await self._zk.ensure_path(self._layout.bundle_owners)
            (made,) = await self._zk.transaction([op])
        if made is None:
            return BundleClaim(Version(0))  # a new znode's version
        if isinstance(made, NodeExists):
            return BundleClaim(None, await self.read_bundle_owner(name))
        raise made

    async def read_bundle_owner(self, bundle: str) -> Versioned[HubInfo] | None:
        got = await self._zk.get_or_none(self._layout.bundle_owner(Bundle.parse(bundle).name))
        if got is None:
            return None
        return Versioned(HubInfo.from_json(got[0]), Version(got[1].version))

    async def release_bundle(self, bundle: str, version: Version) -> None:
        name = Bundle.parse(bundle).name
        try:
            await self._zk.delete(self._layout.bundle_owner(name), zk_version(version))
        except NoNode as exc:
            raise NoTopicOwnerInfoError(name) from exc

    async def bundle_owners(
        self, watch: Callable[[], None] | None = None
    ) -> dict[str, Versioned[HubInfo]]:
        path = self._layout.bundle_owners
        try:
            if watch is None:
                names = await self._zk.children(path)
            else:
                names = await self._zk.children_watched(path, self._zk.one_shot(watch))
        except NoNode:
            # No bundle claimed yet: the first claim makes the node; watch for it.
            if watch is not None and (
                await self._zk.exists_watched(path, self._zk.one_shot(watch)) is not None
            ):
                return await self.bundle_owners(watch)  # made meanwhile
            return {}
        # Read in one turn: one multiRead per 64 records.
        got = await asyncio.gather(*(self._zk.get_or_none(f"{path}/{n}") for n in names))
        return {
            n: Versioned(HubInfo.from_json(g[0]), Version(g[1].version))
            for n, g in zip(names, got, strict=True)
            if g is not None  # released between the listing and the read
        }

    def watch_bundle_owner(
        self, bundle: str, callback: Callable[[str], None], version: Version | None = None
    ) -> None:
        name = Bundle.parse(bundle).name
        self._zk.watch_with(
            self._layout.bundle_owner(name),
            callback,
            name,
            None if version is None else zk_version(version),
        )
