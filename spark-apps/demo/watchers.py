"""The demo's background work on one asyncio loop: vehicles, the heat-map reader, the cluster.

- the simulator publishes every vehicle's position once a second to its quadrant's topic;
- the heat-map reader follows the topic Spark writes, by sequence id (READ requests: a
  reader, not a subscriber, so it leaves no subscription behind);
- the cluster watcher asks ZooKeeper who owns each quadrant's topic and how loaded the hubs
  are, and records the hubs' load reports into the ``hedwig.load`` topic for the hub-load
  analytics job;
- optionally, every ``move_every_s`` seconds a hub that owns a quadrant is restarted
  gracefully, so the page shows topics moving between hubs while Spark keeps going.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time

from demo.state import DemoState, HubView
from hedwig.client import HedwigClient
from hedwig.devcluster.cluster import DevCluster
from hedwig.errors import HedwigError, MessagesUnavailableError, NoSuchTopicError
from hedwig.metadata import open_store
from hedwig.security import ClientSecurity
from jobs.hub_load import LOAD_TOPIC, load_records
from traffic.simulator import Simulator, publish_positions

log = logging.getLogger("demo")


async def run_vehicles(
    cluster: DevCluster, state: DemoState, vehicles: int, stop: asyncio.Event
) -> None:
    sim = Simulator(state.grid, vehicles)

    def tick(published: int) -> None:
        state.published = published

    async with HedwigClient(
        cluster.addresses, publisher_id="demo-vehicles", security=ClientSecurity.from_env()
    ) as client:
        await publish_positions(client, sim, stop=stop, on_tick=tick)


async def follow_heatmap(
    cluster: DevCluster, state: DemoState, topic: str, stop: asyncio.Event
) -> None:
    async with HedwigClient(cluster.addresses, security=ClientSecurity.from_env()) as client:
        next_seq = 1
        while not stop.is_set():
            try:
                answer = await client.read(topic, next_seq, max_messages=5000)
            except MessagesUnavailableError as exc:
                next_seq = exc.first_available or next_seq
                continue
            except NoSuchTopicError:  # the job has not written its first heat map yet
                await _sleep(stop, 1.0)
                continue
            except HedwigError as exc:
                log.warning("reading %s: %s", topic, exc)
                await _sleep(stop, 1.0)
                continue
            got = 0
            for batch in answer.batches:
                for m in batch.delivered():
                    if m.seq >= next_seq:
                        with contextlib.suppress(ValueError, KeyError):
                            state.add_cell(json.loads(m.value))
                        next_seq = m.seq + 1
                        got += 1
            if not got:
                await _sleep(stop, 0.5)


async def watch_cluster(
    cluster: DevCluster, state: DemoState, stop: asyncio.Event, record_every_s: float = 5.0
) -> None:
    store = open_store(cluster.zk, region=cluster.region)
    await store.start()
    last_record = 0.0
    try:
        async with HedwigClient(
            cluster.addresses,
            publisher_id="demo-load-recorder",
            security=ClientSecurity.from_env(),
        ) as client:
            while not stop.is_set():
                try:
                    owners: dict[str, str | None] = {}
                    for topic in state.grid.topics():
                        got = await store.ownership.read_owner_info(topic)
                        owners[topic] = got.value.address if got else None
                    statuses = await store.hubs.list_hubs()
                    hubs = [
                        HubView(
                            s.address,
                            s.alive,
                            s.load.msg_in if s.load else 0.0,
                            s.load.topics if s.load else 0,
                        )
                        for s in statuses
                    ]
                    state.set_cluster(owners, hubs)
                    if time.monotonic() - last_record >= record_every_s:
                        last_record = time.monotonic()
                        for record in load_records(statuses, int(time.time() * 1000)):
                            client.publish_nowait(LOAD_TOPIC, record, key=None)
                except HedwigError as exc:
                    log.warning("watching the cluster: %s", exc)
                await _sleep(stop, 1.0)
    finally:
        await store.close()


async def move_topics(
    cluster: DevCluster, state: DemoState, every_s: float, stop: asyncio.Event
) -> None:
    """Restart, one after the other, hubs that own quadrants: their topics move elsewhere."""
    turn = 0
    while not await _sleep(stop, every_s):
        owners = [o for o in state.owners.values() if o]
        if not owners:
            continue
        victim = sorted(set(owners))[turn % len(set(owners))]
        turn += 1
        log.info("demo: restarting hub %s so its quadrants move", victim)
        await asyncio.to_thread(cluster.hub_at(victim).restart)


async def _sleep(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep up to ``seconds``; True if ``stop`` was set meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()
