"""Helpers of the end-to-end tests on real pods (e2e/test_node.py, test_realpods_*.py).

The images come from ``images/build.sh`` (``make images``; cached, so asking again is
instant) and run on the real node of ``controlplane.node.RealCluster``. Without root, the
image tools or the node's binaries these tests skip, except under CI (``CI=true``), where they
fail: ``make test`` builds and installs all of it first.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from controlplane import cluster
from controlplane.node import NODE_NAME, NodeError, node_dir
from hedwig.net.transport import TcpNetwork
from hedwig.security import ClientSecurity

ROOT = Path(__file__).resolve().parents[1]
IMAGES_BUILD = ROOT / "images" / "build.sh"


def _unavailable(message: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def built_images(*names: str) -> dict[str, Path]:
    """``{"hedwig-hub:0.1.0": tar, ...}`` for the images asked for (hub, operator, spark),
    building them if ``make images`` has not (minutes the first time)."""
    if os.geteuid() != 0:
        _unavailable("real pods need root (containerd, the kubelet, iptables)")
    proc = subprocess.run(
        ["bash", str(IMAGES_BUILD), *names], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        _unavailable(f"images/build.sh failed:\n{proc.stderr[-3000:]}")
    out = {}
    for line in proc.stdout.strip().splitlines()[-len(names) :]:
        ref, _, path = line.partition(" ")
        out[ref] = Path(path)
    return out


def node_binaries() -> Path:
    try:
        cluster.bin_dir(build=os.environ.get("HEDWIG_CONTROLPLANE_BUILD") == "1")
        return node_dir(build=os.environ.get("HEDWIG_CONTROLPLANE_BUILD") == "1")
    except (cluster.ControlPlaneError, NodeError) as exc:
        _unavailable(f"{exc} (make test builds them)")
        raise


def pod_ready(pod: dict[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in pod.get("status", {}).get("conditions", [])
    )


def pods(cp: cluster.ControlPlane, namespace: str, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cp.kubectl_json("get", "pods", "-n", namespace, "-l", selector)[
        "items"
    ]
    return sorted(items, key=lambda p: p["metadata"]["name"])


def local_volume(name: str, path: Path, size: str, storage_class: str, node: str) -> dict[str, Any]:
    """A local PersistentVolume on the real node, for a volume claim to bind to (no
    provisioner runs here): a directory the test bed made, pinned to the node."""
    path.mkdir(parents=True, exist_ok=True)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {"hedwig.io/e2e-volume": "true"}},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "persistentVolumeReclaimPolicy": "Retain",
            "local": {"path": str(path)},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "kubernetes.io/hostname",
                                    "operator": "In",
                                    "values": [node],
                                }
                            ]
                        }
                    ]
                }
            },
        },
    }


def storage_class(name: str) -> dict[str, Any]:
    """A StorageClass for pre-created local volumes: claims wait for their pod's node."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Retain",
    }


def prepare_bed(
    cp: cluster.ControlPlane, namespace: str, storage: str, volumes: dict[str, Path]
) -> None:
    """A namespace, a StorageClass for pre-created local volumes and one local volume per
    name (the hubs run as uid 10001 with fsGroup 10001; a local volume keeps its owner)."""
    cp.create_namespace(namespace)
    cp.apply(storage_class(storage))
    for name, path in volumes.items():
        cp.apply(local_volume(name, path, "1Gi", storage, NODE_NAME))


def chart_sets(zookeeper: str, storage: str, **more: str) -> list[str]:
    """``helm install`` arguments for a secured pool of three hubs on ``zookeeper`` (outside
    the chart) with the local volumes of ``storage``, timed for tests: a 4 s metadata session,
    a 40 s grace period, the operator's status every 2 s; ``more`` adds or overrides values
    (dotted names, as ``--set`` takes them)."""
    values = {
        "zookeeper.enabled": "false",
        "zookeeper.external.connect": zookeeper,
        "hubPool.replicas": "3",
        "hubPool.storage.storageClassName": storage,
        "hubPool.storage.size": "1Gi",
        "hubPool.metadata.sessionTimeoutSeconds": "4",
        "hubPool.terminationGracePeriodSeconds": "40",
        "hubPool.preStopSleepSeconds": "1",
        "operator.settings.statusIntervalSeconds": "2",
        "operator.settings.retryDelaySeconds": "2",
        **more,
    }
    return [a for k, v in values.items() for a in ("--set", f"{k}={v}")]


# --------------------------------------------------------------- clients outside the cluster


def dns_lookup(name: str, server: tuple[str, int], timeout: float = 2.0) -> str:
    """The first A record of ``name`` from the DNS server at ``server`` (a minimal query over
    UDP: the host's resolver does not know the cluster's names)."""
    query_id = secrets.randbelow(1 << 16)
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.rstrip(".").split("."))
    packet = struct.pack(">HHHHHH", query_id, 0x0100, 1, 0, 0, 0) + labels + b"\0\0\1\0\1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.sendto(packet, server)
        reply = sock.recv(4096)
    rid, flags, _qd, answers, _ns, _ar = struct.unpack(">HHHHHH", reply[:12])
    if rid != query_id or flags & 0xF:
        raise OSError(f"DNS lookup of {name} failed (rcode {flags & 0xF})")
    pos = 12 + len(labels) + 5
    for _ in range(answers):
        pos = pos + 2 if reply[pos] & 0xC0 == 0xC0 else reply.index(b"\0", pos) + 1
        rtype, _cls, _ttl, length = struct.unpack(">HHIH", reply[pos : pos + 10])
        pos += 10
        if rtype == 1 and length == 4:
            return socket.inet_ntoa(reply[pos : pos + 4])
        pos += length
    raise OSError(f"no address for {name}")


class ClusterDNSNetwork(TcpNetwork):
    """TCP for a client outside the cluster that asks the cluster's DNS for the hubs' names:
    the addresses hubs advertise (``<pod>.<pool>-headless.<ns>.svc:4080``) and the client
    Service's name resolve to pod and Service IPs, which the host reaches (the pod bridge and
    kube-proxy). What a laptop on a VPN into the cluster's network does. With ``security``,
    TLS as the client would do it, checking the hubs' certificates against the names dialled
    (the pool's certificate covers its Services' names, not pod IPs)."""

    def __init__(self, dns: tuple[str, int], security: ClientSecurity | None = None) -> None:
        reload = security.reload if security else None
        super().__init__(
            client_tls=security.tls if security else None,
            before_connect=reload.reload_if_changed if reload else None,
        )
        self.dns = dns

    async def resolve(self, host: str) -> str:
        if host.endswith(".svc"):
            host += ".cluster.local"
        if host.endswith(".cluster.local"):
            return await asyncio.to_thread(dns_lookup, host, self.dns)
        return host
