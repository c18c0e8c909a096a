"""The chart on real pods: ``helm install`` with the images ``make images`` built, on the real
node of the test bed (containerd, a kubelet, kube-proxy, CoreDNS; e2e/controlplane/node.py).

ZooKeeper runs on the host at the node's address (the chart's ZooKeeper image cannot be pulled
here); everything else runs in pods: the operator, which turns the HubPool into a StatefulSet of
three hubs, each with a local volume, probes, a preStop drain and the DNS name it advertises.
Messages flow through clients outside the cluster (the host, bootstrapping through the client
Service and resolving the hubs' names through cluster DNS) and inside it (pods running ``hedwig
pub``/``hedwig sub``), and every test where messages flow checks the whole history with the
failure harness (tests/failure/history.py): nothing acknowledged lost, no duplicates,
per-publisher order kept. The tests share one release and run in order: install, rolling update
of the hub image, a forced pod deletion and a killed container, scaling up and down.

Measured figures are printed (``-s``) and collected in ``FIGURES``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.failure.history import History, Workload, check

from controlplane import cluster
from controlplane.node import NODE_IP, NODE_NAME, RealCluster
from hedwig.devcluster.zookeeper import ZooKeeperServer
from hedwig_e2e import topic_owner
from realpods import (
    ROOT,
    ClusterDNSNetwork,
    local_volume,
    pod_ready,
    pods,
    storage_class,
    wait_for,
)

if importlib.util.find_spec("pytest_timeout") is not None:
    pytestmark = pytest.mark.timeout(600)

CHART = ROOT / "charts" / "hedwig"
NS = "hedwig-real"
POOL = "hedwig"
HUB_SELECTOR = f"app.kubernetes.io/name=hedwig-hub,app.kubernetes.io/instance={POOL}"
STORAGE_CLASS = "e2e-local"
HUB_IMAGE = "hedwig-hub:0.1.0"
FIGURES: dict[str, float] = {}


@dataclass
class Release:
    rc: RealCluster
    cp: cluster.ControlPlane
    zk: str
    volumes: Path

    def hub_pods(self) -> list[dict[str, Any]]:
        return pods(self.cp, NS, HUB_SELECTOR)

    def ready_hubs(self, n: int) -> list[dict[str, Any]] | None:
        got = [
            p
            for p in self.hub_pods()
            if pod_ready(p) and not p["metadata"].get("deletionTimestamp")
        ]
        return got if len(got) == n else None

    def hubpool(self) -> dict[str, Any]:
        return self.cp.kubectl_json("get", "hubpool", POOL, "-n", NS)  # type: ignore[no-any-return]

    def network(self) -> ClusterDNSNetwork:
        return ClusterDNSNetwork((NODE_IP, self.rc.dns_port))

    def bootstrap(self) -> list[str]:
        """The client Service, as a client outside the cluster names it."""
        return [f"{POOL}.{NS}.svc:4080"]


@pytest.fixture(scope="module")
def release(
    real_cluster: RealCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Release]:
    cp = real_cluster.cp
    assert cp is not None
    work = tmp_path_factory.mktemp("realpods")
    with ZooKeeperServer(host=NODE_IP, data_dir=str(work / "zk")) as zk:
        cp.create_namespace(NS)
        cp.apply(storage_class(STORAGE_CLASS))
        volumes = work / "volumes"
        for i in range(5):
            # The hubs run as uid 10001 with fsGroup 10001; a local volume keeps its owner.
            cp.apply(
                local_volume(f"e2e-hub-{i}", volumes / f"hub-{i}", "1Gi", STORAGE_CLASS, NODE_NAME)
            )
        yield Release(real_cluster, cp, zk.address, volumes)
        cp.kubectl("delete", "namespace", NS, "--wait=false", check=False)


def _helm_install(rel: Release) -> str:
    return rel.cp.helm(
        "install",
        "hedwig",
        str(CHART),
        "--namespace",
        NS,
        "--set",
        "zookeeper.enabled=false",
        "--set",
        f"zookeeper.external.connect={rel.zk}",
        "--set",
        "hubPool.replicas=3",
        "--set",
        f"hubPool.storage.storageClassName={STORAGE_CLASS}",
        "--set",
        "hubPool.storage.size=1Gi",
        "--set",
        "hubPool.zookeeper.sessionTimeoutSeconds=4",
        "--set",
        "hubPool.terminationGracePeriodSeconds=40",
        "--set",
        "hubPool.preStopSleepSeconds=1",
        "--set",
        "operator.settings.statusIntervalSeconds=2",
        "--set",
        "operator.settings.retryDelaySeconds=2",
        "--wait",
        "--timeout=180s",
    ).stdout


def _run_workload(rel: Release, topics: list[str], action: Any, rate: float = 100.0) -> History:
    """The failure harness's workload from outside the cluster around ``action()``."""

    async def go() -> History:
        load = Workload(
            rel.bootstrap(), topics, rate=rate, network=rel.network(), retry_deadline_s=120
        )
        await load.start()
        await asyncio.sleep(3)
        await asyncio.to_thread(action)
        await asyncio.sleep(3)
        return await load.finish(timeout=90)

    history = asyncio.run(go())
    check(history)
    return history


def _longest_pause(history: History) -> float:
    times = sorted(history.ack_times)
    return max((b - a for a, b in itertools.pairwise(times)), default=0.0)


def _client_pod(name: str, command: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
            "containers": [
                {
                    "name": "client",
                    "image": HUB_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", command],
                    "securityContext": {
                        "readOnlyRootFilesystem": True,
                        "allowPrivilegeEscalation": False,
                    },
                }
            ],
        },
    }


def _pod_phase(cp: cluster.ControlPlane, name: str) -> str:
    got = cp.kubectl("get", "pod", name, "-n", NS, "-o", "jsonpath={.status.phase}", check=False)
    return got.stdout.strip()


def test_helm_install_runs_the_operator_and_ready_hubs_on_real_pods(release: Release) -> None:
    rel, cp = release, release.cp
    started = time.monotonic()
    notes = _helm_install(rel)
    assert f"hedwig sub --hub hedwig.{NS}.svc:4080 greetings reader" in notes
    operator = pods(cp, NS, "app.kubernetes.io/component=operator")
    assert len(operator) == 1
    assert pod_ready(operator[0])
    assert operator[0]["spec"]["nodeName"] == NODE_NAME

    hubs = wait_for("three hub pods Ready through their probes", lambda: rel.ready_hubs(3), 240, 1)
    FIGURES["install_to_hubs_ready_s"] = time.monotonic() - started
    print(f"helm install to 3 hubs Ready: {FIGURES['install_to_hubs_ready_s']:.1f}s")
    for hub in hubs:
        assert hub["spec"]["nodeName"] == NODE_NAME
        assert hub["status"]["podIP"].startswith("10.245.0.")
        spec = hub["spec"]["containers"][0]
        assert spec["securityContext"]["readOnlyRootFilesystem"] is True
        assert "preStop" in spec["lifecycle"]
    claims = cp.kubectl_json("get", "pvc", "-n", NS)["items"]
    assert sorted(c["status"]["phase"] for c in claims) == ["Bound"] * 3

    def pool_ready() -> dict[str, Any] | None:
        status = rel.hubpool().get("status") or {}
        ready = [c for c in status.get("conditions", []) if c["type"] == "Ready"]
        ok = status.get("readyHubs") == 3 and status.get("aliveHubs") == 3
        return status if ok and ready and ready[0]["status"] == "True" else None

    status = wait_for("the HubPool Ready with 3 alive hubs", pool_ready, 120)
    advertised = {h["address"] for h in status["hubs"]}
    assert advertised == {f"{POOL}-{i}.{POOL}-headless.{NS}.svc:4080" for i in range(3)}

    # A Topic applied with kubectl gets an owner among the hubs.
    cp.apply(
        {
            "apiVersion": "hedwig.io/v1alpha1",
            "kind": "Topic",
            "metadata": {"name": "greetings", "namespace": NS},
            "spec": {"pool": POOL},
        }
    )
    owner = wait_for(
        "Topic greetings owned",
        lambda: (cp.kubectl_json("get", "topic", "greetings", "-n", NS).get("status") or {}).get(
            "owner"
        ),
        90,
    )
    assert owner in advertised
    info = topic_owner(rel.zk, POOL, "greetings")
    assert info is not None
    assert info.address == owner

    # A client pod inside the cluster subscribes, another publishes, while clients outside
    # publish and subscribe: everyone sees every acknowledged message.
    inside = 40
    cp.apply(
        _client_pod(
            "inside-sub",
            f"exec hedwig sub --hub {POOL}:4080 --mode create-or-attach --timeout 60 "
            f"--count 1000000 greetings inside-reader",
        )
    )
    wait_for("the inside subscriber running", lambda: _pod_phase(cp, "inside-sub") == "Running", 90)
    time.sleep(3)  # its subscription is made before anything is published

    def publish_inside() -> None:
        cp.apply(
            _client_pod(
                "inside-pub",
                f"seq 1 {inside} | sed 's/^/pubpod:/' "
                f"| exec hedwig pub --hub {POOL}:4080 greetings",
            )
        )
        wait_for(
            "the inside publisher done", lambda: _pod_phase(cp, "inside-pub") == "Succeeded", 120
        )

    history = _run_workload(rel, ["greetings", "weather"], publish_inside, rate=60)
    pub_log = cp.kubectl("logs", "inside-pub", "-n", NS).stdout.splitlines()
    assert len(pub_log) == inside, pub_log[-5:]
    log_values = {v for _, v in history.log["greetings"]}
    assert {f"pubpod:{i}".encode() for i in range(1, inside + 1)} <= log_values

    def inside_got_everything() -> bool:
        lines = cp.kubectl("logs", "inside-sub", "-n", NS).stdout.splitlines()
        return {line.split("\t", 1)[1].encode() for line in lines if "\t" in line} >= log_values

    wait_for("the inside subscriber to receive the whole log", inside_got_everything, 60)
    print(f"outside: {history.acked_count} acknowledged, inside: {inside} published")
    cp.kubectl("delete", "pod", "inside-sub", "inside-pub", "-n", NS, "--wait=false")
