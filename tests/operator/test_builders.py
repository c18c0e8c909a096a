"""The pure manifest builders: what a HubPool becomes."""

from __future__ import annotations

from typing import Any

from hedwig_operator import resources
from hedwig_operator.builders import (
    build_client_service,
    build_configmap,
    build_headless_service,
    build_pdb,
    build_pool_children,
    build_statefulset,
    hub_address,
)
from hedwig_operator.builders.labels import image_version
from hedwig_operator.builders.statefulset import rollout_in_progress
from hedwig_operator.specs import parse_pool

from hedwig.settings import HubConfig

from .fakes import pool_body

SELECTOR = {"app.kubernetes.io/name": "hedwig-hub", "app.kubernetes.io/instance": "pool"}


def pool(**spec: Any):  # type: ignore[no-untyped-def]
    return parse_pool(pool_body(spec=spec))


def test_every_child_is_owned_by_the_pool_and_labelled() -> None:
    children = build_pool_children(pool())
    assert [c["kind"] for c in children] == [
        "ConfigMap",
        "Service",
        "Service",
        "StatefulSet",
        "PodDisruptionBudget",
    ]
    for child in children:
        meta = child["metadata"]
        assert meta["namespace"] == "ns"
        (owner,) = meta["ownerReferences"]
        assert owner == {
            "apiVersion": "hedwig.io/v1alpha1",
            "kind": "HubPool",
            "name": "pool",
            "uid": "pool-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "hedwig-operator"
        assert meta["labels"]["app.kubernetes.io/part-of"] == "hedwig"
        assert SELECTOR.items() <= meta["labels"].items()


def test_statefulset_shape() -> None:
    sts = build_statefulset(pool(replicas=4, resources={"requests": {"cpu": "1"}}))
    spec = sts["spec"]
    assert spec["replicas"] == 4
    assert spec["serviceName"] == "pool-headless"
    assert spec["selector"] == {"matchLabels": SELECTOR}
    assert spec["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Retain",
        "whenScaled": "Retain",
    }
    template = spec["template"]
    assert template["metadata"]["labels"]["app.kubernetes.io/version"] == "1.2"
    pod = template["spec"]
    assert pod["terminationGracePeriodSeconds"] == 60
    (c,) = pod["containers"]
    assert c["image"] == "hedwig/hub:1.2"
    assert c["resources"] == {"requests": {"cpu": "1"}}
    assert c["envFrom"] == [{"configMapRef": {"name": "pool-config"}}]
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["HEDWIG_ADVERTISE"]["value"] == "$(POD_NAME).pool-headless.ns.svc:4080"
    assert env["HEDWIG_HUB_ID"]["value"] == "$(POD_NAME)"  # replicas named by the pod
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["lifecycle"]["preStop"]["exec"]["command"] == [
        "sh",
        "-c",
        "sleep 5; exec hedwig drain --socket /tmp/hedwig-drain.sock",
    ]
    assert env["HEDWIG_DRAIN_SOCKET"]["value"] == "/tmp/hedwig-drain.sock"
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"hub": 4080, "metrics": 9100}
    assert c["volumeMounts"][0] == {"name": "data", "mountPath": resources.DATA_DIR}
    (claim,) = spec["volumeClaimTemplates"]
    assert claim["spec"]["resources"] == {"requests": {"storage": "10Gi"}}
    assert "storageClassName" not in claim["spec"]


def test_storage_class_and_retention_policy() -> None:
    sts = build_statefulset(
        pool(storage={"size": "1Gi", "storageClassName": "fast", "whenDeleted": "Delete"})
    )
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["storageClassName"] == "fast"
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Delete"


def test_config_changes_roll_the_pods_and_image_changes_only_the_template() -> None:
    a = build_statefulset(pool())
    b = build_statefulset(pool(placement="least-loaded"))
    c = build_statefulset(pool(image="hedwig/hub:1.3"))

    def hash_of(s: dict[str, Any]) -> str:
        return str(
            s["spec"]["template"]["metadata"]["annotations"][resources.ANNOTATION_CONFIG_HASH]
        )

    assert hash_of(a) != hash_of(b)
    assert hash_of(a) == hash_of(c)
    assert a["spec"]["selector"] == c["spec"]["selector"]  # selectors are immutable
    assert c["spec"]["template"]["spec"]["containers"][0]["image"] == "hedwig/hub:1.3"


def test_configmap_holds_the_hub_settings() -> None:
    data = build_configmap(
        pool(
            region="eu",
            replication={"ensemble": 3, "writeQuorum": 3, "ackQuorum": 2},
            maxMessageSizeBytes=2048,
            metadata={"url": "zk-0:2181,zk-1:2181", "sessionTimeoutSeconds": 8},
        )
    )["data"]
    assert data == {
        "HEDWIG_METADATA": "zk-0:2181,zk-1:2181",
        "HEDWIG_REGION": "eu",
        "HEDWIG_LISTEN": "0.0.0.0:4080",
        "HEDWIG_DATA_DIR": "/var/lib/hedwig",
        "HEDWIG_METRICS_PORT": "9100",
        "HEDWIG_METRICS_HOST": "0.0.0.0",
        "HEDWIG_PLACEMENT": "load-weighted",
        "HEDWIG_METADATA_SESSION_TIMEOUT_S": "8",
        "HEDWIG_SELF_BALANCE": "false",
        "HEDWIG_REPLICATION": "3/3/2",
        "HEDWIG_MAX_MESSAGE_SIZE": "2048",
        # The pool is open (spec.security.enabled false): its hubs are told so.
        "HEDWIG_INSECURE": "true",
    }


def test_the_hubs_parse_what_the_operator_writes() -> None:
    """The ConfigMap and the pod's own variables, read as a hub reads them at start."""
    secured = {"security": {"enabled": True, "superUsers": ["ops:alice"]}}
    for spec in ({"placement": "least-loaded", "metadata": {"url": "etcd://e:2379"}}, secured):
        p = pool(**spec)
        data = build_configmap(p, "system:serviceaccount:hedwig:op")["data"]
        container = build_statefulset(p)["spec"]["template"]["spec"]["containers"][0]
        own = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        config = HubConfig.from_env({**data, **own})
        assert config.connection.metadata_url == p.metadata_url
        assert config.connection.region == p.region
        assert config.connection.metadata_session_timeout_s == p.metadata_session_timeout_s
        assert config.placement.policy.value == p.placement
        assert config.balance.self_balance is not p.rebalancing.enabled
        assert config.storage.hub_id == "$(POD_NAME)" and config.http.metrics_port == 9100
        assert config.security.authenticate is p.security.enabled
        if p.security.enabled:
            assert config.security.super_user_set == {
                "system:serviceaccount:hedwig:op",
                "ops:alice",
            }
            assert config.security.internal_advertise


def test_services_and_pdb() -> None:
    headless = build_headless_service(pool())
    assert headless["metadata"]["name"] == "pool-headless"
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert {p["name"] for p in headless["spec"]["ports"]} == {"hub", "metrics"}
    client = build_client_service(pool())
    assert client["metadata"]["name"] == "pool"
    assert client["spec"]["selector"] == SELECTOR
    assert [p["port"] for p in client["spec"]["ports"]] == [4080]
    pdb = build_pdb(pool())
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": SELECTOR}}


def test_hub_address_is_the_pods_stable_dns_name() -> None:
    assert hub_address(pool(), 2) == "pool-2.pool-headless.ns.svc:4080"


def test_image_version() -> None:
    assert image_version("hub") is None
    assert image_version("registry:5000/hedwig/hub") is None
    assert image_version("registry:5000/hedwig/hub:2.0") == "2.0"
    assert image_version("hub@sha256:abc") == "sha256-abc"


def sts_with(generation: int = 2, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"generation": generation},
        "spec": {"replicas": 3},
        "status": {
            "observedGeneration": 2,
            "currentRevision": "r1",
            "updateRevision": "r1",
            "updatedReplicas": 3,
            "readyReplicas": 3,
            **status,
        },
    }


def test_rollout_in_progress() -> None:
    assert rollout_in_progress(sts_with()) is None
    assert rollout_in_progress(None) is not None
    assert "latest spec" in str(rollout_in_progress(sts_with(generation=3)))
    assert "revision r2" in str(rollout_in_progress(sts_with(updateRevision="r2")))
    assert "1 of 3 pods run" in str(rollout_in_progress(sts_with(updatedReplicas=1)))
    assert "2 of 3 pods are ready" in str(rollout_in_progress(sts_with(readyReplicas=2)))


def test_scheduling_fields_reach_the_pod_template() -> None:
    spec = build_statefulset(
        pool(
            imagePullSecrets=[{"name": "registry"}],
            nodeSelector={"hedwig.io/hubs": "yes"},
            tolerations=[{"key": "dedicated", "value": "hedwig", "effect": "NoSchedule"}],
            affinity={"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
            topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": "zone"}],
            priorityClassName="high",
        )
    )["spec"]["template"]["spec"]
    assert spec["imagePullSecrets"] == [{"name": "registry"}]
    assert spec["nodeSelector"] == {"hedwig.io/hubs": "yes"}
    assert spec["tolerations"][0]["key"] == "dedicated"
    assert "podAntiAffinity" in spec["affinity"]
    assert spec["topologySpreadConstraints"] == [{"maxSkew": 1, "topologyKey": "zone"}]
    assert spec["priorityClassName"] == "high"


def test_hubs_get_default_resources_and_spread_when_the_pool_names_none() -> None:
    spec = build_statefulset(pool())["spec"]["template"]["spec"]
    assert spec["containers"][0]["resources"] == {
        "requests": {"cpu": "100m", "memory": "256Mi"},
        "limits": {"memory": "1Gi"},
    }
    (spread,) = spec["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert not {"imagePullSecrets", "nodeSelector", "tolerations", "affinity"} & set(spec)


def test_an_etcd_access_secret_is_mounted_for_the_hubs_only_when_named() -> None:
    body = pool_body(spec={"metadata": {"url": "etcd://e:2379", "secretName": "etcd-access"}})
    pod = build_statefulset(parse_pool(body))["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["HEDWIG_ETCD_DIR"] == resources.ETCD_ACCESS_DIR
    (mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == resources.ETCD_ACCESS_DIR]
    assert mount["readOnly"] is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"] == {"secretName": "etcd-access", "defaultMode": 0o440}
    plain = build_statefulset(pool())["spec"]["template"]["spec"]
    assert "HEDWIG_ETCD_DIR" not in {e["name"] for e in plain["containers"][0]["env"]}
    assert all("secret" not in v or v["name"] != mount["name"] for v in plain["volumes"])
