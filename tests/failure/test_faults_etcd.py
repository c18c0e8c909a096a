"""The fault scenarios of ``test_faults.py`` with etcd as the metadata store.

Owner records are bound to each hub's lease instead of a ZooKeeper session: a killed owner's
lease expires after its TTL (the session timeout, 2 s here), a frozen owner's too, and an etcd
restart under load must cost no acknowledged message. Each run checks the whole history
(``history.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from hedwig.devcluster.cluster import DevCluster
from tests.cluster_helpers import eventually, owner_of
from tests.failure.test_faults import SESSION, TOPICS, run, scrape

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    with DevCluster(
        hubs=3,
        region="faults-etcd",
        session_timeout_s=SESSION,
        replication="3/3/2",
        base_dir=str(tmp_path / "cluster"),
        store="etcd",
    ) as c:
        yield c


async def victim_owner(cluster: DevCluster) -> str:
    owner = await owner_of(cluster.zk, cluster.region, TOPICS[0])
    assert owner is not None
    return owner


async def test_kill9_owner_under_load(cluster: DevCluster) -> None:
    assert cluster.zk.startswith("etcd://")

    async def fault() -> None:
        cluster.hub_at(await victim_owner(cluster)).kill()

    await run(cluster, fault, after=SESSION + 5)


async def test_owner_frozen_past_its_lease(cluster: DevCluster) -> None:
    frozen: list[str] = []

    async def fault() -> None:
        owner = await victim_owner(cluster)
        hub = cluster.hub_at(owner)
        hub.freeze()
        frozen.append(owner)

        async def taken_over() -> bool:
            now = await owner_of(cluster.zk, cluster.region, TOPICS[0])
            return now is not None and now != owner

        await eventually(taken_over, timeout=SESSION * 8)
        await asyncio.sleep(1.0)
        hub.thaw()  # it must notice its lease is gone, acknowledge nothing more, step down

    await run(cluster, fault, after=4)
    hub = cluster.hub_at(frozen[0])
    metrics = await asyncio.get_running_loop().run_in_executor(None, scrape, hub.metrics_url)
    losses = [
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("hedwig_topic_losses_total{")
    ]
    assert sum(losses) >= 1, "the frozen owner never noticed it lost its topics"


async def test_etcd_restarted_under_load(cluster: DevCluster) -> None:
    async def fault() -> None:
        assert cluster.etcd_server is not None
        await asyncio.get_running_loop().run_in_executor(None, cluster.etcd_server.restart)

    await run(cluster, fault, after=SESSION + 5)
