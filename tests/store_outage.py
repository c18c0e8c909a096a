"""A metadata store's server going away, for either store's suite.

Each function here takes the store's server running (a ``Server``: ZooKeeper's or etcd's, of
the test's own) and stops it at the end, whatever happens.

- **Ledger ids through a crash.** Two hubs make ledgers, taking small blocks of ids, while the
  server is killed (``kill -9``) and started again on its data. A block's compare-and-set cut
  off by the crash may or may not have been applied: its hub reads the counter again and
  takes the next block, so at worst ids are skipped, never given twice; every ledger made has
  its metadata, under its id.
- **A hub started in an outage.** A hub restarted into an outage of its store (a pod
  rescheduled while ZooKeeper or etcd restarts; the nemesis found it on ZooKeeper) waits for
  the store at each startup step instead of exiting, registers once the store is back, and
  serves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

from hedwig.client import HedwigClient
from hedwig.errors import MetadataUnavailableError
from hedwig.metadata import MetadataStore, open_store
from hedwig.metadata.records import LedgerMetadata
from tests.cluster_helpers import lone_hub
from tests.waiting import succeeds, until


class Server(Protocol):
    """A store's server process (``ZooKeeperServer``, ``EtcdServer``)."""

    def start(self) -> object: ...
    def kill(self) -> None: ...
    def stop(self) -> None: ...


LEDGER = LedgerMetadata(0, "t", 1, 1, 1, ((0, ("h:1",)),), owner="h:1", owner_epoch=3)


async def ledger_ids_stay_unique_through_a_crash(
    server: Server, stores: Sequence[MetadataStore]
) -> None:
    """Two hubs' ``stores`` (not started) make ledgers through a crash of ``server``."""
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
        await asyncio.to_thread(server.kill)
        await until(lambda: failed[0] > 0, what="the crash felt")
        await asyncio.to_thread(server.start)
        after_restart = len(made)
        # until the clients are back and ledgers are made again
        await until(lambda: len(made) > after_restart + 20, what="ledgers made after the crash")
        stop.set()
        await asyncio.gather(*makers)
        assert before > 0 and len(made) > after_restart + 20, "ledgers made before and after"
        assert failed[0] > 0, "the crash was felt"
        assert len(made) == len(set(made)), "a ledger id was given twice"
        # each store reconnects on its own: read through one that has
        await succeeds(lambda: stores[0].ledgers.read_ledger(made[0]), MetadataUnavailableError)
        for lid in made:
            got = await stores[0].ledgers.read_ledger(lid)
            assert got is not None and got.value.ledger_id == lid
    finally:
        stop.set()
        try:
            for s in stores:
                await s.close()
        finally:
            server.stop()


async def a_hub_started_in_an_outage_waits_and_serves(server: Server, store_url: str) -> None:
    """``server`` killed, a hub on ``store_url`` started, ``server`` started again."""
    region = "startup-outage"
    try:
        await asyncio.to_thread(server.kill)
        hub = lone_hub(store_url, region, session_timeout_s=4.0)
        starting = asyncio.create_task(hub.start())
        try:
            await asyncio.sleep(3.0)  # the test: three seconds of the outage, the hub waiting
            assert not starting.done(), "the hub gave up (or started) without its store"
            await asyncio.to_thread(server.start)
            await asyncio.wait_for(starting, 60)
            assert hub.readiness() == (True, "ready")
            look = open_store(store_url, region=region)
            await look.start()
            try:
                alive = [h.address for h in await look.hubs.list_hubs() if h.alive]
                assert alive == [hub.address]
            finally:
                await look.close()
            async with HedwigClient(hub.address) as client:
                await client.publish("after-the-outage", b"x")
        finally:
            if not starting.done():
                starting.cancel()
            await hub.stop()
    finally:
        server.stop()
