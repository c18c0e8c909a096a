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
of the hub image, a forced pod deletion and a killed container, scaling up and down by
hand, then by the pool's autoscaler (``spec.autoscaling``) under a load step.

Measured figures are printed (``-s``) and collected in ``FIGURES``.
"""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.failure.history import History, Workload, check, read_all

import render
import scrape
from controlplane import cluster
from controlplane.node import NODE_IP, NODE_NAME, RealCluster
from hedwig.client import HedwigClient, SyncClient
from hedwig.devcluster.zookeeper import ZooKeeperServer, free_port
from hedwig.errors import AuthenticationError
from hedwig.security import ClientSecurity
from hedwig_e2e import topic_owner, wait_for
from notes_commands import run_notes
from notes_commands import values as notes_values
from realpods import (
    ROOT,
    ClusterDNSNetwork,
    built_images,
    chart_sets,
    pod_ready,
    pods,
    prepare_bed,
)
from traffic.grid import Grid
from traffic.positions import Position

if importlib.util.find_spec("pytest_timeout") is not None:
    pytestmark = pytest.mark.timeout(600)

CHART = ROOT / "charts" / "hedwig"
NS = "hedwig-real"
POOL = "hedwig"
HUB_SELECTOR = f"app.kubernetes.io/name=hedwig-hub,app.kubernetes.io/instance={POOL}"
STORAGE_CLASS = "e2e-local"
HUB_IMAGE = "hedwig-hub:0.1.0"
GREETER = "greeter"
FIGURES: dict[str, float] = {}


@dataclass
class Release:
    rc: RealCluster
    cp: cluster.ControlPlane
    zk: str
    volumes: Path
    # The identity of the clients outside the cluster: a ``tls`` HedwigUser allowed every
    # topic (the chart secures the pool by default), set once the operator has issued it.
    security: ClientSecurity | None = None

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

    def network(self, security: ClientSecurity | None = None) -> ClusterDNSNetwork:
        return ClusterDNSNetwork((NODE_IP, self.rc.dns_port), security or self.security)

    def user_files(self, name: str) -> Path:
        """The Secret the operator issued a ``tls`` HedwigUser (``ca.crt``, ``tls.crt``,
        ``tls.key``), written to files for a client outside the cluster."""
        wait_for(f"HedwigUser {name} Ready", lambda: _user_ready(self.cp, name), 60)
        secret = self.cp.kubectl_json("get", "secret", f"{name}-user-tls", "-n", NS)
        d = self.volumes.parent / "users" / name
        d.mkdir(parents=True, exist_ok=True)
        for key, value in secret["data"].items():
            (d / key).write_bytes(base64.b64decode(value))
        return d

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
        volumes = work / "volumes"
        prepare_bed(cp, NS, STORAGE_CLASS, {f"e2e-hub-{i}": volumes / f"hub-{i}" for i in range(5)})
        yield Release(real_cluster, cp, zk.address, volumes)
        cp.kubectl("delete", "namespace", NS, "--wait=false", check=False)


def _helm_install(rel: Release) -> str:
    args = chart_sets(rel.zk, STORAGE_CLASS)
    return rel.cp.helm(
        "install", "hedwig", str(CHART), "--namespace", NS, *args, "--wait", "--timeout=180s"
    ).stdout


def _run_workload(rel: Release, topics: list[str], action: Any, rate: float = 100.0) -> History:
    """The failure harness's workload from outside the cluster around ``action()``."""

    async def go() -> History:
        load = Workload(
            rel.bootstrap(),
            topics,
            rate=rate,
            network=rel.network(),
            security=rel.security,
            retry_deadline_s=120,
        )
        await load.start()
        await asyncio.sleep(3)  # the test: load before the action
        await asyncio.to_thread(action)
        await asyncio.sleep(3)  # and after it
        return await load.finish(timeout=90)

    history = asyncio.run(go())
    _check(history)
    return history


def _check(history: History) -> None:
    """The failure harness's history check, every property enforced: nothing acknowledged
    lost, no duplicates, per-publisher order, and every subscriber receiving every topic's
    whole log. (A subscriber that stopped receiving a topic after a hub pod was force-deleted
    or killed was once reported here as an expected failure: when the pod came back, the hubs'
    self-balancing handed topics to it, and a subscriber that was not also publishing on its
    connection was never told the topic moved. Fixed in the hub; docs/deploying.md.)"""
    check(history)


def _longest_pause(history: History) -> float:
    """The longest time any one topic went without an acknowledged publish."""
    return max(
        (
            b - a
            for times in history.topic_ack_times.values()
            for a, b in itertools.pairwise(sorted(times))
        ),
        default=0.0,
    )


def _client_pod(name: str, command: str) -> dict[str, Any]:
    """A pod running ``hedwig`` from the hub image as the ServiceAccount ``greeter``: its
    projected token (audience ``hedwig``) is found where the client looks by default, and it
    trusts the pool's CA from the ConfigMap the operator publishes (docs/security.md)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "serviceAccountName": GREETER,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "fsGroup": 10001},
            "containers": [
                {
                    "name": "client",
                    "image": HUB_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", command],
                    "env": [{"name": "HEDWIG_TLS_CA", "value": "/etc/hedwig-ca/ca.crt"}],
                    "securityContext": {
                        "readOnlyRootFilesystem": True,
                        "allowPrivilegeEscalation": False,
                    },
                    "volumeMounts": [
                        {"name": "token", "mountPath": "/var/run/secrets/hedwig", "readOnly": True},
                        {"name": "ca", "mountPath": "/etc/hedwig-ca", "readOnly": True},
                    ],
                }
            ],
            "volumes": [
                {
                    "name": "token",
                    "projected": {
                        "sources": [
                            {
                                "serviceAccountToken": {
                                    "audience": "hedwig",
                                    "expirationSeconds": 3600,
                                    "path": "token",
                                }
                            }
                        ]
                    },
                },
                {"name": "ca", "configMap": {"name": f"{POOL}-ca-cert"}},
            ],
        },
    }


def _hedwig_user(
    name: str, authentication: dict[str, Any], acls: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "apiVersion": "hedwig.io/v1alpha1",
        "kind": "HedwigUser",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"pool": POOL, "authentication": authentication, "authorization": {"acls": acls}},
    }


def _user_ready(cp: cluster.ControlPlane, name: str) -> bool:
    got = cp.kubectl("get", "hedwiguser", name, "-n", NS, "-o", "json", check=False)
    if got.returncode != 0:
        return False
    conditions = (json.loads(got.stdout).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _topics(prefix: str, operations: list[str], pattern: str = "prefix") -> list[dict[str, Any]]:
    return [{"resource": {"name": prefix, "patternType": pattern}, "operations": operations}]


def _secure_clients(rel: Release) -> None:
    """The pool is secured (the chart's default): a client with no identity, or without TLS,
    is refused. The clients outside get a ``tls`` HedwigUser allowed every topic; the client
    pods run as the ServiceAccount ``greeter``, whose HedwigUser allows ``greetings`` only."""
    cp = rel.cp
    ca_pem = cp.kubectl_json("get", "configmap", f"{POOL}-ca-cert", "-n", NS)["data"]["ca.crt"]
    ca = rel.volumes.parent / "pool-ca.crt"
    ca.write_text(ca_pem)
    for security, refusal in (
        (None, "TLS connections only"),
        (ClientSecurity.build(tls_ca=str(ca)), "needs an identity"),
    ):
        anonymous = SyncClient(rel.bootstrap(), network=rel.network(security), security=security)
        try:
            with pytest.raises(AuthenticationError, match=refusal):
                anonymous.publish("greetings", b"anonymous")
        finally:
            anonymous.close()

    every_topic = ["create", "publish", "subscribe", "read", "describe"]
    cp.apply(_hedwig_user("outside", {"type": "tls"}, _topics("", every_topic)))
    cp.kubectl("create", "serviceaccount", GREETER, "-n", NS)
    cp.apply(
        _hedwig_user(
            GREETER,
            {"type": "serviceAccount", "serviceAccount": GREETER},
            _topics("greetings", ["create", "publish", "subscribe"], "literal"),
        )
    )
    wait_for(f"HedwigUser {GREETER} Ready", lambda: _user_ready(cp, GREETER), 60)
    d = rel.user_files("outside")
    rel.security = ClientSecurity.build(
        tls_ca=str(d / "ca.crt"), cert=str(d / "tls.crt"), key=str(d / "tls.key")
    )


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
    _secure_clients(rel)

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

    # The same ServiceAccount is refused a topic its HedwigUser does not name.
    cp.apply(_client_pod("inside-denied", f"echo no | exec hedwig pub --hub {POOL}:4080 weather"))
    wait_for("the refused publisher done", lambda: _pod_phase(cp, "inside-denied") == "Failed", 90)
    refused = cp.kubectl("logs", "inside-denied", "-n", NS).stdout
    assert f"system:serviceaccount:{NS}:{GREETER} may not publish" in refused, refused
    cp.kubectl(
        "delete", "pod", "inside-sub", "inside-pub", "inside-denied", "-n", NS, "--wait=false"
    )


def test_the_notes_publish_and_subscribe_as_pasted(release: Release) -> None:
    """The NOTES' step 2, pasted into two terminals: ``kubectl run`` pods that are the
    HedwigUser greeter (its projected token, the pool's CA, through --overrides) subscribe
    and publish on the secured pool."""
    cp = release.cp
    notes = cp.helm("get", "notes", "hedwig", "--namespace", NS).stdout
    try:
        sub, pub = run_notes(
            notes, cp.env(), lambda: _pod_phase(cp, "hedwig-sub") == "Running", 180
        )
        assert pub.returncode == 0, pub.stdout + pub.stderr
        assert notes_values(pub.stdout) == ["hello", "world"], pub.stdout + pub.stderr
        assert sub.returncode == 0, sub.stdout + sub.stderr
        assert notes_values(sub.stdout) == ["hello", "world"], sub.stdout + sub.stderr
    finally:
        cp.kubectl(
            "delete",
            "pod",
            "hedwig-sub",
            "hedwig-pub",
            "-n",
            NS,
            "--ignore-not-found",
            "--wait=false",
        )


def topics(test: str) -> list[str]:
    """Fresh topics for each test: the history check reads every topic's whole log, and the
    hubs' deduplication remembers each publisher's messages per topic."""
    return [f"{test}-{i}" for i in range(6)]


def _statefulset(rel: Release) -> dict[str, Any]:
    return rel.cp.kubectl_json("get", "statefulset", POOL, "-n", NS)  # type: ignore[no-any-return]


def _rolled_out(rel: Release, image: str, replicas: int) -> bool:
    sts = _statefulset(rel)
    status = sts.get("status", {})
    hubs = rel.ready_hubs(replicas)
    return bool(
        status.get("observedGeneration", 0) >= sts["metadata"]["generation"]
        and status.get("updateRevision") == status.get("currentRevision")
        and status.get("updatedReplicas") == replicas
        and hubs
        and all(p["spec"]["containers"][0]["image"] == image for p in hubs)
    )


def test_rolling_update_of_the_hub_image_under_load_loses_nothing(release: Release) -> None:
    rel, cp = release, release.cp
    rolled = "hedwig-hub:0.1.0-rolled"
    rel.rc.tag_image(HUB_IMAGE, rolled)
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in rel.hub_pods()}

    def upgrade() -> None:
        started = time.monotonic()
        cp.helm(
            "upgrade",
            "hedwig",
            str(CHART),
            "--namespace",
            NS,
            "--reuse-values",
            "--set",
            "hub.image.tag=0.1.0-rolled",
            "--wait",
            "--timeout=300s",
        )
        wait_for("the hubs rolled to the new image", lambda: _rolled_out(rel, rolled, 3), 420, 1)
        FIGURES["rolling_update_s"] = time.monotonic() - started

    history = _run_workload(rel, topics("rolling"), upgrade, rate=100)
    after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in rel.hub_pods()}
    assert set(after) == set(before)
    assert not set(after.values()) & set(before.values()), "every hub pod was replaced"
    # Every stopping hub's preStop (sleep, then `hedwig drain`, which returns once the hub has
    # handed its topics over) ran and succeeded: the kubelet reports a failed hook as an event.
    failed = cp.kubectl_json("get", "events", "-n", NS, "--field-selector=reason=FailedPreStopHook")
    assert failed["items"] == [], [e["message"] for e in failed["items"]]
    FIGURES["rolling_update_longest_pause_s"] = _longest_pause(history)
    FIGURES["rolling_update_acknowledged"] = history.acked_count
    print(
        f"rolling update of 3 hubs: {FIGURES['rolling_update_s']:.1f}s, "
        f"{history.acked_count} acknowledged, 0 lost, {history.failed} failed publishes, "
        f"longest publish pause {FIGURES['rolling_update_longest_pause_s']:.2f}s"
    )
    assert history.acked_count > 0


def _owner_pod(rel: Release, topic: str) -> str:
    info = topic_owner(rel.zk, POOL, topic)
    assert info is not None, f"{topic} has no owner"
    return info.address.split(".")[0]


def test_forced_pod_deletion_fails_over_and_loses_nothing(release: Release) -> None:
    rel, cp = release, release.cp
    names = topics("forced")
    deleted: list[tuple[str, float]] = []

    def force_delete() -> None:
        victim = _owner_pod(rel, names[0])
        deleted.append((victim, time.monotonic()))
        cp.kubectl("delete", "pod", victim, "-n", NS, "--grace-period=0", "--force")
        wait_for("the pool Ready again", lambda: rel.ready_hubs(3), 180, 1)

    history = _run_workload(rel, names, force_delete, rate=100)
    victim, at = deleted[0]
    after = sorted(t for t in history.ack_times if t > at)
    assert after, "nothing was acknowledged after the deletion"
    # Failover: the longest time publishes waited (the deleted hub's topics are claimed
    # again once its ZooKeeper session expires, or its replacement comes back).
    FIGURES["forced_deletion_failover_s"] = _longest_pause(history)
    print(
        f"forced deletion of {victim}: longest publish pause "
        f"{FIGURES['forced_deletion_failover_s']:.2f}s, {history.acked_count} acknowledged, "
        f"{len(after)} after the deletion, 0 lost"
    )


def test_killed_hub_container_fails_over_and_loses_nothing(release: Release) -> None:
    rel = release
    names = topics("killed")
    victims: list[str] = []

    def kill_container() -> None:
        victim = _owner_pod(rel, names[0])
        victims.append(victim)
        pod = rel.cp.kubectl_json("get", "pod", victim, "-n", NS)
        status = pod["status"]["containerStatuses"][0]
        restarts = status["restartCount"]
        container_id = status["containerID"].removeprefix("containerd://")
        proc = rel.rc.ctr("tasks", "kill", "--signal", "SIGKILL", container_id)
        assert proc.returncode == 0, proc.stderr

        def restarted() -> bool:
            got = rel.cp.kubectl_json("get", "pod", victim, "-n", NS)
            return bool(
                got["status"]["containerStatuses"][0]["restartCount"] > restarts and pod_ready(got)
            )

        wait_for(f"{victim}'s hub restarted by the kubelet and Ready", restarted, 180, 1)

    history = _run_workload(rel, names, kill_container, rate=100)
    FIGURES["container_kill_longest_pause_s"] = _longest_pause(history)
    print(
        f"SIGKILL of {victims[0]}'s container: longest publish pause "
        f"{FIGURES['container_kill_longest_pause_s']:.2f}s, {history.acked_count} acknowledged, "
        "0 lost"
    )


def _claim(rel: Release, ordinal: int) -> dict[str, Any] | None:
    got = rel.cp.kubectl(
        "get", "pvc", f"data-{POOL}-{ordinal}", "-n", NS, "-o", "json", check=False
    )
    return json.loads(got.stdout) if got.returncode == 0 else None


def test_scaling_up_and_down_keeps_volumes_as_the_retention_policy_says(release: Release) -> None:
    """3 -> 4 hubs, then back to 3 under load (never fewer hubs than the 3/3/2 ensemble): the
    removed hub drains, and its claim stays (whenScaled: Retain) for when the pool grows."""
    rel, cp = release, release.cp
    assert rel.hubpool()["spec"]["storage"]["whenScaled"] == "Retain"

    cp.kubectl("scale", "hubpool", POOL, "-n", NS, "--replicas=4")
    wait_for("four hubs Ready", lambda: rel.ready_hubs(4), 240, 1)
    volume_of_3 = (_claim(rel, 3) or {})["spec"]["volumeName"]

    def scale_down() -> None:
        cp.kubectl("scale", "hubpool", POOL, "-n", NS, "--replicas=3")
        wait_for("three hubs left", lambda: len(rel.hub_pods()) == 3 and rel.ready_hubs(3), 240, 1)

    history = _run_workload(rel, topics("scaled"), scale_down, rate=100)
    print(f"scaled 4 -> 3 under load: {history.acked_count} acknowledged, 0 lost")
    claim = _claim(rel, 3)
    assert claim is not None, f"data-{POOL}-3 was deleted"
    assert claim["status"]["phase"] == "Bound"

    cp.kubectl("scale", "hubpool", POOL, "-n", NS, "--replicas=4")
    hubs = wait_for("four hubs Ready again", lambda: rel.ready_hubs(4), 240, 1)
    assert f"{POOL}-3" in {p["metadata"]["name"] for p in hubs}
    assert (_claim(rel, 3) or {})["spec"]["volumeName"] == volume_of_3, "hub 3 got its volume back"
    cp.kubectl("scale", "hubpool", POOL, "-n", NS, "--replicas=3")
    wait_for("three hubs again", lambda: len(rel.hub_pods()) == 3 and rel.ready_hubs(3), 240, 1)


# The autoscaler's test settings: a hub carries 150 msg/s (in plus out), so three hubs' target
# (60 %) is 270 msg/s. The checked workload alone (60 in, 120 out) stays under the line for one
# hub fewer (230); the step (300 in more) needs more hubs than the maximum of four.
AUTOSCALED = {
    "autoscaling": {
        "enabled": True,
        "minReplicas": 3,
        "maxReplicas": 4,
        "scaleOutWindowSeconds": 20,
        "scaleInWindowSeconds": 30,
        "cooldownSeconds": 20,
        "reconfigurationSeconds": 10,
    },
    # The fan-out policy stays out of it: its plan changes would make hubs busy.
    "rebalancing": {
        "intervalSeconds": 5,
        "hubCapacity": 150,
        "maxMovesPerCycle": 4,
        "fanOut": {"enabled": False},
    },
}


def _autoscaling(rel: Release) -> dict[str, Any]:
    return (rel.hubpool().get("status") or {}).get("autoscaling") or {}


def _last_change(autoscaling: dict[str, Any]) -> str:
    return str((autoscaling.get("lastChange") or {}).get("action", ""))


def _scale_events(rel: Release) -> list[tuple[str, str]]:
    got = rel.cp.kubectl_json(
        "get", "events", "-n", NS, "--field-selector", f"involvedObject.name={POOL}"
    )
    items = sorted(got["items"], key=lambda e: e.get("lastTimestamp") or "")
    wanted = ("ScalingOut", "ScaleCompleted", "DrainStarted", "DrainCancelled", "ScalingIn")
    return [(e["reason"], e["message"]) for e in items if e["reason"] in wanted]


def _pause_within(history: History, start: float, end: float) -> float:
    """The longest time a topic went without an acknowledged publish, of the gaps that
    overlap ``[start, end]``."""
    return max(
        (
            b - a
            for times in history.topic_ack_times.values()
            for a, b in itertools.pairwise(sorted(times))
            if b >= start and a <= end
        ),
        default=0.0,
    )


def test_autoscaling_scales_a_load_step_out_and_back_in_losing_nothing(release: Release) -> None:
    """spec.autoscaling on the secured pool: a load step makes the operator add a hub (its
    load above the target for the window), the end of the step makes it drain the new hub
    (hand-offs to named hubs) and remove it, with the checked workload running throughout:
    nothing acknowledged lost, and the longest publish pause of the scale-in measured."""
    rel, cp = release, release.cp
    assert rel.hubpool()["spec"]["replicas"] == 3
    patch = json.dumps({"spec": AUTOSCALED})
    cp.kubectl("patch", "hubpool", POOL, "-n", NS, "--type=merge", "-p", patch)
    marks: dict[str, float] = {}

    def wait_state(what: str, ok: Callable[[dict[str, Any]], bool], timeout: float) -> None:
        wait_for(what, lambda: ok(_autoscaling(rel)), timeout, 1)

    async def go() -> tuple[History, History]:
        checked = Workload(
            rel.bootstrap(),
            topics("autoscaled"),
            rate=20,
            network=rel.network(),
            security=rel.security,
            retry_deadline_s=120,
        )
        step = Workload(
            rel.bootstrap(),
            topics("step"),
            publishers=2,
            subscribers=0,
            rate=150,
            network=rel.network(),
            security=rel.security,
            retry_deadline_s=120,
        )
        await checked.start()
        await asyncio.sleep(3)
        started = time.monotonic()
        await step.start()
        await asyncio.to_thread(
            wait_state, "the operator scaling out", lambda a: a.get("desiredReplicas") == 4, 240
        )
        marks["scale_out_decided_s"] = time.monotonic() - started
        await asyncio.to_thread(wait_for, "four hubs Ready", lambda: rel.ready_hubs(4), 240, 1)
        await asyncio.to_thread(
            wait_state, "the scale-out complete", lambda a: _last_change(a) == "ScaleCompleted", 120
        )
        marks["scale_out_complete_s"] = time.monotonic() - started
        step_history = await step.finish(timeout=90)
        ended = time.monotonic()
        await asyncio.to_thread(
            wait_state,
            "a hub draining",
            lambda a: _last_change(a) in ("DrainStarted", "ScalingIn"),
            240,
        )
        marks["drain_start"] = time.monotonic()
        marks["drain_after_step_s"] = marks["drain_start"] - ended
        await asyncio.to_thread(
            wait_for,
            "the drained hub removed",
            lambda: len(rel.hub_pods()) == 3 and rel.ready_hubs(3),
            240,
            1,
        )
        await asyncio.to_thread(
            wait_state,
            "the scale-in complete",
            lambda a: a.get("state") == "steady" and a.get("desiredReplicas") == 3,
            120,
        )
        marks["scale_in_end"] = time.monotonic()
        await asyncio.sleep(3)
        return await checked.finish(timeout=90), step_history

    try:
        history, step_history = asyncio.run(go())
    finally:
        off = {"autoscaling": {"enabled": False}, "rebalancing": None}
        cp.kubectl(
            "patch", "hubpool", POOL, "-n", NS, "--type=merge", "-p", json.dumps({"spec": off})
        )
    _check(history)
    _check(step_history)
    assert rel.hubpool()["spec"]["replicas"] == 3
    reasons = [r for r, _ in _scale_events(rel)]
    assert reasons == [
        "ScalingOut",
        "ScaleCompleted",
        "DrainStarted",
        "ScalingIn",
        "ScaleCompleted",
    ]
    why = dict(_scale_events(rel)[:3])
    assert "for 20 s" in why["ScalingOut"]
    assert "scaling out to 4 hubs" in why["ScalingOut"]
    assert f"draining {POOL}-3.{POOL}-headless.{NS}.svc:4080" in why["DrainStarted"]
    pause = _pause_within(history, marks["drain_start"] - 5, marks["scale_in_end"])
    FIGURES["autoscale_out_decided_s"] = marks["scale_out_decided_s"]
    FIGURES["autoscale_out_complete_s"] = marks["scale_out_complete_s"]
    FIGURES["autoscale_drain_after_step_s"] = marks["drain_after_step_s"]
    FIGURES["autoscale_in_longest_pause_s"] = pause
    print(
        f"autoscaled 3 -> 4 -> 3: out decided {marks['scale_out_decided_s']:.0f} s after the "
        f"step, complete at {marks['scale_out_complete_s']:.0f} s; drain "
        f"{marks['drain_after_step_s']:.0f} s after it ended; {history.acked_count} + "
        f"{step_history.acked_count} acknowledged, 0 lost; longest publish pause of the "
        f"scale-in {pause * 1000:.0f} ms"
    )
    assert pause < 1.0, f"a publish paused {pause:.2f} s during the scale-in"


BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z, a multiple of every window size used


def _script(grid: Grid) -> list[Position]:
    """Three vehicles in three cells of two quadrants (tests/spark/test_heatmap.py's script)."""
    w = grid.cell_w
    return [
        Position("car-a", 0.2 * w, 0.5 * w, 30.0, BASE_MS + 1000),
        Position("car-a", 0.5 * w, 0.5 * w, 40.0, BASE_MS + 2000),
        Position("car-a", 0.8 * w, 0.5 * w, 50.0, BASE_MS + 3000),
        Position("car-b", 5.5 * w, 3.5 * w, 20.0, BASE_MS + 1000),
        Position("car-c", 5.6 * w, 3.4 * w, 60.0, BASE_MS + 2000),
        Position("car-c", 9.5 * w, 1.5 * w, 45.0, BASE_MS + 5000),
    ]


def _spark_manifests(data_dir: Path) -> list[dict[str, Any]]:
    """spark-apps/k8s/rbac.yaml in the test's namespace, and a volume for its claim."""
    docs = [
        d for d in yaml.safe_load_all((ROOT / "spark-apps" / "k8s" / "rbac.yaml").read_text()) if d
    ]
    for doc in docs:
        doc["metadata"]["namespace"] = NS
        for subject in doc.get("subjects", []):
            subject["namespace"] = NS
    data_dir.mkdir(parents=True, exist_ok=True)
    data_dir.chmod(0o777)  # the driver and executors run as Spark's uid 185
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "e2e-spark-data"},
        "spec": {
            "capacity": {"storage": "10Gi"},
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": str(data_dir), "type": "Directory"},
        },
    }
    return [volume, *docs]


def test_spark_heatmap_job_runs_on_kubernetes_driver_and_executor_pods(release: Release) -> None:
    rel, cp = release, release.cp
    (spark_image,) = built_images("spark").values()
    started = time.monotonic()
    rel.rc.load_image(spark_image)
    FIGURES["spark_image_import_s"] = time.monotonic() - started
    cp.apply(_spark_manifests(rel.volumes.parent / "spark-data"))
    wait_for(
        "the Spark data claim Bound",
        lambda: (
            cp.kubectl_json("get", "pvc", "hedwig-spark-data", "-n", NS)["status"].get("phase")
            == "Bound"
        ),
        60,
    )
    # spark-submit authenticates with a token of its own ServiceAccount, allowed what the
    # driver's is (rbac.yaml) in this namespace.
    cp.kubectl("create", "serviceaccount", "spark-submitter", "-n", NS)
    cp.kubectl(
        "create",
        "rolebinding",
        "spark-submitter",
        "-n",
        NS,
        "--role=spark-driver",
        f"--serviceaccount={NS}:spark-submitter",
    )
    token = cp.kubectl(
        "create", "token", "spark-submitter", "-n", NS, "--duration=1h"
    ).stdout.strip()

    # The driver and executors reach the secured hubs as a ``tls`` HedwigUser allowed the
    # ``spark.`` topics: its Secret mounted in every pod, named by the HEDWIG_* variables the
    # Hedwig source and sink fall back to (spark-apps/hedwig_spark/options.py).
    every = ["create", "publish", "subscribe", "read", "describe"]
    cp.apply(_hedwig_user("spark-heatmap", {"type": "tls"}, _topics("spark.", every)))
    wait_for("HedwigUser spark-heatmap Ready", lambda: _user_ready(cp, "spark-heatmap"), 60)
    user_dir = "/etc/hedwig-user"
    user_env = {
        "HEDWIG_TLS_CA": f"{user_dir}/ca.crt",
        "HEDWIG_CERT": f"{user_dir}/tls.crt",
        "HEDWIG_KEY": f"{user_dir}/tls.key",
    }

    grid = Grid(topic_prefix="spark.quadrant")
    client = SyncClient(rel.bootstrap(), network=rel.network(), security=rel.security)
    try:
        for p in _script(grid):
            client.publish(grid.topic_at(p.x, p.y), p.to_json(), key=p.vehicle.encode())
        client.publish(grid.topic(1, 1), b"not json")  # ignored, not fatal
    finally:
        client.close()

    conf = {
        "spark.kubernetes.authenticate.submission.caCertFile": str(cp.ca_file),
        "spark.kubernetes.authenticate.submission.oauthToken": token,
        "spark.kubernetes.container.image.pullPolicy": "IfNotPresent",
        "spark.executor.instances": "1",
        "spark.executor.memory": "512m",
        "spark.driver.memory": "512m",
        # Beside the JVM's heap, the pod holds the Python job and the JVM's own memory: with
        # Spark's default overhead (384 MiB) the driver was once OOM-killed at its limit.
        "spark.driver.memoryOverhead": "768m",
        "spark.executor.memoryOverhead": "768m",
        # Two cores for everything on this node: ask for little, use what is free.
        "spark.kubernetes.driver.request.cores": "0.2",
        "spark.kubernetes.executor.request.cores": "0.2",
        "spark.kubernetes.executor.deleteOnTermination": "false",
        "spark.kubernetes.submission.waitAppCompletion": "true",
        "spark.kubernetes.report.interval": "5s",
        "spark.kubernetes.driver.secrets.spark-heatmap-user-tls": user_dir,
        "spark.kubernetes.executor.secrets.spark-heatmap-user-tls": user_dir,
        **{f"spark.kubernetes.driverEnv.{k}": v for k, v in user_env.items()},
        **{f"spark.executorEnv.{k}": v for k, v in user_env.items()},
    }
    argv = [str(ROOT / "spark-apps" / "k8s" / "spark-submit.sh")]
    for key, value in conf.items():
        argv += ["--conf", f"{key}={value}"]
    argv += [
        "--",
        "--grid",
        grid.to_json(),
        "--output-topic",
        "spark.heatmap",
        "--output-dir",
        "/data/heatmap",
        "--checkpoint",
        "/data/checkpoints/heatmap",
        "--available-now",
    ]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")},
        "K8S": cp.server,
        "NAMESPACE": NS,
        "IMAGE": "hedwig-spark:0.1.0",
        "ZK": rel.zk,
        "REGION": POOL,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    started = time.monotonic()
    submitted = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=540, check=False
    )
    FIGURES["spark_job_wall_s"] = time.monotonic() - started
    drivers = pods(cp, NS, "spark-role=driver")
    executors = pods(cp, NS, "spark-role=executor")
    if submitted.returncode != 0 or not drivers or drivers[-1]["status"]["phase"] != "Succeeded":
        logs = cp.kubectl("logs", "-n", NS, "-l", "spark-role=driver", "--tail=60", check=False)
        raise AssertionError(f"spark-submit: {submitted.stderr[-3000:]}\ndriver:\n{logs.stdout}")
    assert executors, "the driver started no executor pod"
    assert all(p["spec"]["nodeName"] == NODE_NAME for p in [*drivers, *executors])

    # The heat map came back to Hedwig: every report lies in three 30 s windows.
    published = [json.loads(v) for _, v in asyncio.run(_read_topic(rel, "spark.heatmap"))]
    at_base = {
        (m["cx"], m["cy"]): (m["reports"], m["mean_kmh"], m["vehicles"])
        for m in published
        if m["window_start"] == BASE_MS
    }
    assert at_base == {(0, 0): (3, 40.0, 1), (5, 3): (2, 40.0, 2), (9, 1): (1, 45.0, 1)}
    assert len(published) == 9
    parquet = list((rel.volumes.parent / "spark-data" / "heatmap").glob("batch_id=*/*.parquet"))
    assert parquet, "no Parquet files in the shared volume"
    print(
        f"Spark heat map on Kubernetes: {FIGURES['spark_job_wall_s']:.1f}s from spark-submit to "
        f"the driver's completion, {len(executors)} executor pod(s), 9 cells checked "
        f"(image import {FIGURES['spark_image_import_s']:.1f}s)"
    )


async def _read_topic(rel: Release, topic: str) -> list[tuple[int, bytes]]:
    client = HedwigClient(rel.bootstrap(), network=rel.network(), security=rel.security)
    try:
        return await read_all(client, topic)
    finally:
        await client.close()


UP = 'up{job="hedwig-hub"} == 1'


def test_prometheus_scrapes_the_hub_pods_the_service_monitor_selects(
    release: Release, tmp_path: Path
) -> None:
    """The chart's ServiceMonitor resolved against the live objects as the Prometheus Operator
    would (its selector finds the pool's headless Service, whose endpoints are the hub pods),
    written as a static configuration for Debian's Prometheus, which has no Kubernetes service
    discovery: Prometheus scrapes every hub pod, labelled with its namespace, pod and pool."""
    rel, cp = release, release.cp
    binary = shutil.which("prometheus")
    if binary is None:
        if os.environ.get("CI"):
            raise AssertionError("prometheus is not installed (make test installs it)")
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    rendered = cp.helm(
        "template",
        "hedwig",
        str(CHART),
        "--namespace",
        NS,
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "zookeeper.enabled=false",
        "--set",
        "zookeeper.external.connect=zk:2181",
        "--show-only",
        "templates/monitoring/servicemonitor.yaml",
    ).stdout
    (monitor,) = [d for d in yaml.safe_load_all(rendered) if d]
    found = scrape.targets(
        monitor, [NS], lambda kind, ns: cp.kubectl_json("get", kind, "-n", ns)["items"]
    )
    hubs = {p["metadata"]["name"] for p in rel.hub_pods()}
    assert {labels["pod"] for _, labels in found} == hubs
    config = tmp_path / "prometheus.yml"
    job = {
        "job_name": "hedwig-hub",
        "scrape_interval": "1s",
        "scrape_timeout": "900ms",
        "static_configs": [{"targets": [a], "labels": labels} for a, labels in found],
    }
    config.write_text(yaml.safe_dump({"scrape_configs": [job]}))
    port = free_port()
    log = tmp_path / "prometheus.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    url = f"http://127.0.0.1:{port}"
    try:

        def scraped() -> list[dict[str, Any]] | None:
            assert proc.poll() is None, log.read_text()[-2000:]
            try:
                got = render.prometheus_get(url, "/api/v1/query", {"query": UP})
            except OSError:
                return None
            result = list(got["result"]) if isinstance(got, dict) else []
            return result if {r["metric"].get("pod") for r in result} == hubs else None

        up = wait_for("Prometheus scraping every hub pod", scraped, 90)
        for series in up:
            assert series["metric"]["namespace"] == NS
            assert series["metric"]["pool"] == POOL
            assert series["metric"]["service"] == f"{POOL}-headless"
        owned = render.prometheus_get(url, "/api/v1/query", {"query": "hedwig_topics_owned"})
        assert isinstance(owned, dict)
        assert {r["metric"]["pod"] for r in owned["result"]} == hubs
    finally:
        proc.terminate()
        proc.wait(30)


def test_figures(release: Release) -> None:
    """The measured figures, in one line (docs/deploying.md quotes them)."""
    print("figures:", json.dumps({k: round(v, 2) for k, v in FIGURES.items()}))
