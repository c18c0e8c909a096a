"""Pure manifest builders: a ``PoolSpec`` in, Kubernetes objects (dicts) out.

No I/O and no kopf here, so the Helm chart can mirror them and tests check them directly.
Every child carries the pool's labels and an owner reference to the pool, so deleting the pool
lets Kubernetes' garbage collector remove them (volumes follow the pool's storage policy).
"""

from __future__ import annotations

from typing import Any

from hedwig_operator.builders.configmap import build_configmap, hub_environment
from hedwig_operator.builders.external import build_external_services, external_service_name
from hedwig_operator.builders.labels import (
    client_service_name,
    configmap_name,
    headless_service_name,
    hub_address,
    owner_reference,
    pool_labels,
    selector_labels,
)
from hedwig_operator.builders.pdb import build_pdb
from hedwig_operator.builders.services import build_client_service, build_headless_service
from hedwig_operator.builders.statefulset import build_statefulset
from hedwig_operator.specs import PoolSpec


def build_pool_children(pool: PoolSpec, operator_principal: str = "") -> list[dict[str, Any]]:
    """Every object a HubPool owns, in the order they are applied (config before pods);
    ``operator_principal`` is a super-user of a secured pool. (A secured pool's Secrets hold
    generated keys: ``hedwig_operator.security`` makes them.)"""
    return [
        build_configmap(pool, operator_principal),
        build_headless_service(pool),
        build_client_service(pool),
        *build_external_services(pool),
        build_statefulset(pool, operator_principal),
        build_pdb(pool),
    ]


__all__ = [
    "build_client_service",
    "build_configmap",
    "build_external_services",
    "build_headless_service",
    "build_pdb",
    "build_pool_children",
    "build_statefulset",
    "client_service_name",
    "configmap_name",
    "external_service_name",
    "headless_service_name",
    "hub_address",
    "hub_environment",
    "owner_reference",
    "pool_labels",
    "selector_labels",
]
