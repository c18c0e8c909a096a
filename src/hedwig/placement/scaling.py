"""The scaling policy: when one topic alone is too hot for one hub, and when to go back.

Moving whole topics (``hedwig.placement.rebalance``) cannot help a topic that alone overloads
its hub. This policy looks at each topic's traffic across the region (its owner's report plus
what delivery hubs report delivering for it) and proposes plan changes, with the same guards
as topic moves:

- A topic's traffic is counted over its lanes too (``T~laneN`` are reported as topics of
  their own: they are summed into ``T``).
- A topic needs more than one hub when its messages out or in per second exceed
  ``fan_out_above`` of one hub's capacity. Its subscribers are the load when out is at least
  ``fan_out_ratio`` times in: it is fanned out. Otherwise its publishers are the load and it
  gets lanes (``ingest``), unless it is fanned out already and its subscribers still carry it.
- Delivery hubs, or open lanes: enough that each carries at most ``per_hub_target`` of a
  hub's capacity (of messages out, or in), at least 2, at most ``max_hubs``, and never more
  than the other alive hubs (delivery hubs) or the alive hubs (lanes, lane 0 on the owner).
- Back to single when the topic's larger rate falls below ``back_below`` of a hub's
  capacity; a spread topic whose load grew or shrank past one hub's worth is resized.
- Every proposal must hold for ``confirmations`` consecutive cycles; a topic whose plan
  changed cools down for ``cooldown_s``; at most ``max_changes_per_cycle`` changes a cycle.

Pure apart from the history it keeps between cycles. Every change carries its reason.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hedwig.clock import Clock, SystemClock
from hedwig.metadata.plans import PlanMode, TopicPlan
from hedwig.metadata.records import HubStatus
from hedwig.protocol.names import lane_of


@dataclass(frozen=True, slots=True)
class ScalingConfig:
    # Messages/s one hub delivers comfortably (as RebalanceConfig.hub_capacity).
    hub_capacity: float = 50_000.0
    # A topic delivering more than this share of a hub's capacity needs more hubs.
    fan_out_above: float = 0.7
    # Out/in ratio from which the subscribers, not the publishers, are the load.
    fan_out_ratio: float = 4.0
    # Each delivery hub carries at most this share of a hub's capacity.
    per_hub_target: float = 0.5
    # A fan-out topic delivering less than this share of one hub's capacity goes back.
    back_below: float = 0.3
    confirmations: int = 3
    cooldown_s: float = 600.0
    max_changes_per_cycle: int = 2
    max_hubs: int = 8

    def __post_init__(self) -> None:
        if not 0 < self.back_below < self.fan_out_above:
            raise ValueError("back_below must be positive and below fan_out_above")
        if self.confirmations < 1 or self.max_hubs < 2 or self.per_hub_target <= 0:
            raise ValueError("confirmations >= 1, max_hubs >= 2 and per_hub_target > 0")


@dataclass(frozen=True, slots=True)
class ModeChange:
    topic: str
    owner: str
    mode: PlanMode
    hubs: int  # delivery hubs (fan-out) or open lanes (ingest); 0 for single
    reason: str


@dataclass
class ScalingPolicy:
    config: ScalingConfig = field(default_factory=ScalingConfig)
    clock: Clock = field(default_factory=SystemClock)
    _pending: dict[str, tuple[PlanMode, int, int]] = field(default_factory=dict)
    _changed_at: dict[str, float] = field(default_factory=dict)

    def plan(self, hubs: Sequence[HubStatus], plans: Mapping[str, TopicPlan]) -> list[ModeChange]:
        """Proposals for this cycle; ``plans``: the current plan of every spread topic."""
        c = self.config
        alive = [h for h in hubs if h.alive and h.load is not None]
        out: dict[str, float] = {}
        inn: dict[str, float] = {}
        owner: dict[str, str] = {}
        for h in alive:
            assert h.load is not None
            for name, tl in h.load.topic_loads.items():
                topic, index = lane_of(name)
                if not index or topic not in owner:
                    owner[topic] = h.address  # lane 0's owner sets the plan
                out[topic] = out.get(topic, 0.0) + tl.msg_out
                inn[topic] = inn.get(topic, 0.0) + tl.msg_in
            for topic, tl in h.load.delivering.items():
                out[topic] = out.get(topic, 0.0) + tl.msg_out
        now = self.clock.monotonic()
        changes: list[ModeChange] = []
        seen: set[str] = set()
        for topic in sorted(owner, key=lambda t: -max(out.get(t, 0.0), inn.get(t, 0.0))):
            seen.add(topic)
            current = plans.get(topic)
            have = _have(current)
            want = self._wanted(out.get(topic, 0.0), inn.get(topic, 0.0), len(alive), have[0])
            if want is None or want == have:
                self._pending.pop(topic, None)
                continue
            mode, count = want
            if now - self._changed_at.get(topic, float("-inf")) < c.cooldown_s:
                continue
            previous = self._pending.get(topic)
            streak = previous[2] + 1 if previous and previous[:2] == (mode, count) else 1
            self._pending[topic] = (mode, count, streak)
            if streak < c.confirmations or len(changes) >= c.max_changes_per_cycle:
                continue
            ingest = mode is PlanMode.INGEST or (
                mode is PlanMode.SINGLE and have[0] is PlanMode.INGEST
            )
            rate = inn.get(topic, 0.0) if ingest else out.get(topic, 0.0)
            verb = "takes" if ingest else "delivers"
            what = {
                PlanMode.FAN_OUT: f"{count} delivery hubs",
                PlanMode.INGEST: f"{count} lanes",
                PlanMode.SINGLE: "one hub is enough",
            }[mode]
            reason = (
                f"topic {topic!r} {verb} {rate:.0f} msg/s ({rate / c.hub_capacity:.0%} of a "
                f"hub) for {streak} cycles: {what}"
            )
            changes.append(ModeChange(topic, owner[topic], mode, count, reason))
            self._changed_at[topic] = now
            del self._pending[topic]
        for gone in set(self._pending) - seen:
            del self._pending[gone]
        return changes

    def _wanted(
        self, out: float, inn: float, alive: int, mode: PlanMode
    ) -> tuple[PlanMode, int] | None:
        """The mode and hubs (delivery hubs or lanes) a topic needs, or None to leave it as
        it is."""
        c = self.config
        others = alive - 1
        if max(out, inn) < c.back_below * c.hub_capacity:
            return (PlanMode.SINGLE, 0)
        subscribers_carry = out >= c.fan_out_ratio * inn
        if mode is PlanMode.INGEST and not subscribers_carry:
            if inn <= c.fan_out_above * c.hub_capacity and inn >= c.back_below * c.hub_capacity:
                return None  # between the lines: keep its lanes (hysteresis)
            return self._lanes(inn, alive)
        if max(out, inn) <= c.fan_out_above * c.hub_capacity:
            return None  # between the lines: keep whatever it has (hysteresis)
        if subscribers_carry and out > c.fan_out_above * c.hub_capacity:
            if others < 1:
                return None  # no hub to add
            hubs = math.ceil(out / (c.per_hub_target * c.hub_capacity))
            return (PlanMode.FAN_OUT, max(2, min(hubs, c.max_hubs, others)) if others > 1 else 1)
        if mode is PlanMode.FAN_OUT or inn <= c.fan_out_above * c.hub_capacity:
            return None
        return self._lanes(inn, alive)

    def _lanes(self, inn: float, alive: int) -> tuple[PlanMode, int] | None:
        c = self.config
        if alive < 2:
            return None  # one hub: lanes would all be on it
        lanes = math.ceil(inn / (c.per_hub_target * c.hub_capacity))
        return (PlanMode.INGEST, max(2, min(lanes, c.max_hubs, alive)))


def _have(plan: TopicPlan | None) -> tuple[PlanMode, int]:
    if plan is None:
        return (PlanMode.SINGLE, 0)
    if plan.mode is PlanMode.FAN_OUT:
        return (PlanMode.FAN_OUT, len(plan.hubs))
    if plan.mode is PlanMode.INGEST:
        return (PlanMode.INGEST, len(plan.open_lanes))
    return (PlanMode.SINGLE, 0)
