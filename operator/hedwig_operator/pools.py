"""HubPool reconciliation: its children exist as built, and its status tells how the hubs are.

Children are written by server-side apply with ``force``: the operator owns every field it
sets, a user's ``kubectl edit`` of those fields is undone at the next reconciliation, and
fields it does not set (another controller's annotations) are left alone. Re-applying an
unchanged object is a no-op on the server, so the pool's worker re-applies on every refresh
to repair drift (a deleted Service comes back).

A pool with external access (``spec.external``) of type LoadBalancer is built with what the
cloud gave each hub's Service (``with_balancers``): the hubs advertise those addresses, and
the hubs' certificate names them. A pool whose security is turned off says so in its Secured
condition (False, reason Insecure). ``status.external`` lists every hub's external address (the
one it published, else the one it will publish; "" while none is known) and ``bootstrap``,
what an external client is given.

Status combines two views that can disagree, and shows both: the StatefulSet's (pods
scheduled and ready) and ZooKeeper's (hubs registered alive in the region, with their load).
A Secret the pool needs that is not the operator's to use (``ownership``: someone else's
under a pool Secret's name, or an access Secret its owner has not bound to the pool) stops
the reconciliation before anything is applied, and is the Ready condition's reason.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from hedwig.metadata import HubStatus
from hedwig_operator.builders import build_pool_children, external_service_name, selector_labels
from hedwig_operator.builders.labels import statefulset_name
from hedwig_operator.conditions import condition
from hedwig_operator.kube import KubeApi, ObjectRef
from hedwig_operator.ownership import SecretRefusedError, read_access
from hedwig_operator.security import PoolTrust, ensure_pool_security, operator_principal
from hedwig_operator.specs import PoolSpec

# A load report older than this is ignored by placement and rebalancing (hub default 30 s).
STALE_REPORT_MS = 30_000


def statefulset_ref(pool: PoolSpec) -> ObjectRef:
    return ObjectRef("apps/v1", "StatefulSet", pool.namespace, statefulset_name(pool))


async def apply_children(kube: KubeApi, pool: PoolSpec, trust: PoolTrust | None = None) -> PoolSpec:
    """Apply every child (a secured pool's Secrets first); ``KubeError`` propagates (the
    caller retries), and ``SecretRefusedError`` if a Secret the pool needs is someone else's,
    or its access Secret is missing or not bound to it (nothing is applied then). The pool
    as built: with its load balancers' addresses."""
    pool = await with_balancers(kube, pool)
    if pool.store_secret is not None:
        # Before anything mounts it into the hubs: the Secret's owner bound it to this pool.
        await read_access(kube, pool.store_secret)
    if trust is not None:
        await ensure_pool_security(kube, pool, trust)
    for manifest in build_pool_children(pool, operator_principal()):
        await kube.apply(manifest)
    return pool


async def with_balancers(kube: KubeApi, pool: PoolSpec) -> PoolSpec:
    """``pool`` with the address of each hub's load balancer that has one (LoadBalancer)."""
    external = pool.external
    if external is None or external.type != "LoadBalancer":
        return pool
    found: dict[int, str] = {}
    for ordinal in range(pool.replicas):
        ref = ObjectRef("v1", "Service", pool.namespace, external_service_name(pool, ordinal))
        service = await kube.get(ref) or {}
        ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        address = next((i.get("ip") or i.get("hostname") for i in ingress if i), None)
        if address:
            found[ordinal] = str(address)
    return dataclasses.replace(pool, external=dataclasses.replace(external, balancers=found))


def external_status(pool: PoolSpec, hubs: Sequence[HubStatus] | None) -> dict[str, Any]:
    """``status.external``: each hub's external address, and the bootstrap list."""
    external = pool.external
    assert external is not None
    published = {h.load.hub_id: h.load.external for h in hubs or () if h.alive and h.load}
    entries = []
    for ordinal in range(pool.replicas):
        name = f"{statefulset_name(pool)}-{ordinal}"
        planned = external.advertised(ordinal, external.balancers.get(ordinal)) or ""
        address = published.get(name) or ("" if "$(" in planned else planned)
        entries.append({"name": name, "address": address})
    return {
        "type": external.type,
        "hubs": entries,
        "bootstrap": ",".join(e["address"] for e in entries if e["address"]),
    }


def selector_string(pool: PoolSpec) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(selector_labels(pool).items()))


def hub_entry(hub: HubStatus, now_ms: int) -> dict[str, Any]:
    entry: dict[str, Any] = {"address": hub.address, "alive": hub.alive}
    load = hub.load
    if load is not None:
        entry.update(
            topics=load.topics,
            connections=load.connections,
            cpu=round(load.cpu, 3),
            messagesInPerSecond=load.msg_in,
            messagesOutPerSecond=load.msg_out,
            bytesInPerSecond=load.bytes_in,
            bytesOutPerSecond=load.bytes_out,
            reportStale=now_ms - load.timestamp_ms > STALE_REPORT_MS,
        )
        if load.external:
            entry["externalAddress"] = load.external
    return entry


def secured_condition(
    pool: PoolSpec, previous: Sequence[Mapping[str, Any]] | None, now: dt.datetime | None
) -> dict[str, Any]:
    """``Secured``: False for a pool whose hubs run open (``spec.security.enabled: false``)."""
    if pool.security.enabled:
        return condition(
            "Secured",
            True,
            "SecurityEnabled",
            "TLS on both listeners, authentication and ACLs (spec.security)",
            previous,
            now,
        )
    return condition(
        "Secured",
        False,
        "Insecure",
        "spec.security.enabled is false: the hubs run --insecure, so anyone who can reach "
        "their ports can publish, read and delete topics and ledgers, with no identity",
        previous,
        now,
    )


def build_pool_status(
    pool: PoolSpec,
    *,
    statefulset: Mapping[str, Any] | None,
    hubs: Sequence[HubStatus] | None,
    zk_error: str | None,
    previous: Mapping[str, Any] | None,
    now_ms: int,
    now: dt.datetime | None = None,
    refused: SecretRefusedError | None = None,
) -> dict[str, Any]:
    """The pool's status from the StatefulSet and ZooKeeper (``hubs`` None if unreadable),
    and the Secret that stopped its reconciliation (``refused``), if one did."""
    previous = previous or {}
    sts_status = (statefulset or {}).get("status") or {}
    ready = int(sts_status.get("readyReplicas", 0))
    replicas = int(sts_status.get("replicas", 0))
    alive = sum(1 for h in hubs or () if h.alive)
    if refused is not None:
        ok, reason, message = False, refused.reason, refused.message
    elif statefulset is None:
        ok, reason, message = False, "StatefulSetMissing", "the StatefulSet does not exist yet"
    elif zk_error is not None:
        ok, reason, message = False, "ZooKeeperUnavailable", zk_error
    elif ready < pool.replicas:
        ok, reason = False, "HubsNotReady"
        message = f"{ready} of {pool.replicas} hub pods are ready; {alive} hubs alive in ZooKeeper"
    else:
        ok, reason = True, "HubsReady"
        message = f"{ready} of {pool.replicas} hub pods are ready; {alive} hubs alive in ZooKeeper"
    status: dict[str, Any] = {
        "replicas": replicas,
        "readyHubs": ready,
        "aliveHubs": alive,
        "selector": selector_string(pool),
        "region": pool.region,
        "conditions": [
            condition("Ready", ok, reason, message, previous.get("conditions"), now),
            secured_condition(pool, previous.get("conditions"), now),
        ],
    }
    if hubs is not None:
        status["hubs"] = [hub_entry(h, now_ms) for h in hubs]
    if pool.external is not None:
        status["external"] = external_status(pool, hubs)
    return status
