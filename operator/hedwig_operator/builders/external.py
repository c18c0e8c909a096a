"""The pool's external access (``spec.external``): one Service per hub, and the hubs' settings.

Each hub's Service selects its pod alone (the StatefulSet's pod-name label) and forwards to
its external client listener, so a client outside the cluster reaches every hub by itself,
at the address that hub advertises to it. The settings: the external listener's port, in the
ConfigMap all hubs share (``hub_environment``), and the advertised addresses of every hub by
hub id in the pod template's env (``HEDWIG_EXTERNAL_ADVERTISE``): a value there may name the
pod's node address, ``$(HOST_IP)``, which only a container's env expands. Every hub gets the
same list and advertises its own entry; a hub without one (its load balancer has no address
yet) listens and is named to no external client until the list gives it one (the template
changes, and the pods roll).
"""

from __future__ import annotations

from typing import Any

from hedwig.settings import HubConfig, environment
from hedwig_operator.builders.labels import child_metadata, statefulset_name
from hedwig_operator.resources import EXTERNAL_PORT
from hedwig_operator.specs import PoolSpec
from hedwig_operator.specs.external import HOST_IP, ExternalSpec

# The label the StatefulSet controller gives each of its pods, with the pod's name.
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"


def external_service_name(pool: PoolSpec, ordinal: int) -> str:
    return f"{statefulset_name(pool)}-{ordinal}-external"


def build_external_services(pool: PoolSpec) -> list[dict[str, Any]]:
    """Hub ``i``'s Service, for every hub the pool has (none without ``spec.external``)."""
    external = pool.external
    if external is None:
        return []
    return [_service(pool, external, ordinal) for ordinal in range(pool.replicas)]


def _service(pool: PoolSpec, external: ExternalSpec, ordinal: int) -> dict[str, Any]:
    port: dict[str, Any] = {
        "name": "external",
        "port": external.port,
        "targetPort": "external",
        "protocol": "TCP",
    }
    node_port = external.node_port(ordinal)
    if node_port is not None:
        port["nodePort"] = node_port
    metadata = child_metadata(pool, external_service_name(pool, ordinal))
    if external.annotations:
        metadata["annotations"] = dict(external.annotations)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "type": external.type,
            "selector": {POD_NAME_LABEL: f"{statefulset_name(pool)}-{ordinal}"},
            "ports": [port],
        },
    }


def external_settings(pool: PoolSpec) -> dict[str, object]:
    """The external listener, for the ConfigMap (nothing while no hub has an address)."""
    if pool.external is None or not advertised(pool):
        return {}
    return {"external_listen": f"0.0.0.0:{EXTERNAL_PORT}"}


def advertised(pool: PoolSpec) -> dict[str, str]:
    """Every hub's external address known, by hub id (its pod's name): up to the autoscaler's
    maximum, if it sizes the pool, so that a scale-out does not change the pod template (and
    roll every hub) where the addresses are known before the hubs are (NodePort)."""
    external = pool.external
    if external is None:
        return {}
    hubs = pool.replicas
    if pool.autoscaling.enabled:
        hubs = max(hubs, pool.autoscaling.max_replicas)
    found = {
        f"{statefulset_name(pool)}-{i}": external.advertised(i, external.balancers.get(i))
        for i in range(hubs)
    }
    return {hub: address for hub, address in found.items() if address}


def external_env(pool: PoolSpec) -> list[dict[str, Any]]:
    """The pod template's env for the external listener: the node's address, if advertised,
    and every hub's external address by hub id."""
    addresses = advertised(pool)
    if not addresses:
        return []
    env: list[dict[str, Any]] = []
    if any(HOST_IP in a for a in addresses.values()):
        env.append({"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}})
    listed = ",".join(f"{hub}={address}" for hub, address in addresses.items())
    env += [
        {"name": k, "value": v}
        for k, v in environment(HubConfig, external_advertise=listed).items()
    ]
    return env


def external_port(pool: PoolSpec) -> list[dict[str, Any]]:
    if not advertised(pool):
        return []
    return [{"name": "external", "containerPort": EXTERNAL_PORT, "protocol": "TCP"}]
