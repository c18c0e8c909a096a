"""The memory store's hub registry (``HubRegistry``): a hub's lasting ``host`` record and its
``alive`` record, which dies with its session and whose creation order is the hub's epoch."""

from __future__ import annotations

from hedwig.errors import MetadataError
from hedwig.metadata.memory.backend import Entry
from hedwig.metadata.memory.session import MemorySession
from hedwig.metadata.records import ANY_VERSION, HubLoad, HubStatus


class MemoryHubs(MemorySession):
    async def register_hub(self, address: str, load: HubLoad) -> int:
        self._check()
        self._b.data.setdefault(self._k("host", address), Entry(None))
        key = self._k("alive", address)
        self._b.data.pop(key, None)
        return self._create(key, load, ephemeral=True).czxid

    async def update_load(self, address: str, load: HubLoad) -> None:
        self._set(self._k("alive", address), load, ANY_VERSION, MetadataError("not registered"))

    async def unregister_hub(self, address: str) -> None:
        self._check()
        self._b.data.pop(self._k("alive", address), None)

    async def alive_epoch(self, address: str) -> int | None:
        self._check()
        alive = self._b.data.get(self._k("alive", address))
        return None if alive is None else alive.czxid

    async def list_hubs(self) -> list[HubStatus]:
        self._check()
        out = []
        for key in sorted(k for k in self._b.data if k[:2] == (self.region, "host")):
            alive = self._b.data.get(self._k("alive", key[2]))
            out.append(
                HubStatus(key[2], False)
                if alive is None
                else HubStatus(key[2], True, alive.czxid, alive.value)
            )
        return out
