"""The fault scenarios of ``test_faults.py`` with etcd as the metadata store.

Owner records are bound to each hub's lease instead of a ZooKeeper session: a killed owner's
lease expires after its TTL (the session timeout, 2 s here), a frozen owner's too, and an etcd
restart under load must cost no acknowledged message. Each run checks the whole history
(``history.py``).

The secured runs do the same with etcd as it runs in production: clients over TLS with
certificates, authentication on, Hedwig's user confined to Hedwig's prefix, and the hubs'
clients over TLS with ACLs (``DevCluster(secure=True)``). A restarted etcd has forgotten every
token it gave: each hub must authenticate again, and still lose nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from hedwig.client import HedwigClient
from hedwig.devcluster.cluster import DevCluster
from tests.cluster_helpers import eventually, owner_of
from tests.failure.test_faults import (
    SESSION,
    SWEEPING,
    TOPICS,
    admin,
    left_over_ledgers_go,
    published_once_come_back,
    run,
    run_secure,
    scrape,
)

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


def _secure_cluster(
    path: Path, monkeypatch: pytest.MonkeyPatch, session_s: float, hub_args: Sequence[str] = ()
) -> DevCluster:
    cluster = DevCluster(
        hubs=3,
        region="faults-etcd-secure",
        session_timeout_s=session_s,
        replication="3/3/2",
        base_dir=str(path / "cluster"),
        hub_args=list(hub_args),
        store="etcd",
        secure=True,
    )
    cluster.start()
    assert cluster.security is not None
    for name, value in cluster.security.store_env().items():
        monkeypatch.setenv(name, value)  # this process reads owners as the hubs do
    return cluster


@pytest.fixture
def secure_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[DevCluster]:
    cluster = _secure_cluster(tmp_path, monkeypatch, SESSION)
    yield cluster
    cluster.stop()


@pytest.fixture
def secure_cluster_long_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[DevCluster]:
    """Leases that outlast an etcd restart: the hubs keep their sessions (and topics) through
    it, so each must get a new token to go on."""
    cluster = _secure_cluster(tmp_path, monkeypatch, 15.0)
    yield cluster
    cluster.stop()


@pytest.fixture
def secure_sweeping_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[DevCluster]:
    cluster = _secure_cluster(tmp_path, monkeypatch, SESSION, SWEEPING)
    yield cluster
    cluster.stop()


async def test_secure_left_over_ledgers_go_and_nothing_else_does(
    secure_sweeping_cluster: DevCluster,
) -> None:
    # This process reads and writes the store with the hubs' credentials (the environment).
    await left_over_ledgers_go(secure_sweeping_cluster, run_secure)


async def test_secure_kill9_owner_under_load(secure_cluster: DevCluster) -> None:
    async def fault() -> None:
        secure_cluster.hub_at(await victim_owner(secure_cluster)).kill()

    await run_secure(secure_cluster, fault, after=SESSION + 5)


async def test_secure_topics_published_once_come_back_whole_after_their_owner_froze(
    secure_cluster: DevCluster,
) -> None:
    """As on ZooKeeper, secured: the take-overs fence over mutual TLS, under the lease."""
    await published_once_come_back(
        secure_cluster, run_secure, freeze=True, security=admin(secure_cluster)
    )


async def test_secure_etcd_restarted_under_load(secure_cluster_long_lease: DevCluster) -> None:
    cluster = secure_cluster_long_lease

    async def fault() -> None:
        assert cluster.etcd_server is not None
        await asyncio.get_running_loop().run_in_executor(None, cluster.etcd_server.restart)

    await run_secure(cluster, fault, after=8.0)
    # A topic nobody owned before: claiming it writes to etcd with the hub's new token.
    async with HedwigClient(cluster.addresses, security=admin(cluster)) as client:
        await client.publish("f/new-after-the-restart", b"claimed")
    renewed = [
        h.address
        for h in cluster.hub_procs
        if "authenticating again" in Path(h.log_path).read_text(errors="replace")
    ]
    assert len(renewed) == 3, f"only {renewed} got a new token after etcd forgot theirs"
    lost = [
        h.address
        for h in cluster.hub_procs
        if "session expired" in Path(h.log_path).read_text(errors="replace")
    ]
    assert not lost, f"{lost} lost their sessions: the restart outlasted the lease"
