"""The pool's autoscaler: ``spec.autoscaling`` acted on, once a rebalancing cycle.

The decisions are the pool scaling policy's (``hedwig.placement.pool_scaling``: its rules and
its table of states are in its docstring); this module gives it what only the operator knows
and does what it answers:

- Its input: the hubs' load reports the cycle read, the pool's ``spec.replicas``, the plans
  of the region's planned topics (a hub owning or delivering a topic whose plan changed within
  ``reconfigurationSeconds`` is never drained) and the hub that may be removed: the pool is a
  StatefulSet, which removes its highest ordinal, so that hub and no other.
- A guard of the cycle (rebalancing paused or disabled, a StatefulSet rollout under way, the
  hubs' load unreadable) is passed as the policy's ``hold``: nothing is decided and its
  windows start again once the guard lifts. The operator's own scale-out is such a rollout
  until the new pods are ready; the policy waits for them to report in any case.
- ``ScalingOut`` and ``ScalingIn`` set ``spec.replicas`` (the pool's own, so ``kubectl get
  hubpool`` and the scale subresource say what the pool is). A scale-in happens only once the
  draining hub reports no topic: the StatefulSet then stops an empty hub, whose preStop drain
  has nothing to hand over.
- While a hub drains, the cycle names it to the rebalancer as retiring (``retiring`` below):
  the rebalancer hands its topics over, hottest first, to the least loaded hubs, each a graceful
  hand-off to a named destination. When its traffic is under ``hand_off_rest_below`` of a
  hub's capacity (``decision.hand_off_rest``), the topics its report does not list (a report
  lists a hub's hottest only) are found by their owner records and handed over the same way,
  ``REST_PER_CYCLE`` a cycle, each to the serving hub that has received the fewest so far.
  This reads every topic's owner record of the region, once a cycle while it lasts.
- Every decision that does something is an Event on the pool whose reason is the action
  (``ScalingOut``, ``DrainStarted``, ``DrainCancelled``, ``ScalingIn``, ``ScaleCompleted``)
  and whose message is the policy's reason, with its numbers; a pool becoming pinned at its
  maximum, or a change stalled, is a Warning (``ScalingPinned``, ``ScalingStalled``). The pool's
  ``status.autoscaling`` shows the state, the last decision and the last change; the operator's
  metrics (``hedwig_operator.metrics``) the same as series.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from hedwig.errors import MetadataError
from hedwig.metadata import HubStatus, MetadataStore, TopicPlan
from hedwig.placement.pool_records import PoolDecision, PoolScalingConfig, ScaleAction, hub_rate
from hedwig.placement.pool_scaling import PoolScaler
from hedwig.placement.rebalance import Move
from hedwig.protocol import MoveKind
from hedwig_operator import metrics
from hedwig_operator.builders.labels import hub_address
from hedwig_operator.conditions import now_iso
from hedwig_operator.context import Context
from hedwig_operator.kube import KubeError, ObjectRef
from hedwig_operator.rebalancing.mover import perform_move
from hedwig_operator.recorder import record_event
from hedwig_operator.resources import API_VERSION, POOL_KIND
from hedwig_operator.specs import PoolSpec

log = logging.getLogger(__name__)

# Cold topics of a draining hub handed over per cycle: each is one graceful hand-off (a
# fraction of a second), so a cycle stays well inside a minute.
REST_PER_CYCLE = 32
_EVENTFUL = frozenset(
    {
        ScaleAction.SCALE_OUT,
        ScaleAction.DRAIN,
        ScaleAction.CANCEL,
        ScaleAction.SCALE_IN,
        ScaleAction.COMPLETE,
    }
)


@dataclass
class AutoscaleState:
    """A pool's autoscaler between cycles: the policy (its windows, the change in progress)
    and what the status shows. A new configuration starts a new policy."""

    scaler: PoolScaler | None = None
    config: PoolScalingConfig | None = None
    status: dict[str, Any] = field(default_factory=dict)
    last_change: dict[str, Any] | None = None
    pinned: bool = False
    stalled: bool = False

    def get(self, config: PoolScalingConfig, ctx: Context) -> PoolScaler:
        if self.scaler is None or config != self.config:
            self.scaler = PoolScaler(config, ctx.clock)
            self.config = config
        return self.scaler

    @property
    def retiring(self) -> list[str]:
        """The hub the rebalancer must empty (none unless a drain is under way)."""
        s = self.scaler
        return [s.retiring] if s is not None and s.retiring else []


def _config(pool: PoolSpec) -> PoolScalingConfig:
    r = pool.rebalancing
    return pool.autoscaling.to_config(
        hub_capacity=r.hub_capacity, max_report_age_s=r.max_report_age_s
    )


async def _plans(store: MetadataStore) -> dict[str, TopicPlan]:
    plans: dict[str, TopicPlan] = {}
    for topic in sorted(await store.plans.planned_topics()):
        got = await store.plans.read_plan(topic)
        if got is not None:
            plans[topic] = got.value
    return plans


async def autoscale(
    ctx: Context,
    pool: PoolSpec,
    state: AutoscaleState,
    store: MetadataStore | None,
    hubs: list[HubStatus],
    *,
    hold: str = "",
) -> PoolDecision | None:
    """One cycle of the autoscaler (None if ``spec.autoscaling`` is off): decide, act, report.
    ``hold``: why the cycle will not scale now (its guard), or empty."""
    if not pool.autoscaling.enabled:
        if state.scaler is not None:
            metrics.forget(pool.namespace, pool.name)
        state.scaler, state.status, state.last_change = None, {}, None
        return None
    config = _config(pool)
    scaler = state.get(config, ctx)
    plans: dict[str, TopicPlan] = {}
    if not hold and store is not None:
        try:
            plans = await _plans(store)
        except MetadataError as exc:
            hold = f"cannot read the topics' plans: {exc}"
    if hold or store is None:
        decision = scaler.decide([], replicas=pool.replicas, hold=hold or "no metadata store")
    else:
        last = [hub_address(pool, pool.replicas - 1)] if pool.replicas > 0 else []
        decision = scaler.decide(hubs, replicas=pool.replicas, plans=plans, removable=last)
    before = pool.replicas
    target = ObjectRef(API_VERSION, POOL_KIND, pool.namespace, pool.name, pool.uid)
    if decision.action in (ScaleAction.SCALE_OUT, ScaleAction.SCALE_IN):
        try:
            await ctx.kube.patch(target, {"spec": {"replicas": decision.replicas}})
        except KubeError as exc:
            # The next cycle sees replicas unchanged: the policy abandons the change (resized).
            log.warning(
                "pool %s: setting replicas to %d failed: %s", pool.name, decision.replicas, exc
            )
    if decision.action in _EVENTFUL:
        log.info("pool %s/%s: %s", pool.namespace, pool.name, decision.reason)
        await record_event(ctx.kube, target, decision.action.value, decision.reason)
        state.last_change = {
            "time": now_iso(),
            "action": decision.action.value,
            "reason": decision.reason,
            "fromReplicas": before,
            "toReplicas": decision.replicas,
        }
    held = decision.action is ScaleAction.HOLD
    if decision.pinned and not state.pinned:
        message = (
            f"the load needs {decision.needed} hubs and the pool is at its maximum of "
            f"{config.max_hubs} ({decision.utilisation:.0%} of its capacity)"
        )
        await record_event(ctx.kube, target, "ScalingPinned", message, warning=True)
    if decision.stalled and not state.stalled:
        message = f"the change in progress ({decision.state.value}) is overdue: {decision.reason}"
        await record_event(ctx.kube, target, "ScalingStalled", message, warning=True)
    if not held:  # a hold knows no load: the flags stay as the last decision left them
        state.pinned, state.stalled = decision.pinned, decision.stalled
    if decision.hand_off_rest and decision.drain and store is not None:
        await hand_off_rest(ctx, pool, store, hubs, decision.drain)
    if not held:
        metrics.observe(
            pool.namespace, pool.name, decision, min_hubs=config.min_hubs, max_hubs=config.max_hubs
        )
    state.status = _status(decision, state, held=held)
    return decision


def _status(decision: PoolDecision, state: AutoscaleState, *, held: bool) -> dict[str, Any]:
    status: dict[str, Any] = {
        "state": decision.state.value,
        "desiredReplicas": decision.replicas,
        "drainingHub": decision.drain,
        "scaleChanges": state.scaler.changes if state.scaler else 0,
        "lastDecision": {"action": decision.action.value, "reason": decision.reason},
    }
    if held and state.status:  # a hold reads no load: the last figures stand
        return {**state.status, **status}
    status.update(
        loadMessagesPerSecond=round(decision.load, 1),
        utilisation=round(decision.utilisation, 3),
        neededHubs=decision.needed,
        pinned=decision.pinned,
        stalled=decision.stalled,
    )
    if state.last_change is not None:
        status["lastChange"] = state.last_change
    return status


async def hand_off_rest(
    ctx: Context, pool: PoolSpec, store: MetadataStore, hubs: list[HubStatus], retiring: str
) -> int:
    """Hand the draining hub's remaining topics over to the serving hubs, at most
    ``REST_PER_CYCLE``; how many were handed over."""
    serving = [h for h in hubs if h.alive and h.load is not None and h.address != retiring]
    if not serving:
        return 0
    given = {h.address: 0 for h in serving}
    rate = {h.address: hub_rate(h.load) for h in serving if h.load is not None}
    alive = [h.address for h in hubs if h.alive]
    done = 0
    try:
        topics = await store.topics.list_topics()
        for topic in sorted(topics):
            if done >= REST_PER_CYCLE:
                break
            owner = await store.ownership.read_owner_info(topic)
            if owner is None or owner.value.address != retiring:
                continue
            dst = min(given, key=lambda a: (given[a], rate[a], a))
            move = Move(
                topic,
                retiring,
                dst,
                f"{retiring} is retiring (the pool scales in): handing its cold topic "
                f"{topic} to {dst}",
                0.0,
                MoveKind.DRAIN,
            )
            outcome = await perform_move(
                store,
                ctx.hubs,
                move,
                alive,
                ctx.settings,
                graceful=pool.rebalancing.graceful_hand_off,
            )
            if outcome.performed:
                given[dst] += 1
                done += 1
    except MetadataError as exc:
        log.warning("pool %s: handing %s's rest over failed: %s", pool.name, retiring, exc)
    if done:
        log.info(
            "pool %s/%s: %d cold topics of %s handed over",
            pool.namespace,
            pool.name,
            done,
            retiring,
        )
    return done
