"""Fan-out on real hub processes under load, each run checked with the full history
(``history.py``: nothing acknowledged lost, per-publisher order, every subscriber sees every
message of the log in order, redeliveries allowed and gaps never).

Three hubs with 3/3/2 replication and a 2 s ZooKeeper session. The plan is changed by
``set_topic_mode`` exactly as ``hedwig topic mode`` does: single -> fan-out -> a delivery hub
removed -> added back -> single, a delivery hub killed with SIGKILL in the middle of a
change, and one frozen past its session and thawed, on a plain cluster and on a secured one
(where delivery hubs tail the owner over the internal listener with their certificates, a
subscriber without permission is refused at a delivery hub, and the owner asks its delivery
hubs before a delete without force).
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Awaitable, Callable

import pytest

from hedwig.client import HedwigClient
from hedwig.clock import SystemClock
from hedwig.devcluster.cluster import DevCluster
from hedwig.errors import ForbiddenError, TopicInUseError
from hedwig.metadata import MetadataStore, PlanMode, TopicPlan
from hedwig.placement.plans import set_topic_mode
from tests.cluster_helpers import eventually
from tests.failure.clusters import SESSION, open_region, security
from tests.failure.history import History, Workload
from tests.failure.history import under_load as run_under_load
from tests.waiting import until

pytestmark = pytest.mark.integration

TOPICS = ["fo/a", "fo/b"]
SUBSCRIBERS = 6


@pytest.fixture(autouse=True)
def hubs_log_at_info(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hubs log their tails, claims and subscription moves: a failure here is a sequence
    of those across three hubs, and warnings alone do not tell it."""
    monkeypatch.setenv("HEDWIG_LOG_LEVEL", "INFO")


async def mode(store: MetadataStore, mode: PlanMode, hubs: int = 2) -> list[TopicPlan]:
    return [
        await set_topic_mode(store, t, mode, hubs=hubs, reason="test", clock=SystemClock())
        for t in TOPICS
    ]


async def under_load(
    cluster: DevCluster, steps: Callable[[], Awaitable[object]], *, after: float
) -> History:
    work = Workload(cluster.addresses, TOPICS, subscribers=SUBSCRIBERS, security=security(cluster))
    return await run_under_load(work, steps, before=1.5, after=after)


async def test_every_reconfiguration_under_load(cluster: DevCluster) -> None:
    async with open_region(cluster) as store:
        spread: list[float] = []

        async def steps() -> None:
            for m, hubs in (
                (PlanMode.FAN_OUT, 2),  # single -> fan-out
                (PlanMode.FAN_OUT, 1),  # a delivery hub removed
                (PlanMode.FAN_OUT, 2),  # and added
                (PlanMode.SINGLE, 0),  # fan-out -> single
            ):
                await mode(store, m, hubs)
                await asyncio.sleep(1.0)  # load a while in each configuration
                if m is PlanMode.FAN_OUT and hubs == 2 and not spread:
                    # While spread (a hub's series for a topic it no longer delivers goes
                    # once the topic leaves its load report: series are bounded).
                    owner = await store.ownership.read_owner_info(TOPICS[0])
                    assert owner is not None
                    spread.append(delivered_by_others(cluster, TOPICS[0], owner.value.address))

        await under_load(cluster, steps, after=2.0)
        for t in TOPICS:
            assert await store.plans.read_plan(t) is None
        assert spread and spread[0] > 0, "no other hub delivered while the topic was spread"


def delivered_by_others(cluster: DevCluster, topic: str, owner: str) -> float:
    """Messages of ``topic`` delivered by the running hubs other than ``owner``."""
    total = 0.0
    for hub in cluster.hub_procs:
        if hub.address == owner or not hub.running:
            continue
        with urllib.request.urlopen(hub.metrics_url + "/metrics", timeout=5) as r:
            text = r.read().decode()
        for line in text.splitlines():
            if line.startswith(f'hedwig_messages_out_total{{topic="{topic}"}}'):
                total += float(line.rsplit(" ", 1)[1])
    return total


async def owners_apart(cluster: DevCluster, store: MetadataStore) -> str:
    """Claim both topics, ``fo/b`` at the hub that will be ``fo/a``'s first delivery hub (the
    victim below), so that the kill takes a delivery hub of one topic and the owner of the
    other: the other's subscribers then read, at their delivery hub, through a dead owner
    and then its successor. The hub to kill, which the plan confirms later."""
    admin = HedwigClient(cluster.addresses, security=security(cluster))
    async with admin:
        for t in TOPICS:  # claimed, and nothing in their logs that the workload did not write
            await admin.subscribe(t, "warm-up")
            await admin.unsubscribe(t, "warm-up")
        a = await store.ownership.read_owner_info(TOPICS[0])
        assert a is not None
        victim = min(h for h in cluster.addresses if h != a.value.address)
        tries = 0

        async def moved() -> bool:
            nonlocal tries
            b = await store.ownership.read_owner_info(TOPICS[1])
            if b is not None and b.value.address == victim:
                return True
            if b is not None and tries % 20 == 0:
                await admin.move_topic(TOPICS[1], victim)
            tries += 1
            return False

        await eventually(moved, timeout=10, interval=0.1, what=f"{TOPICS[1]} moved to {victim}")
    return victim


async def kill_a_delivery_hub_mid_change(cluster: DevCluster) -> None:
    async with open_region(cluster) as store:
        meant = await owners_apart(cluster, store)

        async def steps() -> None:
            plans = await mode(store, PlanMode.FAN_OUT, 2)
            await asyncio.sleep(1.5)  # load, subscribers spread over both delivery hubs
            victim = plans[0].hubs[0]
            assert victim == meant, (plans, meant)
            # Remove the other delivery hub and kill this one while subscribers move.
            change = asyncio.get_running_loop().create_task(mode(store, PlanMode.FAN_OUT, 1))
            await asyncio.sleep(0.05)
            cluster.hub_at(victim).kill()
            await change

        await under_load(cluster, steps, after=SESSION + 5)


async def test_kill9_delivery_hub_mid_reconfiguration(plain_or_secure: DevCluster) -> None:
    await kill_a_delivery_hub_mid_change(plain_or_secure)


async def test_secure_delivery_hub_refuses_a_subscriber_without_permission(
    secure_cluster: DevCluster,
) -> None:
    admin = HedwigClient(secure_cluster.addresses, security=security(secure_cluster))
    async with admin, open_region(secure_cluster) as store:
        await admin.publish(TOPICS[0], b"first")
        plan = await set_topic_mode(store, TOPICS[0], PlanMode.FAN_OUT, hubs=1, clock=SystemClock())
        delivery_hub = plan.hubs[0]
        sub = await admin.subscribe(TOPICS[0], "allowed", auto_consume=True)
        await admin.publish(TOPICS[0], b"second")
        assert (await sub.next(10)).value == b"second"
        # The owner may have served it until it saw the plan (its cached copy is replaced when
        # its watch fires): then it hands the subscription over.
        await until(
            lambda: sub.connection is not None and sub.connection.address == delivery_hub,
            what="the subscription handed over to its delivery hub",
        )
        assert sub.connection is not None and sub.connection.address == delivery_hub
        # Alice (no ACLs) asks the delivery hub itself: refused there, before anything else.
        alice = HedwigClient([delivery_hub], security=security(secure_cluster, "alice"))
        async with alice:
            with pytest.raises(ForbiddenError, match="alice may not subscribe"):
                await alice.subscribe(TOPICS[0], "mallory")
        # The owner asks the delivery hub, over the internal plane with its certificate,
        # before a delete without force: refused while the subscriber is attached there.
        with pytest.raises(TopicInUseError, match=f"delivery hub {delivery_hub}"):
            await admin.delete_topic(TOPICS[0])
        await admin.delete_topic(TOPICS[0], force=True)


async def test_kill9_owner_of_a_fan_out_topic(cluster: DevCluster) -> None:
    """The delivery hubs' tails follow the topic to its next owner; subscribers attached to
    the dead owner go to their delivery hubs or the new owner."""
    async with open_region(cluster) as store:

        async def steps() -> None:
            await mode(store, PlanMode.FAN_OUT, 1)
            await asyncio.sleep(1.5)  # load under the fan-out plan
            owner = await store.ownership.read_owner_info(TOPICS[0])
            assert owner is not None
            cluster.hub_at(owner.value.address).kill()

        await under_load(cluster, steps, after=SESSION + 5)


async def test_frozen_delivery_hub_under_load(plain_or_secure: DevCluster) -> None:
    await freeze_a_delivery_hub(plain_or_secure)


async def freeze_a_delivery_hub(cluster: DevCluster) -> None:
    """A delivery hub frozen (SIGSTOP) past its session, then thawed: its subscribers' connections
    go quiet, they notice, and attach where the plan's live hubs send them; the thawed hub has
    lost its session and lets what it served go. Nothing skipped, nothing out of order."""
    async with open_region(cluster) as store:

        async def steps() -> None:
            plans = await mode(store, PlanMode.FAN_OUT, 2)
            await asyncio.sleep(1.5)  # load, subscribers spread over both delivery hubs
            victim = cluster.hub_at(plans[0].hubs[0])
            victim.freeze()
            try:
                await asyncio.sleep(SESSION + 3)  # the test: frozen past its session
            finally:
                victim.thaw()

        await under_load(cluster, steps, after=SESSION + 5)
