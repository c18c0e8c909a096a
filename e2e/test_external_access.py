"""External access on real pods: a client outside the pod network publishes and subscribes
through the hubs' NodePorts, secured, through a graceful move and a hub pod's deletion.

The chart is installed as a user would expose it (``hubPool.external``: NodePort, hub i at node
port 31400 + i, advertised at the node's address, which the hubs' certificate carries; the pool
is secured by default). The client runs in a network namespace that reaches the node's address
and nothing else (``outside.Outside``): no pod addresses, no cluster DNS. It bootstraps at one
NodePort, is redirected and moved by the other hubs' external addresses, and the failure
harness's history check (tests/failure/history.py) finds nothing acknowledged lost, nothing
twice, every subscriber with every message in order.
"""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.failure.history import Workload, check

from controlplane import cluster
from controlplane.node import NODE_IP, RealCluster
from hedwig.client import HedwigClient
from hedwig.devcluster.zookeeper import ZooKeeperServer
from hedwig.security import ClientSecurity
from hedwig_e2e import topic_owner, wait_for
from outside import Outside
from realpods import ROOT, chart_sets, pod_ready, pods, prepare_bed

if importlib.util.find_spec("pytest_timeout") is not None:
    pytestmark = pytest.mark.timeout(600)

CHART = ROOT / "charts" / "hedwig"
NS = "hedwig-ext"
POOL = "hedwig-ext"  # the release's name, which names its pool
HUB_SELECTOR = f"app.kubernetes.io/name=hedwig-hub,app.kubernetes.io/instance={POOL}"
STORAGE_CLASS = "e2e-ext-local"
NODE_PORT_BASE = 31400
HUBS = 3
EXTERNAL = [f"{NODE_IP}:{NODE_PORT_BASE + i}" for i in range(HUBS)]


@dataclass
class Pool:
    cp: cluster.ControlPlane
    zk: str
    work: Path

    def ready_hubs(self) -> list[dict[str, Any]] | None:
        got = [
            p
            for p in pods(self.cp, NS, HUB_SELECTOR)
            if pod_ready(p) and not p["metadata"].get("deletionTimestamp")
        ]
        return got if len(got) == HUBS else None

    def external_status(self) -> dict[str, Any]:
        pool = self.cp.kubectl_json("get", "hubpool", POOL, "-n", NS)
        return (pool.get("status") or {}).get("external") or {}

    def owner_pod(self, topic: str) -> str | None:
        info = topic_owner(self.zk, POOL, topic)
        return None if info is None else info.address.split(".")[0]


@pytest.fixture(scope="module")
def pool(real_cluster: RealCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    cp = real_cluster.cp
    assert cp is not None
    work = tmp_path_factory.mktemp("external")
    with ZooKeeperServer(host=NODE_IP, data_dir=str(work / "zk")) as zk:
        volumes = {f"e2e-ext-hub-{i}": work / "volumes" / f"hub-{i}" for i in range(HUBS)}
        prepare_bed(cp, NS, STORAGE_CLASS, volumes)
        args = chart_sets(
            zk.address,
            STORAGE_CLASS,
            **{
                "hubPool.replicas": str(HUBS),
                "hubPool.external.type": "NodePort",
                "hubPool.external.nodePortBase": str(NODE_PORT_BASE),
                "hubPool.external.advertisedHost": NODE_IP,
            },
        )
        cp.helm("install", POOL, str(CHART), "--namespace", NS, *args, "--wait", "--timeout=180s")
        try:
            yield Pool(cp, zk.address, work)
        finally:
            # Not waited for: the hubs drain as they stop, and nothing later needs them gone.
            cp.helm("uninstall", POOL, "--namespace", NS, check=False)
            cp.kubectl("delete", "namespace", NS, "--wait=false", check=False)
            for i in range(HUBS):
                cp.kubectl("delete", "pv", f"e2e-ext-hub-{i}", "--wait=false", check=False)


def _refused(cp: cluster.ControlPlane, work: Path, external: dict[str, Any], **spec: Any) -> str:
    """What the API server answers a HubPool with ``external`` (a dry run)."""
    body = {
        "apiVersion": "hedwig.io/v1alpha1",
        "kind": "HubPool",
        "metadata": {"name": "refused", "namespace": NS},
        "spec": {"image": "x", "metadata": {"url": "zk:2181"}, "external": external, **spec},
    }
    path = work / "refused.json"
    path.write_text(json.dumps(body))
    got = cp.kubectl("apply", "--dry-run=server", "-f", str(path), check=False)
    assert got.returncode != 0, got.stdout
    return got.stderr


def _outside_user(pool: Pool) -> ClientSecurity:
    """A ``tls`` HedwigUser allowed everything on every topic (moves need admin), as files."""
    ops = ["create", "publish", "subscribe", "read", "describe", "admin"]
    pool.cp.apply(
        {
            "apiVersion": "hedwig.io/v1alpha1",
            "kind": "HedwigUser",
            "metadata": {"name": "outside", "namespace": NS},
            "spec": {
                "pool": POOL,
                "authentication": {"type": "tls"},
                "authorization": {
                    "acls": [{"resource": {"name": "", "patternType": "prefix"}, "operations": ops}]
                },
            },
        }
    )

    def issued() -> dict[str, Any] | None:
        got = pool.cp.kubectl(
            "get", "secret", "outside-user-tls", "-n", NS, "-o", "json", check=False
        )
        return json.loads(got.stdout) if got.returncode == 0 else None

    secret = wait_for("the outside user's certificate", issued, 60)
    d = pool.work / "outside"
    d.mkdir(exist_ok=True)
    for key, value in secret["data"].items():
        (d / key).write_bytes(base64.b64decode(value))
    return ClientSecurity.build(
        tls_ca=str(d / "ca.crt"), cert=str(d / "tls.crt"), key=str(d / "tls.key")
    )


async def _until(what: str, check: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.2)


def test_an_outside_client_goes_through_a_move_and_a_pod_deletion_losing_nothing(
    pool: Pool,
) -> None:
    cp = pool.cp
    # Invalid external access is refused by the CRD, saying what to give.
    assert "needs external.nodePortBase" in _refused(cp, pool.work, {"type": "NodePort"})
    secured = _refused(
        cp, pool.work, {"type": "NodePort", "nodePortBase": 31900}, security={"enabled": True}
    )
    assert "needs external.advertisedHost" in secured
    assert "Unsupported value" in _refused(cp, pool.work, {"type": "Ingress"})

    # Every hub published its external address; status.external lists them.
    wait_for(
        "status.external naming every hub's NodePort",
        lambda: pool.external_status().get("bootstrap") == ",".join(EXTERNAL),
        90,
        1,
    )
    security = _outside_user(pool)
    ready = wait_for("every hub pod ready", pool.ready_hubs, 120, 1)
    pod_ips = [p["status"]["podIP"] for p in ready]
    topics = [f"ext-{i}" for i in range(6)]
    events: dict[str, Any] = {}

    async def outside_client() -> Any:
        # Outside the pod network: a hub pod's address is not even routed.
        with pytest.raises(OSError, match="unreachable"):
            await asyncio.wait_for(asyncio.open_connection(pod_ips[0], 4080), 5)
        load = Workload([EXTERNAL[0]], topics, rate=100, security=security, retry_deadline_s=120)
        await load.start()
        h = load.history
        await _until("acknowledgements", lambda: h.acked_count >= 100, 60)
        admin = HedwigClient([EXTERNAL[0]], security=security)
        try:
            # A graceful move: the old owner names the new one by its external address.
            before = await asyncio.to_thread(pool.owner_pod, topics[0])
            assert before is not None
            # Named as the region knows its hubs: by their pod names.
            other = next(i for i in range(HUBS) if f"{POOL}-{i}" != before)
            await admin.move_topic(topics[0], f"{POOL}-{other}.{POOL}-headless.{NS}.svc:4080")

            def moved_away() -> str | None:
                now = pool.owner_pod(topics[0])
                return now if now not in (None, before) else None

            moved = await asyncio.to_thread(wait_for, "the move", moved_away, 30, 0.2)
            events["moved"] = (before, moved)
            assert set(admin.router.region_hubs) <= set(EXTERNAL)
        finally:
            await admin.close()
        count = h.acked_count
        await _until("acknowledgements after the move", lambda: h.acked_count >= count + 100, 60)
        # A hub pod deleted at once: its topics fail over, its replacement comes back.
        victim = await asyncio.to_thread(pool.owner_pod, topics[1])
        assert victim is not None
        events["deleted"] = victim
        await asyncio.to_thread(
            cp.kubectl, "delete", "pod", victim, "-n", NS, "--grace-period=0", "--force"
        )
        await asyncio.to_thread(wait_for, "the pool Ready again", pool.ready_hubs, 180, 1)
        count = h.acked_count
        await _until(
            "acknowledgements after the deletion", lambda: h.acked_count >= count + 100, 90
        )
        return await load.finish(timeout=90)

    with Outside(NODE_IP) as outside:
        history = outside.run(outside_client)
    check(history)
    before, moved = events["moved"]
    print(
        f"outside client: {history.acked_count} acknowledged, {topics[0]} moved {before} -> "
        f"{moved}, {events['deleted']} deleted, 0 lost"
    )
