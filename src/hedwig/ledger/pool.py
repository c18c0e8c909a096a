"""Storage addresses to replicas: this hub's own disk, or another hub's storage role."""

from __future__ import annotations

import time
from collections.abc import Sequence

from hedwig.ledger.remote import RemoteStorage
from hedwig.ledger.storage import LocalStorage, StorageNode

SUSPECT_FOR_S = 10.0


class HubPool:
    def __init__(self, local: LocalStorage) -> None:
        self.local = local
        self._remote: dict[str, RemoteStorage] = {}
        self._suspects: dict[str, float] = {}

    def preferred(self, addresses: Sequence[str]) -> list[str]:
        now = time.monotonic()

        def rank(a: str) -> int:
            if a == self.local.address:
                return 0
            return 2 if self._suspects.get(a, 0.0) > now else 1

        return sorted(addresses, key=rank)

    def suspect(self, address: str) -> None:
        self._suspects[address] = time.monotonic() + SUSPECT_FOR_S

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


class RemotePool:
    """Every replica over the wire: for tools that run outside a hub (``hedwig ledgers``)."""

    def __init__(self) -> None:
        self._remote: dict[str, RemoteStorage] = {}

    def node(self, address: str) -> StorageNode:
        node = self._remote.get(address)
        if node is None:
            node = self._remote[address] = RemoteStorage(address, timeout_s=3.0)
        return node

    def preferred(self, addresses: Sequence[str]) -> list[str]:
        return list(addresses)

    def suspect(self, address: str) -> None:
        return None

    def close(self) -> None:
        for node in self._remote.values():
            node.close()
