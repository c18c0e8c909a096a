"""Specs parse as the API server would store them, and agree with the CRDs in ``crds/``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hedwig_operator import resources
from hedwig_operator.specs import (
    AccessSecret,
    DeletionPolicy,
    PoolSpec,
    RebalancingSpec,
    SecuritySpec,
    SpecError,
    StorageSpec,
    parse_pool,
    parse_topic,
)

from hedwig.metadata import ReplicationConfig, TopicConfig

from .fakes import pool_body, topic_body

CRDS = Path(__file__).resolve().parents[2] / "crds"


def crd(plural: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CRDS / f"{plural}.{resources.GROUP}.yaml").read_text())
    return loaded


def schema(plural: str) -> dict[str, Any]:
    (version,) = crd(plural)["spec"]["versions"]
    found: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return found


def test_crds_match_the_operators_names() -> None:
    for plural, kind in (
        (resources.POOL_PLURAL, resources.POOL_KIND),
        (resources.TOPIC_PLURAL, resources.TOPIC_KIND),
        (resources.USER_PLURAL, resources.USER_KIND),
        (resources.NAMESPACE_PLURAL, resources.NAMESPACE_KIND),
    ):
        c = crd(plural)
        assert c["metadata"]["name"] == f"{plural}.{resources.GROUP}"
        assert c["spec"]["group"] == resources.GROUP
        assert c["spec"]["names"]["kind"] == kind
        assert c["spec"]["names"]["shortNames"]
        assert "hedwig" in c["spec"]["names"]["categories"]
        (version,) = c["spec"]["versions"]
        assert version["name"] == resources.VERSION
        assert version["subresources"]["status"] == {}
        columns = {col["name"]: col["jsonPath"] for col in version["additionalPrinterColumns"]}
        assert columns["Ready"] == '.status.conditions[?(@.type=="Ready")].status'
        assert "Age" in columns


def test_pool_crd_scale_subresource_points_at_status_the_operator_writes() -> None:
    (version,) = crd("hubpools")["spec"]["versions"]
    scale = version["subresources"]["scale"]
    assert scale == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }


def test_pool_crd_defaults_are_the_specs_defaults() -> None:
    props = schema("hubpools")["properties"]["spec"]["properties"]
    rb = props["rebalancing"]["properties"]
    d = RebalancingSpec()
    pairs = {
        "enabled": d.enabled,
        "paused": d.paused,
        "intervalSeconds": d.interval_s,
        "overloadMargin": d.overload_margin,
        "underloadMargin": d.underload_margin,
        "confirmations": d.confirmations,
        "cooldownSeconds": d.cooldown_s,
        "maxMovesPerCycle": d.max_moves_per_cycle,
        "minTopicRate": d.min_topic_rate,
        "maxReportAgeSeconds": d.max_report_age_s,
        "lowLoadDrain": d.low_load_drain,
        "lowLoadThreshold": d.low_load_threshold,
        "hubCapacity": d.hub_capacity,
        "gracefulHandOff": d.graceful_hand_off,
    }
    assert set(pairs) | {"prometheus", "scaleDown", "fanOut"} == set(rb)
    for key, value in pairs.items():
        assert rb[key]["default"] == value, key
    sd = rb["scaleDown"]["properties"]
    assert sd["enabled"]["default"] == d.scale_down.enabled
    assert sd["minReplicas"]["default"] == d.scale_down.min_replicas
    assert sd["emptyForSeconds"]["default"] == d.scale_down.empty_for_s
    fo = rb["fanOut"]["properties"]
    assert fo["enabled"]["default"] == d.fan_out.enabled
    assert fo["above"]["default"] == d.fan_out.above
    assert fo["backBelow"]["default"] == d.fan_out.back_below
    assert fo["maxHubs"]["default"] == d.fan_out.max_hubs
    p = parse_pool(pool_body())
    assert props["replicas"]["default"] == p.replicas
    assert props["placement"]["default"] == p.placement
    assert props["metadata"]["properties"]["sessionTimeoutSeconds"]["default"] == (
        p.metadata_session_timeout_s
    )
    assert props["terminationGracePeriodSeconds"]["default"] == p.termination_grace_period_s
    assert props["preStopSleepSeconds"]["default"] == p.pre_stop_sleep_s
    st = props["storage"]["properties"]
    assert st["size"]["default"] == StorageSpec().size
    assert st["whenDeleted"]["default"] == StorageSpec().when_deleted
    assert st["whenScaled"]["default"] == StorageSpec().when_scaled


def test_a_pool_without_security_is_secured_by_the_crd_as_by_the_operator() -> None:
    """The API server fills in ``security: {enabled: true}`` where a HubPool has none (an
    object's default, then its fields'), as the operator reads a HubPool without it."""
    (version,) = crd("hubpools")["spec"]["versions"]
    root = version["schema"]["openAPIV3Schema"]
    sec = root["properties"]["spec"]["properties"]["security"]
    assert sec["default"] == {}
    assert sec["properties"]["enabled"]["default"] is True is SecuritySpec().enabled
    assert (
        parse_pool(pool_body(security=None)).security
        == parse_pool(pool_body(security={"enabled": True})).security
    )
    # The NodePort rule holds a pool open only when it says so (enabled: false).
    (nodeport,) = [r for r in root["x-kubernetes-validations"] if "NodePort" in r["rule"]]
    assert "!self.spec.security.enabled" in nodeport["rule"]
    assert "!has(self.spec.security)" not in nodeport["rule"]
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Secured"] == '.status.conditions[?(@.type=="Secured")].status'


def test_topic_crd_defaults_and_rules() -> None:
    spec = schema("topics")["properties"]["spec"]
    assert spec["properties"]["deletionPolicy"]["default"] == DeletionPolicy.KEEP.value
    assert spec["properties"]["deletionPolicy"]["enum"] == [p.value for p in DeletionPolicy]
    assert spec["properties"]["retention"]["properties"]["timeMs"]["minimum"] == 0
    assert spec["properties"]["topicName"]["maxLength"] == 255
    rules = [r["rule"] for r in spec["properties"]["replication"]["x-kubernetes-validations"]]
    assert rules == ["self.ackQuorum <= self.writeQuorum && self.writeQuorum <= self.ensemble"]


def test_parse_pool_defaults() -> None:
    # Without spec.security: secured (SecuritySpec's default).
    p = parse_pool(pool_body(security=None))
    assert p.security.enabled
    assert p == PoolSpec(
        namespace="ns",
        name="pool",
        uid="pool-uid",
        generation=1,
        image="hedwig/hub:1.2",
        metadata_url="zk:2181",
    )
    assert p.region == "pool"
    assert not p.rebalancing_paused
    assert p.rebalancing.to_config().max_moves_per_cycle == 2


def test_parse_pool_full() -> None:
    body = pool_body(
        spec={
            "replicas": 5,
            "region": "eu",
            "placement": "least-loaded",
            "replication": {"ensemble": 3, "writeQuorum": 3, "ackQuorum": 2},
            "storage": {"size": 1024, "storageClassName": "fast", "whenScaled": "Delete"},
            "rebalancing": {
                "paused": True,
                "intervalSeconds": 30,
                "cooldownSeconds": 5,
                "prometheus": {"url": "http://prom:9090"},
            },
        }
    )
    body["metadata"]["annotations"] = {resources.ANNOTATION_REBALANCE_PAUSED: "true"}
    p = parse_pool(body)
    assert p.region == "eu"
    assert p.replication == ReplicationConfig(3, 3, 2)
    assert p.storage == StorageSpec("1024", "fast", "Retain", "Delete")
    assert p.rebalancing.interval_s == 30
    assert p.rebalancing.prometheus is not None and p.rebalancing.prometheus.hub_label == "pod"
    assert p.rebalancing_paused and p.paused_by_annotation
    assert p.rebalancing.to_config().cooldown_s == 5


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"replication": {"ensemble": 1, "writeQuorum": 2, "ackQuorum": 1}}, "spec.replication"),
        ({"placement": "nearest"}, "spec.placement"),
        ({"replicas": -1}, "spec.replicas"),
        ({"metadata": {}}, "spec.metadata.url"),
        ({"storage": {"whenDeleted": "Keep"}}, "spec.storage.whenDeleted"),
        ({"rebalancing": {"fanOut": {"above": 0.2, "backBelow": 0.3}}}, "spec.rebalancing.fanOut"),
    ],
)
def test_parse_pool_refuses(spec: dict[str, Any], path: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_pool(pool_body(spec=spec))
    assert err.value.path == path


def test_parse_topic() -> None:
    t = parse_topic(
        topic_body(
            spec={
                "topicName": "a/b c",
                "replication": {"ensemble": 3, "writeQuorum": 2, "ackQuorum": 2},
                "retention": {"timeMs": 60000, "sizeBytes": 0},
                "maxMessageSizeBytes": 100,
                "deletionPolicy": "Delete",
            }
        )
    )
    assert t.topic_name == "a/b c"
    assert t.deletion_policy is DeletionPolicy.DELETE
    assert t.config() == TopicConfig(ReplicationConfig(3, 2, 2), 60000, 0, 100)
    assert parse_topic(topic_body("plain")).topic_name == "plain"
    assert parse_topic(topic_body()).config() == TopicConfig()


def test_parse_topic_refuses_negative_retention() -> None:
    with pytest.raises(SpecError, match=r"spec.retention.timeMs: must be at least 0"):
        parse_topic(topic_body(spec={"retention": {"timeMs": -1}}))


def test_shipped_rbac_covers_what_the_operator_writes() -> None:
    from hedwig_operator.builders import build_pool_children
    from hedwig_operator.kube.api import PLURALS

    docs = list(yaml.safe_load_all((CRDS.parent / "operator" / "deploy" / "rbac.yaml").read_text()))
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"]

    def allowed(group: str, resource: str, verb: str) -> bool:
        return any(
            group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
            for r in role["rules"]
        )

    for child in build_pool_children(parse_pool(pool_body())):
        group = child["apiVersion"].rpartition("/")[0]
        for verb in ("get", "create", "patch"):  # server-side apply creates or patches
            assert allowed(group, PLURALS[child["kind"]], verb), (child["kind"], verb)
    for plural in (resources.POOL_PLURAL, resources.TOPIC_PLURAL, resources.USER_PLURAL):
        for verb in ("get", "list", "watch", "patch"):
            assert allowed(resources.GROUP, plural, verb)
        assert allowed(resources.GROUP, f"{plural}/status", "patch")
    assert allowed("", "events", "create")
    # A secured pool's CAs and certificates are Secrets it makes and reads back.
    for verb in ("get", "create", "patch"):
        assert allowed("", "secrets", verb)
    # A hub's external Service, found by the pool's labels and deleted once its hub is gone
    # (hedwig_operator/pruning.py).
    for verb in ("list", "delete"):
        assert allowed("", "services", verb)
    # Nothing the operator does not need: no other deletes, no listing secrets, no wildcards.
    for rule in role["rules"]:
        if "delete" in rule["verbs"]:
            assert rule["apiGroups"] == [""] and rule["resources"] == ["services"], rule
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
        if "secrets" in rule["resources"]:
            # By name, never enumerated or deleted: the operator checks each one it touches
            # (hedwig_operator/ownership.py).
            assert sorted(rule["verbs"]) == ["create", "get", "patch"]


def test_pool_on_any_store_by_url() -> None:
    body = pool_body(spec={"metadata": {"url": "etcd://etcd:2379/hedwig"}})
    p = parse_pool(body)
    assert p.metadata_url == "etcd://etcd:2379/hedwig"
    md = schema("hubpools")["properties"]["spec"]["properties"]["metadata"]["properties"]
    assert md["sessionTimeoutSeconds"]["default"] == p.metadata_session_timeout_s


def test_an_etcd_pool_names_its_access_secret() -> None:
    body = pool_body(spec={"metadata": {"url": "etcd://etcd:2379", "secretName": "etcd-access"}})
    p = parse_pool(body)
    assert p.metadata_secret == "etcd-access"
    assert p.store_secret == AccessSecret("ns", "etcd-access", pool="pool")
    md = schema("hubpools")["properties"]["spec"]["properties"]["metadata"]["properties"]
    assert md["secretName"]["type"] == "string"
    # ZooKeeper's credentials are the pool's own digest (spec.security), not a Secret here.
    zk = pool_body(spec={"metadata": {"url": "zk://zk:2181", "secretName": "x"}})
    with pytest.raises(SpecError) as err:
        parse_pool(zk)
    assert err.value.path == "spec.metadata.secretName"
