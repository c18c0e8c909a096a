"""Storage addresses to replicas: this hub's own disk, or another hub's storage role."""

from __future__ import annotations

from hedwig.ledger.remote import RemoteStorage
from hedwig.ledger.storage import LocalStorage, StorageNode


class HubPool:
    def __init__(self, local: LocalStorage) -> None:
        self.local = local
        self._remote: dict[str, RemoteStorage] = {}

    def node(self, address: str) -> StorageNode:
        if address == self.local.address:
            return self.local
        node = self._remote.get(address)
        if node is None:
            node = self._remote[address] = RemoteStorage(address)
        return node

    def close(self) -> None:
        for node in self._remote.values():
            node.close()
        self._remote.clear()


# Kept for tests that use a single disk.
LocalPool = HubPool
