"""Access control entries on etcd: a key each under ``acls/``, listed in one range read and
watched as one prefix from the revision of that read (an entry written, created or deleted
after it fires the watch).
"""

from __future__ import annotations

from collections.abc import Callable

from hedwig.errors import MetadataError
from hedwig.metadata.acls import AclEntry
from hedwig.metadata.etcd.client import EtcdClient
from hedwig.metadata.etcd.keys import Keys, create_key, delete_key, set_key
from hedwig.metadata.etcd.wire import put
from hedwig.metadata.records import ANY_VERSION, NEW_VERSION, Version, Versioned


class EtcdAcls:
    def __init__(self, etcd: EtcdClient, keys: Keys) -> None:
        self._etcd = etcd
        self._keys = keys

    async def list_acls(
        self, watch: Callable[[], None] | None = None
    ) -> dict[str, Versioned[AclEntry]]:
        prefix = self._keys.family("acls")
        items, revision = await self._etcd.range(prefix)
        if watch is not None:
            await self._etcd.watch_once(prefix, revision, watch, prefix=True)
        return {
            Keys.name_of(i.key): Versioned(AclEntry.from_json(i.value), Version(i.mod))
            for i in items
        }

    async def read_acl(self, name: str) -> Versioned[AclEntry] | None:
        got = await self._etcd.get(self._keys.acl(name))
        return None if got is None else Versioned(AclEntry.from_json(got.value), Version(got.mod))

    async def write_acl(self, name: str, entry: AclEntry, version: Version) -> Version:
        key = self._keys.acl(name)
        if version == NEW_VERSION:
            return await create_key(self._etcd, key, entry.to_json())
        if version == ANY_VERSION:
            res = await self._etcd.txn([], [put(key, entry.to_json())])
            return Version(res.revision)
        try:
            return await set_key(self._etcd, key, entry.to_json(), version)
        except LookupError as exc:
            raise MetadataError(f"no ACL entry {name!r}") from exc

    async def delete_acl(self, name: str, version: Version) -> None:
        try:
            await delete_key(self._etcd, self._keys.acl(name), version)
        except LookupError as exc:
            raise MetadataError(f"no ACL entry {name!r}") from exc
