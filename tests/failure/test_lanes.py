"""Ingest lanes on real hub processes under load, each run checked with the full history
(``history.py``, lane by lane: nothing acknowledged lost or stored twice, each publisher's
messages in order in each lane, every subscriber received every lane in its order).

Three hubs with 3/3/2 replication and a 2 s ZooKeeper session. The plan is changed by
``set_topic_mode`` exactly as ``hedwig topic mode`` does: single -> ingest (3 lanes) -> a lane
sealed -> a lane added -> single; and a lane's owner killed with SIGKILL in the middle of a
change, on a plain cluster and on a secured one (TLS, certificates, authorization on: the
topic's permissions cover its lanes, and a client without them is refused on a lane too).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import pytest

from hedwig.client import HedwigClient
from hedwig.devcluster.cluster import DevCluster
from hedwig.errors import ForbiddenError
from hedwig.metadata import MetadataStore, PlanMode
from hedwig.protocol import lane_name
from tests.cluster_helpers import eventually
from tests.failure.clusters import SESSION, open_region, security
from tests.failure.history import History, Workload
from tests.failure.history import under_load as run_under_load
from tests.failure.test_fanout import mode
from tests.waiting import until

pytestmark = pytest.mark.integration

TOPICS = ["fo/a", "fo/b"]


async def under_load(
    cluster: DevCluster, steps: Callable[[History], Awaitable[object]], *, after: float
) -> History:
    work = Workload(
        cluster.addresses, TOPICS, publishers=6, subscribers=3, security=security(cluster)
    )
    return await run_under_load(work, lambda: steps(work.history), before=1.5, after=after)


async def test_every_lane_reconfiguration_under_load(cluster: DevCluster) -> None:
    async with open_region(cluster) as store:

        async def steps(history: History) -> None:
            opened: set[str] = set()
            for m, lanes in (
                (PlanMode.INGEST, 3),  # single -> ingest
                (PlanMode.INGEST, 2),  # a lane sealed
                (PlanMode.INGEST, 3),  # a lane added (a new one: sealed lanes stay sealed)
                (PlanMode.SINGLE, 0),  # ingest -> single
            ):
                plans = await mode(store, m, lanes)
                new = (
                    {
                        lane_name(t, i)
                        for t, p in zip(TOPICS, plans, strict=True)
                        for i in p.open_lanes
                    }
                    - opened
                    - set(TOPICS)
                )
                opened |= new
                await took_messages(history, new)
                await asyncio.sleep(1.5)  # load a while in each configuration

        history = await under_load(cluster, steps, after=2.0)
        for t in TOPICS:
            got = await store.plans.read_plan(t)
            # Single, with the sealed lanes its hubs have not dropped yet (a lane is dropped
            # once every subscriber has read it, at a garbage collection: a slow run sees one).
            assert got is None or got.value.mode is PlanMode.SINGLE
            assert got is None or set(got.value.readable_lanes) <= {0, 1, 2, 3}
            # Every lane took messages while it was open.
            for i in (1, 2, 3):
                assert history.acked[lane_name(t, i)], f"lane {i} of {t} took nothing"


async def took_messages(history: History, lanes: set[str], timeout: float = 20.0) -> None:
    """Wait (at most ``timeout``) until each of ``lanes`` has taken a message. Getting a new
    lane its publishers (the owner sees the plan, answers USE_LANE; the lane is claimed and its
    ledger made on three replicas) can take longer than a step's pause on a loaded machine:
    a lane opened 1.5 s before it was sealed then took nothing, and the test failed."""
    with contextlib.suppress(AssertionError):  # the test finds it out, and says which lane
        await until(lambda: all(history.acked[n] for n in lanes), timeout, interval=0.05)


async def kill_a_lane_owner_mid_change(cluster: DevCluster) -> None:
    async with open_region(cluster) as store:

        async def steps(history: History) -> None:
            await mode(store, PlanMode.INGEST, 3)
            await asyncio.sleep(1.5)  # load, publishers spread over the lanes
            victim = await lane_owner(store, lane_name(TOPICS[0], 1))
            change = asyncio.get_running_loop().create_task(mode(store, PlanMode.INGEST, 2))
            await asyncio.sleep(0.05)
            cluster.hub_at(victim).kill()
            await change

        await under_load(cluster, steps, after=SESSION + 5)


async def lane_owner(store: MetadataStore, name: str) -> str:
    owner: list[str] = []

    async def claimed() -> bool:
        got = await store.ownership.read_owner_info(name)
        if got is not None:
            owner.append(got.value.address)
        return bool(owner)

    await eventually(claimed, timeout=10, what=f"{name} claimed")
    return owner[0]


async def test_kill9_lane_owner_mid_reconfiguration(plain_or_secure: DevCluster) -> None:
    await kill_a_lane_owner_mid_change(plain_or_secure)


async def test_secure_lanes_are_covered_by_their_topics_permissions(
    secure_cluster: DevCluster,
) -> None:
    """A principal refused on a topic is refused on its lanes; DESCRIBE_LANES needs a
    permission on the topic too."""
    cluster = secure_cluster
    async with open_region(cluster) as store:
        async with HedwigClient(cluster.addresses, security=security(cluster)) as admin:
            for topic in TOPICS:
                await admin.publish(topic, b"pub0:0")
            await mode(store, PlanMode.INGEST, 2)
        stranger = security(cluster, "alice")  # no ACLs
        async with HedwigClient(cluster.addresses, security=stranger) as client:
            with pytest.raises(ForbiddenError):
                await client.publish(lane_name(TOPICS[0], 1), b"pub9:0")
            with pytest.raises(ForbiddenError):
                await client.describe_lanes(TOPICS[0])
