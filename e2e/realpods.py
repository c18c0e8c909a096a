"""Helpers of the end-to-end tests on real pods (e2e/test_node.py, test_realpods_*.py).

The images come from ``images/build.sh`` (``make images``; cached, so asking again is
instant) and run on the real node of ``controlplane.node.RealCluster``. Without root, the
image tools or the node's binaries these tests skip, except under CI (``CI=true``), where they
fail: ``make test`` builds and installs all of it first.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from controlplane import cluster
from controlplane.node import NodeError, node_dir

ROOT = Path(__file__).resolve().parents[1]
IMAGES_BUILD = ROOT / "images" / "build.sh"

T = TypeVar("T")


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


def wait_for(
    what: str, check: Callable[[], T | None], timeout: float = 60.0, interval: float = 0.5
) -> T:
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


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
