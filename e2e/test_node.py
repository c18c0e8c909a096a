"""The real node of the test bed (e2e/controlplane/node.py): it starts and stops twice in a row
leaving the host as it found it, and a pod of the hub image gets an address on the pod network,
cluster DNS, the API server through the ``kubernetes`` Service, a Service of its own reachable
from another pod and from the host, logs, exec and port-forward through the kubelet."""

from __future__ import annotations

import importlib.util
import socket
import time
from typing import Any

import pytest

from controlplane import node
from controlplane.host import HostState
from controlplane.node import RealCluster
from hedwig_e2e import wait_for
from realpods import built_images, node_binaries, pod_ready

if importlib.util.find_spec("pytest_timeout") is not None:
    pytestmark = pytest.mark.timeout(400)

NS = "node-smoke"
HUB_IMAGE = "hedwig-hub:0.1.0"


def test_node_starts_and_stops_twice_leaving_the_host_as_it_was() -> None:
    if node.running_here():
        pytest.skip("this test run already holds the real node")
    node_binaries()
    images = list(built_images("hub").values())
    for run in range(2):
        started = time.monotonic()
        with RealCluster(images) as rc:
            up = time.monotonic() - started
            before = rc.host_before
            assert before is not None
            assert rc.cp is not None
            assert (
                rc.cp.kubectl("get", "node", node.NODE_NAME, "-o", "name").stdout.strip()
                == f"node/{node.NODE_NAME}"
            )
        after = HostState.capture(node.BRIDGE, node.CGROUP_ROOT)
        assert after.diff(before) == [], f"run {run}: the host differs after the node stopped"
        print(f"run {run}: node Ready in {up:.1f}s")


def _pod(name: str, command: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels or {}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
            "containers": [
                {
                    "name": "main",
                    "image": HUB_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", command],
                    "securityContext": {
                        "readOnlyRootFilesystem": True,
                        "allowPrivilegeEscalation": False,
                    },
                }
            ],
        },
    }


SERVE = "cd /tmp 2>/dev/null || cd /; exec python -m http.server 8000 --bind 0.0.0.0"
CHECK = (
    "python - <<'EOF'\n"
    "import socket, urllib.request\n"
    "print('api', socket.gethostbyname('kubernetes.default.svc.cluster.local'))\n"
    "socket.create_connection(('kubernetes.default', 443), 5).close()\n"
    "print('api reachable')\n"
    "body = urllib.request.urlopen('http://web.node-smoke.svc:8080/', timeout=5).read()\n"
    "print('web', len(body))\n"
    "EOF\n"
    "sleep 3600"
)


def test_pods_get_dns_services_logs_exec_and_port_forward(real_cluster: RealCluster) -> None:
    cp = real_cluster.cp
    assert cp is not None
    cp.create_namespace(NS)
    cp.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web", "namespace": NS},
                "spec": {"selector": {"app": "web"}, "ports": [{"port": 8080, "targetPort": 8000}]},
            },
            _pod("web", SERVE, {"app": "web"}),
        ]
    )
    web = wait_for(
        "the web pod Running",
        lambda: (lambda p: p if p["status"].get("phase") == "Running" else None)(
            cp.kubectl_json("get", "pod", "web", "-n", NS)
        ),
        90,
    )
    assert web["spec"]["nodeName"] == node.NODE_NAME
    ip = web["status"]["podIP"]
    assert ip.startswith("10.245.0.")
    # The host reaches the pod, and the Service's cluster IP through kube-proxy.
    wait_for("the pod's port from the host", lambda: _connects(ip, 8000), 30)
    cluster_ip = cp.kubectl_json("get", "service", "web", "-n", NS)["spec"]["clusterIP"]
    wait_for("the Service from the host", lambda: _connects(cluster_ip, 8080), 30)

    cp.apply(_pod("check", CHECK))
    logs = wait_for(
        "the check pod's output",
        lambda: (lambda out: out if "web " in out else None)(
            cp.kubectl("logs", "check", "-n", NS, check=False).stdout
        ),
        90,
    )
    assert "api 10.96.0.1" in logs, logs
    assert "api reachable" in logs, logs

    exec_out = cp.kubectl("exec", "-n", NS, "check", "--", "id", "-u").stdout.strip()
    assert exec_out == "10001"
    assert pod_ready(cp.kubectl_json("get", "pod", "check", "-n", NS))
    cp.kubectl("delete", "namespace", NS, "--wait=false")


def _connects(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False
