"""The memory store's ledger metadata (``LedgerMetadataManager``): ids from the backend's
count, records changed by compare-and-set, and ``left_over`` decided from the order of writes,
as ZooKeeper's zxids decide it (a ledger made after its topic's ledger list was last written
may yet be named by it)."""

from __future__ import annotations

from msgspec.structs import replace

from hedwig.errors import NoLedgerMetadataError
from hedwig.metadata.memory.session import MemorySession
from hedwig.metadata.records import LedgerMetadata, Version, Versioned
from hedwig.metadata.topic_logs import holds_ledger


class MemoryLedgers(MemorySession):
    async def create_ledger(self, metadata: LedgerMetadata) -> Versioned[LedgerMetadata]:
        self._check()
        lid = next(self._b.counter)
        md = replace(metadata, ledger_id=lid)
        self._create(self._k("ledger", str(lid)), md)
        return Versioned(md, Version(0))

    async def read_ledger(self, ledger_id: int) -> Versioned[LedgerMetadata] | None:
        e = self._get(self._k("ledger", str(ledger_id)))
        return None if e is None else Versioned(e.value, Version(e.version))

    async def write_ledger(self, metadata: LedgerMetadata, version: Version) -> Version:
        missing = NoLedgerMetadataError(str(metadata.ledger_id))
        return Version(
            self._set(self._k("ledger", str(metadata.ledger_id)), metadata, version, missing)
        )

    async def delete_ledger(self, ledger_id: int, version: Version) -> None:
        missing = NoLedgerMetadataError(str(ledger_id))
        self._delete(self._k("ledger", str(ledger_id)), version, missing)

    async def list_ledgers(self) -> list[int]:
        self._check()
        return sorted(int(k[2]) for k in self._b.data if k[:2] == (self.region, "ledger"))

    async def left_over(self, ledger_id: int, topic: str) -> bool:
        ledger = self._get(self._k("ledger", str(ledger_id)))
        record = self._get(self._k("ledgers", topic))
        if ledger is None or record is None or record.mzxid <= ledger.made:
            return False
        return not holds_ledger(record.value, ledger_id)
