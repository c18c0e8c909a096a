"""Ledger ids through a crash of the metadata store, for either store's suite.

Two hubs make ledgers, taking small blocks of ids, while the store's server is killed
(``kill -9``) and started again on its data. A block's compare-and-set cut off by the crash
may or may not have been applied: its hub reads the counter again and takes the next block,
so at worst ids are skipped, never given twice; every ledger made has its metadata, under
its id.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

from hedwig.errors import MetadataUnavailableError
from hedwig.metadata import MetadataStore
from hedwig.metadata.records import LedgerMetadata
from tests.waiting import eventually, until

LEDGER = LedgerMetadata(0, "t", 1, 1, 1, ((0, ("h:1",)),), owner="h:1", owner_epoch=3)


async def ledger_ids_stay_unique_through_a_crash(
    stores: Sequence[MetadataStore], kill: Callable[[], object], start: Callable[[], object]
) -> None:
    made: list[int] = []
    failed = [0]
    stop = asyncio.Event()

    async def make(s: MetadataStore) -> None:
        while not stop.is_set():
            try:
                md = await s.ledgers.create_ledger(LEDGER)
            except MetadataUnavailableError:  # while the server is down; anything else fails
                failed[0] += 1
                await asyncio.sleep(0.05)
            else:
                made.append(md.value.ledger_id)

    try:
        for s in stores:
            await s.start()
        makers = [asyncio.create_task(make(s)) for s in stores for _ in range(4)]
        await until(lambda: len(made) > 20, what="ledgers made before the crash")
        before = len(made)
        await asyncio.to_thread(kill)
        await until(lambda: failed[0] > 0, what="the crash felt")
        await asyncio.to_thread(start)
        after_restart = len(made)
        # until the clients are back and ledgers are made again
        await until(lambda: len(made) > after_restart + 20, what="ledgers made after the crash")
        stop.set()
        await asyncio.gather(*makers)
        assert before > 0 and len(made) > after_restart + 20, "ledgers made before and after"
        assert failed[0] > 0, "the crash was felt"
        assert len(made) == len(set(made)), "a ledger id was given twice"

        async def read() -> bool:  # each store reconnects on its own: read through one that has
            with contextlib.suppress(MetadataUnavailableError):
                await stores[0].ledgers.read_ledger(made[0])
                return True
            return False

        await eventually(read, what="a read through the first store")
        for lid in made:
            got = await stores[0].ledgers.read_ledger(lid)
            assert got is not None and got.value.ledger_id == lid
    finally:
        stop.set()
        for s in stores:
            await s.close()
