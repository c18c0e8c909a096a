"""Reconciling one Topic: the topic's znode holds the spec's configuration, a hub owns it, and
the resource's status says so (or says exactly why not).

Rules, in the order they are checked:

1. The spec must parse and its ``topicName`` must be one the hubs accept (the core's
   ``validate_name``): otherwise Ready=False, reason InvalidSpec / InvalidTopicName. Nothing is
   retried: the user must change the spec.
2. The pool must exist in the Topic's namespace: otherwise Ready=False, reason PoolNotFound.
   The pool's worker reconciles the Topic again once the pool appears.
3. One Topic resource manages one topic of a pool. When several claim the same topic name, the
   oldest (creation time, then name) manages it; the others get Ready=False, reason
   ResourceConflict, and never touch the topic (not even when they are deleted).
4. The topic's znode is created with the configuration, or updated when it differs
   (compare-and-set on its version, so a concurrent writer is noticed, not overwritten).
5. If no hub owns the topic, one is asked to take it (``HubRequests.activate``).

A pinned ``spec.scaling`` is then written to the topic's plan by compare-and-set too, and a
change of plan is an Event on the Topic (ModeChanged). A failure whose reason may go away (the
store unreachable, no hub alive yet: ``TransientError`` among them) is a Ready=False status
and a retry later.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hedwig.clock import Clock
from hedwig.errors import BadVersionError, HedwigError, InvalidTopicError, MetadataError
from hedwig.metadata import NEW_VERSION, HubStatus, MetadataStore, PlanMode, TopicPlan
from hedwig.placement.plans import set_topic_mode
from hedwig.protocol.names import validate_name
from hedwig_operator.context import Context
from hedwig_operator.recorder import record_event
from hedwig_operator.specs import ScalingMode, SpecError, TopicSpec, parse_pool, parse_topic
from hedwig_operator.specs.topic import DEFAULT_FAN_OUT_HUBS
from hedwig_operator.topics.claims import TopicClaim, conflict_winner, pool_ref
from hedwig_operator.topics.errors import TransientError
from hedwig_operator.topics.snapshot import TopicSnapshot, read_snapshot
from hedwig_operator.topics.status import MODE_NAMES, build_topic_status

log = logging.getLogger(__name__)


async def _ensure_scaling(store: MetadataStore, spec: TopicSpec, clock: Clock) -> TopicPlan | None:
    """Make the topic's plan what ``spec.scaling`` pins; the plan written, or None if nothing
    was pinned or nothing changed. ``auto`` leaves the plan to the pool's scaling policy (the
    rebalancing cycle, ``spec.rebalancing.fanOut``), ``hedwig topic mode`` and the hubs'
    ``--auto-fan-out``."""
    mode = spec.scaling_mode
    if mode is ScalingMode.AUTO:
        return None
    current = await store.plans.read_plan(spec.topic_name)
    if mode is ScalingMode.SINGLE:
        if current is None:
            return None
        return await set_topic_mode(
            store, spec.topic_name, PlanMode.SINGLE, reason="Topic spec.scaling", clock=clock
        )
    hubs = spec.max_hubs or DEFAULT_FAN_OUT_HUBS
    plan = await set_topic_mode(
        store,
        spec.topic_name,
        PlanMode.INGEST if mode is ScalingMode.INGEST else PlanMode.FAN_OUT,
        hubs=hubs,
        reason="Topic spec.scaling",
        clock=clock,
    )
    return None if current is not None and current.value == plan else plan


async def _ensure_config(store: MetadataStore, spec: TopicSpec) -> str | None:
    """Make the topic's znode hold the spec's configuration; what changed, or None."""
    wanted = spec.config()
    for _ in range(3):
        current = await store.topics.read_topic_config(spec.topic_name)
        try:
            if current is None:
                await store.topics.write_topic_config(spec.topic_name, wanted, NEW_VERSION)
                return "created"
            if current.value == wanted:
                await store.topics.ensure_topic(spec.topic_name)  # subscriber root, if missing
                return None
            await store.topics.write_topic_config(spec.topic_name, wanted, current.version)
            return "updated"
        except BadVersionError:
            continue  # someone wrote in between: read again
    raise TransientError(f"the znode of topic {spec.topic_name!r} keeps changing under us")


async def reconcile_topic(
    ctx: Context,
    body: Mapping[str, Any],
    claims: Iterable[TopicClaim],
    *,
    pool_body: Mapping[str, Any] | None = None,
    hubs: Sequence[HubStatus] | None = None,
    now: dt.datetime | None = None,
) -> tuple[dict[str, Any], bool]:
    """Reconcile one Topic; returns (its new status, whether to retry later).

    ``pool_body`` and ``hubs`` may be passed by a caller that already read them (the pool's
    worker refreshing all its Topics); otherwise they are read here.
    """
    previous = body.get("status") or {}
    generation = int(body.get("metadata", {}).get("generation", 0))

    def result(
        ready: bool,
        reason: str,
        message: str,
        *,
        topic: str | None = None,
        snapshot: TopicSnapshot | None = None,
        retry: bool = False,
    ) -> tuple[dict[str, Any], bool]:
        status = build_topic_status(
            generation=generation,
            topic_name=topic,
            ready=ready,
            reason=reason,
            message=message,
            previous=previous,
            snapshot=snapshot,
            now=now,
        )
        return status, retry

    try:
        spec = parse_topic(body)
    except SpecError as exc:
        return result(False, "InvalidSpec", str(exc))
    try:
        validate_name(spec.topic_name)
    except InvalidTopicError as exc:
        return result(
            False,
            "InvalidTopicName",
            f"the hubs refuse topic name {spec.topic_name!r}: {exc.reason}",
        )
    topic = spec.topic_name
    winner = conflict_winner(claims, topic)
    if winner is not None and winner.name != spec.name:
        return result(
            False,
            "ResourceConflict",
            f"topic {topic!r} of pool {spec.pool!r} is managed by Topic "
            f"{winner.namespace}/{winner.name}, created earlier",
            topic=topic,
        )
    if pool_body is None:
        pool_body = await ctx.kube.get(pool_ref(spec.namespace, spec.pool))  # KubeError: retry
    if pool_body is None:
        return result(
            False,
            "PoolNotFound",
            f"HubPool {spec.namespace}/{spec.pool} does not exist",
            topic=topic,
        )
    try:
        pool = parse_pool(pool_body)
    except SpecError as exc:
        return result(False, "PoolInvalid", f"HubPool {spec.pool} is invalid: {exc}", topic=topic)

    def store_unavailable(
        exc: Exception, snapshot: TopicSnapshot | None = None
    ) -> tuple[dict[str, Any], bool]:
        return result(
            False,
            "ZooKeeperUnavailable",
            f"ZooKeeper of pool {pool.name} ({pool.metadata_url}): {exc}",
            topic=topic,
            snapshot=snapshot,
            retry=True,
        )

    try:
        store = await ctx.metadata.for_pool(pool)
        await _ensure_config(store, spec)
        if hubs is None:
            hubs = await store.hubs.list_hubs()
        snapshot = await read_snapshot(store, topic, hubs)
        if snapshot.owner is None:
            alive = [h.address for h in hubs if h.alive]
            if not alive:
                return result(
                    False,
                    "NoHubs",
                    f"no hub of region {pool.region!r} is alive to own the topic",
                    topic=topic,
                    snapshot=snapshot,
                    retry=True,
                )
            ctx.trust.note_hubs(pool, alive)
            try:
                await ctx.hubs.activate(alive, topic, ctx.settings.activate_timeout_s)
            except (HedwigError, TimeoutError, OSError) as exc:
                return result(
                    False,
                    "NotOwned",
                    f"no hub has taken the topic yet: {exc!r}",
                    topic=topic,
                    snapshot=snapshot,
                    retry=True,
                )
            snapshot = await read_snapshot(store, topic)
    except (MetadataError, TransientError) as exc:
        return store_unavailable(exc)
    if snapshot.owner is None:
        return result(
            False,
            "NotOwned",
            "a hub was asked to take the topic but no owner is recorded yet",
            topic=topic,
            snapshot=snapshot,
            retry=True,
        )
    try:
        changed = await _ensure_scaling(store, spec, ctx.clock)
    except (MetadataError, TransientError) as exc:
        return store_unavailable(exc, snapshot)
    except HedwigError as exc:  # no hub alive to deliver, and the like
        return result(False, "ScalingFailed", str(exc), topic=topic, snapshot=snapshot, retry=True)
    if changed is not None:
        where = f" on {', '.join(changed.hubs)}" if changed.hubs else ""
        if changed.mode is PlanMode.INGEST:
            where = f" by lanes {', '.join(str(i) for i in changed.open_lanes)}"
        message = f"topic {topic!r} is served {MODE_NAMES[changed.mode]}{where} (spec.scaling)"
        log.info("%s", message)
        await record_event(ctx.kube, body, "ModeChanged", message)
        keep = changed.hubs or changed.lanes
        snapshot = dataclasses.replace(snapshot, plan=changed if keep else None)
    return result(
        True,
        "Owned",
        f"topic {topic!r} is configured in region {pool.region!r} and owned by {snapshot.owner}",
        topic=topic,
        snapshot=snapshot,
    )
