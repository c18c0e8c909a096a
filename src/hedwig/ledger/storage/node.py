"""What a ledger's writer, its recovery and its readers ask of one storage replica.

A replica is this hub's own disk (``LocalStorage``) or another hub's storage role over the
wire (``hedwig.ledger.remote.RemoteStorage``); both answer the same questions, so writers and
recoveries count them against their quorums alike. A replica refuses an add to a fenced ledger
(``LedgerFencedError``) unless it is a recovery's write-back, and answers a read of an entry it
does not hold with ``NoSuchEntryError``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol


class StorageNode(Protocol):
    """What a ledger writer or reader needs from one storage replica."""

    address: str

    async def add_entry(
        self, ledger_id: int, entry_id: int, lac: int, payload: bytes, *, recovery: bool = False
    ) -> None: ...

    async def read_entry(self, ledger_id: int, entry_id: int) -> bytes: ...

    async def read_lac(self, ledger_id: int, *, fence: bool) -> tuple[int, int]:
        """``(lac, last_entry_id)`` known for the ledger; -1 for none. Fences if asked."""
        ...

    def fence_soon(self, ledger_id: int) -> asyncio.Future[tuple[int, int]]:
        """``read_lac(ledger_id, fence=True)`` started now, as a future: a recovery fences
        every replica of its ledger, and a failover is thousands of recoveries, so a replica
        may gather the fences of one turn (``RemoteStorage``) or answer without a task
        (``LocalStorage``)."""
        ...

    async def fenced(self, ledger_id: int) -> bool:
        """Whether this replica has fenced the ledger (a recovery has begun)."""
        ...

    async def write_lacs(self, lacs: Sequence[tuple[int, int]]) -> None:
        """Learn the last-add-confirmed entry of ledgers (ledger id, LAC) whose writer went
        idle; ledgers not stored here are ignored."""
        ...

    async def delete_ledger(self, ledger_id: int) -> None: ...
