"""The kopf registrations: thin adapters from kopf's callbacks to the reconcilers.

- HubPool: create/update/resume apply the children (StatefulSet, Services, ConfigMap, PDB)
  and record ``observedGeneration``; an event handler (no finalizer) keeps one
  ``PoolWorker`` per pool, which refreshes status and rebalances.
- HedwigUser: create/update/resume (and an hourly timer) write its ACL entry and, for a
  ``tls`` user, its client certificate (``hedwig_operator.security``); a delete handler (with
  the operator's finalizer) removes the ACL entry.
- HedwigNamespace: create/update/resume write its namespace's policy record and status; a
  daemon per resource refreshes its status (usage against limits) every status interval and
  writes the record again if someone changed it; a delete handler (with the operator's
  finalizer, unless ``hedwig.io/finalizer: "false"``) deletes the record. An index by
  (namespace, pool, Hedwig namespace) (``namespace_claims``) says which resource manages it.
- Topic: create/update/resume reconcile the topic's znode and status; an index of Topics by
  pool (``topic_entries``) tells which Topics a pool's worker refreshes, and one by topic
  name (``topic_claims``) which resource manages which topic name (looked up, not scanned:
  with N Topics a scan per event made creating them O(N²)). A delete handler, filtered to
  ``deletionPolicy: Delete`` without ``hedwig.io/finalizer: "false"``, is the only reason a
  Topic gets a finalizer.

Domain problems (bad spec, unknown pool, ZooKeeper down) end up in the status, never as
handler failures: the pool's worker retries them on its own schedule. Only API-server
errors are retried by kopf (``TemporaryError``).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import kopf

from hedwig.errors import HedwigError
from hedwig_operator.conditions import condition
from hedwig_operator.context import Context
from hedwig_operator.hubs import ClientHubRequests
from hedwig_operator.kube import KubeError, ref_of
from hedwig_operator.kube.http import HttpKubeApi
from hedwig_operator.metadata import MetadataConnections
from hedwig_operator.namespaces import (
    NamespaceClaim,
    delete_namespace_policy,
    reconcile_namespace,
    status_changed,
)
from hedwig_operator.namespaces import claim_of as namespace_claim_of
from hedwig_operator.namespaces import wants_finalizer as namespace_wants_finalizer
from hedwig_operator.ownership import SecretRefusedError, read_access
from hedwig_operator.pools import apply_children, selector_string
from hedwig_operator.recorder import record_event
from hedwig_operator.resources import (
    FINALIZER,
    GROUP,
    KOPF_PREFIX,
    NAMESPACE_PLURAL,
    POOL_PLURAL,
    TOPIC_PLURAL,
    USER_PLURAL,
    VERSION,
)
from hedwig_operator.security import PoolTrust, delete_user, reconcile_user
from hedwig_operator.settings import OperatorSettings
from hedwig_operator.specs import AccessSecret, SpecError, parse_pool
from hedwig_operator.topics import (
    TopicClaim,
    TransientError,
    claim_of,
    claims_key,
    delete_topic_data,
    reconcile_topic,
    wants_finalizer,
)
from hedwig_operator.workers import PoolKey, TopicEntry, Workers

log = logging.getLogger(__name__)


class _State:
    """What the handlers share: built at start-up, torn down at clean-up."""

    ctx: Context | None = None
    workers: Workers | None = None
    topic_index: kopf.Index[PoolKey, TopicEntry] | None = None


STATE = _State()

# Resources kopf handles at once (a worker each). Unbounded, a burst of new Topics, or the
# listing of every Topic when the operator starts (each resumed), had a worker and a
# reconciliation under way per Topic: 5,000 Topics created at once took the operator to about
# 310 MB, which it kept (150 MB with 64 workers). Reconciling waits on the API server, the
# store and the hubs, so a hundred at once keep the operator busy.
KOPF_WORKERS = 128
# How long a resource's worker waits for its next event before it exits. kopf's 5 s held each
# of the bounded workers idle that long after its Topic was handled: 64 workers made Topics
# Ready at 12 a second instead of 50. The next event of a resource starts a worker again.
KOPF_WORKER_IDLE_S = 0.5


def _ctx() -> Context:
    if STATE.ctx is None:  # pragma: no cover - kopf runs startup handlers first
        raise kopf.TemporaryError("the operator is still starting", delay=1)
    return STATE.ctx


def _plain(body: Mapping[str, Any]) -> dict[str, Any]:
    """A detached copy of a kopf body (kopf reuses and replaces its views)."""
    return copy.deepcopy(dict(body))


# What the operator reads of a Topic's metadata.
_TOPIC_METADATA = (
    "name",
    "namespace",
    "uid",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
)


def _kept(body: Mapping[str, Any]) -> dict[str, Any]:
    """A detached copy of what the operator reads of a Topic: the index holds one per Topic.

    Not its managed fields nor kopf's own annotations (its last-handled configuration is a
    second copy of the spec): most of a body, and the index held them for every Topic (about
    50 KB of operator memory per Topic with them)."""
    meta = body.get("metadata") or {}
    kept: dict[str, Any] = {k: copy.deepcopy(meta[k]) for k in _TOPIC_METADATA if k in meta}
    annotations = {
        k: v for k, v in (meta.get("annotations") or {}).items() if not k.startswith(KOPF_PREFIX)
    }
    if annotations:
        kept["annotations"] = annotations
    out = {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), "metadata": kept}
    for part in ("spec", "status"):
        if body.get(part) is not None:
            out[part] = copy.deepcopy(dict(body[part]))
    return out


def _topics_of(key: PoolKey) -> Iterable[TopicEntry]:
    index = STATE.topic_index
    if index is None or key not in index:
        return []
    return list(index[key])


def _claims(
    index: kopf.Index[tuple[str, str, str], TopicClaim], body: Mapping[str, Any]
) -> list[TopicClaim]:
    """Every claim on the topic name ``body`` claims, in its pool (what decides which Topic
    manages it)."""
    claim = claim_of(body)
    if claim is None:
        return []
    key = (claim.namespace, claim.pool, claim.topic_name)
    return list(index[key]) if key in index else []


def _pool_body(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pool of a Topic (or HedwigNamespace) as its worker last saw it (kept current by the
    pool's events), so reconciling one does not read the pool from the API server each time;
    None if the pool has no worker (yet): the reconciler reads it."""
    meta, spec = body.get("metadata") or {}, body.get("spec") or {}
    workers = STATE.workers
    worker = workers.get((str(meta.get("namespace")), str(spec.get("pool")))) if workers else None
    return worker.body if worker is not None else None


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.finalizer = FINALIZER
    settings.queueing.worker_limit = KOPF_WORKERS
    settings.queueing.idle_timeout = KOPF_WORKER_IDLE_S
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=KOPF_PREFIX, key="last-handled-configuration"
    )
    # CRDs are installed before the operator; watching for new ones would need cluster-wide
    # list/watch on CRDs and namespaces, which the operator does not otherwise need.
    settings.scanning.disabled = True
    # Handler logs become Events only for warnings; moves and deletions post their own.
    settings.posting.level = logging.WARNING
    ops = OperatorSettings.from_env()
    trust = PoolTrust.from_pod()
    kube = HttpKubeApi.from_environment()

    async def read_secret(secret: AccessSecret) -> dict[str, bytes]:
        return await read_access(kube, secret)

    STATE.ctx = Context(
        kube=kube,
        metadata=MetadataConnections(
            session_timeout_s=ops.metadata_session_timeout_s,
            connect_timeout_s=ops.metadata_connect_timeout_s,
            digests=trust.digests,
            read_secret=read_secret,
        ),
        hubs=ClientHubRequests(trust),
        settings=ops,
        trust=trust,
    )
    STATE.workers = Workers(STATE.ctx, _topics_of)


@kopf.on.cleanup()
async def cleanup(**_: Any) -> None:
    if STATE.workers is not None:
        await STATE.workers.stop_all()
    if STATE.ctx is not None:
        await STATE.ctx.kube.close()
        await STATE.ctx.metadata.close()


# ------------------------------------------------------------------------------- Topics


@kopf.index(GROUP, VERSION, TOPIC_PLURAL)
def topic_entries(body: kopf.Body, **_: Any) -> dict[PoolKey, TopicEntry]:
    claim = claim_of(body)
    if claim is None:
        return {}
    return {claims_key(claim.namespace, claim.pool): TopicEntry(claim, _kept(body))}


@kopf.index(GROUP, VERSION, TOPIC_PLURAL)
def topic_claims(body: kopf.Body, **_: Any) -> dict[tuple[str, str, str], TopicClaim]:
    claim = claim_of(body)
    if claim is None:
        return {}
    return {(claim.namespace, claim.pool, claim.topic_name): claim}


@kopf.on.resume(GROUP, VERSION, TOPIC_PLURAL)
@kopf.on.create(GROUP, VERSION, TOPIC_PLURAL)
@kopf.on.update(GROUP, VERSION, TOPIC_PLURAL)
async def topic_changed(body: kopf.Body, patch: kopf.Patch, **kwargs: Any) -> None:
    ctx = _ctx()
    claims = _claims(kwargs["topic_claims"], body)
    try:
        status, _retry = await reconcile_topic(ctx, body, claims, pool_body=_pool_body(body))
    except KubeError as exc:
        raise kopf.TemporaryError(f"API server: {exc}", delay=ctx.settings.retry_delay_s) from exc
    for key, value in status.items():
        patch.status[key] = value


@kopf.on.delete(
    GROUP, VERSION, TOPIC_PLURAL, when=lambda body, **_: wants_finalizer(body), timeout=900
)
async def topic_deleted(body: kopf.Body, **kwargs: Any) -> None:
    ctx = _ctx()
    claims = _claims(kwargs["topic_claims"], body)
    try:
        outcome = await delete_topic_data(ctx, body, claims)
    except (TransientError, KubeError) as exc:
        raise kopf.TemporaryError(str(exc), delay=ctx.settings.retry_delay_s) from exc
    await record_event(ctx.kube, body, "TopicDataDeleted", outcome)


# ------------------------------------------------------------------------------ HubPools


@kopf.on.resume(GROUP, VERSION, POOL_PLURAL)
@kopf.on.create(GROUP, VERSION, POOL_PLURAL)
@kopf.on.update(GROUP, VERSION, POOL_PLURAL)
async def pool_changed(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    ctx = _ctx()
    try:
        pool = parse_pool(body)
    except SpecError as exc:
        patch.status["conditions"] = [
            condition("Ready", False, "InvalidSpec", str(exc), body.status.get("conditions"))
        ]
        raise kopf.PermanentError(str(exc)) from exc
    try:
        await apply_children(ctx.kube, pool, ctx.trust)
    except SecretRefusedError as exc:
        # A domain problem, not a handler failure: the pool's worker repeats the check every
        # refresh (and posts the Warning Event), so a Secret made right is picked up.
        patch.status["conditions"] = [
            condition("Ready", False, exc.reason, exc.message, body.status.get("conditions"))
        ]
        return
    except KubeError as exc:
        await record_event(ctx.kube, body, "ApplyFailed", str(exc), warning=True)
        raise kopf.TemporaryError(
            f"applying children: {exc}", delay=ctx.settings.retry_delay_s
        ) from exc
    patch.status["observedGeneration"] = pool.generation
    patch.status["region"] = pool.region
    patch.status["selector"] = selector_string(pool)


@kopf.on.event(GROUP, VERSION, POOL_PLURAL)
async def pool_event(type: str, body: kopf.Body, **kwargs: Any) -> None:
    STATE.topic_index = kwargs["topic_entries"]
    workers = STATE.workers
    if workers is None:  # pragma: no cover - startup runs first
        return
    meta = body.get("metadata") or {}
    key = (str(meta.get("namespace")), str(meta.get("name")))
    if type == "DELETED":
        await workers.pool_deleted(key)
    else:
        workers.ensure(_plain(body))


# ---------------------------------------------------------------------------- HedwigUsers


@kopf.on.resume(GROUP, VERSION, USER_PLURAL)
@kopf.on.create(GROUP, VERSION, USER_PLURAL)
@kopf.on.update(GROUP, VERSION, USER_PLURAL)
@kopf.timer(GROUP, VERSION, USER_PLURAL, interval=3600, initial_delay=3600, idle=60)
async def user_changed(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    """Write the user's ACL entry (and certificate); hourly too, so certificates are renewed
    and a pool that appeared later is picked up."""
    ctx = _ctx()
    try:
        outcome = await reconcile_user(ctx.kube, ctx.metadata, ctx.trust, _plain(body))
    except KubeError as exc:
        raise kopf.TemporaryError(f"API server: {exc}", delay=ctx.settings.retry_delay_s) from exc
    for key, value in outcome.status.items():
        patch.status[key] = value
    if outcome.retry:
        raise kopf.TemporaryError(
            str(outcome.status["conditions"][0]["message"]), delay=ctx.settings.retry_delay_s
        )


@kopf.on.delete(GROUP, VERSION, USER_PLURAL, timeout=600)
async def user_deleted(body: kopf.Body, **_: Any) -> None:
    """Remove the user's ACL entry: its access ends on every hub within a second."""
    ctx = _ctx()
    try:
        await delete_user(ctx.kube, ctx.metadata, ctx.trust, _plain(body))
    except (KubeError, HedwigError) as exc:
        raise kopf.TemporaryError(str(exc), delay=ctx.settings.retry_delay_s) from exc


# ------------------------------------------------------------------------- HedwigNamespaces


@kopf.index(GROUP, VERSION, NAMESPACE_PLURAL)
def namespace_claims(body: kopf.Body, **_: Any) -> dict[tuple[str, str, str], NamespaceClaim]:
    claim = namespace_claim_of(body)
    return {} if claim is None else {claim.key: claim}


def _namespace_rivals(
    index: kopf.Index[tuple[str, str, str], NamespaceClaim], body: Mapping[str, Any]
) -> list[NamespaceClaim]:
    claim = namespace_claim_of(body)
    if claim is None or claim.key not in index:
        return []
    return list(index[claim.key])


@kopf.on.resume(GROUP, VERSION, NAMESPACE_PLURAL)
@kopf.on.create(GROUP, VERSION, NAMESPACE_PLURAL)
@kopf.on.update(GROUP, VERSION, NAMESPACE_PLURAL)
async def namespace_changed(body: kopf.Body, patch: kopf.Patch, **kwargs: Any) -> None:
    ctx = _ctx()
    rivals = _namespace_rivals(kwargs["namespace_claims"], body)
    try:
        status, _retry = await reconcile_namespace(
            ctx, _plain(body), rivals, pool_body=_pool_body(body)
        )
    except KubeError as exc:
        raise kopf.TemporaryError(f"API server: {exc}", delay=ctx.settings.retry_delay_s) from exc
    for key, value in status.items():
        patch.status[key] = value


@kopf.daemon(GROUP, VERSION, NAMESPACE_PLURAL, cancellation_timeout=5)
async def namespace_refresh(stopped: kopf.DaemonStopped, body: kopf.Body, **kwargs: Any) -> None:
    """Every status interval: the usage (topics counted) into the status, and the record made
    what the spec says again if someone changed or deleted it. A status is patched only when
    it changed."""
    ctx = _ctx()
    while not stopped:
        await stopped.wait(ctx.settings.status_interval_s)
        if stopped:
            return
        current = _plain(body)
        rivals = _namespace_rivals(kwargs["namespace_claims"], current)
        try:
            status, _retry = await reconcile_namespace(
                ctx, current, rivals, pool_body=_pool_body(current)
            )
            if status_changed(current.get("status"), status):
                await ctx.kube.patch_status(ref_of(current), status)
        except KubeError as exc:
            log.warning("HedwigNamespace %s: refreshing its status: %s", ref_of(current), exc)


@kopf.on.delete(
    GROUP,
    VERSION,
    NAMESPACE_PLURAL,
    when=lambda body, **_: namespace_wants_finalizer(body),
    timeout=900,
)
async def namespace_deleted(body: kopf.Body, **kwargs: Any) -> None:
    ctx = _ctx()
    rivals = _namespace_rivals(kwargs["namespace_claims"], body)
    try:
        outcome = await delete_namespace_policy(ctx, _plain(body), rivals)
    except (TransientError, KubeError) as exc:
        raise kopf.TemporaryError(str(exc), delay=ctx.settings.retry_delay_s) from exc
    await record_event(ctx.kube, body, "NamespacePolicyDeleted", outcome)
