"""The clusters the fault scenarios run on, and a test's ways into them.

Every scenario of ``test_faults``, ``test_faults_etcd``, ``test_fanout``, ``test_lanes`` and
``test_replication`` runs hub processes (three, or four to have a spare) at 3/3/2 replication
(an ack quorum of two: no scenario may lose an acknowledged message) with a session of
``SESSION`` seconds, short so that a killed or frozen hub is replaced within a few seconds. A
cluster given pytest's temporary directory keeps its hubs' and its store's logs of the last
runs there, to read after a failure. A secured cluster (TLS, client certificates, ACLs) is
reached with the certificates of its users: ``admin`` may do anything, others only what the
test grants them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hedwig.devcluster.cluster import DevCluster
from hedwig.metadata import MetadataStore, open_store
from hedwig.security import ClientSecurity

SESSION = 2.0


def cluster_332(
    tmp_path: Path | None,
    region: str,
    *,
    hubs: int = 3,
    secure: bool = False,
    store: str = "zookeeper",
    hub_args: Sequence[str] = (),
    session_s: float = SESSION,
) -> DevCluster:
    """``hubs`` hubs at 3/3/2 with a session of ``session_s``, under ``tmp_path`` if given."""
    return DevCluster(
        hubs=hubs,
        region=region,
        session_timeout_s=session_s,
        replication="3/3/2",
        secure=secure,
        store=store,
        base_dir=str(tmp_path / "cluster") if tmp_path is not None else None,
        hub_args=list(hub_args),
    )


def security(cluster: DevCluster, user: str = "admin") -> ClientSecurity | None:
    """The client security of ``user`` on a secured cluster; None on a plain one."""
    if cluster.security is None:
        return None
    env = cluster.security.client_env(user)
    return ClientSecurity.build(
        tls_ca=env["HEDWIG_TLS_CA"], cert=env["HEDWIG_CERT"], key=env["HEDWIG_KEY"]
    )


def admin(cluster: DevCluster) -> ClientSecurity:
    """The administrator's client security on a secured cluster."""
    got = security(cluster)
    assert got is not None, "a secured cluster"
    return got


def open_region(cluster: DevCluster) -> MetadataStore:
    """The cluster's metadata store, not started, as its hubs reach it."""
    digest = cluster.security.zk_digest if cluster.security is not None else None
    return open_store(cluster.zk, region=cluster.region, digest=digest)
