"""The pool's StatefulSet: one pod per hub, each with its own volume and stable name.

Why each choice:

- StatefulSet, not Deployment: a hub's ledgers live on its disk and other hubs read them
  through its advertised name, so both must survive a restart (a restarted hub "comes back
  under the same address with the same data directory", docs/operations.md).
- ``HEDWIG_ADVERTISE`` is built from the pod's name through the headless Service, so the
  address a hub writes into ZooKeeper resolves inside the cluster. ``HEDWIG_HUB_ID`` is the
  pod's name: ledgers name the hub's replicas by it (``hedwig.hub.process.identity``), it matches
  the id kept on the pod's volume, and ``hedwig ledgers`` reads as the pods are named.
- ``podManagementPolicy: Parallel``: hubs do not depend on each other to start, and scaling
  by several hubs should not wait for each in turn. Rolling updates still go one pod at a
  time (the PodDisruptionBudget and RollingUpdate), which is what keeps topics served.
- Probes: readiness is the hub's ``/readyz`` (registered in ZooKeeper and serving), liveness
  its ``/healthz`` (the event loop answers), with a startup probe so a hub recovering long
  ledgers is not killed while it starts.
- ``preStop`` sleeps briefly so endpoints stop routing new clients to the hub, then runs
  ``hedwig drain`` through the hub's drain socket (in the pod's own ``/tmp``), which returns
  once the hub has handed every topic over; the SIGTERM that follows finds nothing left to
  move. The socket needs no token, and no service mesh's sidecar can forward to it.
- Pods run as a non-root user with a read-only root filesystem; ``fsGroup`` makes the
  volume writable by that user.
"""

from __future__ import annotations

from typing import Any

from hedwig.settings import HubConfig, environment
from hedwig_operator.builders.configmap import build_configmap, config_hash
from hedwig_operator.builders.external import external_env, external_port
from hedwig_operator.builders.labels import (
    child_metadata,
    configmap_name,
    headless_service_name,
    pool_labels,
    selector_labels,
    statefulset_name,
)
from hedwig_operator.builders.security import security_mounts, security_volumes
from hedwig_operator.resources import (
    ANNOTATION_CONFIG_HASH,
    DATA_DIR,
    DRAIN_SOCKET,
    ETCD_ACCESS_DIR,
    HUB_PORT,
    INTERNAL_PORT,
    METRICS_PORT,
)
from hedwig_operator.specs import PoolSpec

HUB_UID = 10001
VOLUME_NAME = "data"
ETCD_ACCESS_VOLUME = "etcd-access"


def _container(pool: PoolSpec) -> dict[str, Any]:
    pod_host = f"$(POD_NAME).{headless_service_name(pool)}.{pool.namespace}.svc"
    advertise = f"{pod_host}:{HUB_PORT}"
    container: dict[str, Any] = {
        "name": "hub",
        "image": pool.image,
        "command": ["hedwig", "hub"],
        "envFrom": [{"configMapRef": {"name": configmap_name(pool)}}],
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            *_env(advertise=advertise, hub_id="$(POD_NAME)", drain_socket=DRAIN_SOCKET),
            *external_env(pool),
        ],
        "ports": [
            {"name": "hub", "containerPort": HUB_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
            *external_port(pool),
        ],
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": "metrics"},
            "periodSeconds": 5,
            "failureThreshold": 2,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "metrics"},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 6,
        },
        "startupProbe": {
            "httpGet": {"path": "/healthz", "port": "metrics"},
            "periodSeconds": 2,
            "failureThreshold": 150,
        },
        "lifecycle": {
            "preStop": {
                "exec": {
                    "command": [
                        "sh",
                        "-c",
                        f"sleep {pool.pre_stop_sleep_s}; exec hedwig drain --socket {DRAIN_SOCKET}",
                    ]
                }
            }
        },
        "volumeMounts": [
            {"name": VOLUME_NAME, "mountPath": DATA_DIR},
            {"name": "tmp", "mountPath": "/tmp"},
            *security_mounts(pool),
            *_store_access_mounts(pool),
        ],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    if pool.security.enabled:
        # Hub-to-hub requests (storage, claims) go to the internal listener, mutual TLS.
        container["env"] += _env(internal_advertise=f"{pod_host}:{INTERNAL_PORT}")
        container["ports"].append(
            {"name": "internal", "containerPort": INTERNAL_PORT, "protocol": "TCP"}
        )
    if pool.metadata_secret is not None:
        container["env"].append({"name": "HEDWIG_ETCD_DIR", "value": ETCD_ACCESS_DIR})
    if pool.image_pull_policy:
        container["imagePullPolicy"] = pool.image_pull_policy
    if pool.resources:
        container["resources"] = dict(pool.resources)
    return container


def _store_access_mounts(pool: PoolSpec) -> list[dict[str, Any]]:
    if pool.metadata_secret is None:
        return []
    return [{"name": ETCD_ACCESS_VOLUME, "mountPath": ETCD_ACCESS_DIR, "readOnly": True}]


def _store_access_volumes(pool: PoolSpec) -> list[dict[str, Any]]:
    """The etcd access Secret, as files (``hedwig.metadata.EtcdAccess``), readable by the
    hub only."""
    if pool.metadata_secret is None:
        return []
    secret = {"secretName": pool.metadata_secret, "defaultMode": 0o440}
    return [{"name": ETCD_ACCESS_VOLUME, "secret": secret}]


def _volume_claim_template(pool: PoolSpec) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": pool.storage.size}},
    }
    if pool.storage.storage_class is not None:
        spec["storageClassName"] = pool.storage.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": VOLUME_NAME, "labels": selector_labels(pool)},
        "spec": spec,
    }


def _spread(pool: PoolSpec) -> list[dict[str, Any]]:
    """The pool's own spread constraints, or: hubs on different nodes where possible (a node
    lost takes one hub, and its topics' other replicas, with it)."""
    if pool.scheduling.topology_spread is not None:
        return [dict(c) for c in pool.scheduling.topology_spread]
    return [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector_labels(pool)},
        }
    ]


def _scheduling(pool: PoolSpec) -> dict[str, Any]:
    """imagePullSecrets, nodeSelector, tolerations, affinity and priority class, when set."""
    s = pool.scheduling
    out: dict[str, Any] = {}
    if s.image_pull_secrets:
        out["imagePullSecrets"] = [{"name": n} for n in s.image_pull_secrets]
    if s.node_selector:
        out["nodeSelector"] = dict(s.node_selector)
    if s.tolerations:
        out["tolerations"] = [dict(t) for t in s.tolerations]
    if s.affinity:
        out["affinity"] = dict(s.affinity)
    if s.priority_class:
        out["priorityClassName"] = s.priority_class
    return out


def build_statefulset(pool: PoolSpec, operator_principal: str = "") -> dict[str, Any]:
    labels = pool_labels(pool, with_version=True)
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": child_metadata(pool, statefulset_name(pool)),
        "spec": {
            "replicas": pool.replicas,
            "serviceName": headless_service_name(pool),
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "RollingUpdate"},
            "persistentVolumeClaimRetentionPolicy": {
                "whenDeleted": pool.storage.when_deleted,
                "whenScaled": pool.storage.when_scaled,
            },
            "selector": {"matchLabels": selector_labels(pool)},
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {
                        ANNOTATION_CONFIG_HASH: config_hash(
                            build_configmap(pool, operator_principal)["data"]
                        ),
                    },
                },
                "spec": {
                    "terminationGracePeriodSeconds": pool.termination_grace_period_s,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": HUB_UID,
                        "runAsGroup": HUB_UID,
                        "fsGroup": HUB_UID,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "topologySpreadConstraints": _spread(pool),
                    "containers": [_container(pool)],
                    # The root filesystem is read-only; Python and the hub may still want /tmp.
                    "volumes": [
                        {"name": "tmp", "emptyDir": {}},
                        *security_volumes(pool),
                        *_store_access_volumes(pool),
                    ],
                    **_scheduling(pool),
                },
            },
            "volumeClaimTemplates": [_volume_claim_template(pool)],
        },
    }


def rollout_in_progress(statefulset: dict[str, Any] | None) -> str | None:
    """Why the StatefulSet is still rolling out, or None if it has settled.

    Settled means the controller has seen the latest spec, every replica runs the current
    revision, and every replica is ready. Hubs restart during a rollout, so their load
    reports say nothing about balance then: rebalancing waits.
    """
    if statefulset is None:
        return "the StatefulSet does not exist yet"
    meta = statefulset.get("metadata", {})
    spec = statefulset.get("spec", {})
    status = statefulset.get("status", {})
    replicas = int(spec.get("replicas", 1))
    if int(status.get("observedGeneration", 0)) < int(meta.get("generation", 0)):
        return "the StatefulSet controller has not seen the latest spec yet"
    update_rev, current_rev = status.get("updateRevision"), status.get("currentRevision")
    if update_rev and current_rev and update_rev != current_rev:
        return f"pods are being updated to revision {update_rev}"
    if int(status.get("updatedReplicas", 0)) < replicas:
        return f"{status.get('updatedReplicas', 0)} of {replicas} pods run the current revision"
    if int(status.get("readyReplicas", 0)) < replicas:
        return f"{status.get('readyReplicas', 0)} of {replicas} pods are ready"
    return None


def _env(**settings: object) -> list[dict[str, str]]:
    """Per-pod hub settings (by name, as ``hedwig.settings`` declares them) as container env."""
    return [{"name": k, "value": v} for k, v in environment(HubConfig, **settings).items()]
