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
    MAX_FENCED_LEDGERS,
    AddEntry,
    DeleteLedger,
    Entry,
    FencedLedgers,
    FenceLedgers,
    HubAlive,
    HubAliveAnswer,
    Lac,
    LedgerLac,
    Ok,
    ReadEntry,
    ReadLac,
    Reply,
    Request,
    StorageHello,
    WriteLacs,
)

# Maps a hub's address to where its storage role listens (its internal listener), and is told
# when that failed (``hedwig.hub.owning.peers.PeerDirectory``).
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
        # Fences asked for in this turn of the event loop, sent together (``fence_soon``).
        self._fences: list[tuple[int, asyncio.Future[tuple[int, int]]]] = []
        self._fence_tasks: set[asyncio.Task[None]] = set()
        # Whether the replica takes FENCE_LEDGERS, and answers HUB_ALIVE (its answer to
        # STORAGE_HELLO says).
        self._fences_batched = False
        self._answers_hub_alive = False

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
                        hello = await conn.request(
                            StorageHello(request_id=conn.next_id(), replica=self.address),
                            self._timeout,
                        )
                    except BaseException:
                        conn.close()
                        raise
                    self._conn = conn
                    self._fences_batched = isinstance(hello, Ok) and hello.fences_batched
                    self._answers_hub_alive = isinstance(hello, Ok) and hello.answers_hub_alive
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
            raise self._failed(exc) from exc

    async def _connected(self) -> None:
        try:
            await self._connection()
        except HedwigError as exc:
            raise self._failed(exc) from exc

    def _failed(self, exc: HedwigError) -> NotEnoughReplicasError:
        """The replica did not answer (``exc``): told to ``on_failure``, counted against the
        quorums."""
        if self._on_failure is not None:
            self._on_failure(self.address)
        return NotEnoughReplicasError(f"storage replica {self.address}: {exc}")

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

    def fence_soon(self, ledger_id: int) -> asyncio.Future[tuple[int, int]]:
        """``read_lac(ledger_id, fence=True)`` as a future: the fences asked for in one turn
        of the event loop go to the replica as one FENCE_LEDGERS. After a hub died, each
        survivor fenced a ledger per topic it took over on the other survivors, thousands a
        second, and a request each (its task, frame, answer and handler on both sides) was
        a twentieth of its time."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[tuple[int, int]] = loop.create_future()
        if not self._fences:
            loop.call_soon(self._send_fences)
        self._fences.append((ledger_id, fut))
        return fut

    def _send_fences(self) -> None:
        waiting, self._fences = self._fences, []
        loop = asyncio.get_running_loop()
        for i in range(0, len(waiting), MAX_FENCED_LEDGERS):
            task = loop.create_task(self._fence(waiting[i : i + MAX_FENCED_LEDGERS]))
            self._fence_tasks.add(task)
            task.add_done_callback(self._fence_tasks.discard)

    async def _fence(self, waiting: list[tuple[int, asyncio.Future[tuple[int, int]]]]) -> None:
        ids = tuple(dict.fromkeys(ledger_id for ledger_id, _ in waiting))
        try:
            await self._connected()
            if not self._fences_batched:
                # A hub from before FENCE_LEDGERS (it would close the connection on one).
                await self._fence_one_by_one(waiting)
                return
            answer = await self._request(lambda rid: FenceLedgers(request_id=rid, ledger_ids=ids))
        except asyncio.CancelledError:
            for _, fut in waiting:
                fut.cancel()
            raise
        except Exception as exc:
            for _, fut in waiting:
                if not fut.done():
                    fut.set_exception(exc)
            return
        assert isinstance(answer, FencedLedgers)
        ends = {e.ledger_id: (e.lac, e.last_entry_id) for e in answer.ends}
        for ledger_id, fut in waiting:
            if fut.done():
                continue
            end = ends.get(ledger_id)
            if end is None:
                fut.set_exception(
                    NotEnoughReplicasError(
                        f"storage replica {self.address} could not fence ledger {ledger_id}"
                    )
                )
            else:
                fut.set_result(end)

    async def _fence_one_by_one(
        self, waiting: list[tuple[int, asyncio.Future[tuple[int, int]]]]
    ) -> None:
        async def one(ledger_id: int, fut: asyncio.Future[tuple[int, int]]) -> None:
            try:
                end = await self.read_lac(ledger_id, fence=True)
            except Exception as exc:
                if not fut.done():
                    fut.set_exception(exc)
            else:
                if not fut.done():
                    fut.set_result(end)

        await asyncio.gather(*(one(ledger_id, fut) for ledger_id, fut in waiting))

    async def fenced(self, ledger_id: int) -> bool:
        answer = await self._request(
            lambda rid: ReadLac(request_id=rid, ledger_id=ledger_id, fence=False)
        )
        assert isinstance(answer, Lac)
        return answer.fenced

    async def hub_alive(self, address: str, epoch: int, timeout_s: float) -> bool | None:
        """Whether the hub at ``address`` is alive in the session of ``epoch`` as this replica's
        hub reads the registry now (``HubAlive``); None if it cannot tell: it is out of reach,
        cannot reach the store either, or is from before HUB_ALIVE. Not a replica's failure:
        nothing is counted against it."""
        try:
            conn = await asyncio.wait_for(self._connection(), timeout_s)
            if not self._answers_hub_alive:
                return None
            answer = await conn.request(
                HubAlive(request_id=conn.next_id(), address=address, epoch=epoch), timeout_s
            )
        except (HedwigError, TimeoutError):
            return None
        return answer.alive if isinstance(answer, HubAliveAnswer) else None

    async def write_lacs(self, lacs: Sequence[tuple[int, int]]) -> None:
        told = tuple(LedgerLac(ledger_id, lac) for ledger_id, lac in lacs)
        await self._request(lambda rid: WriteLacs(request_id=rid, lacs=told))

    async def delete_ledger(self, ledger_id: int) -> None:
        await self._request(lambda rid: DeleteLedger(request_id=rid, ledger_id=ledger_id))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
