"""One rebalancing cycle of one pool, and the history kept between cycles.

Guards first, in this order, each giving the cycle's ``result`` in the pool's status:
``Disabled`` (spec or operator switch), ``Paused`` (``spec.rebalancing.paused`` or the
``hedwig.io/rebalance-paused: "true"`` annotation), ``RolloutInProgress`` (hubs restart during a
StatefulSet rollout, so their load says nothing about balance, and moving topics onto a hub
about to restart is wasted work). While a guard holds, the policy is not consulted at all, so
overload confirmations only count checks made on a settled pool.

Each move is performed (``perform_move``) and reported: an Event on the pool and on the Topic
resource that manages the topic (if any), with the policy's reason; the Topic's
``status.lastMove``; the pool's ``status.lastRebalance``.

A low-load drain empties the pool's highest-ordinal hub first (the pod a StatefulSet removes
when scaled down). With ``spec.rebalancing.scaleDown``, once that hub has stayed drained and
empty for ``emptyForSeconds``, the operator lowers ``spec.replicas`` by one (never below
``minReplicas``) and says so in an Event: the drain then frees a server instead of leaving an
idle hub that the under-load rule would refill.

With ``spec.autoscaling`` the pool's autoscaler (``autoscale``) runs first in every cycle, and
the older ``scaleDown`` rule does not: it decides on the hubs' load just read (or is held by the
guard that ended the cycle), and the hub it drains is passed to the rebalancer as retiring, so
this cycle's moves empty it.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from hedwig.errors import HedwigError, MetadataError
from hedwig.metadata import HubStatus, MetadataStore, PlanMode, TopicPlan
from hedwig.placement.plans import set_topic_mode
from hedwig.placement.rebalance import RebalanceConfig, Rebalancer
from hedwig.placement.scaling import ScalingConfig, ScalingPolicy
from hedwig.protocol.names import lane_of
from hedwig_operator.builders.labels import hub_address
from hedwig_operator.builders.statefulset import rollout_in_progress
from hedwig_operator.conditions import now_iso
from hedwig_operator.context import Context
from hedwig_operator.kube import KubeError, ObjectRef
from hedwig_operator.pools import statefulset_ref
from hedwig_operator.rebalancing.autoscale import AutoscaleState, autoscale
from hedwig_operator.rebalancing.load import PrometheusError, fetch_prometheus_load
from hedwig_operator.rebalancing.mover import MoveOutcome, perform_move
from hedwig_operator.recorder import record_event
from hedwig_operator.resources import API_VERSION, POOL_KIND, TOPIC_KIND
from hedwig_operator.specs import PoolSpec
from hedwig_operator.specs.topic import ScalingMode
from hedwig_operator.topics import MODE_NAMES, TopicClaim, conflict_winner

log = logging.getLogger(__name__)

# The replication's ensemble when the pool does not set one (the hubs' default, 3/3/2).
DEFAULT_ENSEMBLE = 3

MAX_MOVES_IN_STATUS = 20


@dataclass
class ScalingState:
    """A pool's scaling policy instance (confirmations and cooldowns between cycles)."""

    policy: ScalingPolicy | None = None
    config: ScalingConfig | None = None
    total_changes: int = 0

    def get(self, config: ScalingConfig, ctx: Context) -> ScalingPolicy:
        if self.policy is None or config != self.config:
            self.policy = ScalingPolicy(config, ctx.clock)
            self.config = config
        return self.policy


@dataclass
class RebalanceState:
    """A pool's policy instance (it keeps confirmations and cooldowns between cycles). A new
    configuration starts a new policy: its history was counted against other thresholds."""

    rebalancer: Rebalancer | None = None
    config: RebalanceConfig | None = None
    # The drained last hub, and since when (monotonic) it has owned no topic.
    empty_since: tuple[str, float] | None = None
    total_moves: int = 0
    scaling: ScalingState = field(default_factory=ScalingState)
    autoscaling: AutoscaleState = field(default_factory=AutoscaleState)
    last_result: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)

    def policy(self, config: RebalanceConfig, ctx: Context) -> Rebalancer:
        if self.rebalancer is None or config != self.config:
            self.rebalancer = Rebalancer(config, ctx.clock)
            self.config = config
        return self.rebalancer


async def _maybe_scale_down(
    ctx: Context,
    pool: PoolSpec,
    state: RebalanceState,
    policy: Rebalancer,
    hubs: list[HubStatus],
    drain_first: list[str],
) -> str | None:
    """Lower ``spec.replicas`` by one if the last hub has been drained and empty long enough;
    what was done, or None."""
    rule = pool.rebalancing.scale_down
    if not rule.enabled or not drain_first or pool.replicas <= rule.min_replicas:
        state.empty_since = None
        return None
    last = drain_first[0]
    status = next((h for h in hubs if h.address == last), None)
    empty = (
        last in policy.drained
        and status is not None
        and status.load is not None
        and status.load.topics == 0
    )
    if not empty:
        state.empty_since = None
        return None
    now = ctx.clock.monotonic()
    if state.empty_since is None or state.empty_since[0] != last:
        state.empty_since = (last, now)
    if now - state.empty_since[1] < rule.empty_for_s:
        return None
    replicas = pool.replicas - 1
    target = ObjectRef(API_VERSION, POOL_KIND, pool.namespace, pool.name, pool.uid)
    try:
        await ctx.kube.patch(target, {"spec": {"replicas": replicas}})
    except KubeError as exc:
        log.warning("pool %s: scaling down failed: %s", pool.name, exc)
        return None
    state.empty_since = None
    message = (
        f"scaled down to {replicas} hubs: the low-load drain emptied {last}, which owned no "
        f"topic for {rule.empty_for_s} s (minReplicas {rule.min_replicas})"
    )
    log.info("pool %s/%s: %s", pool.namespace, pool.name, message)
    await record_event(ctx.kube, target, "ScaledDown", message)
    return message


async def _scale_topics(
    ctx: Context,
    pool: PoolSpec,
    state: ScalingState,
    store: MetadataStore,
    hubs: list[HubStatus],
    claims_of: Callable[[str], Iterable[TopicClaim]],
) -> list[str]:
    """The scaling policy on the pool's load reports: a topic whose subscribers alone overload
    its hub is spread over delivery hubs, one whose publishers do is given lanes, and either is
    brought back once it cools; what changed.

    Only topics whose Topic resource says ``auto`` (or that no Topic manages) change, capped
    at the Topic's ``maxHubs``; each change is a ``ModeChanged`` Event on the pool and the
    Topic, and the Topic's ``status.plan``. Plans are read for the topics the reports list
    (each report lists its hottest topics only), so a cycle costs the same at any topic count.
    """
    fan_out = pool.rebalancing.fan_out
    if not fan_out.enabled:
        return []
    policy = state.get(pool.rebalancing.to_scaling(), ctx)
    plans: dict[str, TopicPlan] = {}
    try:
        # A lane's load is its topic's: the plan is the topic's.
        listed = {lane_of(t)[0] for h in hubs if h.alive and h.load for t in h.load.topic_loads}
        for topic in sorted(listed):
            got = await store.plans.read_plan(topic)
            if got is not None and got.value.mode in (PlanMode.FAN_OUT, PlanMode.INGEST):
                plans[topic] = got.value
    except MetadataError as exc:
        log.warning("pool %s: cannot read the topics' plans: %s", pool.name, exc)
        return []
    done: list[str] = []
    pool_target = ObjectRef(API_VERSION, POOL_KIND, pool.namespace, pool.name, pool.uid)
    for change in policy.plan(hubs, plans):
        claims = list(claims_of(change.topic))
        managed = conflict_winner(claims, change.topic)
        if managed is not None and managed.scaling is not ScalingMode.AUTO:
            continue  # its Topic pins the mode
        count = change.hubs
        if managed is not None and managed.max_hubs:
            count = min(count, managed.max_hubs)
        try:
            plan = await set_topic_mode(
                store,
                change.topic,
                change.mode,
                hubs=max(1, count),
                reason=change.reason,
                clock=ctx.clock,
            )
        except HedwigError as exc:
            log.warning("pool %s: changing the plan of %r failed: %s", pool.name, change.topic, exc)
            continue
        state.total_changes += 1
        where = f"by {', '.join(plan.hubs)}" if plan.hubs else "by its owner alone"
        message = f"topic {change.topic!r} is served {where}: {change.reason}"
        log.info("pool %s/%s: %s", pool.namespace, pool.name, message)
        done.append(message)
        await record_event(ctx.kube, pool_target, "ModeChanged", message)
        status = {
            "mode": MODE_NAMES[plan.mode],
            "hubs": list(plan.hubs),
            "generation": plan.generation,
        }
        for claim in claims:
            target = ObjectRef(API_VERSION, TOPIC_KIND, claim.namespace, claim.name, claim.uid)
            await record_event(ctx.kube, target, "ModeChanged", message)
            try:
                await ctx.kube.patch_status(target, {"plan": status})
            except KubeError as exc:
                log.warning("could not record the plan on Topic %s: %s", claim.name, exc)
    return done


def _summary(result: str, detail: str, moves: list[dict[str, Any]], now: str) -> dict[str, Any]:
    return {"time": now, "result": result, "message": detail, "moves": moves}


def _move_entry(outcome: MoveOutcome, now: str) -> dict[str, Any]:
    m = outcome.move
    return {
        "topic": m.topic,
        "from": m.source,
        "to": outcome.new_owner,
        "plannedTo": m.destination,
        "method": outcome.method,
        "reason": m.reason,
        "detail": outcome.detail,
        "time": now,
    }


async def rebalance_cycle(
    ctx: Context,
    pool: PoolSpec,
    state: RebalanceState,
    claims_of: Callable[[str], Iterable[TopicClaim]],
    *,
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """Run one cycle; returns the pool's ``status.lastRebalance``.

    ``claims_of(topic)`` gives the Topic resources of this pool naming ``topic`` (for events).
    """
    stamp = now_iso(now)
    spec = pool.rebalancing

    async def held(result: str, detail: str) -> dict[str, Any]:
        # A guard holds: the autoscaler decides nothing either, and says why.
        await autoscale(ctx, pool, state.autoscaling, None, [], hold=detail)
        return _summary(result, detail, [], stamp)

    if not spec.enabled or not ctx.settings.rebalancing_enabled:
        return await held("Disabled", "rebalancing is disabled")
    if pool.rebalancing_paused:
        return await held("Paused", "rebalancing is paused by the pool's spec or annotation")
    try:
        statefulset = await ctx.kube.get(statefulset_ref(pool))
    except KubeError as exc:
        return await held("Error", f"cannot read the StatefulSet: {exc}")
    rolling = rollout_in_progress(statefulset)
    if rolling is not None:
        return await held("RolloutInProgress", f"waiting for the rollout: {rolling}")
    try:
        store = await ctx.metadata.for_pool(pool)
        hubs: list[HubStatus] = await store.hubs.list_hubs()
        if spec.prometheus is not None:
            hubs = await fetch_prometheus_load(spec.prometheus, pool, hubs, ctx.clock.wall_ms())
    except (MetadataError, PrometheusError) as exc:
        return await held("Error", f"cannot read the hubs' load: {exc}")

    scaled_by_load = await autoscale(ctx, pool, state.autoscaling, store, hubs)
    changed = await _scale_topics(ctx, pool, state.scaling, store, hubs, claims_of)
    ensemble = pool.replication.ensemble if pool.replication else DEFAULT_ENSEMBLE
    policy = state.policy(spec.to_config(min_hubs=ensemble), ctx)
    drain_first = [hub_address(pool, i) for i in reversed(range(pool.replicas))]
    moves = policy.plan(hubs, drain_first=drain_first, retiring=state.autoscaling.retiring)
    if not moves:
        # spec.autoscaling owns the replicas when on; the older scaleDown rule only when off.
        scaled = (
            None
            if scaled_by_load is not None
            else await _maybe_scale_down(ctx, pool, state, policy, hubs, drain_first)
        )
        if scaled is not None:
            return _summary("ScaledDown", scaled, [], stamp)
        if changed:
            return _summary("ModeChanged", "; ".join(changed), [], stamp)
        return _summary("Balanced", f"no move needed among {len(hubs)} hubs", [], stamp)
    state.empty_since = None
    alive = [h.address for h in hubs if h.alive]
    entries: list[dict[str, Any]] = []
    pool_target = ObjectRef(API_VERSION, POOL_KIND, pool.namespace, pool.name, pool.uid)
    for move in moves:
        try:
            outcome = await perform_move(
                store, ctx.hubs, move, alive, ctx.settings, graceful=spec.graceful_hand_off
            )
        except MetadataError as exc:
            log.warning("pool %s: moving %r failed: %s", pool.name, move.topic, exc)
            outcome = MoveOutcome(move, "skipped", None, f"ZooKeeper error: {exc}")
        entry = _move_entry(outcome, stamp)
        entries.append(entry)
        if not outcome.performed:
            continue
        state.total_moves += 1
        message = (
            f"topic {move.topic!r} moved from {move.source} to "
            f"{outcome.new_owner or 'a new owner (not claimed yet)'} ({outcome.method}): "
            f"{move.reason}"
        )
        log.info("pool %s/%s: %s", pool.namespace, pool.name, message)
        await record_event(ctx.kube, pool_target, "TopicMoved", message)
        for claim in claims_of(move.topic):
            topic_target = ObjectRef(
                API_VERSION, TOPIC_KIND, claim.namespace, claim.name, claim.uid
            )
            await record_event(ctx.kube, topic_target, "TopicMoved", message)
            last_move = {k: entry[k] for k in ("from", "to", "method", "reason", "time")}
            try:
                await ctx.kube.patch_status(topic_target, {"lastMove": last_move})
            except KubeError as exc:
                log.warning("could not record the move on Topic %s: %s", claim.name, exc)
    performed = sum(1 for e in entries if e["method"] != "skipped")
    return _summary(
        "Moved" if performed else "NothingMoved",
        f"{performed} of {len(entries)} planned moves performed",
        entries[:MAX_MOVES_IN_STATUS],
        stamp,
    )
