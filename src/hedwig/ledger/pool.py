"""Storage addresses to replicas.

With one copy per ledger (ensemble size 1) every ledger a hub writes lives on its own disk, so
the only replica a hub can reach is its own. A ledger whose replica is another hub's disk is
unreachable until replication across hubs exists: recovering it fails with
``NotEnoughReplicasError`` and the claim is retried, never completed with data missing.
"""

from __future__ import annotations

from hedwig.errors import NotEnoughReplicasError
from hedwig.ledger.storage import LocalStorage, StorageNode


class _Unreachable:
    def __init__(self, address: str) -> None:
        self.address = address

    def _fail(self) -> NotEnoughReplicasError:
        return NotEnoughReplicasError(f"storage replica {self.address} is not reachable")

    async def add_entry(
        self, ledger_id: int, entry_id: int, lac: int, payload: bytes, *, recovery: bool = False
    ) -> None:
        raise self._fail()

    async def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        raise self._fail()

    async def read_lac(self, ledger_id: int, *, fence: bool) -> tuple[int, int]:
        raise self._fail()

    async def delete_ledger(self, ledger_id: int) -> None:
        raise self._fail()


class LocalPool:
    def __init__(self, local: LocalStorage) -> None:
        self.local = local

    def node(self, address: str) -> StorageNode:
        if address == self.local.address:
            return self.local
        return _Unreachable(address)
