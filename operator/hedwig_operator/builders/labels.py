"""Names, labels and owner references of a pool's children.

The selector holds only labels that never change for a pool (name and instance): a
StatefulSet's selector is immutable, so putting the image version in it would make image
upgrades impossible. The version label goes on the pods only.
"""

from __future__ import annotations

from typing import Any

from hedwig_operator.resources import (
    API_VERSION,
    HUB_APP_NAME,
    HUB_PORT,
    LABEL_COMPONENT,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LABEL_PART_OF,
    LABEL_POOL,
    LABEL_VERSION,
    POOL_KIND,
)
from hedwig_operator.specs import PoolSpec


def statefulset_name(pool: PoolSpec) -> str:
    return pool.name


def headless_service_name(pool: PoolSpec) -> str:
    return f"{pool.name}-headless"


def client_service_name(pool: PoolSpec) -> str:
    return pool.name


def configmap_name(pool: PoolSpec) -> str:
    return f"{pool.name}-config"


def pdb_name(pool: PoolSpec) -> str:
    return pool.name


def hub_address(pool: PoolSpec, ordinal: int | str) -> str:
    """The address hub ``ordinal`` advertises: its stable per-pod DNS name, so that redirects
    between hubs keep working when pods are rescheduled with new IPs."""
    pod = f"{statefulset_name(pool)}-{ordinal}"
    return f"{pod}.{headless_service_name(pool)}.{pool.namespace}.svc:{HUB_PORT}"


def selector_labels(pool: PoolSpec) -> dict[str, str]:
    return {LABEL_NAME: HUB_APP_NAME, LABEL_INSTANCE: pool.name}


def image_version(image: str) -> str | None:
    """The tag of an image reference (``repo:tag`` or ``repo@sha256:...``), if any."""
    if "@" in image:
        return image.rsplit("@", 1)[1].replace(":", "-")[:63]
    last = image.rsplit("/", 1)[-1]
    return last.rsplit(":", 1)[1][:63] if ":" in last else None


def pool_labels(pool: PoolSpec, *, with_version: bool = False) -> dict[str, str]:
    labels = {
        **selector_labels(pool),
        LABEL_COMPONENT: "hub",
        LABEL_PART_OF: "hedwig",
        LABEL_MANAGED_BY: "hedwig-operator",
        LABEL_POOL: pool.name,
    }
    version = image_version(pool.image) if with_version else None
    if version:
        labels[LABEL_VERSION] = version
    return labels


def owner_reference(pool: PoolSpec) -> dict[str, Any]:
    """Makes the child garbage-collected with the pool; ``controller`` marks the operator's
    ownership so other controllers leave the object alone."""
    return {
        "apiVersion": API_VERSION,
        "kind": POOL_KIND,
        "name": pool.name,
        "uid": pool.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def child_metadata(pool: PoolSpec, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": pool.namespace,
        "labels": pool_labels(pool),
        "ownerReferences": [owner_reference(pool)],
    }
