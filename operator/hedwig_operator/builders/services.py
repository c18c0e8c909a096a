"""The pool's two Services.

- The headless Service gives each hub a stable DNS name (``<pod>.<pool>-headless.<ns>.svc``),
  which is the address the hub advertises and other hubs redirect clients to. It publishes
  addresses of pods that are not ready yet, because a starting hub must already be reachable
  by its peers as a storage replica and by redirected clients.
- The client Service is where clients bootstrap: any ready hub answers and redirects to the
  owner of the topic.
"""

from __future__ import annotations

from typing import Any

from hedwig_operator.builders.labels import (
    child_metadata,
    client_service_name,
    headless_service_name,
    selector_labels,
)
from hedwig_operator.resources import HUB_PORT, METRICS_PORT
from hedwig_operator.specs import PoolSpec


def _ports(*, metrics: bool) -> list[dict[str, Any]]:
    ports: list[dict[str, Any]] = [
        {"name": "hub", "port": HUB_PORT, "targetPort": "hub", "protocol": "TCP"}
    ]
    if metrics:
        ports.append(
            {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"}
        )
    return ports


def _service(pool: PoolSpec, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": child_metadata(pool, name),
        "spec": spec,
    }


def build_headless_service(pool: PoolSpec) -> dict[str, Any]:
    return _service(
        pool,
        headless_service_name(pool),
        {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": selector_labels(pool),
            "ports": _ports(metrics=True),
        },
    )


def build_client_service(pool: PoolSpec) -> dict[str, Any]:
    return _service(
        pool,
        client_service_name(pool),
        {"type": "ClusterIP", "selector": selector_labels(pool), "ports": _ports(metrics=False)},
    )
