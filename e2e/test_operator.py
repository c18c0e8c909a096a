"""The operator end to end, against a real API server (e2e/controlplane), with ZooKeeper and
hub processes running locally.

The operator runs as a local process under a ServiceAccount token bound to the shipped RBAC
(``operator/deploy/rbac.yaml``), so these tests also prove that RBAC is enough. kwok moves the
StatefulSet's pods to Running; the hubs that really serve are local ``hedwig hub`` processes
registered in the pool's region. Statically provisioned hostPath volumes (storage class
``e2e-static``) satisfy the pools' volume claims, as there is no provisioner.

Tests share one control plane, ZooKeeper and operator; each pool has its own region.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.secured_etcd import access_files

from controlplane import cluster
from hedwig.devcluster.cluster import HubProcess
from hedwig.devcluster.etcd import EtcdServer
from hedwig.devcluster.security import DevSecurity
from hedwig.devcluster.zookeeper import ZooKeeperServer, free_port
from hedwig.errors import QuotaExceededError
from hedwig.metadata import ReplicationConfig, TopicConfig
from hedwig_e2e import (
    ROOT,
    STORAGE_CLASS,
    OperatorProcess,
    Workload,
    control_plane_bins,
    install_operator_access,
    namespace_policy,
    publish_each,
    static_volume,
    topic_config,
    topic_exists,
    topic_owner,
    wait_for,
)

if importlib.util.find_spec("pytest_timeout") is not None:
    pytestmark = pytest.mark.timeout(300)

NS = "hedwig-e2e"
GROUP_VERSION = "hedwig.io/v1alpha1"
OPERATOR_SETTINGS = {
    "HEDWIG_OPERATOR_STATUS_INTERVAL_S": "1",
    "HEDWIG_OPERATOR_ACTIVATE_TIMEOUT_S": "15",
    "HEDWIG_OPERATOR_GRACEFUL_MOVE_TIMEOUT_S": "5",
    "HEDWIG_OPERATOR_RETRY_DELAY_S": "2",
}


@dataclass
class Bed:
    cp: cluster.ControlPlane
    zk: str
    operator: OperatorProcess
    workdir: Path
    hubs: list[HubProcess] = field(default_factory=list)
    volumes: int = 0

    # -- Kubernetes, as admin (the operator alone uses the ServiceAccount) -----------------
    def kubectl(self, *args: str, check: bool = True) -> Any:
        return self.cp.kubectl(*args, "-n", NS, check=check)

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        proc = self.kubectl("get", kind, name, "-o", "json", check=False)
        return json.loads(proc.stdout) if proc.returncode == 0 else None

    def status(self, kind: str, name: str) -> dict[str, Any]:
        return (self.get(kind, name) or {}).get("status") or {}

    def ready(self, kind: str, name: str) -> dict[str, Any]:
        for c in self.status(kind, name).get("conditions") or []:
            if c["type"] == "Ready":
                return dict(c)
        return {}

    def topic_condition(
        self, what: str, name: str, holds: Callable[[dict[str, Any]], bool], timeout: float
    ) -> dict[str, Any]:
        """Topic ``name``'s Ready condition, waited for until it ``holds``."""

        def check() -> dict[str, Any] | None:
            cond = self.ready("topic", name)
            return cond if holds(cond) else None

        return wait_for(what, check, timeout)

    def apply(self, manifest: dict[str, Any], check: bool = True) -> Any:
        return self.cp.apply(manifest, namespace=NS, check=check)

    def events(self, name: str, reason: str) -> list[dict[str, Any]]:
        items = json.loads(
            self.kubectl(
                "get", "events", "-o", "json", "--field-selector", f"involvedObject.name={name}"
            ).stdout
        )["items"]
        return [e for e in items if e["reason"] == reason]

    def describe(self) -> str:
        """The pods, claims, volumes and StatefulSets, and the namespace's recent events: what a
        failed wait on the cluster prints, so a flaky failure says which step stalled."""
        parts = [
            self.cp.kubectl("get", *what, check=False).stdout
            for what in (
                ("pods,pvc,statefulsets", "-n", NS, "-o", "wide"),
                ("pv", "-o", "wide"),
                ("events", "-n", NS, "--sort-by=.lastTimestamp"),
                (
                    "pods",
                    "-n",
                    NS,
                    "-o",
                    'jsonpath={range .items[*]}{.metadata.name} {.status.conditions}{"\\n"}{end}',
                ),
            )
        ]
        return "\n".join(parts)

    def add_volumes(self, n: int) -> None:
        """Static volumes for the pools' claims (no provisioner runs here)."""
        for _ in range(n):
            self.volumes += 1
            self.cp.apply(
                static_volume(
                    f"e2e-volume-{self.volumes}", self.workdir / f"volume-{self.volumes}", "1Gi"
                )
            )

    # -- hubs ---------------------------------------------------------------------------
    def start_hub(self, region: str, *, load_report_s: float | None = None) -> HubProcess:
        reports = ["--load-report-interval", str(load_report_s)] if load_report_s else []
        hub = HubProcess(
            self.zk,
            region,
            str(self.workdir / f"hub-{len(self.hubs)}"),
            session_timeout_s=4.0,
            extra_args=["--replication", "1/1/1", "--placement", "least-loaded", *reports],
        )
        self.hubs.append(hub)
        return hub.start()


def pool_manifest(name: str, replicas: int = 2, **spec: Any) -> dict[str, Any]:
    """A HubPool whose hubs are local open processes (``spec.security`` off, said explicitly:
    a pool without it is secured; e2e/test_security.py runs secured ones)."""
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "HubPool",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "image": "hedwig/hub:e2e",
            "region": name,
            "storage": {"size": "1Gi", "storageClassName": STORAGE_CLASS},
            "security": {"enabled": False},
            **spec,
        },
    }


def topic_manifest(name: str, pool: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Topic",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"pool": pool, **spec},
    }


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    bins = control_plane_bins()
    workdir = tmp_path_factory.mktemp("e2e-operator")
    with cluster.ControlPlane(bins=bins) as cp, ZooKeeperServer() as zk:
        cp.create_namespace(NS)
        kubeconfig = install_operator_access(cp, NS)
        operator = OperatorProcess(
            NS, cp.env(kubeconfig), workdir / "operator.log", free_port(), OPERATOR_SETTINGS
        )
        bed = Bed(cp, zk.address, operator, workdir)
        operator.start()
        try:
            yield bed
        finally:
            operator.stop()
            for hub in bed.hubs:
                hub.kill()
            print(f"operator log {operator.log_path}:\n{operator.tail(80)}")


@pytest.fixture(scope="module")
def alpha(bed: Bed) -> str:
    """Pool ``alpha``: 2 replicas, 2 hubs alive in region ``alpha``."""
    bed.add_volumes(2)
    bed.start_hub("alpha")
    bed.start_hub("alpha")
    bed.apply(pool_manifest("alpha", metadata={"url": bed.zk}))
    return "alpha"


def test_operator_rbac_is_least_privilege(bed: Bed) -> None:
    kc = bed.cp.token_kubeconfig(NS, "hedwig-operator")

    def can(*args: str) -> bool:
        proc = bed.cp.kubectl("auth", "can-i", *args, kubeconfig=kc, check=False)
        return proc.stdout.strip() == "yes"

    assert can("patch", "hubpools.hedwig.io", "-n", NS)
    assert can("patch", "topics.hedwig.io", "--subresource=status", "-n", NS)
    assert can("create", "statefulsets.apps", "-n", NS)
    assert can("create", "events", "-n", NS)
    assert not can("delete", "statefulsets.apps", "-n", NS)
    # A hub's external Service, deleted once its hub is gone (hedwig_operator/pruning.py).
    assert can("list", "services", "-n", NS)
    assert can("delete", "services", "-n", NS)
    assert not can("delete", "configmaps", "-n", NS)
    assert can("patch", "hedwigusers.hedwig.io", "--subresource=status", "-n", NS)
    assert can("watch", "hedwignamespaces.hedwig.io", "-n", NS)
    assert can("patch", "hedwignamespaces.hedwig.io", "--subresource=status", "-n", NS)
    assert not can("delete", "hedwignamespaces.hedwig.io", "-n", NS)
    assert can("get", "secrets", "-n", NS)  # a secured pool's CAs and certificates
    assert not can("list", "secrets", "-n", NS)
    assert not can("delete", "secrets", "-n", NS)
    assert not can("list", "pods", "-n", NS)
    assert not can("get", "topics.hedwig.io", "-n", "default")  # only where it is bound
    assert not can("create", "customresourcedefinitions.apiextensions.k8s.io")


def test_shipped_operator_deployment_passes_server_side_validation(bed: Bed) -> None:
    deployment = yaml.safe_load((ROOT / "operator" / "deploy" / "operator.yaml").read_text())
    deployment["metadata"]["namespace"] = NS
    bed.cp.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(deployment))
    assert bed.get("deployment", "hedwig-operator") is None  # a dry run creates nothing


def test_hubpool_becomes_statefulset_services_pdb_and_status(bed: Bed, alpha: str) -> None:
    pool = wait_for("the HubPool", lambda: bed.get("hubpool", alpha))
    uid = pool["metadata"]["uid"]
    names = {
        "statefulset": alpha,
        "service": alpha,
        "configmap": f"{alpha}-config",
        "poddisruptionbudget": alpha,
    }
    for kind, name in [*names.items(), ("service", f"{alpha}-headless")]:
        obj = wait_for(f"{kind} {name}", lambda k=kind, n=name: bed.get(k, n), timeout=30)
        (owner,) = obj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("HubPool", alpha, uid)
        assert owner["controller"] is True
    sts = bed.get("statefulset", alpha)
    assert sts is not None
    container = sts["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HEDWIG_ADVERTISE"] == f"$(POD_NAME).{alpha}-headless.{NS}.svc:4080"
    assert container["lifecycle"]["preStop"]["exec"]["command"][-1].endswith(
        "hedwig drain --socket /tmp/hedwig-drain.sock"
    )
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    headless = bed.get("service", f"{alpha}-headless")
    assert headless is not None
    assert headless["spec"]["clusterIP"] == "None"
    config = bed.get("configmap", f"{alpha}-config")
    assert config is not None
    assert config["data"]["HEDWIG_METADATA"] == bed.zk

    # kwok runs the pods; ZooKeeper has the local hubs; the status shows both.
    def settled() -> dict[str, Any] | None:
        s = bed.status("hubpool", alpha)
        return s if s.get("readyHubs") == 2 and s.get("aliveHubs") == 2 else None

    status = wait_for("2 ready pods and 2 alive hubs in the pool's status", settled, 90)
    assert status["replicas"] == 2
    assert status["region"] == alpha
    assert status["observedGeneration"] == pool["metadata"]["generation"]
    assert {h["address"] for h in status["hubs"]} == {
        h.address for h in bed.hubs if h.region == alpha
    }
    assert bed.ready("hubpool", alpha)["status"] == "True"
    table = bed.kubectl("get", "hp", alpha).stdout
    assert "READY HUBS" in table
    assert alpha in table
    # Open, as its manifest says (security.enabled false): its hubs are told so, and its
    # status says so.
    assert config["data"]["HEDWIG_INSECURE"] == "true"
    (secured,) = [c for c in status["conditions"] if c["type"] == "Secured"]
    assert (secured["status"], secured["reason"]) == ("False", "Insecure")
    assert "SECURED" in table


def test_a_pool_without_spec_security_is_stored_secured(bed: Bed) -> None:
    """The API server fills in ``security.enabled: true`` where a HubPool has no
    ``spec.security`` (the CRD's defaults), as the operator reads it; so a NodePort pool
    without it needs the advertised host a secured one does."""

    def dry_run(manifest: dict[str, Any], check: bool = True) -> Any:
        return bed.cp.kubectl(
            "apply", "--dry-run=server", "-n", NS, "-o", "json", "-f", "-",
            input=json.dumps(manifest), check=check,
        )  # fmt: skip

    bare = pool_manifest("bare", 0, metadata={"url": bed.zk})
    del bare["spec"]["security"]
    stored = json.loads(dry_run(bare).stdout)
    assert stored["spec"]["security"]["enabled"] is True
    assert stored["spec"]["security"]["audience"] == "hedwig"
    bare["spec"]["external"] = {"type": "NodePort", "nodePortBase": 31900}
    refused = dry_run(bare, check=False)
    assert refused.returncode != 0
    assert "needs external.advertisedHost" in refused.stderr
    open_ = pool_manifest(
        "bare", 0, metadata={"url": bed.zk}, external={"type": "NodePort", "nodePortBase": 31900}
    )
    assert json.loads(dry_run(open_).stdout)["spec"]["security"]["enabled"] is False
    assert bed.get("hubpool", "bare") is None  # a dry run creates nothing


def _etcd_access_secret(name: str, files: dict[str, bytes], pool: str) -> dict[str, Any]:
    """An access Secret its owner bound to ``pool`` (the label the operator asks for)."""
    data = {k: base64.b64encode(v).decode() for k, v in files.items()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"hedwig.io/store-access-for": pool},
        },
        "type": "Opaque",
        "data": data,
    }


def test_a_pool_on_a_secured_etcd(
    bed: Bed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pool whose store is etcd with TLS, client certificates and its own authentication:
    the hubs mount the access Secret the pool names, the operator reads it for its own
    connection and writes the Topic into etcd; a pool whose Secret has a wrong password gets
    its Topic refused by etcd, and says so in the Topic's condition."""
    security = DevSecurity.create(tmp_path / "security")
    server = EtcdServer(data_dir=str(tmp_path), security=security.etcd_security())
    server.start()
    files = access_files(security)
    # What the Secret's volume gives a hub pod (the hubs here are local processes).
    mounted = tmp_path / "etcd-access"
    mounted.mkdir()
    for name, value in files.items():
        (mounted / name).write_bytes(value)
    hub = HubProcess(
        server.url,
        "sec",
        str(tmp_path / "hub"),
        session_timeout_s=4.0,
        extra_args=["--replication", "1/1/1"],
        env={"HEDWIG_ETCD_DIR": str(mounted)},
    )
    bed.hubs.append(hub)
    try:
        hub.start()
        bed.add_volumes(1)
        bed.apply(_etcd_access_secret("etcd-access", files, "sec"))
        bed.apply(
            pool_manifest("sec", 1, metadata={"url": server.url, "secretName": "etcd-access"})
        )
        sts = wait_for("the StatefulSet", lambda: bed.get("statefulset", "sec"), 30)
        pod = sts["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["HEDWIG_ETCD_DIR"] == "/etc/hedwig/etcd"
        mount = next(m for m in container["volumeMounts"] if m["mountPath"] == "/etc/hedwig/etcd")
        volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
        assert volume["secret"]["secretName"] == "etcd-access"
        assert mount["readOnly"]

        bed.apply(topic_manifest("sec-orders", "sec", topicName="orders/secured"))
        cond = bed.topic_condition(
            "Topic sec-orders Ready", "sec-orders", lambda c: c.get("status") == "True", 60
        )
        assert cond["reason"] == "Owned"
        assert bed.status("topic", "sec-orders")["owner"] == hub.address
        monkeypatch.setenv("HEDWIG_ETCD_DIR", str(mounted))  # this process reads etcd too
        assert topic_exists(server.url, "sec", "orders/secured")
        monkeypatch.delenv("HEDWIG_ETCD_DIR")

        # A wrong password: etcd refuses the operator, and the Topic says why. (No replicas:
        # the pool's pod would take a static volume another test's pool counts on.)
        bad = {**files, "credentials": b"hedwig:wrong"}
        bed.apply(_etcd_access_secret("etcd-wrong", bad, "sec-wrong"))
        bed.apply(
            pool_manifest("sec-wrong", 0, metadata={"url": server.url, "secretName": "etcd-wrong"})
        )
        bed.apply(topic_manifest("sec-refused", "sec-wrong"))
        refused = bed.topic_condition(
            "Topic sec-refused refused by etcd",
            "sec-refused",
            lambda c: "refused user" in c.get("message", ""),
            60,
        )
        assert refused["status"] == "False"
    finally:
        for name in ("sec-refused", "sec-orders"):
            bed.kubectl("delete", "topic", name, "--wait=false", check=False)
        for name in ("sec-wrong", "sec"):
            bed.kubectl("delete", "hubpool", name, "--wait=false", check=False)
        hub.kill()
        server.stop()


def test_topics_get_their_znodes_and_an_owner(bed: Bed, alpha: str) -> None:
    bed.apply(
        topic_manifest(
            "orders",
            alpha,
            topicName="orders/eu",
            replication={"ensemble": 1, "writeQuorum": 1, "ackQuorum": 1},
            retention={"timeMs": 3600000, "sizeBytes": 1048576},
            maxMessageSizeBytes=4096,
        )
    )
    bed.apply(topic_manifest("payments", alpha))
    hubs = {h.address for h in bed.hubs if h.region == alpha}
    for name, topic in (("orders", "orders/eu"), ("payments", "payments")):
        cond = bed.topic_condition(
            f"Topic {name} Ready", name, lambda c: c.get("status") == "True", 60
        )
        assert cond["reason"] == "Owned"
        status = bed.status("topic", name)
        assert status["owner"] in hubs
        assert status["topicName"] == topic
        owner = topic_owner(bed.zk, alpha, topic)
        assert owner is not None
        assert owner.address == status["owner"]
    assert topic_config(bed.zk, alpha, "orders/eu") == TopicConfig(
        ReplicationConfig(1, 1, 1), 3600000, 1048576, 4096
    )
    assert topic_config(bed.zk, alpha, "payments") == TopicConfig()

    # A change propagates to the znode.
    bed.kubectl(
        "patch", "topic", "orders", "--type=merge", "-p", '{"spec":{"retention":{"timeMs":60000}}}'
    )
    wait_for(
        "the new retention in ZooKeeper",
        lambda: (
            (c := topic_config(bed.zk, alpha, "orders/eu")) is not None and c.retention_ms == 60000
        ),
        30,
    )
    wait_for(
        "observedGeneration 2",
        lambda: bed.status("topic", "orders").get("observedGeneration") == 2,
        30,
    )


def test_invalid_topics_are_refused_or_not_ready(bed: Bed, alpha: str) -> None:
    refused = bed.apply(
        topic_manifest(
            "bad-quorum", alpha, replication={"ensemble": 3, "writeQuorum": 2, "ackQuorum": 3}
        ),
        check=False,
    )
    assert refused.returncode != 0
    assert "ackQuorum <= writeQuorum <= ensemble" in refused.stderr
    refused = bed.apply(
        topic_manifest("bad-retention", alpha, retention={"timeMs": -5}), check=False
    )
    assert refused.returncode != 0
    assert "spec.retention.timeMs" in refused.stderr
    assert bed.get("topic", "bad-quorum") is None
    assert bed.get("topic", "bad-retention") is None

    bed.apply(topic_manifest("no-pool", "missing-pool"))
    bed.apply(topic_manifest("too-long", alpha, topicName="é" * 200))  # 400 bytes
    bed.apply(topic_manifest("control", alpha, topicName="tab\tname"))
    for name, reason, text in (
        ("no-pool", "PoolNotFound", "missing-pool"),
        ("too-long", "InvalidTopicName", "400 bytes"),
        ("control", "InvalidTopicName", "non-printable"),
    ):
        cond = wait_for(f"{name} not Ready", lambda n=name: bed.ready("topic", n), 30)
        assert (cond["status"], cond["reason"]) == ("False", reason), cond
        assert text in cond["message"]

    # Two resources claiming one topic: the later one is refused.
    bed.apply(topic_manifest("payments-again", alpha, topicName="payments"))
    cond = wait_for("the conflict", lambda: bed.ready("topic", "payments-again"), 30)
    assert (cond["status"], cond["reason"]) == ("False", "ResourceConflict")
    assert f"{NS}/payments" in cond["message"]
    assert bed.ready("topic", "payments")["status"] == "True"

    # topicName and pool cannot change.
    changed = bed.kubectl(
        "patch",
        "topic",
        "payments",
        "--type=merge",
        "-p",
        '{"spec":{"topicName":"other"}}',
        check=False,
    )
    assert changed.returncode != 0
    assert "topicName cannot change" in changed.stderr


def test_topic_deletion_follows_the_deletion_policy(bed: Bed, alpha: str) -> None:
    bed.apply(topic_manifest("kept", alpha))
    bed.apply(topic_manifest("dropped", alpha, deletionPolicy="Delete"))
    for name in ("kept", "dropped"):
        wait_for(f"{name} Ready", lambda n=name: bed.ready("topic", n).get("status") == "True", 60)
    assert topic_exists(bed.zk, alpha, "kept")
    assert topic_exists(bed.zk, alpha, "dropped")
    assert "hedwig.io/topic-data" in bed.get("topic", "dropped")["metadata"]["finalizers"]
    assert not bed.get("topic", "kept")["metadata"].get("finalizers")

    bed.kubectl("delete", "topic", "kept", "--wait=true", "--timeout=30s")
    assert topic_exists(bed.zk, alpha, "kept")

    bed.kubectl("delete", "topic", "dropped", "--wait=true", "--timeout=60s")
    assert not topic_exists(bed.zk, alpha, "dropped")
    assert bed.events("dropped", "TopicDataDeleted")

    # The finalizer can be turned off; the data then stays.
    bed.apply(topic_manifest("dropped", alpha, deletionPolicy="Delete"))
    wait_for("dropped Ready again", lambda: bed.ready("topic", "dropped").get("status") == "True")
    bed.kubectl("annotate", "topic", "dropped", "hedwig.io/finalizer=false")
    wait_for(
        "the finalizer removed",
        lambda: not (bed.get("topic", "dropped") or {}).get("metadata", {}).get("finalizers"),
        30,
    )
    bed.kubectl("delete", "topic", "dropped", "--wait=true", "--timeout=30s")
    assert topic_exists(bed.zk, alpha, "dropped")


def namespace_manifest(resource: str, pool: str, name: str, **spec: Any) -> dict[str, Any]:
    """HedwigNamespace ``resource`` declaring namespace ``name`` (tenant/namespace)."""
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "HedwigNamespace",
        "metadata": {"name": resource, "namespace": NS},
        "spec": {"pool": pool, "name": name, **spec},
    }


def test_a_hedwig_namespace_holds_its_topics_to_a_quota_changed_live(bed: Bed, alpha: str) -> None:
    """A HedwigNamespace with maxTopics 3: topics made through a real hub stop at 3 with
    QUOTA_EXCEEDED (another namespace's are not limited), the status counts 3 of 3; maxTopics
    patched to 5 admits two more within seconds, with no hub restarted; deleting the resource
    deletes the policy."""
    serving = [h for h in bed.hubs if h.region == alpha and h.proc is not None]
    hubs = [h.address for h in serving]
    pids = [h.proc.pid for h in serving if h.proc is not None]
    refused = bed.apply(namespace_manifest("bad-name", alpha, "team/.."), check=False)
    assert refused.returncode != 0
    assert "neither the tenant nor the namespace may be . or .." in refused.stderr
    refused = bed.apply(namespace_manifest("bad-max", alpha, "team/x", maxTopics=-1), check=False)
    assert refused.returncode != 0
    assert "spec.maxTopics" in refused.stderr

    bed.apply(
        namespace_manifest(
            "team-a",
            alpha,
            name="team/a",
            maxTopics=3,
            topicDefaults={"retention": {"timeMs": 60000}},
        )
    )
    wait_for(
        "HedwigNamespace team-a Ready",
        lambda: bed.ready("hedwignamespace", "team-a").get("status") == "True",
        30,
    )
    policy = namespace_policy(bed.zk, alpha, "team/a")
    assert policy is not None
    assert (policy.max_topics, policy.topics.retention_ms) == (3, 60000)

    got = publish_each(hubs, [f"team/a/t{i}" for i in range(4)] + [f"t2/ns/x{i}" for i in range(5)])
    assert [t for t, e in got.items() if e is not None] == ["team/a/t3"], got
    quota = got["team/a/t3"]
    assert isinstance(quota, QuotaExceededError), repr(quota)
    assert (quota.namespace, quota.quota, quota.limit) == ("team/a", "max_topics", 3)
    assert topic_config(bed.zk, alpha, "team/a/t3") is None  # nothing made of the refused one

    def usage(topics: int, limit: int) -> dict[str, Any] | None:
        s = bed.status("hedwignamespace", "team-a")
        ok = s.get("usage") == {"topics": topics} and (s.get("limits") or {}).get("topics") == limit
        return s if ok else None

    wait_for("status.usage.topics 3 of 3", lambda: usage(3, 3), 30)
    table = bed.kubectl("get", "hns", "team-a").stdout
    assert "MAX TOPICS" in table
    assert "team/a" in table

    bed.kubectl(
        "patch", "hedwignamespace", "team-a", "--type=merge", "-p", '{"spec":{"maxTopics":5}}'
    )
    patched = time.monotonic()

    def admitted() -> bool:
        return publish_each(hubs, ["team/a/t3"])["team/a/t3"] is None

    wait_for("team/a/t3 admitted under maxTopics 5", admitted, 15)
    took = time.monotonic() - patched
    got = publish_each(hubs, ["team/a/t4", "team/a/t5"])
    assert got["team/a/t4"] is None
    assert isinstance(got["team/a/t5"], QuotaExceededError)
    print(f"maxTopics 3 -> 5 applied by the hubs {took:.1f} s after the patch")
    assert took < 10
    # The same hub processes, none restarted: they watch the policies.
    assert [h.proc.pid for h in serving if h.proc is not None and h.proc.poll() is None] == pids
    wait_for("status.usage.topics 5 of 5", lambda: usage(5, 5), 30)
    cond = bed.ready("hedwignamespace", "team-a")
    assert "5 of 5 topics" in cond["message"]
    assert bed.status("hedwignamespace", "team-a")["observedGeneration"] == 2

    bed.kubectl("delete", "hedwignamespace", "team-a", "--wait=true", "--timeout=60s")
    assert namespace_policy(bed.zk, alpha, "team/a") is None
    assert bed.events("team-a", "NamespacePolicyDeleted")
    # Without its policy the namespace has no quota: a sixth topic is made.
    assert publish_each(hubs, ["team/a/t5"])["team/a/t5"] is None


def test_scaling_the_pool(bed: Bed, alpha: str) -> None:
    bed.add_volumes(1)
    bed.kubectl("scale", "hubpool", alpha, "--replicas=3")
    wait_for(
        "3 replicas in the StatefulSet",
        lambda: (bed.get("statefulset", alpha) or {}).get("spec", {}).get("replicas") == 3,
    )
    wait_for(
        "3 ready hubs in the status", lambda: bed.status("hubpool", alpha).get("readyHubs") == 3, 90
    )
    assert bed.status("hubpool", alpha)["replicas"] == 3
    bed.kubectl("scale", "hubpool", alpha, "--replicas=1")
    wait_for(
        "1 pod left",
        lambda: (
            len(
                json.loads(
                    bed.kubectl(
                        "get", "pods", "-l", f"app.kubernetes.io/instance={alpha}", "-o", "json"
                    ).stdout
                )["items"]
            )
            == 1
        ),
        90,
    )
    wait_for("status replicas 1", lambda: bed.status("hubpool", alpha).get("replicas") == 1)


def test_external_services_follow_the_pools_size(bed: Bed) -> None:
    """Scaled in, a pool loses the external Service of the hub that went, once its pod is
    gone; without spec.external, all of them."""
    pool = "ext"
    bed.add_volumes(3)
    external = {"type": "NodePort", "nodePortBase": 31910}
    bed.apply(pool_manifest(pool, 3, metadata={"url": bed.zk}, external=external))

    def pods() -> set[str]:
        listed = bed.kubectl(
            "get", "pods", "-l", f"app.kubernetes.io/instance={pool}", "-o", "json"
        )
        return {p["metadata"]["name"] for p in json.loads(listed.stdout)["items"]}

    def external_services() -> list[str]:
        listed = json.loads(
            bed.kubectl("get", "services", "-l", f"hedwig.io/pool={pool}", "-o", "json").stdout
        )["items"]
        return sorted(
            s["metadata"]["name"] for s in listed if s["metadata"]["name"].endswith("-external")
        )

    names = [f"{pool}-{i}-external" for i in range(3)]
    wait_for("3 external Services", lambda: external_services() == names, 60)
    third = bed.get("service", names[2])
    assert third is not None
    assert third["spec"]["ports"][0]["nodePort"] == 31912
    wait_for("3 pods", lambda: pods() == {f"{pool}-{i}" for i in range(3)}, 90)

    def deleted() -> bool:
        services = external_services()
        if names[2] in services:
            return False
        # Read after the Services: a pod seen now was there when its Service was gone.
        assert f"{pool}-2" not in pods(), "the hub's Service went before its pod"
        return services == names[:2]

    bed.kubectl("scale", "hubpool", pool, "--replicas=2")
    wait_for("ext-2-external deleted", deleted, 90, interval=0.2)
    (event,) = bed.events(pool, "ExternalServicesRemoved")
    assert names[2] in event["message"]
    # The pool's other Services stay.
    assert bed.get("service", pool) is not None
    assert bed.get("service", f"{pool}-headless") is not None

    bed.kubectl(
        "patch", "hubpool", pool, "--type=json", "-p", '[{"op":"remove","path":"/spec/external"}]'
    )
    wait_for("every external Service deleted", lambda: external_services() == [], 60)
    assert bed.get("service", pool) is not None


def test_image_change_rolls_the_statefulset(bed: Bed, alpha: str) -> None:
    bed.kubectl(
        "patch", "hubpool", alpha, "--type=merge", "-p", '{"spec":{"image":"hedwig/hub:e2e-2"}}'
    )

    def rolled() -> bool:
        pods = json.loads(
            bed.kubectl(
                "get", "pods", "-l", f"app.kubernetes.io/instance={alpha}", "-o", "json"
            ).stdout
        )
        images = {p["spec"]["containers"][0]["image"] for p in pods["items"]}
        return images == {"hedwig/hub:e2e-2"}

    wait_for("the pods to run the new image", rolled, 90)
    sts = bed.get("statefulset", alpha)
    assert sts is not None
    assert sts["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/version"] == "e2e-2"


@pytest.mark.parametrize(
    ("pool", "graceful"), [("beta", True), ("gamma", False)], ids=["graceful", "forced"]
)
def test_skewed_load_moves_topics_without_losing_acknowledged_messages(
    bed: Bed, pool: str, graceful: bool
) -> None:
    """graceful: the owner hands over (when the hub supports it); forced: the operator
    deletes the owner znode and the owner's watch makes it stop."""
    bed.add_volumes(2)
    first = bed.start_hub(pool)
    bed.apply(
        pool_manifest(
            pool,
            metadata={"url": bed.zk},
            rebalancing={
                "intervalSeconds": 2,
                "confirmations": 1,
                "maxMovesPerCycle": 1,
                "cooldownSeconds": 600,
                "minTopicRate": 1,
                "gracefulHandOff": graceful,
            },
        )
    )
    topics = [f"{pool}-{x}" for x in "abcd"]
    for t in topics:
        bed.apply(topic_manifest(t, pool))
    for t in topics:
        wait_for(f"{t} owned", lambda n=t: bed.status("topic", n).get("owner") == first.address, 60)
    workload = Workload([first.address], topics, rate_per_topic=20).start()
    try:
        wait_for("messages flowing", lambda: workload.acked_count() > 100, 60)
        second = bed.start_hub(pool)  # idle: the policy pulls load onto it

        def moved() -> list[str]:
            return [
                t
                for t in topics
                if (o := topic_owner(bed.zk, pool, t)) is not None and o.address == second.address
            ]

        on_second = wait_for("a topic re-owned by the new hub", moved, 90)
        before = workload.acked_count()
        wait_for(
            "publishing to go on after the move", lambda: workload.acked_count() > before + 100, 60
        )
    finally:
        missing = workload.stop()
    assert all(not m for m in missing.values()), {t: len(m) for t, m in missing.items()}

    moved_topic = on_second[0]
    status = bed.status("topic", moved_topic)
    last_move = wait_for(
        "the Topic's lastMove", lambda: bed.status("topic", moved_topic).get("lastMove"), 30
    )
    assert last_move["from"] == first.address
    assert last_move["method"] == ("graceful" if graceful else "forced") or (
        graceful and last_move["method"] == "forced"  # a hub without hand-off support
    )
    assert "msg/s" in last_move["reason"]
    assert (
        status["owner"] == second.address
        or bed.status("topic", moved_topic)["owner"] == second.address
    )
    topic_events = wait_for(
        "a TopicMoved event on the Topic", lambda: bed.events(moved_topic, "TopicMoved"), 30
    )
    assert "msg/s" in topic_events[0]["message"]
    assert bed.events(pool, "TopicMoved")
    pool_status = bed.status("hubpool", pool)
    assert pool_status["totalMoves"] >= 1
    assert pool_status["lastMoves"]["moves"]
    pool_events = bed.events(pool, "TopicMoved")
    assert any(repr(moved_topic) in e["message"] for e in pool_events)


def test_a_topic_whose_subscribers_overload_its_hub_is_fanned_out(bed: Bed) -> None:
    """The operator's scaling policy (``rebalancing.fanOut``): a Topic whose subscribers alone
    take most of its hub (here a hub handles 200 msg/s; one topic at 20 msg/s in goes out to 12
    subscribers, 240 msg/s) is spread over delivery hubs; its status shows them, a ModeChanged
    Event says why, and every subscriber gets every acknowledged message through the switch."""
    pool = "hot"
    # No pods: the hubs that serve are local processes, and the pool's volumes would be taken
    # from the static ones the other tests count on.
    hubs = [bed.start_hub(pool, load_report_s=1) for _ in range(3)]
    bed.apply(
        pool_manifest(
            pool,
            replicas=0,
            metadata={"url": bed.zk},
            rebalancing={
                "intervalSeconds": 2,
                "confirmations": 2,
                "maxMovesPerCycle": 0,
                "cooldownSeconds": 600,
                "hubCapacity": 200,
            },
        )
    )
    topic = "hot-subscribed"
    bed.apply(topic_manifest(topic, pool, scaling={"maxHubs": 2}))
    owner = wait_for(f"{topic} owned", lambda: bed.status("topic", topic).get("owner"), 60)
    workload = Workload([h.address for h in hubs], [topic], rate_per_topic=20, subscribers=12)
    workload.start()
    try:
        plan = wait_for(
            "the Topic's plan to be fan-out",
            lambda: (p := bed.status("topic", topic).get("plan")) and p["mode"] == "fanOut" and p,
            120,
        )
        assert len(plan["hubs"]) == 2, plan
        assert owner not in plan["hubs"], plan
        before = workload.acked_count()
        wait_for("publishing to go on", lambda: workload.acked_count() > before + 100, 60)
    finally:
        missing = workload.stop()
    assert all(not m for m in missing.values()), {t: len(m) for t, m in missing.items()}
    events = wait_for("a ModeChanged event", lambda: bed.events(topic, "ModeChanged"), 30)
    assert "msg/s" in events[0]["message"]
    assert "delivery hubs" in events[0]["message"]
    assert any(repr(topic) in e["message"] for e in bed.events(pool, "ModeChanged"))


def test_rebalancing_waits_while_the_statefulset_rolls_out(bed: Bed) -> None:
    # A third hub whose volume does not exist yet: its pod stays Pending, the rollout cannot
    # settle, and rebalancing must wait for it.
    bed.kubectl("scale", "hubpool", "gamma", "--replicas=3")
    last = wait_for(
        "lastRebalance RolloutInProgress",
        lambda: (
            (r := bed.status("hubpool", "gamma").get("lastRebalance", {})).get("result")
            == "RolloutInProgress"
            and r
        ),
        30,
        interval=0.2,
    )
    assert "of 3 pods" in last["message"]
    bed.add_volumes(1)
    try:
        wait_for(
            "rebalancing to resume once the pods are ready",
            lambda: (
                bed.status("hubpool", "gamma").get("lastRebalance", {}).get("result")
                not in (None, "RolloutInProgress")
            ),
            180,
            interval=0.2,
        )
    except AssertionError:
        print(bed.status("hubpool", "gamma"), bed.describe(), sep="\n")
        raise


def test_paused_pool_does_not_rebalance(bed: Bed) -> None:
    bed.kubectl("annotate", "hubpool", "beta", "hedwig.io/rebalance-paused=true")
    wait_for(
        "lastRebalance Paused",
        lambda: bed.status("hubpool", "beta").get("lastRebalance", {}).get("result") == "Paused",
        30,
    )


def test_deleting_the_pool_removes_its_children(bed: Bed, alpha: str) -> None:
    bed.kubectl("delete", "hubpool", alpha, "--wait=true", "--timeout=60s")
    for kind, name in (
        ("statefulset", alpha),
        ("service", alpha),
        ("service", f"{alpha}-headless"),
        ("configmap", f"{alpha}-config"),
        ("poddisruptionbudget", alpha),
    ):
        wait_for(
            f"{kind} {name} garbage-collected", lambda k=kind, n=name: bed.get(k, n) is None, 60
        )
    cond = bed.topic_condition(
        "orders to notice", "orders", lambda c: c.get("reason") == "PoolNotFound", 30
    )
    assert cond["status"] == "False"
    # The topic's data stays: deleting a pool deletes no topic.
    assert topic_exists(bed.zk, alpha, "orders/eu")
