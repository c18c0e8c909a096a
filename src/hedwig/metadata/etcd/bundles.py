"""Bundles on etcd: the bundle map at ``bundle-map``, compare-and-set on its mod revision,
and each owned bundle's owner record at ``bundle-owners/<bundle>``, attached to one of its
owner's leases as a topic's owner record is (``lease_keeper.LeaseKeeper.owner_lease``), so it
goes when the owner's session ends.

A claim is one transaction that creates the record if it is missing and reads it back if not
(whose record is in the way, in the same request). Listing the owners is one range read of the
prefix, and its watch a watch of the prefix from that read's revision; owner watches of single
bundles share one watch of the prefix (``watches.PrefixWatch``), as topics' owner watches do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from hedwig.errors import BadVersionError, MetadataError, NoTopicOwnerInfoError
from hedwig.metadata.bundles import Bundle, BundleClaim, BundleMap
from hedwig.metadata.etcd.client import EtcdClient
from hedwig.metadata.etcd.keys import Keys, delete_key, set_key
from hedwig.metadata.etcd.watches import PrefixWatch
from hedwig.metadata.etcd.wire import get, missing, put
from hedwig.metadata.records import ANY_VERSION, NEW_VERSION, HubInfo, Version, Versioned
from hedwig.metadata.topic_call import TopicCall


class EtcdBundles:
    def __init__(self, etcd: EtcdClient, keys: Keys) -> None:
        self._etcd = etcd
        self._keys = keys
        self._prefix = keys.family("bundle-owners")
        self._tasks: set[asyncio.Task[None]] = set()
        # Every bundle owner watch of this process, on one watch of the owners' prefix.
        self.watches = PrefixWatch(etcd.watches, self._prefix, etcd.watch_from)

    def _owner(self, bundle: str) -> tuple[str, bytes]:
        name = Bundle.parse(bundle).name  # (refuses anything else before etcd is asked)
        return name, self._prefix + name.encode()

    async def read_bundle_map(
        self, watch: Callable[[], None] | None = None
    ) -> Versioned[BundleMap] | None:
        key = self._keys.bundle_map
        # Read in a transaction for its header revision: a watch from there misses nothing.
        res = await self._etcd.txn([], [get(key)])
        got = res.reads[0]
        if watch is not None:
            self._etcd.watch_from(key, res.revision, watch)
        return None if got is None else Versioned(BundleMap.from_json(got.value), Version(got.mod))

    async def write_bundle_map(self, bundles: BundleMap, version: Version) -> Version:
        key = self._keys.bundle_map
        if version in (NEW_VERSION, ANY_VERSION):
            res = await self._etcd.txn([missing(key)], [put(key, bundles.to_json())])
            if res.succeeded:
                return Version(res.revision)
            if version == NEW_VERSION:
                raise BadVersionError.at(key.decode(), version)
        try:
            return await set_key(self._etcd, key, bundles.to_json(), version)
        except LookupError as exc:
            raise BadVersionError.at(key.decode(), version) from exc

    async def claim_bundle(self, bundle: str, owner: HubInfo) -> BundleClaim:
        _, key = self._owner(bundle)
        lease = await self._etcd.owner_lease(key)
        res = await self._etcd.txn([missing(key)], [put(key, owner.to_json(), lease)], [get(key)])
        if res.succeeded:
            return BundleClaim(Version(res.revision))
        held = res.reads[0]
        if held is None:  # (cannot be: the comparison failed on its presence)
            raise MetadataError(f"claiming bundle {bundle} failed")
        return BundleClaim(None, Versioned(HubInfo.from_json(held.value), Version(held.mod)))

    async def read_bundle_owner(self, bundle: str) -> Versioned[HubInfo] | None:
        _, key = self._owner(bundle)
        got = await self._etcd.get(key)
        return None if got is None else Versioned(HubInfo.from_json(got.value), Version(got.mod))

    async def release_bundle(self, bundle: str, version: Version) -> None:
        name, key = self._owner(bundle)
        try:
            await delete_key(self._etcd, key, version)
        except LookupError as exc:
            raise NoTopicOwnerInfoError(name) from exc

    async def bundle_owners(
        self, watch: Callable[[], None] | None = None
    ) -> dict[str, Versioned[HubInfo]]:
        items, revision = await self._etcd.range(self._prefix)
        if watch is not None:
            # From the read's revision: a claim or release since fires it.
            self._etcd.watch_from(self._prefix, revision, watch, prefix=True)
        return {
            Keys.name_of(i.key): Versioned(HubInfo.from_json(i.value), Version(i.mod))
            for i in items
        }

    def watch_bundle_owner(
        self, bundle: str, callback: Callable[[str], None], version: Version | None = None
    ) -> None:
        name, key = self._owner(bundle)
        call = TopicCall(callback, name)
        if version is not None and self.watches.follows(int(version)):
            # The record the caller saw is no older than what the prefix watch delivered (a
            # claim's own write): every later change of it is still to come on the stream.
            self.watches.add(key, int(version), call)
            return
        task = asyncio.get_running_loop().create_task(self._watch(key, call, version))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _watch(
        self, key: bytes, callback: Callable[[], None], version: Version | None
    ) -> None:
        """Read the record, then watch from the revision of that read (never from the
        record's own, which etcd may have compacted)."""
        try:
            read = await self._etcd.txn((), (get(key),))
            got = read.reads[0]
            if got is None or (version is not None and got.mod != int(version)):
                callback()  # gone, or changed since the caller saw it
                return
            self.watches.add(key, read.revision, callback)
        except MetadataError:
            callback()  # cannot watch: let the owner check its record again
