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
from tests.failure.clusters import SESSION, admin, cluster_332
from tests.failure.test_faults import (
    SWEEPING,
    left_over_ledgers_go,
    owner_frozen_past_its_session,
    published_once_come_back,
    run,
    run_secure,
    victim_owner,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    with cluster_332(tmp_path, "faults-etcd", store="etcd") as c:
        yield c


async def test_kill9_owner_under_load(cluster: DevCluster) -> None:
    assert cluster.zk.startswith("etcd://")

    async def fault() -> None:
        cluster.hub_at(await victim_owner(cluster)).kill()

    await run(cluster, fault, after=SESSION + 5)


async def test_owner_frozen_past_its_lease(cluster: DevCluster) -> None:
    await owner_frozen_past_its_session(cluster, take_over_s=SESSION * 8, after=4)


async def test_etcd_restarted_under_load(cluster: DevCluster) -> None:
    async def fault() -> None:
        assert cluster.etcd_server is not None
        await asyncio.get_running_loop().run_in_executor(None, cluster.etcd_server.restart)

    await run(cluster, fault, after=SESSION + 5)


def _secure_cluster(
    path: Path, monkeypatch: pytest.MonkeyPatch, session_s: float, hub_args: Sequence[str] = ()
) -> DevCluster:
    cluster = cluster_332(
        path,
        "faults-etcd-secure",
        secure=True,
        store="etcd",
        hub_args=hub_args,
        session_s=session_s,
    )
    cluster.start()
    assert cluster.security is not None
    for name, value in cluster.security.store_env().items():
        monkeypatch.setenv(name, value)  # this process reads owners as the hubs do
    return cluster


@pytest.fixture
def secure_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[DevCluster]:
    """A secured cluster on etcd; a test may ask (``indirect``) for another session and hub
    arguments: ``(session_s, hub_args)``."""
    session_s, hub_args = getattr(request, "param", (SESSION, ()))
    cluster = _secure_cluster(tmp_path, monkeypatch, session_s, hub_args)
    yield cluster
    cluster.stop()


@pytest.mark.parametrize("secure_cluster", [(SESSION, SWEEPING)], indirect=True, ids=["sweeping"])
async def test_secure_left_over_ledgers_go_and_nothing_else_does(
    secure_cluster: DevCluster,
) -> None:
    # This process reads and writes the store with the hubs' credentials (the environment).
    await left_over_ledgers_go(secure_cluster, run_secure)


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


# Leases that outlast an etcd restart: the hubs keep their sessions (and topics) through it, so
# each must get a new token to go on.
@pytest.mark.parametrize("secure_cluster", [(15.0, ())], indirect=True, ids=["long-lease"])
async def test_secure_etcd_restarted_under_load(secure_cluster: DevCluster) -> None:
    cluster = secure_cluster

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
