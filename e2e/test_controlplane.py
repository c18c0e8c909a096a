"""Smoke tests of the real control-plane test bed (e2e/controlplane).

They start etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
kwok once for the module and check what the operator's end-to-end tests rely
on: the pinned version, CEL validation of CRDs, StatefulSet pods reaching
Running/Ready on the fake node, and ServiceAccount tokens bound by RBAC.

The binaries must be built first (``e2e/controlplane/build.sh``: long the
first time, instant once cached); without them these tests are skipped,
unless HEDWIG_CONTROLPLANE_BUILD=1 asks the fixture to build them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane import cluster
from hedwig_e2e import wait_for

HERE = Path(__file__).resolve().parent

if importlib.util.find_spec("pytest_timeout") is not None:
    # The module fixture's start-up (~15 s) counts against the first test.
    pytestmark = pytest.mark.timeout(300)


def pinned_kubernetes_version() -> str:
    match = re.search(
        r"^KUBERNETES_VERSION=(\S+)", (HERE / "controlplane" / "build.sh").read_text(), re.MULTILINE
    )
    assert match, "build.sh pins no KUBERNETES_VERSION"
    return match.group(1)


@pytest.fixture(scope="module")
def cp() -> Iterator[cluster.ControlPlane]:
    try:
        bins = cluster.bin_dir(build=os.environ.get("HEDWIG_CONTROLPLANE_BUILD") == "1")
    except cluster.ControlPlaneError as exc:
        pytest.skip(f"{exc} (about 10 minutes the first time)")
    with cluster.ControlPlane(bins=bins) as plane:
        yield plane


def test_version_is_pinned(cp: cluster.ControlPlane) -> None:
    pinned = pinned_kubernetes_version()
    info = cp.api_get("/version")
    assert info["gitVersion"] == pinned
    assert (info["major"], info["minor"]) == ("1", pinned.split(".")[1])
    client = json.loads(cp.kubectl("version", "-o", "json").stdout)
    assert client["clientVersion"]["gitVersion"] == pinned
    assert client["serverVersion"]["gitVersion"] == pinned
    assert cp.version == pinned


CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "ranges.smoke.hedwig.test"},
    "spec": {
        "group": "smoke.hedwig.test",
        "scope": "Namespaced",
        "names": {"plural": "ranges", "singular": "range", "kind": "Range"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["low", "high"],
                                "properties": {
                                    "low": {"type": "integer", "minimum": 0},
                                    "high": {"type": "integer", "maximum": 100},
                                },
                                "x-kubernetes-validations": [
                                    {
                                        "rule": "self.low <= self.high",
                                        "message": "low must not exceed high",
                                    }
                                ],
                            }
                        },
                    }
                },
            }
        ],
    },
}


def range_object(name: str, low: int, high: int) -> dict:
    return {
        "apiVersion": "smoke.hedwig.test/v1",
        "kind": "Range",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"low": low, "high": high},
    }


def test_crd_cel_validation_is_enforced(cp: cluster.ControlPlane) -> None:
    cp.apply(CRD)
    cp.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "crd/ranges.smoke.hedwig.test"
    )
    # Discovery of a new CRD can lag Established by a moment.
    wait_for(
        "the Range kind to be served",
        lambda: cp.apply(range_object("good", 1, 5), check=False).returncode == 0,
        timeout=30,
    )
    assert cp.kubectl_json("get", "range", "good", "-n", "default")["spec"]["high"] == 5

    refused = cp.apply(range_object("bad", 7, 3), check=False)
    assert refused.returncode != 0
    assert "low must not exceed high" in refused.stderr
    assert cp.kubectl("get", "range", "bad", "-n", "default", check=False).returncode != 0

    # Plain OpenAPI validation too (maximum: 100).
    refused = cp.apply(range_object("big", 1, 500), check=False)
    assert refused.returncode != 0
    assert "spec.high" in refused.stderr


def test_statefulset_pods_reach_running_and_ready(cp: cluster.ControlPlane) -> None:
    ns = "smoke-sts"
    cp.create_namespace(ns)
    labels = {"app": "smoke"}
    cp.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "smoke", "namespace": ns},
                "spec": {
                    "clusterIP": "None",
                    "selector": labels,
                    "ports": [{"name": "hub", "port": 4080}],
                },
            },
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "metadata": {"name": "smoke", "namespace": ns},
                "spec": {
                    "serviceName": "smoke",
                    "replicas": 2,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "containers": [
                                {
                                    "name": "hub",
                                    "image": "hedwig-hub:never-pulled",
                                    "ports": [{"containerPort": 4080}],
                                    "readinessProbe": {"tcpSocket": {"port": 4080}},
                                }
                            ]
                        },
                    },
                },
            },
        ]
    )

    def ready_pods():
        pods = cp.kubectl_json("get", "pods", "-n", ns, "-l", "app=smoke")["items"]
        ready = [
            p
            for p in pods
            if p["status"].get("phase") == "Running"
            and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in p["status"].get("conditions", [])
            )
        ]
        return ready if len(ready) == 2 else None

    pods = wait_for("2 Running and Ready StatefulSet pods", ready_pods, timeout=90)
    assert sorted(p["metadata"]["name"] for p in pods) == ["smoke-0", "smoke-1"]
    assert {p["spec"]["nodeName"] for p in pods} == {cluster.NODE_NAME}
    assert all(p["status"].get("podIP") for p in pods)
    wait_for(
        "the StatefulSet to count 2 ready replicas",
        lambda: (
            cp.kubectl_json("get", "statefulset", "smoke", "-n", ns)["status"].get("readyReplicas")
            == 2
        ),
    )


def test_service_account_token_is_bound_by_rbac(cp: cluster.ControlPlane) -> None:
    ns = "smoke-rbac"
    cp.create_namespace(ns)
    cp.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "reader", "namespace": ns},
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "get-pods", "namespace": ns},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "reader-get-pods", "namespace": ns},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "get-pods",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}],
            },
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "target", "namespace": ns},
                "spec": {"containers": [{"name": "c", "image": "hedwig-hub:never-pulled"}]},
            },
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "hidden", "namespace": ns},
                "stringData": {"password": "not-for-readers"},
            },
        ]
    )
    kubeconfig = cp.token_kubeconfig(ns, "reader")
    config = json.loads(kubeconfig.read_text())
    assert config["users"][0]["user"]["token"]
    assert config["contexts"][0]["context"]["namespace"] == ns

    whoami = json.loads(cp.kubectl("auth", "whoami", "-o", "json", kubeconfig=kubeconfig).stdout)
    assert whoami["status"]["userInfo"]["username"] == f"system:serviceaccount:{ns}:reader"

    got = cp.kubectl("get", "pod", "target", "-o", "name", kubeconfig=kubeconfig)
    assert got.stdout.strip() == "pod/target"

    denied = cp.kubectl("get", "secrets", kubeconfig=kubeconfig, check=False)
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower()
    assert 'cannot list resource "secrets"' in denied.stderr

    # get, but not list, on pods; nothing at all in another namespace.
    assert cp.kubectl("get", "pods", kubeconfig=kubeconfig, check=False).returncode != 0
    assert (
        cp.kubectl(
            "get", "pod", "smoke-0", "-n", "smoke-sts", kubeconfig=kubeconfig, check=False
        ).returncode
        != 0
    )
