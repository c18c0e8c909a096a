"""Reconciling one HedwigNamespace: the pool's region holds its namespace's policy record as
the spec says, and the resource's status shows the namespace's usage against its limits (or
says exactly why not); deleting it deletes the record.

Rules, in the order they are checked:

1. The spec must parse and ``spec.name`` must be a namespace the hubs accept (the core's
   ``checked_namespace``): otherwise Ready=False, reason InvalidSpec. Nothing is retried: the
   user must change the spec (the CRD's schema refuses most such specs before they are stored).
2. The pool must exist in the resource's namespace and parse: otherwise Ready=False, reason
   PoolNotFound / PoolInvalid, tried again at the next refresh.
3. One HedwigNamespace manages one namespace of a pool: the oldest claim (creation time, then
   name); the others get Ready=False, reason ResourceConflict, and never touch the record.
4. The record is created with the spec's policy, or changed when it differs, by
   compare-and-set on its version (a concurrent writer, ``hedwig namespaces set`` among them,
   is noticed and read again, never overwritten blindly). The refresh writes it again if
   someone changed or deleted it: the resource is the source of truth.
5. The namespace's topic count is read into ``status.usage.topics``, beside ``status.limits``.

Every hub watches the policies (``hedwig.hub.owning.namespaces``), so a change of quota
applies within a round trip or two of the store, without restarting a hub. A failure whose
reason may go away (the store unreachable) is Ready=False, reason StoreUnavailable, and a retry.

Deletion (behind the operator's finalizer, which ``hedwig.io/finalizer: "false"`` turns off)
deletes the record: the namespace's topics stay, with the region's defaults and no quota. A
record another resource manages, or in a pool that is gone, is left alone, and the Event says so.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from hedwig.errors import BadVersionError, MetadataError
from hedwig.metadata import ANY_VERSION, NEW_VERSION, MetadataStore
from hedwig.metadata.records.namespaces import NamespacePolicy
from hedwig_operator.context import Context
from hedwig_operator.namespaces.claims import NamespaceClaim, conflict_winner
from hedwig_operator.namespaces.status import build_namespace_status
from hedwig_operator.resources import ANNOTATION_FINALIZER
from hedwig_operator.specs import NamespaceSpec, PoolSpec, SpecError, parse_namespace, parse_pool
from hedwig_operator.topics import TransientError, pool_ref

CAS_ATTEMPTS = 3


def wants_finalizer(body: Mapping[str, Any]) -> bool:
    """Whether deleting this HedwigNamespace waits for its policy record to be deleted."""
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(ANNOTATION_FINALIZER, "")).lower() != "false"


async def ensure_policy(store: MetadataStore, name: str, wanted: NamespacePolicy) -> str | None:
    """Make the namespace's record hold ``wanted`` (compare-and-set); what changed, or None."""
    for _ in range(CAS_ATTEMPTS):
        current = await store.namespaces.read_namespace(name)
        try:
            if current is None:
                await store.namespaces.write_namespace(name, wanted, NEW_VERSION)
                return "created"
            if current.value == wanted:
                return None
            await store.namespaces.write_namespace(name, wanted, current.version)
            return "updated"
        except BadVersionError:
            continue  # someone wrote in between: read again
    raise TransientError(f"the policy of namespace {name!r} keeps changing under us")


def _limits_text(policy: NamespacePolicy, topics: int) -> str:
    held = f"{topics} of {policy.max_topics}" if policy.max_topics is not None else f"{topics}"
    full = " (full: creating another is refused)" if policy.max_topics == topics else ""
    return f"{held} topics{full}"


async def reconcile_namespace(
    ctx: Context,
    body: Mapping[str, Any],
    claims: Iterable[NamespaceClaim],
    *,
    pool_body: Mapping[str, Any] | None = None,
    now: dt.datetime | None = None,
) -> tuple[dict[str, Any], bool]:
    """Reconcile one HedwigNamespace; returns (its new status, whether to retry later).

    ``pool_body``: the pool as its worker last saw it, if the caller has it (so a refresh does
    not read the pool from the API server each time); otherwise it is read here."""
    previous = body.get("status") or {}
    generation = int((body.get("metadata") or {}).get("generation", 0))

    def result(
        ready: bool,
        reason: str,
        message: str,
        *,
        name: str | None = None,
        policy: NamespacePolicy | None = None,
        topics: int | None = None,
        retry: bool = False,
    ) -> tuple[dict[str, Any], bool]:
        status = build_namespace_status(
            generation=generation,
            namespace_name=name,
            ready=ready,
            reason=reason,
            message=message,
            previous=previous,
            policy=policy,
            topics=topics,
            now=now,
        )
        return status, retry

    try:
        spec = parse_namespace(body)
    except SpecError as exc:
        return result(False, "InvalidSpec", str(exc))
    name = spec.namespace_name
    winner = conflict_winner(claims, name)
    if winner is not None and winner.name != spec.name:
        return result(
            False,
            "ResourceConflict",
            f"namespace {name!r} of pool {spec.pool} is managed by HedwigNamespace {winner.name}",
            name=name,
        )
    if pool_body is None:
        pool_body = await ctx.kube.get(pool_ref(spec.namespace, spec.pool))
    if pool_body is None:
        return result(
            False,
            "PoolNotFound",
            f"HubPool {spec.pool} not found in namespace {spec.namespace}",
            name=name,
            retry=True,
        )
    try:
        pool = parse_pool(pool_body)
    except SpecError as exc:
        return result(False, "PoolInvalid", f"HubPool {spec.pool} is invalid: {exc}", name=name)
    try:
        store = await ctx.metadata.for_pool(pool)
        await ensure_policy(store, name, spec.policy)
        topics = await store.namespaces.topic_count(name)
    except (MetadataError, TransientError) as exc:
        return result(
            False,
            "StoreUnavailable",
            f"metadata store of pool {pool.name} ({pool.metadata_url}): {exc}",
            name=name,
            retry=True,
        )
    return result(
        True,
        "Applied",
        f"namespace {name!r} has its policy in region {pool.region!r}; "
        + _limits_text(spec.policy, topics),
        name=name,
        policy=spec.policy,
        topics=topics,
    )


async def delete_namespace_policy(
    ctx: Context, body: Mapping[str, Any], claims: Iterable[NamespaceClaim]
) -> str:
    """Delete the namespace's policy record; returns what was done, for the Event.

    ``TransientError`` if the store cannot be reached (the caller retries, holding the
    finalizer)."""
    try:
        spec: NamespaceSpec = parse_namespace(body)
    except SpecError:
        return "nothing to delete: the HedwigNamespace never named a valid namespace"
    name = spec.namespace_name
    winner = conflict_winner(claims, name)
    if winner is not None and winner.name != spec.name:
        return f"policy kept: namespace {name!r} is managed by HedwigNamespace {winner.name}"
    pool_body = await ctx.kube.get(pool_ref(spec.namespace, spec.pool))
    if pool_body is None:
        return f"policy kept: HubPool {spec.pool} is gone, so its metadata store is unknown"
    try:
        pool: PoolSpec = parse_pool(pool_body)
    except SpecError:
        return f"policy kept: HubPool {spec.pool} is invalid, so its metadata store is unknown"
    try:
        store = await ctx.metadata.for_pool(pool)
        if await store.namespaces.read_namespace(name) is None:
            return f"namespace {name!r} had no policy in region {pool.region!r}"
        try:
            await store.namespaces.delete_namespace(name, ANY_VERSION)
        except MetadataError:
            if await store.namespaces.read_namespace(name) is not None:
                raise
    except MetadataError as exc:
        raise TransientError(f"metadata store of pool {pool.name}: {exc}") from exc
    return (
        f"deleted the policy of namespace {name!r} from region {pool.region!r} "
        "(its topics stay, with the region's defaults and no quota)"
    )
