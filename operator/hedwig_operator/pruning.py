"""The children a pool no longer has: the external Services of hubs that are gone.

Every other child of a pool exists as long as the pool does (its owner reference takes it
with the pool). A hub's external Service (``spec.external``, ``builders/external.py``) is
the exception: it belongs to one hub, ``<pool>-<ordinal>-external``, and outlives it when
the pool shrinks (``spec.replicas``, or its autoscaler) or loses ``spec.external``. The rules:

- The Services are found by listing the namespace's Services with the pool's labels, and
  only a Service named ``<pool>-<ordinal>-external`` that the pool controls (its controller
  owner reference is the pool's uid) is ever deleted: the pool's other Services (headless,
  client), another pool's, and a user's own Service that copies the labels stay.
- Without ``spec.external`` every one goes at once: the hubs' pod template loses the external
  listener in the same change, so the pods roll and stop serving it anyway.
- With it, hub ``i``'s Service goes only once hub ``i`` is gone, so a hub that drains in its
  preStop hook (handing its topics over while its clients still reach it) keeps its address to
  the end: ``i`` is at or above the pool's ``spec.replicas``, the StatefulSet's
  ``spec.replicas`` (applied already) and its ``status.replicas`` (the pods it still has,
  terminating ones included, as of the generation it has observed); and no hub at ``i``'s
  address is alive in the region, when the region could be read.
- Each deletion names the uid it saw (a Service replaced since is left alone), a Service
  already gone is no error, and the pool gets a Normal Event naming what went.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from hedwig_operator.builders.labels import hub_address, pool_labels, statefulset_name
from hedwig_operator.kube import KubeApi, ObjectRef, Objects
from hedwig_operator.specs import PoolSpec


def _ordinal(pool: PoolSpec, service: Mapping[str, Any]) -> int | None:
    """The hub ordinal of one of the pool's external Services, else None."""
    meta = service.get("metadata") or {}
    found = re.fullmatch(
        rf"{re.escape(statefulset_name(pool))}-(\d+)-external", meta.get("name", "")
    )
    if found is None:
        return None
    controllers = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
    if not pool.uid or [o.get("uid") for o in controllers] != [pool.uid]:
        return None
    return int(found.group(1))


def _pods_at_least(statefulset: Mapping[str, Any] | None) -> int | None:
    """How many ordinals the StatefulSet may still have pods at (None: it has not observed
    its latest spec, so its status is no guide); 0 if there is none."""
    if statefulset is None:
        return 0
    meta = statefulset.get("metadata") or {}
    spec = statefulset.get("spec") or {}
    status = statefulset.get("status") or {}
    generation = meta.get("generation")
    if generation is not None and status.get("observedGeneration") != generation:
        return None
    return max(int(spec.get("replicas", 1)), int(status.get("replicas", 0)))


def retired_external_services(
    pool: PoolSpec,
    services: Objects,
    statefulset: Mapping[str, Any] | None,
    alive: Collection[str] | None,
) -> list[ObjectRef]:
    """The pool's external Services whose hub is gone (the rules above), lowest first.
    ``alive``: the addresses of the hubs alive in the region (None if it could not be read)."""
    mine = sorted(
        (ordinal, service)
        for service in services
        if (ordinal := _ordinal(pool, service)) is not None
    )
    if pool.external is None:
        gone = [service for _, service in mine]
    else:
        pods = _pods_at_least(statefulset)
        if pods is None:
            return []
        first = max(pool.replicas, pods)
        gone = [
            service
            for ordinal, service in mine
            if ordinal >= first and hub_address(pool, ordinal) not in (alive or ())
        ]
    return [_ref(service) for service in gone]


def _ref(service: Mapping[str, Any]) -> ObjectRef:
    meta = service.get("metadata") or {}
    return ObjectRef(
        "v1", "Service", str(meta["namespace"]), str(meta["name"]), meta.get("uid", "")
    )


async def remove_retired_services(
    kube: KubeApi,
    pool: PoolSpec,
    statefulset: Mapping[str, Any] | None,
    alive: Collection[str] | None,
) -> list[str]:
    """Delete the pool's external Services whose hub is gone; the names deleted.
    ``KubeError`` propagates (the caller retries at its next refresh)."""
    services = await kube.list("v1", "Service", pool.namespace, pool_labels(pool))
    gone = retired_external_services(pool, services, statefulset, alive)
    for ref in gone:
        await kube.delete(ref)
    return [ref.name for ref in gone]
