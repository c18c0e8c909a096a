"""Another hub's storage role, reached over the wire (the storage frames of the protocol).

Answers come back as the ledger layer's own exceptions (a fenced ledger is
``LedgerFencedError`` whichever replica fenced it); anything else that goes wrong with the
replica (it is down, slow, or refuses) is ``NotEnoughReplicasError`` for that replica, which the
writer and recovery count against their quorums.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from hedwig.clock import Clock, SystemClock
from hedwig.errors import HedwigError, LedgerFencedError, NoSuchEntryError, NotEnoughReplicasError
from hedwig.net.connection import HubConnection
from hedwig.net.transport import TCP, Network
from hedwig.protocol import (
    AddEntry,
    DeleteLedger,
    Entry,
    Lac,
    LedgerLac,
    ReadEntry,
    ReadLac,
    Reply,
    Request,
    StorageHello,
    WriteLacs,
)

# Maps a hub's address to where its storage role listens (its internal listener), and is told
# when that failed (``hedwig.hub.peers.PeerDirectory``).
Resolve = Callable[[str], Awaitable[str]]


class RemoteStorage:
    def __init__(
        self,
        address: str,
        *,
        timeout_s: float = 10.0,
        network: Network = TCP,
        clock: Clock | None = None,
        resolve: Resolve | None = None,
        forget: Callable[[str], None] | None = None,
        on_failure: Callable[[str], None] | None = None,
    ) -> None:
        self.address = address
        self._resolve = resolve
        self._forget = forget
        # Told of every request that failed other than by the replica's answer (the hub's
        # directory marks the replica suspect: reads try it last, placement avoids its hub).
        self._on_failure = on_failure
        self._timeout = timeout_s
        self._network = network
        self._clock = clock or SystemClock()
        self._conn: HubConnection | None = None
        self._connecting = asyncio.Lock()

    async def _connection(self) -> HubConnection:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        async with self._connecting:
            if self._conn is None or self._conn.closed:
                target = self.address
                if self._resolve is not None:
                    target = await self._resolve(self.address)
                try:
                    conn = await HubConnection.open(
                        target, network=self._network, clock=self._clock, timeout=self._timeout
                    )
                    try:
                        await conn.request(
                            StorageHello(request_id=conn.next_id(), replica=self.address),
                            self._timeout,
                        )
                    except BaseException:
                        conn.close()
                        raise
                    self._conn = conn
                except HedwigError:
                    if self._forget is not None:
                        self._forget(self.address)
                    raise
        return self._conn

    async def _request(self, make: Callable[[int], Request]) -> Reply:
        """Send ``make(request_id)`` on the connection to the replica."""
        try:
            conn = await self._connection()
            return await conn.request(make(conn.next_id()), self._timeout)
        except (LedgerFencedError, NoSuchEntryError):
            raise
        except HedwigError as exc:
            if self._on_failure is not None:
                self._on_failure(self.address)
            raise NotEnoughReplicasError(f"storage replica {self.address}: {exc}") from exc

    async def add_entry(
        self, ledger_id: int, entry_id: int, lac: int, payload: bytes, *, recovery: bool = False
    ) -> None:
        await self._request(
            lambda rid: AddEntry(
                request_id=rid,
                ledger_id=ledger_id,
                entry_id=entry_id,
                lac=lac,
                payload=payload,
                recovery=recovery,
            )
        )

    async def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        answer = await self._request(
            lambda rid: ReadEntry(request_id=rid, ledger_id=ledger_id, entry_id=entry_id)
        )
        assert isinstance(answer, Entry)
        return answer.payload

    async def read_lac(self, ledger_id: int, *, fence: bool) -> tuple[int, int]:
        answer = await self._request(
            lambda rid: ReadLac(request_id=rid, ledger_id=ledger_id, fence=fence)
        )
        assert isinstance(answer, Lac)
        return answer.lac, answer.last_entry_id

    async def fenced(self, ledger_id: int) -> bool:
        answer = await self._request(
            lambda rid: ReadLac(request_id=rid, ledger_id=ledger_id, fence=False)
        )
        assert isinstance(answer, Lac)
        return answer.fenced

    async def write_lacs(self, lacs: Sequence[tuple[int, int]]) -> None:
        told = tuple(LedgerLac(ledger_id, lac) for ledger_id, lac in lacs)
        await self._request(lambda rid: WriteLacs(request_id=rid, lacs=told))

    async def delete_ledger(self, ledger_id: int) -> None:
        await self._request(lambda rid: DeleteLedger(request_id=rid, ledger_id=ledger_id))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
