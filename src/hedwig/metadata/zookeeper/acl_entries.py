"""The region's access control entries on ZooKeeper (``acls/<name>``), read and watched
together.
"""

from __future__ import annotations

from collections.abc import Callable

from hedwig.errors import (
    BadVersionError,
    MetadataError,
)
from hedwig.metadata.acls import AclEntry
from hedwig.metadata.layout import Layout
from hedwig.metadata.records import (
    ANY_VERSION,
    NEW_VERSION,
    Version,
    Versioned,
)
from hedwig.metadata.zookeeper.client import NodeExists, NoNode, ZkClient


class ZkAcls:
    def __init__(self, zk: ZkClient, layout: Layout) -> None:
        self._zk = zk
        self._layout = layout

    async def list_acls(
        self, watch: Callable[[], None] | None = None
    ) -> dict[str, Versioned[AclEntry]]:
        parent = self._layout.acls
        out: dict[str, Versioned[AclEntry]] = {}
        if watch is None:
            for znode in await self._zk.children(parent):
                got = await self._zk.get_or_none(f"{parent}/{znode}")
                if got is not None:
                    out[Layout.name_of(znode)] = Versioned(
                        AclEntry.from_json(got[0]), Version(got[1].version)
                    )
            return out
        # One watch over the list and every entry: whichever changes first fires it.
        fire = self._zk.one_shot(watch)
        for znode in await self._zk.children_watched(parent, fire):
            got = await self._zk.get_watched(f"{parent}/{znode}", fire)
            if got is not None:
                out[Layout.name_of(znode)] = Versioned(
                    AclEntry.from_json(got[0]), Version(got[1].version)
                )
        return out

    async def read_acl(self, name: str) -> Versioned[AclEntry] | None:
        got = await self._zk.get_or_none(self._layout.acl(name))
        if got is None:
            return None
        return Versioned(AclEntry.from_json(got[0]), Version(got[1].version))

    async def write_acl(self, name: str, entry: AclEntry, version: Version) -> Version:
        path = self._layout.acl(name)
        if version == NEW_VERSION:
            try:
                _, stat = await self._zk.create(path, entry.to_json())
            except NodeExists as exc:
                raise BadVersionError.at(path, version) from exc
            return Version(stat.version)
        if version == ANY_VERSION:
            try:
                _, stat = await self._zk.create(path, entry.to_json())
                return Version(stat.version)
            except NodeExists:
                pass
        try:
            stat = await self._zk.set(
                path, entry.to_json(), -1 if version == ANY_VERSION else version
            )
        except NoNode as exc:
            raise MetadataError(f"no ACL entry {name!r}") from exc
        return Version(stat.version)

    async def delete_acl(self, name: str, version: Version) -> None:
        try:
            await self._zk.delete(self._layout.acl(name), -1 if version == ANY_VERSION else version)
        except NoNode as exc:
            raise MetadataError(f"no ACL entry {name!r}") from exc
