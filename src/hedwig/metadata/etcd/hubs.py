"""The hub registry on etcd: ``hosts/<H>`` for every hub that joined the region (persistent),
``alive/<H>`` with its load report on the session's own lease. A hub's epoch is the create
revision of its alive key, new for every lease: registering deletes a key left by an earlier
lease of its own and writes a new one.
"""

from __future__ import annotations

from hedwig.errors import MetadataError
from hedwig.metadata.etcd.client import EtcdClient
from hedwig.metadata.etcd.keys import Keys
from hedwig.metadata.etcd.kv import delete
from hedwig.metadata.etcd.wire import exists, missing, put
from hedwig.metadata.records import HubLoad, HubStatus


class EtcdHubs:
    def __init__(self, etcd: EtcdClient, keys: Keys) -> None:
        self._etcd = etcd
        self._keys = keys

    async def register_hub(self, address: str, load: HubLoad) -> int:
        """The epoch is the create revision of the alive key: new for every lease."""
        host, alive = self._keys.host(address), self._keys.alive(address)
        await self._etcd.txn([missing(host)], [put(host, b"")])
        # Left by an earlier lease of ours that has not expired yet: ours to replace.
        await self._etcd.txn([], [delete(alive)])  # a new key: a new create revision
        await self._etcd.txn([], [put(alive, load.to_json(), self._etcd.lease)])
        got = await self._etcd.get(alive)
        if got is None:
            raise MetadataError(f"hub {address}: its alive record vanished as it was written")
        return got.create

    async def update_load(self, address: str, load: HubLoad) -> None:
        key = self._keys.alive(address)
        res = await self._etcd.txn([exists(key)], [put(key, load.to_json(), self._etcd.lease)])
        if not res.succeeded:
            raise MetadataError(f"hub {address} is not registered")

    async def unregister_hub(self, address: str) -> None:
        await self._etcd.txn([], [delete(self._keys.alive(address))])

    async def alive_epoch(self, address: str) -> int | None:
        got = await self._etcd.get(self._keys.alive(address))
        return None if got is None else got.create

    async def list_hubs(self) -> list[HubStatus]:
        hosts, _ = await self._etcd.range(self._keys.family("hosts"), keys_only=True)
        alive_items, _ = await self._etcd.range(self._keys.family("alive"))
        alive = {Keys.name_of(i.key): i for i in alive_items}
        out = []
        for address in sorted(Keys.name_of(i.key) for i in hosts):
            got = alive.get(address)
            if got is None:
                out.append(HubStatus(address, alive=False))
                continue
            try:
                load: HubLoad | None = HubLoad.from_json(got.value)
            except MetadataError:
                load = None
            out.append(HubStatus(address, True, got.create, load))
        return out
