"""The chart, statically: lint, render, labels, the operator's RBAC and Deployment against
operator/deploy, the CRDs against crds/, the values schema, ZooKeeper and NetworkPolicies.
The server-side checks (dry run, helm install, the operator reconciling the chart's HubPool)
are e2e/test_chart.py."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.tools import CHART, CI_VALUES, ROOT, find, helm, one, render, render_error

FULL = CHART / "ci" / "full-values.yaml"
EXTERNAL_ZK = CHART / "ci" / "external-zookeeper-values.yaml"
RECOMMENDED_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/component",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/managed-by",
)


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_ci_values_files_exist() -> None:
    assert {p.name for p in CI_VALUES} >= {"full-values.yaml", "external-zookeeper-values.yaml"}


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=lambda v: v.name if v else "defaults")
def test_helm_lint_strict(values: Path | None) -> None:
    args: list[str | Path] = ["lint", "--strict", CHART]
    if values:
        args += ["-f", values]
    out = helm(*args).stdout
    assert "0 chart(s) failed" in out, out


def test_chart_crds_are_the_repository_crds() -> None:
    ours = {p.name: p.read_bytes() for p in (CHART / "crds").glob("*.yaml")}
    theirs = {p.name: p.read_bytes() for p in (ROOT / "crds").glob("*.yaml")}
    assert ours == theirs, (
        "charts/hedwig/crds/ differs from crds/: cp crds/*.yaml charts/hedwig/crds/"
    )


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=lambda v: v.name if v else "defaults")
def test_every_object_and_pod_template_has_the_recommended_labels(values: Path | None) -> None:
    objects = render([values] if values else [])
    assert objects
    for obj in objects:
        labels = obj["metadata"].get("labels", {})
        missing = [k for k in RECOMMENDED_LABELS if k not in labels]
        assert not missing, f"{obj['kind']} {obj['metadata']['name']} lacks {missing}"
        assert labels["app.kubernetes.io/part-of"] == "hedwig"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        template = obj.get("spec", {}).get("template")
        if template:
            pod_labels = template["metadata"]["labels"]
            assert all(k in pod_labels for k in RECOMMENDED_LABELS), obj["metadata"]["name"]
            selector = obj["spec"]["selector"]["matchLabels"]
            assert selector.items() <= pod_labels.items()
            assert "app.kubernetes.io/version" not in selector  # selectors are immutable


def test_default_release_installs_operator_zookeeper_and_a_pool() -> None:
    objects = render()
    kinds = sorted({o["kind"] for o in objects})
    assert kinds == [
        "ClusterRole",
        "Deployment",
        "HubPool",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "RoleBinding",
        "Secret",
        "Service",
        "ServiceAccount",
        "StatefulSet",
    ]
    # Monitoring is opt-in (its CRDs may be missing); NetworkPolicies are on: without them
    # every pod of the cluster reaches ZooKeeper and the hubs.
    assert not find(objects, "PrometheusRule")
    assert {p["metadata"]["name"] for p in find(objects, "NetworkPolicy")} == {
        "hedwig-hubs",
        "hedwig-zookeeper",
        "hedwig-operator",
    }


# ------------------------------------------------------------------------------ operator


def _shipped(kind: str) -> dict[str, Any]:
    docs = _docs(ROOT / "operator" / "deploy" / "rbac.yaml")
    docs += _docs(ROOT / "operator" / "deploy" / "operator.yaml")
    (found,) = [d for d in docs if d["kind"] == kind]
    return found


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=lambda v: v.name if v else "defaults")
def test_cluster_role_rules_are_the_shipped_rbac(values: Path | None) -> None:
    """The chart's RBAC cannot drift from operator/deploy/rbac.yaml, the rules the operator's
    end-to-end tests run under."""
    role = one(render([values] if values else []), "ClusterRole")
    assert role["rules"] == _shipped("ClusterRole")["rules"]


def test_operator_watches_the_release_namespace_by_default() -> None:
    objects = render(namespace="messaging")
    binding = one(objects, "RoleBinding")
    role = one(objects, "ClusterRole")
    account = one(objects, "ServiceAccount")
    assert binding["metadata"]["namespace"] == "messaging"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "messaging"}
    ]
    assert not find(objects, "ClusterRoleBinding")
    deployment = one(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert pod["containers"][0]["args"][0] == "--namespace=messaging"


def test_operator_watching_several_namespaces_or_all() -> None:
    objects = render([FULL])
    bindings = find(objects, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["hedwig", "hedwig-apps"]
    args = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a for a in args if a.startswith("--namespace")] == [
        "--namespace=hedwig",
        "--namespace=hedwig-apps",
    ]

    objects = render([EXTERNAL_ZK])
    assert not find(objects, "RoleBinding")
    binding = one(objects, "ClusterRoleBinding")
    assert binding["subjects"][0]["namespace"] == "hedwig"
    args = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [a for a in args if a.startswith("--namespace")]


def test_operator_deployment_keeps_the_reference_deployments_choices() -> None:
    reference = _shipped("Deployment")
    ours = one(render(), "Deployment")
    assert ours["spec"]["replicas"] == reference["spec"]["replicas"] == 1
    assert ours["spec"]["strategy"] == reference["spec"]["strategy"]
    ref_pod, pod = reference["spec"]["template"]["spec"], ours["spec"]["template"]["spec"]
    assert ref_pod["securityContext"].items() <= pod["securityContext"].items()
    (ref_c,) = ref_pod["containers"]
    (c,) = pod["containers"]
    assert c["securityContext"] == ref_c["securityContext"]
    assert c["ports"][0]["containerPort"] == ref_c["ports"][0]["containerPort"] == 8080
    assert c["livenessProbe"]["httpGet"] == ref_c["livenessProbe"]["httpGet"]
    assert "--liveness=http://0.0.0.0:8080/healthz" in c["args"]
    assert c["image"] == "hedwig-operator:0.1.0"  # appVersion by default
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    ref_env = {e["name"]: e["value"] for e in ref_c["env"] if "value" in e}
    assert env["HEDWIG_OPERATOR_STATUS_INTERVAL_S"] == "15"
    # Both read ZooKeeper's admin digest from the same place (the operator makes secured
    # pools' regions with it), mounted from the ZooKeeper admin Secret.
    digest = "HEDWIG_ZK_ADMIN_DIGEST_FILE"
    assert env[digest] == ref_env[digest] == "/var/run/secrets/hedwig-zookeeper-admin/digest"
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    ref_mounts = {m["name"]: m["mountPath"] for m in ref_c["volumeMounts"]}
    assert mounts["zookeeper-admin"] == ref_mounts["zookeeper-admin"]


def test_image_digest_wins_over_the_tag() -> None:
    digest = "sha256:" + "ab" * 32
    objects = render(sets=[f"operator.image.digest={digest}", f"hub.image.digest={digest}"])
    c = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == f"hedwig-operator@{digest}"
    assert one(objects, "HubPool")["spec"]["image"] == f"hedwig-hub@{digest}"


# ------------------------------------------------------------------------------ HubPool


def _crd_spec_schema() -> dict[str, Any]:
    crd = yaml.safe_load((ROOT / "crds" / "hubpools.hedwig.io.yaml").read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema["properties"]["spec"]  # type: ignore[no-any-return]


def _openapi_to_jsonschema(node: Any) -> Any:
    """Drop what JSON Schema does not know (x-kubernetes-*): CEL rules the API server checks."""
    if isinstance(node, dict):
        return {
            k: _openapi_to_jsonschema(v)
            for k, v in node.items()
            if not k.startswith("x-kubernetes")
        }
    if isinstance(node, list):
        return [_openapi_to_jsonschema(v) for v in node]
    return node


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=lambda v: v.name if v else "defaults")
def test_default_hubpool_matches_the_crd(values: Path | None) -> None:
    import jsonschema

    pool = one(render([values] if values else []), "HubPool")
    assert pool["apiVersion"] == "hedwig.io/v1alpha1"
    jsonschema.validate(pool["spec"], _openapi_to_jsonschema(_crd_spec_schema()))


def test_a_pool_on_etcd() -> None:
    """With hubPool.metadata.url the pool names its store by URL (an existing etcd), and no
    ZooKeeper is deployed."""
    import jsonschema

    url = "etcd://etcd.db.svc:2379/hedwig"
    objects = render(sets=[f"hubPool.metadata.url={url}", "zookeeper.enabled=false"])
    spec = one(objects, "HubPool")["spec"]
    assert spec["metadata"] == {"url": url, "sessionTimeoutSeconds": 6}
    jsonschema.validate(spec, _openapi_to_jsonschema(_crd_spec_schema()))
    assert not [
        o for o in objects if o["kind"] == "StatefulSet" and "zookeeper" in o["metadata"]["name"]
    ]
    secured = render(
        sets=[
            f"hubPool.metadata.url={url}",
            "hubPool.metadata.secretName=etcd-access",
            "zookeeper.enabled=false",
        ]
    )
    spec = one(secured, "HubPool")["spec"]
    assert spec["metadata"]["secretName"] == "etcd-access"
    jsonschema.validate(spec, _openapi_to_jsonschema(_crd_spec_schema()))


def test_security_is_on_by_default_and_the_operator_can_prove_who_it_is() -> None:
    objects = render(namespace="hw")
    security = one(objects, "HubPool")["spec"]["security"]
    assert security["enabled"] is True and security["audience"] == "hedwig"
    operator = one(objects, "Deployment", "hedwig-operator")["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in operator["containers"][0]["env"]}
    assert env["HEDWIG_OPERATOR_PRINCIPAL"] == "system:serviceaccount:hw:hedwig-operator"
    (volume,) = [v for v in operator["volumes"] if v["name"] == "hedwig-token"]
    (source,) = volume["projected"]["sources"]
    assert source["serviceAccountToken"]["audience"] == "hedwig"
    mount = operator["containers"][0]["volumeMounts"][0]
    assert mount["mountPath"] == "/var/run/secrets/hedwig"  # where ClientSecurity looks


def test_hubpool_uses_the_chart_zookeeper_or_the_external_one() -> None:
    objects = render(namespace="hw")
    pool = one(objects, "HubPool")
    servers = [
        f"hedwig-zookeeper-{i}.hedwig-zookeeper-headless.hw.svc.cluster.local:2181"
        for i in range(3)
    ]
    assert pool["spec"]["metadata"]["url"] == ",".join(servers)
    zk = one(objects, "StatefulSet", "hedwig-zookeeper")
    env = {e["name"]: e["value"] for e in zk["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["ZOO_SERVERS"].split() == [
        f"server.{i + 1}={s.removesuffix(':2181')}:2888:3888;2181" for i, s in enumerate(servers)
    ]
    assert env["ZOO_STANDALONE_ENABLED"] == "false"
    assert "metricsProvider.httpPort=7000" in env["ZOO_CFG_EXTRA"]
    assert zk["spec"]["serviceName"] == "hedwig-zookeeper-headless"
    headless = one(objects, "Service", "hedwig-zookeeper-headless")
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert one(objects, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1

    objects = render([EXTERNAL_ZK])
    assert not find(objects, "StatefulSet") and not find(objects, "PodDisruptionBudget")
    assert one(objects, "HubPool")["spec"]["metadata"]["url"].startswith("zk-0.zk.infra.svc")


def test_single_zookeeper_server_runs_standalone() -> None:
    zk = one(render(sets=["zookeeper.replicas=1"]), "StatefulSet")
    env = {e["name"]: e["value"] for e in zk["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["ZOO_STANDALONE_ENABLED"] == "true"
    assert env["ZOO_SERVERS"].count("server.") == 1


def test_pool_can_be_left_out() -> None:
    assert not find(render(sets=["hubPool.enabled=false"]), "HubPool")


# ------------------------------------------------------------------------------ schema


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        (["zookeeper.replicas=2"], "'/zookeeper/replicas': value must be one of 1, 3, 5, 7, 9"),
        (["hubPool.replicas=-1"], "'/hubPool/replicas': minimum: got -1, want 0"),
        (
            ["operator.image.pullPolicy=Sometimes"],
            "'/operator/image/pullPolicy': value must be one of",
        ),
        (["operatr.enabled=true"], "additional properties 'operatr' not allowed"),
        (["hubPool.storag.size=1Gi"], "additional properties 'storag' not allowed"),
        (["zookeeper.enabled=false"], "'/zookeeper/external/connect': minLength: got 0, want 1"),
        (["hubPool.name=Bad_Name"], "'/hubPool/name': 'Bad_Name' does not match pattern"),
        (["hubPool.placement=nearest"], "'/hubPool/placement': value must be one of"),
        (
            ["hubPool.rebalancing.overloadMargin=20"],
            "'/hubPool/rebalancing/overloadMargin': maximum",
        ),
        (
            ["hubPool.rebalancing.intervalSecond=5"],
            "additional properties 'intervalSecond' not allowed",
        ),
        (["hubPool.storage.size=lots"], "'/hubPool/storage/size': 'lots' does not match pattern"),
        (
            ["metrics.prometheusRule.rules.hubDown.for=soon"],
            "'/metrics/prometheusRule/rules/hubDown/for'",
        ),
        (["metrics.prometheusRule.rules.hubDown.severity=page"], "value must be one of 'critical'"),
        (["operator.image.digest=latest"], "'/operator/image/digest': 'latest' does not match"),
        (["zookeeper.metrics.port=2181"], "'/zookeeper/metrics/port'"),
    ],
)
def test_schema_rejects_bad_values_with_a_clear_message(sets: list[str], expected: str) -> None:
    error = render_error(sets=sets)
    assert "values don't meet the specifications of the schema" in error
    assert expected in error, error


def test_schema_rejects_quorums_out_of_range(tmp_path: Path) -> None:
    values = tmp_path / "v.yaml"
    values.write_text("hubPool:\n  replication: {ensemble: 3, writeQuorum: 0, ackQuorum: 1}\n")
    assert "writeQuorum" in render_error([values])
    values.write_text(
        "metrics:\n  prometheusRule:\n    rules:\n      imbalance: {enabled: true, ratio: 0.5}\n"
    )
    assert "'/metrics/prometheusRule/rules/imbalance/ratio': exclusiveMinimum" in render_error(
        [values]
    )


def test_both_monitors_at_once_are_refused() -> None:
    error = render_error(
        sets=["metrics.serviceMonitor.enabled=true", "metrics.podMonitor.enabled=true"]
    )
    assert "enable one of metrics.serviceMonitor and metrics.podMonitor" in error


def test_schema_rebalancing_is_the_crds() -> None:
    """The schema's hubPool.rebalancing is the CRD's, minus defaults (the CRD applies them)."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    ours = schema["properties"]["hubPool"]["properties"]["rebalancing"]

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: strip(v)
                for k, v in node.items()
                if k != "default"
                and k != "additionalProperties"
                and not k.startswith("x-kubernetes")
            }
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    assert strip(ours) == strip(copy.deepcopy(_crd_spec_schema()["properties"]["rebalancing"]))
    # spec.autoscaling likewise (its own strict object: a misspelt field fails at helm time).
    ours = schema["properties"]["hubPool"]["properties"]["autoscaling"]
    assert strip(ours) == strip(copy.deepcopy(_crd_spec_schema()["properties"]["autoscaling"]))


def test_values_yaml_passes_its_own_schema() -> None:
    import jsonschema

    schema = json.loads((CHART / "values.schema.json").read_text())
    for path in [CHART / "values.yaml", *CI_VALUES]:
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)


# ------------------------------------------------------------------------ NetworkPolicies


def test_network_policies_cover_hubs_zookeeper_and_the_operator() -> None:
    objects = render([FULL])
    policies = {
        (p["metadata"]["namespace"], p["metadata"]["name"]): p
        for p in find(objects, "NetworkPolicy")
    }
    assert set(policies) == {
        ("hedwig", "hedwig-hubs"),
        ("hedwig-apps", "hedwig-hubs"),
        ("hedwig", "hedwig-zookeeper"),
        ("hedwig", "hedwig-operator"),
    }
    hubs = policies[("hedwig", "hedwig-hubs")]["spec"]
    assert hubs["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == "hedwig-hub"
    client_rule, internal_rule, metrics_rule = hubs["ingress"]
    # The hub-to-hub listener of secured pools: from hubs only.
    assert internal_rule["ports"] == [{"port": 4081, "protocol": "TCP"}]
    assert [p["podSelector"]["matchLabels"] for p in internal_rule["from"]] == [
        {"app.kubernetes.io/name": "hedwig-hub", "app.kubernetes.io/part-of": "hedwig"}
    ]
    assert client_rule["ports"] == [{"port": 4080, "protocol": "TCP"}]
    # Hubs reach each other (replication, hand-offs) and the operator reaches them too.
    selectors = [peer.get("podSelector", {}).get("matchLabels", {}) for peer in client_rule["from"]]
    assert {
        "app.kubernetes.io/name": "hedwig-hub",
        "app.kubernetes.io/part-of": "hedwig",
    } in selectors
    assert any(s.get("app.kubernetes.io/component") == "operator" for s in selectors)
    assert metrics_rule["ports"] == [{"port": 9100, "protocol": "TCP"}]
    zk = policies[("hedwig", "hedwig-zookeeper")]["spec"]
    assert [r["ports"][0]["port"] for r in zk["ingress"]] == [2181, 2888, 7000]


def _zookeeper_clients(objects: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The peers ZooKeeper's policy admits on 2181 (None: no rule admits anyone there)."""
    zk = one(objects, "NetworkPolicy", "hedwig-zookeeper")["spec"]
    rules = [r for r in zk["ingress"] if {"port": 2181, "protocol": "TCP"} in r["ports"]]
    if not rules:
        return None
    (rule,) = rules
    return rule["from"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    "sets",
    [[], ["operator.watchAllNamespaces=true"], ["operator.watchNamespaces={hedwig,apps}"]],
    ids=["defaults", "all-namespaces", "some-namespaces"],
)
def test_zookeeper_admits_its_pools_by_namespace_and_pool(sets: list[str]) -> None:
    """Labels are whatever a pod's creator writes: ZooKeeper's clients are each pinned to a
    namespace by the name the API server gives it, and hubs to their pool; no namespace is
    admitted by wildcard, whatever the operator watches."""
    peers = _zookeeper_clients(render(sets=sets))
    assert peers == [
        {
            "podSelector": {
                "matchLabels": {
                    "app.kubernetes.io/name": "hedwig-hub",
                    "app.kubernetes.io/instance": "hedwig",
                }
            },
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "hedwig"}},
        },
        {
            "podSelector": {
                "matchLabels": {
                    "app.kubernetes.io/name": "hedwig",
                    "app.kubernetes.io/instance": "hedwig",
                    "app.kubernetes.io/component": "operator",
                }
            },
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "hedwig"}},
        },
    ]


def test_more_pools_reach_zookeeper_only_when_named(tmp_path: Path) -> None:
    values = tmp_path / "v.yaml"
    values.write_text(
        "networkPolicy:\n  zookeeperClients: [{namespace: apps, pool: orders}]\n"
        "hubPool:\n  name: main\n"
    )
    peers = _zookeeper_clients(render([values]))
    assert peers is not None
    pools = [
        (
            p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
            p["podSelector"]["matchLabels"].get("app.kubernetes.io/instance"),
        )
        for p in peers
    ]
    assert pools == [("hedwig", "main"), ("apps", "orders"), ("hedwig", "hedwig")]
    values.write_text("networkPolicy:\n  zookeeperClients: [{namespace: apps}]\n")
    assert "'/networkPolicy/zookeeperClients/0': missing property 'pool'" in render_error([values])


def test_a_zookeeper_nobody_may_use_admits_nobody() -> None:
    """A NetworkPolicy rule with no peers admits everyone: without a pool or the operator
    there is no client rule at all."""
    objects = render(sets=["operator.enabled=false", "hubPool.enabled=false"])
    assert _zookeeper_clients(objects) is None
    zk = one(objects, "NetworkPolicy", "hedwig-zookeeper")["spec"]
    assert all(rule.get("from") or rule["ports"][0]["port"] == 7000 for rule in zk["ingress"])


def test_zookeeper_runs_on_a_read_only_root_without_a_token() -> None:
    """ZooKeeper's pod: no ServiceAccount token (it talks to no API server), a read-only root
    filesystem, and every directory the image's entrypoint and zkServer.sh write to on a
    volume: zoo.cfg's ZOO_CONF_DIR (which zkServer.sh reads as ZOOCFGDIR, and which gets the
    image's own conf files first), the logs, the JVM's /tmp, the data and its log."""
    zk = one(render(), "StatefulSet", "hedwig-zookeeper")["spec"]["template"]["spec"]
    assert zk["automountServiceAccountToken"] is False
    (c,) = zk["containers"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["ZOOCFGDIR"] == env["ZOO_CONF_DIR"]
    assert env["ZOO_ADMINSERVER_ENABLED"] == "false"
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in zk["volumes"]}
    for written in (
        env["ZOO_CONF_DIR"],
        env["ZOO_LOG_DIR"],
        env["ZOO_DATA_DIR"],
        env["ZOO_DATA_LOG_DIR"],
        "/tmp",
    ):
        holder = next((p for p in mounts if written == p or written.startswith(p + "/")), None)
        assert holder is not None, f"{written} is on the read-only root"
        name = mounts[holder]
        assert name == "data" or "emptyDir" in volumes[name], name
    # The image's logback.xml and the rest of its /conf, copied before the entrypoint runs.
    assert c["args"][0].startswith('cp /conf/* "$ZOO_CONF_DIR"/ && ')


# ------------------------------------------------------------------------ external access

EXTERNAL = CHART / "ci" / "external-access-values.yaml"


def test_the_pool_can_be_exposed_outside_the_cluster() -> None:
    import jsonschema

    objects = render([EXTERNAL])
    spec = one(objects, "HubPool")["spec"]
    assert spec["external"] == {
        "type": "NodePort",
        "nodePortBase": 31000,
        "advertisedHost": "nodes.example.com",
    }
    jsonschema.validate(spec, _openapi_to_jsonschema(_crd_spec_schema()))
    hubs = one(objects, "NetworkPolicy", "hedwig-hubs")["spec"]
    (external,) = [r for r in hubs["ingress"] if {"port": 4082, "protocol": "TCP"} in r["ports"]]
    assert external["from"] == [{"ipBlock": {"cidr": "0.0.0.0/0"}}]
    # Without external access the port stays closed.
    plain = one(render(), "NetworkPolicy", "hedwig-hubs")["spec"]
    assert all({"port": 4082, "protocol": "TCP"} not in r["ports"] for r in plain["ingress"])


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        (["hubPool.external.type=Ingress"], "'/hubPool/external/type': value must be one of"),
        (["hubPool.external.type=NodePort"], "needs hubPool.external.nodePortBase"),
        (["hubPool.external.port=4082"], "hubPool.external needs a type"),
        (
            ["hubPool.external.type=NodePort", "hubPool.external.nodePortBase=31000"],
            "needs hubPool.external.advertisedHost",
        ),
        (
            ["hubPool.external.type=LoadBalancer", "hubPool.external.nodPort=1"],
            "additional properties 'nodPort' not allowed",
        ),
    ],
)
def test_invalid_external_access_is_refused_with_a_clear_message(
    sets: list[str], expected: str
) -> None:
    assert expected in render_error(sets=sets)


def test_schema_external_is_the_crds() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    ours = copy.deepcopy(schema["properties"]["hubPool"]["properties"]["external"])
    theirs = copy.deepcopy(_crd_spec_schema()["properties"]["external"])

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: strip(v)
                for k, v in node.items()
                if k not in ("default", "description", "additionalProperties")
                and not k.startswith("x-kubernetes")
            }
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    # Required by the CRD; the chart's default is {} (no external access), and a type
    # missing from a non-empty one is refused by the template.
    assert theirs.pop("required") == ["type"]
    assert strip(ours) == strip(theirs)
