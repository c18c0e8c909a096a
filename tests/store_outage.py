"""A hub started while its metadata store is down, for either store's suite.

A hub restarted into an outage of its store (a pod rescheduled while ZooKeeper or etcd
restarts; the nemesis found it on ZooKeeper) waits for the store at each startup step instead
of exiting, registers once the store is back, and serves. The caller starts the store's server,
kills it, and stops it after; this runs the hub through the outage.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from hedwig.client import HedwigClient
from hedwig.hub import Hub, HubConfig
from hedwig.metadata import open_store
from tests import scratch

REGION = "startup-outage"


async def a_hub_started_in_an_outage_waits_and_serves(
    store_url: str, start: Callable[[], object]
) -> None:
    """``store_url``: the store, down; ``start``: brings it back (run in a thread)."""
    hub = Hub(
        HubConfig(
            zk=store_url,
            region=REGION,
            listen="127.0.0.1:0",
            data_dir=scratch.mkdtemp("hub-"),
            replication="1/1/1",
            zk_session_timeout_s=4.0,
        )
    )
    starting = asyncio.create_task(hub.start())
    try:
        await asyncio.sleep(3.0)  # the test: three seconds of the outage, the hub waiting on
        assert not starting.done(), "the hub gave up (or started) without its store"
        await asyncio.to_thread(start)
        await asyncio.wait_for(starting, 60)
        assert hub.readiness() == (True, "ready")
        look = open_store(store_url, region=REGION)
        await look.start()
        try:
            assert [h.address for h in await look.hubs.list_hubs() if h.alive] == [hub.address]
        finally:
            await look.close()
        async with HedwigClient(hub.address) as client:
            await client.publish("after-the-outage", b"x")
    finally:
        if not starting.done():
            starting.cancel()
        await hub.stop()
