"""The hub pool's scaling policy: the region's load reports in, a decision out (how many hubs,
which one to drain first, and why).

Sans-IO and pure apart from the history it keeps between cycles (the region's load over its
windows, the change in progress) on an injected clock. The caller (the operator's reconcile
loop, ``hedwig sim``) reads the reports, calls ``PoolScaler.decide`` once a cycle, sets the
pool's replicas to ``decision.replicas``, tells the rebalancer which hub is retiring
(``Rebalancer.plan(retiring=...)``, which hands its topics over to named destinations) and
reports ``decision.action`` and ``decision.reason``. The rules:

- The load is Hedwig's own measure, not CPU: messages per second in plus out over every hub
  (``HubLoad.rate``, what the rebalancer balances), against ``hub_capacity`` per hub. The
  region's total does not depend on how many hubs share it, so the windows stay valid across
  changes: a window of high load that made the pool grow says, of the bigger pool, whether it
  is big enough now.
- Scale out when the load stays above ``target_utilisation`` of the pool's capacity for
  ``scale_out_window_s``: to as many hubs as the lowest load of the window needs at the target
  (at least one more, at most ``max_scale_out_step`` more, never above ``max_hubs``), so a load
  step is met in one change and a spike shorter than the window in none.
- Scale in when the pool one hub smaller would still sit at ``scale_in_below`` of the target or
  less, by the highest load of ``scale_in_window_s``: one hub at a time, never below
  ``min_hubs``. After the change the load must rise by a sixth (0.85 → 1) before hubs are added
  again: the band between the two lines is what keeps a load that wobbles from flapping.
- A hub leaves only once empty: the policy names it (``decision.drain``), the rebalancer moves
  its topics to the least loaded hubs (graceful hand-offs to named destinations), and when its
  traffic is under ``hand_off_rest_below`` of a hub's capacity the hub is asked to hand the
  cold rest over itself (``decision.hand_off_rest``, as ``hedwig drain`` does: a report lists
  only a hub's hottest topics). When it reports no topic, replicas go down by one.
- The hub drained is the cheapest to empty among those the caller may remove (``removable``,
  in its order of preference: a StatefulSet removes its highest ordinal): the fewest topics
  (each a hand-off, a pause for its clients), then the least traffic (what is caught in the
  pauses). Never a hub owning, or delivering, a topic whose plan changed less than
  ``reconfiguration_s`` ago: its subscribers or publishers are moving already.
- A drain is cancelled when the pool without the draining hub would scale out (the load came
  back); the rebalancer then refills the hub.
- After a scale-out completes (the new hubs report) no scale-in for ``cooldown_s``, whatever the
  window says: the pool has just paid for its hubs in moves. A scale-in is followed at once by
  the next if the window still allows one (a load that fell far is met hub after hub, never
  two at once); scaling out is never held by a cooldown, only by its window.
- No decision while the pool is not whole (fewer hubs report than it should have: a hub
  restarting, its topics in flight between owners) or while the caller holds it (a rollout);
  the windows start again afterwards. Below ``min_hubs`` the pool grows at once, above
  ``max_hubs`` it drains.
- A change not complete after ``stall_after_s`` is reported stalled; a pool that needs more
  than ``max_hubs`` is reported pinned (``decision.pinned``: the alert's condition).

The states, and the events that move between them (checked in the order listed; the first
that holds fires; while a state waits for the pool to be whole only the events marked * do):

================  ================  ================  ==========================================
state             event             next              when
================  ================  ================  ==========================================
steady            below-min*        scaling-out       replicas < min_hubs
steady            above-max         draining          replicas > max_hubs
steady            overloaded        scaling-out       above the target for the scale-out window
steady            underloaded       draining          one hub fewer fits for the scale-in window
scaling-out       hubs-up           cooling-down      every replica reports
cooling-down      below-min*        scaling-out       replicas < min_hubs
cooling-down      overloaded        scaling-out       as in steady
cooling-down      cooled            steady            cooldown_s since the scale-out completed
draining          hub-lost*         steady            the draining hub died or stopped reporting
draining          load-back         steady            the pool without it would scale out
draining          emptied           scaling-in        the draining hub reports no topic
scaling-in        hub-gone          steady            the drained hub is no longer alive
(any but steady)  resized*          steady            replicas changed by someone else
================  ================  ================  ==========================================
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from hedwig.clock import Clock, SystemClock
from hedwig.metadata.plans import TopicPlan
from hedwig.metadata.records import HubLoad, HubStatus
from hedwig.placement.pool_records import (
    Event,
    PoolDecision,
    PoolScalingConfig,
    PoolState,
    ScaleAction,
    hub_rate,
)
from hedwig.protocol.names import lane_of

S, E = PoolState, Event
# Each state's events in the order they are checked, and the state each leads to.
TRANSITIONS: dict[PoolState, tuple[tuple[Event, PoolState], ...]] = {
    S.STEADY: (
        (E.BELOW_MIN, S.SCALING_OUT),
        (E.ABOVE_MAX, S.DRAINING),
        (E.OVERLOADED, S.SCALING_OUT),
        (E.UNDERLOADED, S.DRAINING),
    ),
    S.SCALING_OUT: ((E.RESIZED, S.STEADY), (E.HUBS_UP, S.COOLING_DOWN)),
    S.COOLING_DOWN: (
        (E.RESIZED, S.STEADY),
        (E.BELOW_MIN, S.SCALING_OUT),
        (E.OVERLOADED, S.SCALING_OUT),
        (E.COOLED, S.STEADY),
    ),
    S.DRAINING: (
        (E.RESIZED, S.STEADY),
        (E.HUB_LOST, S.STEADY),
        (E.LOAD_BACK, S.STEADY),
        (E.EMPTIED, S.SCALING_IN),
    ),
    S.SCALING_IN: ((E.RESIZED, S.STEADY), (E.HUB_GONE, S.STEADY)),
}
# States that decide nothing while fewer hubs report than the pool should have, and the
# events that fire even then.
WAITS_FOR_WHOLE = frozenset({S.STEADY, S.COOLING_DOWN, S.DRAINING})
EVEN_WHEN_SHORT = frozenset({E.BELOW_MIN, E.HUB_LOST, E.RESIZED})


@dataclass(frozen=True, slots=True)
class _Facts:
    now: float
    load: float
    reporting: Mapping[str, HubLoad]
    alive: frozenset[str]
    replicas: int
    busy: frozenset[str]
    removable: Sequence[str] | None


@dataclass
class PoolScaler:
    config: PoolScalingConfig = field(default_factory=PoolScalingConfig)
    clock: Clock = field(default_factory=SystemClock)
    state: PoolState = PoolState.STEADY
    # The hub retiring (DRAINING, SCALING_IN).
    retiring: str | None = None
    # Scale changes asked of the caller (SCALE_OUT, SCALE_IN).
    changes: int = 0
    _samples: deque[tuple[float, float]] = field(default_factory=deque)
    _replicas: int | None = None
    # The drain in progress must finish (the pool is above max_hubs): the load cannot cancel it.
    _must: bool = False
    _since: float = 0.0
    _completed_at: float = float("-inf")

    def decide(
        self,
        hubs: Sequence[HubStatus],
        *,
        replicas: int,
        plans: Mapping[str, TopicPlan] | None = None,
        removable: Sequence[str] | None = None,
        hold: str = "",
    ) -> PoolDecision:
        """This cycle's decision. ``replicas``: the pool's replicas now; ``plans``: the plans of
        the topics that have one (to spare hubs mid-reconfiguration); ``removable``: the hubs
        the caller can remove, preferred first (``None``: any); ``hold``: why the caller will
        not scale now (a rollout), or empty."""
        c = self.config
        facts = self._facts(hubs, replicas, plans or {}, removable)
        if self._replicas is None or self.state is S.STEADY:
            self._replicas = replicas  # steady: whatever the pool has is what it has
        if hold:
            self._samples.clear()
            return self._decision(facts, ScaleAction.HOLD, f"held: {hold}")
        short = self._short(facts)
        if short and self.state in WAITS_FOR_WHOLE:
            self._samples.clear()
        else:
            self._samples.append((facts.now, facts.load))
            # Keep the newest sample at or before the horizon: cycles are not exact multiples
            # of the windows (a cycle takes time), and without it the load could never be
            # seen to hold for the longest window.
            edge = facts.now - self._horizon()
            while len(self._samples) > 1 and self._samples[1][0] <= edge:
                self._samples.popleft()
        for event, after in TRANSITIONS[self.state]:
            if short and self.state in WAITS_FOR_WHOLE and event not in EVEN_WHEN_SHORT:
                continue
            if self._holds(event, facts):
                return self._fire(event, after, facts)
        if short and self.state in WAITS_FOR_WHOLE:
            return self._decision(facts, ScaleAction.HOLD, f"held: {short}")
        stalled = (
            self.state in (S.SCALING_OUT, S.DRAINING, S.SCALING_IN)
            and facts.now - self._since >= c.stall_after_s
        )
        return self._decision(facts, ScaleAction.NONE, self._why_not(facts), stalled=stalled)

    # -- facts ------------------------------------------------------------------------------

    def _facts(
        self,
        hubs: Sequence[HubStatus],
        replicas: int,
        plans: Mapping[str, TopicPlan],
        removable: Sequence[str] | None,
    ) -> _Facts:
        now_ms = self.clock.wall_ms()
        max_age_ms = self.config.max_report_age_s * 1000
        reporting = {
            h.address: h.load
            for h in hubs
            if h.alive and h.load is not None and now_ms - h.load.timestamp_ms <= max_age_ms
        }
        busy: set[str] = set()
        window_ms = self.config.reconfiguration_s * 1000
        moving = {t: p for t, p in plans.items() if now_ms - p.changed_ms < window_ms}
        for address, load in reporting.items():
            names = [*load.topic_loads, *load.delivering]
            if any(lane_of(name)[0] in moving for name in names):
                busy.add(address)
        for plan in moving.values():
            busy.update(plan.hubs)
            busy.update(lane.hub for lane in plan.lanes if lane.hub and not lane.sealed)
        return _Facts(
            self.clock.monotonic(),
            sum(hub_rate(load) for load in reporting.values()),
            reporting,
            frozenset(h.address for h in hubs if h.alive),
            replicas,
            frozenset(busy),
            removable,
        )

    def _horizon(self) -> float:
        return max(self.config.scale_in_window_s, self.config.scale_out_window_s)

    def _serving(self, facts: _Facts) -> int:
        """Hubs that carry the load (the replicas, less the one draining)."""
        return facts.replicas - (1 if self.state is S.DRAINING else 0)

    def _short(self, facts: _Facts) -> str:
        """Why the pool is not whole ("" if it is)."""
        expected = set(facts.reporting) - ({self.retiring} if self.retiring else set())
        want = self._serving(facts)
        if len(expected) >= want:
            return ""
        return f"{len(expected)} of {want} hubs report their load"

    def _held_for(self, ok: Callable[[float], bool]) -> float:
        """Seconds the load has satisfied ``ok``, by the samples (0 if the last does not)."""
        start = None
        for t, load in reversed(self._samples):
            if not ok(load):
                break
            start = t
        return 0.0 if start is None else self._samples[-1][0] - start

    def _window(self, seconds: float) -> list[float]:
        end = self._samples[-1][0] if self._samples else 0.0
        return [load for t, load in self._samples if t >= end - seconds]

    def _line(self, hubs: int, share: float = 1.0) -> float:
        c = self.config
        return hubs * c.hub_capacity * c.target_utilisation * share

    def _needed(self, load: float) -> int:
        c = self.config
        return math.ceil(load / (c.hub_capacity * c.target_utilisation) - 1e-9)

    def _over(self, hubs: int) -> bool:
        line = self._line(hubs)
        return bool(self._samples) and (
            self._held_for(lambda load: load > line) >= self.config.scale_out_window_s
        )

    def _under(self, hubs: int) -> bool:
        line = self._line(hubs - 1, self.config.scale_in_below)
        return (
            hubs - 1 >= self.config.min_hubs
            and bool(self._samples)
            and self._held_for(lambda load: load <= line) >= self.config.scale_in_window_s
        )

    # -- events -----------------------------------------------------------------------------

    def _holds(self, event: Event, facts: _Facts) -> bool:
        c = self.config
        n = self._serving(facts)
        gone = self.retiring is not None and self.retiring not in facts.reporting
        match event:
            case E.RESIZED:
                return facts.replicas != self._replicas
            case E.BELOW_MIN:
                return facts.replicas < c.min_hubs
            case E.ABOVE_MAX:
                return facts.replicas > c.max_hubs and self._candidate(facts) is not None
            case E.OVERLOADED:
                return facts.replicas < c.max_hubs and self._over(n)
            case E.UNDERLOADED:
                return self._under(n) and self._candidate(facts) is not None
            case E.HUBS_UP:
                return len(facts.reporting) >= facts.replicas
            case E.COOLED:
                return facts.now - self._completed_at >= c.cooldown_s
            case E.HUB_LOST:
                return gone
            case E.LOAD_BACK:
                return not self._must and self._over(n)
            case E.EMPTIED:
                assert self.retiring is not None
                return not gone and facts.reporting[self.retiring].topics == 0
            case E.HUB_GONE:
                return self.retiring not in facts.alive
        raise AssertionError(event)  # pragma: no cover

    def _fire(self, event: Event, after: PoolState, facts: _Facts) -> PoolDecision:
        c = self.config
        before, n = self.state, self._serving(facts)
        action, reason = ScaleAction.NONE, ""
        if event is E.RESIZED:
            reason = (
                f"replicas are {facts.replicas}, not the {self._replicas} decided (changed by "
                f"someone else, or not applied): {before.value} abandoned"
            )
            self._replicas, self.retiring = facts.replicas, None
            action = ScaleAction.CANCEL if before is S.DRAINING else ScaleAction.NONE
        elif event in (E.BELOW_MIN, E.OVERLOADED):
            action = ScaleAction.SCALE_OUT
            if event is E.BELOW_MIN:
                target = c.min_hubs
                reason = f"{facts.replicas} hubs is below the minimum: scaling out to {target}"
            else:
                low = min(self._window(c.scale_out_window_s))
                target = min(c.max_hubs, n + c.max_scale_out_step, max(n + 1, self._needed(low)))
                reason = (
                    f"the region has carried more than {self._line(n):.0f} msg/s "
                    f"({c.target_utilisation:.0%} of {n} hubs) for {c.scale_out_window_s:.0f} s, "
                    f"at least {low:.0f}: scaling out to {target} hubs"
                )
            self._replicas = target
            self.changes += 1
        elif event in (E.ABOVE_MAX, E.UNDERLOADED):
            hub = self._candidate(facts)
            assert hub is not None
            self.retiring, self._must = hub, event is E.ABOVE_MAX
            action = ScaleAction.DRAIN
            load = facts.reporting[hub]
            free = self._free(facts)
            which = "the cheapest to empty" if len(free) > 1 else "the one removable now"
            cost = f"{load.topics} topics, {hub_rate(load):.0f} msg/s, {which}"
            if event is E.ABOVE_MAX:
                reason = f"{facts.replicas} hubs is above the maximum: draining {hub} ({cost})"
            else:
                high = max(self._window(c.scale_in_window_s))
                reason = (
                    f"the region has carried at most {high:.0f} msg/s for "
                    f"{c.scale_in_window_s:.0f} s, {high / (self._line(n - 1) or 1):.0%} of the "
                    f"target of {n - 1} hubs: draining {hub} ({cost}) "
                    f"to scale in to {n - 1}"
                )
        elif event is E.HUBS_UP:
            action, self._completed_at = ScaleAction.COMPLETE, facts.now
            reason = f"all {facts.replicas} hubs report: scaled out"
        elif event is E.COOLED:
            reason = f"cooled down for {c.cooldown_s:.0f} s"
        elif event in (E.HUB_LOST, E.LOAD_BACK):
            action = ScaleAction.CANCEL
            if event is E.HUB_LOST:
                reason = f"drain of {self.retiring} cancelled: it no longer reports"
            else:
                reason = (
                    f"drain of {self.retiring} cancelled: the region has carried more than "
                    f"{self._line(n):.0f} msg/s, the target of the {n} hubs left, for "
                    f"{c.scale_out_window_s:.0f} s"
                )
            self.retiring = None
        elif event is E.EMPTIED:
            action = ScaleAction.SCALE_IN
            self._replicas = facts.replicas - 1
            self.changes += 1
            reason = f"{self.retiring} owns no topic: scaling in to {self._replicas} hubs"
        elif event is E.HUB_GONE:
            action = ScaleAction.COMPLETE
            reason = f"{self.retiring} has left: scaled in"
            self.retiring = None
        self.state, self._since = after, facts.now
        return self._decision(facts, action, reason, event=event)

    # -- choosing the hub to drain ----------------------------------------------------------

    def _free(self, facts: _Facts) -> list[str]:
        """The hubs that may be removed and are not mid-reconfiguration, preferred first."""
        order = list(facts.removable) if facts.removable is not None else sorted(facts.reporting)
        return [a for a in order if a in facts.reporting and a not in facts.busy]

    def _candidate(self, facts: _Facts) -> str | None:
        """The hub cheapest to empty among those that may be removed, or None."""
        free = self._free(facts)
        if not free:
            return None
        rank = {a: i for i, a in enumerate(free)}

        def cost(a: str) -> tuple[int, float, int]:
            load = facts.reporting[a]
            return (max(load.topics, len(load.topic_loads)), hub_rate(load), rank[a])

        return min(free, key=cost)

    # -- reporting --------------------------------------------------------------------------

    def _why_not(self, facts: _Facts) -> str:
        c = self.config
        n = self._serving(facts)
        share = facts.load / (self._line(n) / c.target_utilisation or 1)
        target = c.target_utilisation
        where = f"{facts.load:.0f} msg/s, {share:.0%} of {n} hubs (target {target:.0%})"
        if self.state is S.SCALING_OUT:
            return f"{where}: waiting for {facts.replicas} hubs, {len(facts.reporting)} report"
        if self.state is S.SCALING_IN:
            return f"{where}: waiting for {self.retiring} to leave"
        if self.state is S.DRAINING:
            assert self.retiring is not None
            topics = facts.reporting[self.retiring].topics
            return f"{where}: draining {self.retiring}, {topics} topics left"
        if self.state is S.COOLING_DOWN:
            left = c.cooldown_s - (facts.now - self._completed_at)
            return f"{where}: cooling down, {left:.0f} s left"
        line = self._line(n)
        if facts.load > line and facts.replicas >= c.max_hubs:
            return f"{where}: at the maximum of {c.max_hubs} hubs"
        if facts.load > line:
            held = self._held_for(lambda load: load > line)
            return f"{where}: above the target for {held:.0f} of {c.scale_out_window_s:.0f} s"
        low = self._line(n - 1, c.scale_in_below)
        if facts.load <= low and n - 1 >= c.min_hubs:
            held = self._held_for(lambda load: load <= low)
            if held >= c.scale_in_window_s:
                return f"{where}: one hub fewer would do, but every removable hub is busy"
            return f"{where}: one hub fewer would do for {held:.0f} of {c.scale_in_window_s:.0f} s"
        return f"{where}: steady"

    def _decision(
        self,
        facts: _Facts,
        action: ScaleAction,
        reason: str,
        *,
        stalled: bool = False,
        event: Event | None = None,
    ) -> PoolDecision:
        c = self.config
        n = max(1, self._serving(facts))
        needed = self._needed(facts.load)
        rest = False
        draining = facts.reporting.get(self.retiring or "")
        if self.state is S.DRAINING and draining is not None:
            rest = hub_rate(draining) <= c.hand_off_rest_below * c.hub_capacity
        replicas = self._replicas if self._replicas is not None else facts.replicas
        return PoolDecision(
            state=self.state,
            action=action,
            replicas=replicas,
            drain=self.retiring,
            reason=reason,
            load=facts.load,
            utilisation=facts.load / (n * c.hub_capacity),
            needed=needed,
            pinned=replicas >= c.max_hubs and needed > c.max_hubs,
            stalled=stalled,
            hand_off_rest=rest,
            event=event,
        )
