"""The memory store's ACL entries (``AclManager``); a watch of the list fires at any entry's
change, as the real stores' watch of the entries' parent does."""

from __future__ import annotations

from collections.abc import Callable

from hedwig.errors import MetadataError
from hedwig.metadata.acls import AclEntry
from hedwig.metadata.memory.session import MemorySession
from hedwig.metadata.records import ANY_VERSION, NEW_VERSION, Version, Versioned
from hedwig.protocol.names import encode_name

# The key whose watches fire when any ACL entry changes.
ACLS_CHANGED = "acls-changed"


class MemoryAcls(MemorySession):
    async def list_acls(
        self, watch: Callable[[], None] | None = None
    ) -> dict[str, Versioned[AclEntry]]:
        self._check()
        out = {
            key[2]: Versioned(e.value, Version(e.version))
            for key, e in self._b.data.items()
            if key[:2] == (self.region, "acl")
        }
        if watch is not None:
            self._b.watches.setdefault(self._k(ACLS_CHANGED), []).append(watch)
        return out

    async def read_acl(self, name: str) -> Versioned[AclEntry] | None:
        e = self._get(self._k("acl", name))
        return None if e is None else Versioned(e.value, Version(e.version))

    async def write_acl(self, name: str, entry: AclEntry, version: Version) -> Version:
        encode_name(name)  # validates, as the ZooKeeper store does
        key = self._k("acl", name)
        if version == NEW_VERSION or (version == ANY_VERSION and self._get(key) is None):
            got = Version(self._create(key, entry).version)
        else:
            got = Version(self._set(key, entry, version, MetadataError(f"no ACL entry {name!r}")))
        self._b.fire(self._k(ACLS_CHANGED))
        return got

    async def delete_acl(self, name: str, version: Version) -> None:
        self._delete(self._k("acl", name), version, MetadataError(f"no ACL entry {name!r}"))
        self._b.fire(self._k(ACLS_CHANGED))
