"""The external metrics API (hedwig_operator.metricsapi) behind a real API server's
aggregation layer (e2e/controlplane), with a secured hub as a local process.

The chart's objects (``metricsApi.enabled``: ServiceAccount, serving certificate, APIService,
RBAC) are applied as rendered, with one change: the API's Service is an ExternalName of
127.0.0.1 and the APIService names the local process's port, because pods do not run here and
nothing routes a ClusterIP (the aggregator dials an ExternalName Service's name at the
APIService's port, and still checks the serving certificate for ``<service>.<ns>.svc``). The
API runs as a local process under a token of the chart's ServiceAccount, so the chart's RBAC
is what lets it read the front proxy's CA and send SubjectAccessReviews; it reads the hub as a
tls user allowed ``describe`` (and then ``admin``: a hub lists to ``describe`` alone only the
caller's own subscriptions).

- ``GET /apis/external.metrics.k8s.io/v1beta1/namespaces/NS/hedwig_subscription_backlog``
  through the API server answers the subscription's real backlog; a user without the chart's
  ClusterRole is refused by the API server, and by the metrics API's own SubjectAccessReview
  when it is asked directly with the front proxy's certificate.
- kube-controller-manager's HorizontalPodAutoscaler controller (as
  ``system:serviceaccount:kube-system:horizontal-pod-autoscaler``, bound by the chart) scales a
  Deployment on the backlog: out while it is high, back in once the messages are acknowledged;
  with the HPAScaleToZero gate (this module's control plane has it), an idle one to zero and
  back out from zero when messages arrive.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from controlplane import cluster
from hedwig.client import SubscriptionType
from hedwig.client.sync import SyncClient
from hedwig.devcluster.cluster import DevCluster
from hedwig.devcluster.zookeeper import free_port
from hedwig.security import ClientSecurity
from hedwig_e2e import ROOT, control_plane_bins, crd_manifests, wait_for

if importlib.util.find_spec("pytest_timeout") is not None:
    pytestmark = pytest.mark.timeout(300)

CHART = ROOT / "charts" / "hedwig"
NS = "apps"
NAME = "hedwig-metrics-api"
# Label values cannot hold "/": a topic an autoscaler selects has a name without one.
TOPIC = "jobs"
HPA_TOPIC = "scaled-jobs"
SUB = "workers"
GROUP_PATH = "/apis/external.metrics.k8s.io/v1beta1"
HPA_USER = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
ZERO_TOPIC = "idle-jobs"
# minReplicas 0 is the alpha HPAScaleToZero gate, on the API server (validation) and in the
# controller; the autoscaler syncs every 5 s instead of 15 s, to keep the test short.
CONTROL_PLANE_FLAGS = {
    "kube-apiserver": ["--feature-gates=HPAScaleToZero=true"],
    "kube-controller-manager": [
        "--feature-gates=HPAScaleToZero=true",
        "--horizontal-pod-autoscaler-sync-period=5s",
    ],
}


@dataclass
class Bed:
    cp: cluster.ControlPlane
    hubs: DevCluster
    port: int
    admin: ClientSecurity
    readable: bool = False

    def let_read_every_subscription(self) -> None:
        """``admin`` on every topic for the API's hub user (once)."""
        if not self.readable:
            _grant(self.hubs, "alice", "describe,admin")
            self.readable = True

    def backlog_path(self, namespace: str = NS, topic: str = TOPIC, sub: str = SUB) -> str:
        selector = urllib.parse.quote(f"topic={topic},subscription={sub}")
        return (
            f"{GROUP_PATH}/namespaces/{namespace}/hedwig_subscription_backlog"
            f"?labelSelector={selector}"
        )

    def client(self) -> SyncClient:
        return SyncClient(self.hubs.addresses, security=self.admin)


def _chart_objects(
    kinds: tuple[str, ...] = (
        "ServiceAccount",
        "Secret",
        "APIService",
        "Service",
        "ClusterRole",
        "ClusterRoleBinding",
        "RoleBinding",
    ),
    *,
    secured: bool = False,
) -> list[dict[str, Any]]:
    """The chart's metrics-API objects of ``kinds``, rendered for namespace NS."""
    helm = control_plane_bins() / "helm"
    out = subprocess.run(
        [
            str(helm),
            "template",
            "hedwig",
            str(CHART),
            "--namespace",
            NS,
            "--set",
            "metricsApi.enabled=true",
            "--set",
            f"hubPool.security.enabled={str(secured).lower()}",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "HELM_CACHE_HOME": "/tmp/hedwig-helm-cache"},
    ).stdout
    return [
        d
        for d in yaml.safe_load_all(out)
        if d
        and d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "metrics-api"
        and d["kind"] in kinds
    ]


def _grant(hubs: DevCluster, principal: str, operations: str) -> None:
    assert hubs.security is not None
    env = {**os.environ, **hubs.security.client_env()}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "hedwig",
            "acl",
            "add",
            f"metrics-api-{operations.replace(',', '-')}",
            "--metadata",
            hubs.zk,
            "--region",
            hubs.region,
            "--principal",
            principal,
            "--topic-prefix",
            "",
            "--operations",
            operations,
        ],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    bins = control_plane_bins()
    work = tmp_path_factory.mktemp("metrics-api")
    with (
        cluster.ControlPlane(bins=bins, extra_args=CONTROL_PLANE_FLAGS) as cp,
        DevCluster(hubs=1, region="metrics-api", secure=True, session_timeout_s=3.0) as hubs,
    ):
        assert hubs.security is not None
        cp.create_namespace(NS)
        port = free_port()
        objects = _chart_objects()
        for obj in objects:
            if obj["kind"] == "Service":
                obj["spec"] = {
                    "type": "ExternalName",
                    "externalName": "127.0.0.1",
                    "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
                }
            if obj["kind"] == "APIService":
                obj["spec"]["service"]["port"] = port
            if obj["kind"] == "Secret":
                for key, file in (("tls.crt", "serving.crt"), ("tls.key", "serving.key")):
                    (work / file).write_bytes(base64.b64decode(obj["data"][key]))
        cp.apply(objects)
        _grant(hubs, "alice", "describe")
        kubeconfig = cp.token_kubeconfig(NS, NAME)
        sec = hubs.security
        log = (work / "metrics-api.log").open("w")
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hedwig_operator.metricsapi",
                f"--hubs={','.join(hubs.addresses)}",
                "--host=127.0.0.1",
                f"--port={port}",
                f"--tls-cert={work / 'serving.crt'}",
                f"--tls-key={work / 'serving.key'}",
                f"--hub-ca-file={sec.path('hub-ca.crt')}",
                f"--hub-cert={sec.path('alice.crt')}",
                f"--hub-key={sec.path('alice.key')}",
            ],
            env={**os.environ, "KUBECONFIG": str(kubeconfig)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        admin = ClientSecurity.build(
            tls_ca=sec.path("hub-ca.crt"), cert=sec.path("admin.crt"), key=sec.path("admin.key")
        )

        def available() -> bool:
            assert proc.poll() is None, (work / "metrics-api.log").read_text()
            got = cp.kubectl(
                "get",
                "apiservice",
                "v1beta1.external.metrics.k8s.io",
                "-o",
                'jsonpath={.status.conditions[?(@.type=="Available")].status}',
            )
            return got.stdout.strip() == "True"

        try:
            wait_for("the APIService Available", available, timeout=90)
            yield Bed(cp, hubs, port, admin)
        finally:
            proc.terminate()
            proc.wait(10)
            log.close()


def _get_raw(bed: Bed, path: str, *, as_user: str | None = None) -> tuple[int, dict[str, Any]]:
    args = ["get", "--raw", path]
    if as_user:
        args += ["--as", as_user]
    proc = bed.cp.kubectl(*args, check=False)
    if proc.returncode == 0:
        return 0, json.loads(proc.stdout)
    return proc.returncode, {"stderr": proc.stderr}


def _value(bed: Bed, topic: str = TOPIC) -> str | None:
    code, body = _get_raw(bed, bed.backlog_path(topic=topic))
    if code != 0:
        return None
    (item,) = body["items"]
    return str(item["value"])


def test_the_backlog_through_the_api_server(bed: Bed) -> None:
    with bed.client() as client:
        client.create_subscription(TOPIC, SUB, type=SubscriptionType.SHARED)
        for i in range(12):
            client.publish(TOPIC, b"m%d" % i)
    code, discovery = _get_raw(bed, GROUP_PATH)
    assert code == 0, discovery
    assert {r["name"] for r in discovery["resources"]} == {
        "hedwig_subscription_backlog",
        "hedwig_subscription_oldest_unacked_seconds",
    }
    # ``describe`` alone lists only the caller's own subscriptions: another principal's (the
    # admin made this one) is not found until the API's user has ``admin`` on the topic.
    code, body = _get_raw(bed, bed.backlog_path())
    assert code != 0, body
    assert "no subscription 'workers'" in body["stderr"], body
    bed.let_read_every_subscription()
    wait_for("the backlog with admin", lambda: _get_raw(bed, bed.backlog_path())[0] == 0)
    code, body = _get_raw(bed, bed.backlog_path())
    assert code == 0, body
    assert body["kind"] == "ExternalMetricValueList"
    (item,) = body["items"]
    assert item["metricLabels"] == {"topic": TOPIC, "subscription": SUB}
    assert item["value"] == "12"
    # The autoscaler's user may (the chart's binding); a user without the role may not.
    code, body = _get_raw(bed, bed.backlog_path(), as_user=HPA_USER)
    assert code == 0, body
    code, body = _get_raw(bed, bed.backlog_path(), as_user="mallory")
    assert code != 0, body
    assert "forbidden" in body["stderr"].lower(), body


def _direct(bed: Bed, user: str) -> tuple[int, dict[str, Any]]:
    """The metrics API asked directly with the front proxy's certificate, naming ``user``."""
    pki = bed.cp.pki
    ctx = ssl.create_default_context(cafile=None)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.load_cert_chain(str(pki / "front-proxy-client.crt"), str(pki / "front-proxy-client.key"))
    req = urllib.request.Request(
        f"https://127.0.0.1:{bed.port}{bed.backlog_path()}", headers={"X-Remote-User": user}
    )
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_the_metrics_api_asks_the_api_server_who_may_read(bed: Bed) -> None:
    """Past the aggregator, the API's own SubjectAccessReview against the real RBAC."""
    status, body = _direct(bed, HPA_USER)
    assert status == 200, body
    status, body = _direct(bed, "mallory")
    assert status == 403, body
    assert body["reason"] == "Forbidden"
    assert "mallory" in body["message"]


def _workers(replicas: int, name: str = "workers") -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "worker",
                            "image": "hedwig-consumer:e2e",
                            "resources": {"requests": {"cpu": "10m"}},
                        }
                    ],
                    "tolerations": [{"operator": "Exists"}],
                },
            },
        },
    }


def _hpa(name: str = "workers", topic: str = HPA_TOPIC, min_replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": min_replicas,
            "maxReplicas": 6,
            "metrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {
                            "name": "hedwig_subscription_backlog",
                            "selector": {"matchLabels": {"topic": topic, "subscription": SUB}},
                        },
                        "target": {"type": "AverageValue", "averageValue": "4"},
                    },
                }
            ],
            # Scale in as soon as the backlog is gone (the default waits 300 s).
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}},
        },
    }


def _replicas(bed: Bed, name: str = "workers") -> int:
    got = bed.cp.kubectl_json("get", "deployment", name, "-n", NS)
    return int(got["spec"]["replicas"])


def _wait_replicas(bed: Bed, name: str, replicas: int, what: str) -> None:
    """Until the autoscaler has set ``replicas``; else fail with what it says of itself."""
    try:
        wait_for(what, lambda: _replicas(bed, name) == replicas, timeout=90, interval=1)
    except AssertionError as e:
        hpa = bed.cp.kubectl_json("get", "hpa", name, "-n", NS)
        raise AssertionError(f"{e}: {json.dumps(hpa.get('status'))}") from e


def test_an_hpa_scales_a_deployment_on_the_backlog(bed: Bed) -> None:
    bed.let_read_every_subscription()
    with bed.client() as client:
        client.create_subscription(HPA_TOPIC, SUB, type=SubscriptionType.SHARED)
        for i in range(12):
            client.publish(HPA_TOPIC, b"h%d" % i)
        assert _value(bed, HPA_TOPIC) == "12"
        bed.cp.apply([_workers(1), _hpa()])
        # 12 waiting at 4 a replica: 3 replicas.
        _wait_replicas(bed, "workers", 3, "scale-out to 3")
        hpa = bed.cp.kubectl_json("get", "hpa", "workers", "-n", NS)
        (current,) = hpa["status"]["currentMetrics"]
        assert current["external"]["metric"]["name"] == "hedwig_subscription_backlog"
        worker = client.subscribe(HPA_TOPIC, SUB, type=SubscriptionType.SHARED)
        for _ in range(12):
            worker.ack(worker.next(10))
        worker.close()
        wait_for("the backlog to drain", lambda: _value(bed, HPA_TOPIC) == "0", timeout=30)
        _wait_replicas(bed, "workers", 1, "scale-in to 1")
    events = bed.cp.kubectl_json("get", "events", "-n", NS)["items"]
    rescales = [
        e["message"]
        for e in events
        if e["involvedObject"]["kind"] == "HorizontalPodAutoscaler"
        and e["reason"] == "SuccessfulRescale"
    ]
    assert len(rescales) >= 2, rescales


def test_to_zero_when_idle_and_back_from_zero_on_new_messages(bed: Bed) -> None:
    bed.let_read_every_subscription()
    with bed.client() as client:
        client.create_subscription(ZERO_TOPIC, SUB, type=SubscriptionType.SHARED)
        wait_for("the idle backlog", lambda: _value(bed, ZERO_TOPIC) == "0", timeout=30)
        bed.cp.apply([_workers(1, "idle"), _hpa("idle", ZERO_TOPIC, min_replicas=0)])
        _wait_replicas(bed, "idle", 0, "scale-in to zero")
        for i in range(6):
            client.publish(ZERO_TOPIC, b"z%d" % i)
        # 6 waiting at 4 a replica: 2, from none.
        _wait_replicas(bed, "idle", 2, "scale-out from zero")
        worker = client.subscribe(ZERO_TOPIC, SUB, type=SubscriptionType.SHARED)
        for _ in range(6):
            worker.ack(worker.next(10))
        worker.close()
        _wait_replicas(bed, "idle", 0, "back to zero")


def test_the_charts_other_metrics_api_objects_pass_a_server_side_dry_run(bed: Bed) -> None:
    """What the module does not apply for real (its Deployment, NetworkPolicy and, secured as
    by default, its HedwigUser), as the chart renders them."""
    crds = crd_manifests()
    bed.cp.apply(crds)
    names = [f"crd/{c['metadata']['name']}" for c in crds]
    bed.cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
    rest = _chart_objects(kinds=("Deployment", "NetworkPolicy", "HedwigUser"), secured=True)
    assert sorted(o["kind"] for o in rest) == ["Deployment", "HedwigUser", "NetworkPolicy"]
    out = bed.cp.kubectl(
        "apply",
        "--dry-run=server",
        "-f",
        "-",
        input=json.dumps({"kind": "List", "apiVersion": "v1", "items": rest}),
    )
    assert out.stdout.count("(server dry run)") == 3, out.stdout


def test_an_unreadable_subscription_is_not_found(bed: Bed) -> None:
    selector = urllib.parse.quote(f"topic={TOPIC},subscription=nobody")
    path = f"{GROUP_PATH}/namespaces/{NS}/hedwig_subscription_backlog?labelSelector={selector}"
    code, body = _get_raw(bed, path)
    assert code != 0, body
    assert "(NotFound)" in body["stderr"], body
