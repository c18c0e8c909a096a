"""The Helm chart against a real control plane (e2e/controlplane: kube-apiserver v1.36.3 with
etcd, controller-manager, scheduler and kwok), as a user installs it.

- The rendered chart (default values and each charts/hedwig/ci values file, everything on
  included) passes a server-side dry run. The monitoring.coreos.com CRDs are not part of the
  control plane, so minimal copies (``x-kubernetes-preserve-unknown-fields``) are installed
  first: the server checks those objects' shape as Kubernetes objects only; their fields are
  checked by tests/chart (helm template, promtool).
- ``helm install`` creates the CRDs, the operator's ServiceAccount, RBAC and Deployment (kwok
  makes its pod Ready, so ``--wait`` passes) and a HubPool. The operator then runs as a local
  process under a token of the chart's ServiceAccount (proving the chart's RBAC is enough),
  with ZooKeeper and two hubs as local processes in the pool's region: it reconciles the pool
  (StatefulSet, Services, PDB, status Ready with both hubs alive) and a Topic.
- A release of the chart's ZooKeeper alone: the StatefulSet's three pods become Ready.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.chart.notes import render_notes

from controlplane import cluster
from hedwig.devcluster.cluster import HubProcess
from hedwig.devcluster.zookeeper import ZooKeeperServer, free_port
from hedwig_e2e import (
    ROOT,
    STORAGE_CLASS,
    OperatorProcess,
    control_plane_bins,
    static_volume,
    topic_owner,
    wait_for,
)
from notes_commands import dry_run

if importlib.util.find_spec("pytest_timeout") is not None:
    pytestmark = pytest.mark.timeout(300)

CHART = ROOT / "charts" / "hedwig"
NS = "hedwig"
MONITORING_KINDS = {
    "servicemonitors": "ServiceMonitor",
    "podmonitors": "PodMonitor",
    "prometheusrules": "PrometheusRule",
}


def monitoring_crd(plural: str, kind: str) -> dict[str, Any]:
    """A minimal stand-in for a Prometheus Operator CRD: any spec is accepted."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def cp() -> Iterator[cluster.ControlPlane]:
    with cluster.ControlPlane(bins=control_plane_bins()) as plane:
        yield plane


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e-chart")


def add_volumes(cp: cluster.ControlPlane, workdir: Path, prefix: str, n: int) -> None:
    """Static volumes for volume claims (no provisioner runs here)."""
    for i in range(n):
        cp.apply(static_volume(f"{prefix}-{i}", workdir / f"{prefix}-{i}", "10Gi"))


def test_rendered_chart_passes_server_side_dry_run(cp: cluster.ControlPlane) -> None:
    for ns in (NS, "hedwig-apps"):
        cp.create_namespace(ns)
    cp.kubectl("apply", "-f", str(CHART / "crds"))
    cp.apply([monitoring_crd(plural, kind) for plural, kind in MONITORING_KINDS.items()])
    cp.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/hubpools.hedwig.io",
        "crd/topics.hedwig.io",
        *(f"crd/{plural}.monitoring.coreos.com" for plural in MONITORING_KINDS),
    )
    values_files = [None, *sorted((CHART / "ci").glob("*-values.yaml"))]
    for values in values_files:
        args = ["template", "hedwig", str(CHART), "--namespace", NS]
        if values:
            args += ["-f", str(values)]
        rendered = cp.helm(*args).stdout
        proc = cp.kubectl("apply", "--dry-run=server", "-f", "-", input=rendered, check=False)
        assert proc.returncode == 0, f"{values}: {proc.stderr}"
        kinds = {line.split()[0].split("/")[0] for line in proc.stdout.splitlines() if line}
        assert {
            "deployment.apps",
            "hubpool.hedwig.io",
            "clusterrole.rbac.authorization.k8s.io",
        } <= kinds
        if values and values.name == "full-values.yaml":
            assert {
                "servicemonitor.monitoring.coreos.com",
                "prometheusrule.monitoring.coreos.com",
                "networkpolicy.networking.k8s.io",
                "configmap",
                "statefulset.apps",
                "poddisruptionbudget.policy",
            } <= kinds, kinds
    # A dry run creates nothing.
    assert cp.kubectl("get", "hubpools", "-A", "-o", "name").stdout.strip() == ""

    # The server refuses what the schema lets through but the CRD's CEL rules do not:
    # the chart cannot produce such a pool with a valid values file, the API server is the
    # last word.
    bad = cp.helm(
        "template",
        "hedwig",
        str(CHART),
        "--namespace",
        NS,
        "--set",
        "hubPool.replication.ensemble=1",
        "--set",
        "hubPool.replication.writeQuorum=2",
        "--set",
        "hubPool.replication.ackQuorum=1",
        "--show-only",
        "templates/hubpool.yaml",
    ).stdout
    refused = cp.kubectl("apply", "--dry-run=server", "-f", "-", input=bad, check=False)
    assert refused.returncode != 0
    assert "ackQuorum <= writeQuorum <= ensemble" in refused.stderr


@pytest.fixture(scope="module")
def zk(workdir: Path) -> Iterator[str]:
    with ZooKeeperServer(data_dir=str(workdir / "zk")) as server:
        yield server.address


def test_helm_install_creates_the_operator_and_a_pool_the_operator_reconciles(
    cp: cluster.ControlPlane, workdir: Path, zk: str
) -> None:
    ns = "hedwig-install"
    cp.create_namespace(ns)
    add_volumes(cp, workdir, "pool-volume", 2)
    installed = cp.helm(
        "install",
        "hedwig",
        str(CHART),
        "--namespace",
        ns,
        "--set",
        "zookeeper.enabled=false",
        "--set",
        f"zookeeper.external.connect={zk}",
        "--set",
        "hubPool.replicas=2",
        "--set",
        "hubPool.placement=least-loaded",
        "--set",
        f"hubPool.storage.storageClassName={STORAGE_CLASS}",
        "--set",
        "hubPool.storage.size=1Gi",
        "--set",
        "hubPool.zookeeper.sessionTimeoutSeconds=4",
        # The hubs here are local processes started before the pool exists; a secured pool's
        # hubs need the Secrets the operator makes for it (e2e/test_security.py runs those).
        "--set",
        "hubPool.security.enabled=false",
        "--wait",
        "--timeout=120s",
    ).stdout
    # NOTES tell the user how to publish and subscribe.
    assert f"hedwig sub --hub hedwig.{ns}.svc:4080 greetings reader" in installed
    assert f"hedwig pub --hub hedwig.{ns}.svc:4080 greetings" in installed

    def get(kind: str, name: str, namespace: str = ns) -> dict[str, Any] | None:
        proc = cp.kubectl("get", kind, name, "-n", namespace, "-o", "json", check=False)
        return json.loads(proc.stdout) if proc.returncode == 0 else None

    deployment = get("deployment", "hedwig-operator")
    assert deployment is not None
    assert deployment["status"].get("readyReplicas") == 1  # kwok's pod, --wait saw it
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "hedwig-operator"
    assert pod["containers"][0]["args"][0] == f"--namespace={ns}"
    pool = get("hubpool", "hedwig")
    assert pool is not None
    assert pool["spec"]["zookeeper"]["connect"] == zk

    # The operator, as the Deployment's pod would run it: under the chart's ServiceAccount.
    kubeconfig = cp.token_kubeconfig(ns, "hedwig-operator")

    def can(*args: str) -> bool:
        proc = cp.kubectl("auth", "can-i", *args, "-n", ns, kubeconfig=kubeconfig, check=False)
        return proc.stdout.strip() == "yes"

    assert can("patch", "hubpools.hedwig.io/status")
    assert can("create", "statefulsets.apps")
    assert not can("delete", "statefulsets.apps")
    assert can("get", "secrets")  # the secured pool's CAs and certificates
    assert not can("list", "secrets")

    hubs = [
        HubProcess(
            zk,
            "hedwig",  # the pool's region: its name
            str(workdir / f"hub-{i}"),
            session_timeout_s=4.0,
            extra_args=["--replication", "1/1/1", "--placement", "least-loaded"],
        ).start()
        for i in range(2)
    ]
    operator = OperatorProcess(
        ns,
        cp.env(kubeconfig),
        workdir / "operator.log",
        free_port(),
        {"HEDWIG_OPERATOR_STATUS_INTERVAL_S": "1", "HEDWIG_OPERATOR_RETRY_DELAY_S": "2"},
    )
    operator.start()
    try:
        for kind, name in (
            ("statefulset", "hedwig"),
            ("service", "hedwig"),
            ("service", "hedwig-headless"),
            ("configmap", "hedwig-config"),
            ("poddisruptionbudget", "hedwig"),
        ):
            child = wait_for(f"{kind} {name}", lambda k=kind, n=name: get(k, n), 60)
            (owner,) = child["metadata"]["ownerReferences"]
            assert (owner["kind"], owner["name"]) == ("HubPool", "hedwig")

        def settled() -> dict[str, Any] | None:
            status = (get("hubpool", "hedwig") or {}).get("status") or {}
            ready = [c for c in status.get("conditions", []) if c["type"] == "Ready"]
            ok = status.get("readyHubs") == 2 and status.get("aliveHubs") == 2
            return status if ok and ready and ready[0]["status"] == "True" else None

        status = wait_for("the pool Ready with 2 ready pods and 2 alive hubs", settled, 120)
        assert {h["address"] for h in status["hubs"]} == {h.address for h in hubs}
        sts = get("statefulset", "hedwig")
        assert sts is not None
        assert sts["spec"]["template"]["spec"]["containers"][0]["image"] == "hedwig-hub:0.1.0"

        # NOTES' step 3: a Topic resource gets an owner among the hubs.
        cp.apply(
            {
                "apiVersion": "hedwig.io/v1alpha1",
                "kind": "Topic",
                "metadata": {"name": "greetings", "namespace": ns},
                "spec": {"pool": "hedwig"},
            }
        )
        owner = wait_for(
            "Topic greetings owned",
            lambda: ((get("topic", "greetings") or {}).get("status") or {}).get("owner"),
            60,
        )
        assert owner in {h.address for h in hubs}
        info = topic_owner(zk, "hedwig", "greetings")
        assert info is not None
        assert info.address == owner
    finally:
        operator.stop()
        for hub in hubs:
            hub.kill()
        print(f"operator log {operator.log_path}:\n{operator.tail(40)}")

    # Uninstalling keeps the CRDs (Helm never deletes a chart's crds/) and so the Topics.
    cp.helm("uninstall", "hedwig", "--namespace", ns, "--wait", "--timeout=60s")
    assert get("deployment", "hedwig-operator") is None
    assert cp.kubectl("get", "crd", "hubpools.hedwig.io", check=False).returncode == 0


def test_chart_zookeeper_ensemble_comes_up(cp: cluster.ControlPlane, workdir: Path) -> None:
    ns = "hedwig-zk"
    cp.create_namespace(ns)
    add_volumes(cp, workdir, "zk-volume", 3)
    cp.helm(
        "install",
        "zk",
        str(CHART),
        "--namespace",
        ns,
        "--set",
        "operator.enabled=false",
        "--set",
        "hubPool.enabled=false",
        "--set",
        f"zookeeper.storage.storageClassName={STORAGE_CLASS}",
        "--set",
        "networkPolicy.enabled=true",
        "--wait",
        "--timeout=120s",
    )
    sts = json.loads(
        cp.kubectl("get", "statefulset", "zk-hedwig-zookeeper", "-n", ns, "-o", "json").stdout
    )
    assert sts["status"]["readyReplicas"] == 3
    pods = json.loads(
        cp.kubectl(
            "get", "pods", "-n", ns, "-l", "app.kubernetes.io/component=zookeeper", "-o", "json"
        ).stdout
    )["items"]
    assert sorted(p["metadata"]["name"] for p in pods) == [
        f"zk-hedwig-zookeeper-{i}" for i in range(3)
    ]
    pvcs = json.loads(cp.kubectl("get", "pvc", "-n", ns, "-o", "json").stdout)["items"]
    assert sorted(p["status"]["phase"] for p in pvcs) == ["Bound"] * 3
    pdb = json.loads(cp.kubectl("get", "pdb", "zk-hedwig-zookeeper", "-n", ns, "-o", "json").stdout)
    assert pdb["status"]["currentHealthy"] == 3
    assert pdb["status"]["disruptionsAllowed"] == 1
    names = cp.kubectl("get", "networkpolicy", "-n", ns, "-o", "name").stdout.split()
    assert "networkpolicy.networking.k8s.io/zk-hedwig-zookeeper" in names


def test_the_notes_client_pods_are_the_ones_docs_security_md_describes(
    cp: cluster.ControlPlane,
) -> None:
    """The NOTES' ``kubectl run`` commands, as pasted, make pods the API server admits: the
    ServiceAccount greeter, its token projected for the hubs' audience where the client looks
    for it, the pool's CA named by HEDWIG_TLS_CA, and the hedwig command the NOTES name
    (e2e/test_realpods.py runs them on real pods)."""
    ns = "hedwig-notes"
    cp.create_namespace(ns)
    cp.kubectl("create", "serviceaccount", "greeter", "-n", ns)
    notes = render_notes(["hub.image.repository=hedwig-hub"], namespace=ns)
    pods = dry_run(notes, cp.env())
    assert set(pods) == {"hedwig-sub", "hedwig-pub"}
    for name, pod in pods.items():
        spec: dict[str, Any] = pod["spec"]  # type: ignore[assignment]
        assert spec["serviceAccountName"] == "greeter"
        (container,) = spec["containers"]
        assert container["name"] == name
        assert container["image"] == "hedwig-hub:0.1.0"
        assert container["command"][:3] == ["hedwig", name.removeprefix("hedwig-"), "--hub"]
        assert container["command"][3] == f"hedwig.{ns}.svc:4080"
        volumes = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        token = volumes[mounts["/var/run/secrets/hedwig"]]["projected"]["sources"][0]
        assert token["serviceAccountToken"]["audience"] == "hedwig"
        assert token["serviceAccountToken"]["path"] == "token"
        env = {e["name"]: e["value"] for e in container["env"]}
        ca = volumes[mounts[env["HEDWIG_TLS_CA"].rpartition("/")[0]]]
        assert ca["configMap"]["name"] == "hedwig-ca-cert"
