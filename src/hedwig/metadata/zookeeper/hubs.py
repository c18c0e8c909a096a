"""The hub registry on ZooKeeper: ``hosts/<H>`` for every member, and its ephemeral
``alive`` record (the load report) while its session lives; a hub's epoch is that record's
creation zxid.
"""

from __future__ import annotations

import contextlib

from hedwig.errors import (
    MetadataError,
)
from hedwig.metadata.layout import Layout
from hedwig.metadata.records import (
    HubLoad,
    HubStatus,
)
from hedwig.metadata.zookeeper.client import NodeExists, NoNode, ZkClient


class ZkHubs:
    def __init__(self, zk: ZkClient, layout: Layout) -> None:
        self._zk = zk
        self._layout = layout

    async def register_hub(self, address: str, load: HubLoad) -> int:
        await self._zk.ensure_path(self._layout.host(address))
        path = self._layout.alive(address)
        try:
            _, stat = await self._zk.create(path, load.to_json(), ephemeral=True)
        except NodeExists:
            # Left by an earlier session of ours that has not expired yet: it is ours to replace.
            await self._zk.delete(path)
            _, stat = await self._zk.create(path, load.to_json(), ephemeral=True)
        return int(stat.czxid)

    async def update_load(self, address: str, load: HubLoad) -> None:
        await self._zk.set(self._layout.alive(address), load.to_json())

    async def unregister_hub(self, address: str) -> None:
        with contextlib.suppress(NoNode):
            await self._zk.delete(self._layout.alive(address))

    async def alive_epoch(self, address: str) -> int | None:
        stat = await self._zk.exists(self._layout.alive(address))
        return None if stat is None else int(stat.czxid)

    async def list_hubs(self) -> list[HubStatus]:
        try:
            names = await self._zk.children(self._layout.hosts)
        except NoNode:
            return []
        out = []
        for znode in sorted(names):
            address = Layout.name_of(znode)
            got = await self._zk.get_or_none(self._layout.alive(address))
            if got is None:
                out.append(HubStatus(address, alive=False))
            else:
                try:
                    load: HubLoad | None = HubLoad.from_json(got[0])
                except MetadataError:
                    load = None
                out.append(HubStatus(address, True, int(got[1].czxid), load))
        return out
