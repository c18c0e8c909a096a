"""A namespace's publish rate quota through its owner killed with -9, on three secured hub
processes: publishers offering three times the quota are held to it, and the history checker
finds nothing acknowledged lost, duplicated or out of order across the take-over (a held
publish is an ordinary one that waited)."""

from __future__ import annotations

import asyncio

import pytest

from hedwig.devcluster.cluster import DevCluster
from hedwig.metadata import NEW_VERSION
from hedwig.metadata.records.namespaces import NamespacePolicy
from tests.cluster_helpers import owner_of
from tests.failure.clusters import SESSION, admin, open_region
from tests.failure.history import Workload, under_load

pytestmark = pytest.mark.integration

NS, RATE = "acme/r", 100
TOPICS = [f"{NS}/a", f"{NS}/b"]


async def test_a_held_namespace_loses_nothing_through_its_owner_killed(
    secure_cluster: DevCluster,
) -> None:
    cluster = secure_cluster
    async with open_region(cluster) as store:
        policy = NamespacePolicy(max_publish_msgs_per_s=RATE)
        await store.namespaces.write_namespace(NS, policy, NEW_VERSION)
    await asyncio.sleep(1.5)  # the hubs read policies on a watch: well within this
    # Three publishers at 100 a second each: three times the namespace's quota.
    work = Workload(cluster.addresses, TOPICS, publishers=3, rate=100.0, security=admin(cluster))

    async def fault() -> None:
        owner = await owner_of(cluster.zk, cluster.region, TOPICS[0])
        assert owner is not None
        cluster.hub_at(owner).kill()

    before, after = 3.0, SESSION + 5
    history = await under_load(work, fault, before=before, after=after)
    # Every publish offered was acknowledged in the end (held, not dropped: the checker found
    # them all stored), but at the quota: acknowledgements went on well after the publishers
    # stopped, and those in the run's first ten seconds were the quota's worth, with room for
    # the hubs serving the namespace to learn of each other (two report intervals of 5 s).
    times = sorted(history.ack_times)
    window = sum(1 for t in times if t <= times[0] + 10)
    assert window <= RATE * (10 + 2 * 5), (window, history.acked_count)
    assert times[-1] - times[0] > before + after + 5, "not held: acknowledged as offered"
