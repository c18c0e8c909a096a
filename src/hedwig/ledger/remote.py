"""Another hub's storage role, reached over the wire (the storage frames of the protocol)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVarTuple

from hedwig.errors import (
    ConnectionLostError,
    LedgerFencedError,
    NoSuchEntryError,
    NotEnoughReplicasError,
)
from hedwig.net.connection import Answer, HubConnection
from hedwig.protocol import status
from hedwig.protocol.frames import AddEntry, DeleteLedger, Entry, Frame, Lac, ReadEntry, ReadLac

Ts = TypeVarTuple("Ts")


class RemoteStorage:
    def __init__(self, address: str, *, timeout_s: float = 10.0) -> None:
        self.address = address
        self._timeout = timeout_s
        self._conn: HubConnection | None = None
        self._connecting: asyncio.Lock | None = None

    async def _connection(self) -> HubConnection:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._conn is None or self._conn.closed:
                self._conn = await HubConnection.open(
                    self.address, lambda *_: None, lambda *_: None, timeout=self._timeout
                )
        return self._conn

    async def _request(self, make: Callable[[int, *Ts], Frame], *args: *Ts) -> Answer:
        try:
            conn = await self._connection()
            return await conn.request(make(conn.next_id(), *args), self._timeout)
        except status.LedgerFencedStatusError as exc:
            raise LedgerFencedError(str(exc)) from exc
        except status.NoSuchEntryStatusError as exc:
            raise NoSuchEntryError(str(exc)) from exc
        except (status.ServerError, ConnectionLostError) as exc:
            raise NotEnoughReplicasError(f"storage replica {self.address}: {exc}") from exc

    async def add_entry(
        self, ledger_id: int, entry_id: int, lac: int, payload: bytes, *, recovery: bool = False
    ) -> None:
        await self._request(AddEntry, ledger_id, entry_id, lac, payload, recovery)

    async def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        answer = await self._request(ReadEntry, ledger_id, entry_id)
        assert isinstance(answer, Entry)
        return answer.payload

    async def read_lac(self, ledger_id: int, *, fence: bool) -> tuple[int, int]:
        answer = await self._request(ReadLac, ledger_id, fence)
        assert isinstance(answer, Lac)
        return answer.lac, answer.last_entry_id

    async def delete_ledger(self, ledger_id: int) -> None:
        await self._request(DeleteLedger, ledger_id)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
