"""The storage role's requests: what other hubs ask of this hub's ledger replicas.

Other hubs' ledger writers add entries and write LACs here, their recoveries read and fence,
their auditors read and delete, and their session witnesses ask about the registry
(HUB_ALIVE). These frames come from hubs only: on the internal listener when the region's hubs
have one (the client listener then refuses them, ``hedwig.hub.front.access``), else on the
client listener, which then serves them too. They go to ``LocalStorage``; nothing here knows
of topics.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from hedwig.errors import InvalidRequestError, ServiceUnavailableError, WrongReplicaError
from hedwig.hub.front.server import ClientConnection
from hedwig.ledger.storage import LocalStorage
from hedwig.metadata.managers import MetadataStore
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
    LedgerEnd,
    Ok,
    ReadEntry,
    ReadLac,
    Reply,
    StorageHello,
    WriteLacs,
)

log = logging.getLogger(__name__)


class StorageRequests:
    def __init__(
        self,
        *,
        storage: LocalStorage,
        store: MetadataStore,
        address: Callable[[], str],
        store_reachable: Callable[[], bool],
    ) -> None:
        self._storage = storage
        self._store = store
        self._address = address  # this hub's client address (known once it listens)
        self._store_reachable = store_reachable

    async def storage_hello(self, conn: ClientConnection, req: StorageHello) -> Reply:
        """The sender means to reach replica ``req.replica``, this hub's id; anything else is
        another hub that listened here before."""
        if req.replica != self._storage.address:
            raise WrongReplicaError(
                f"replica {req.replica} is not here: this is hub {self._storage.address} at "
                f"{self._address()} (the address was reused)"
            )
        return Ok(request_id=req.request_id, fences_batched=True, answers_hub_alive=True)

    async def hub_alive(self, conn: ClientConnection, req: HubAlive) -> Reply:
        """Read the registry for a hub that cannot (``HubAlive``). Only a read made now is an
        answer: this hub's own view of its session is no better than the asker's."""
        if not self._store_reachable():
            raise ServiceUnavailableError("this hub cannot reach the metadata store either")
        epoch = await self._store.hubs.alive_epoch(req.address)
        return HubAliveAnswer(request_id=req.request_id, alive=epoch == req.epoch)

    async def add_entry(self, conn: ClientConnection, req: AddEntry) -> None:
        await self._storage.add_entry(
            req.ledger_id, req.entry_id, req.lac, req.payload, recovery=req.recovery
        )

    async def read_entry(self, conn: ClientConnection, req: ReadEntry) -> Reply:
        payload = await self._storage.read_entry(req.ledger_id, req.entry_id)
        return Entry(request_id=req.request_id, payload=payload)

    async def read_lac(self, conn: ClientConnection, req: ReadLac) -> Reply:
        lac, last = await self._storage.read_lac(req.ledger_id, fence=req.fence)
        fenced = self._storage.is_fenced(req.ledger_id)
        return Lac(request_id=req.request_id, lac=lac, last_entry_id=last, fenced=fenced)

    async def fence_ledgers(self, conn: ClientConnection, req: FenceLedgers) -> Reply:
        """Fence every ledger named (each as READ_LAC with fence would), answering once all
        are on disk; one the storage could not fence is left out of the answer."""
        ids = req.ledger_ids
        if len(ids) > MAX_FENCED_LEDGERS:
            raise InvalidRequestError(
                f"{len(ids)} ledgers to fence in one request; at most {MAX_FENCED_LEDGERS}"
            )
        # The storage's futures, awaited together: no task per ledger.
        results = await asyncio.gather(
            *(self._storage.fence_soon(i) for i in ids), return_exceptions=True
        )
        ends = []
        for ledger_id, r in zip(ids, results, strict=True):
            if isinstance(r, BaseException):
                log.info("fencing ledger %d for a peer failed: %s", ledger_id, r)
                continue
            ends.append(LedgerEnd(ledger_id, r[0], r[1]))
        return FencedLedgers(request_id=req.request_id, ends=tuple(ends))

    async def write_lacs(self, conn: ClientConnection, req: WriteLacs) -> None:
        await self._storage.write_lacs([(x.ledger_id, x.lac) for x in req.lacs])

    async def delete_ledger(self, conn: ClientConnection, req: DeleteLedger) -> None:
        await self._storage.delete_ledger(req.ledger_id)
