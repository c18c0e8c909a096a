"""What the hub pool's scaling policy (``hedwig.placement.pool_scaling``, which has the rules
and the table of states) is configured with and what it answers.

``PoolScalingConfig`` holds its settings, each with its unit and the reason for its default,
validated when built. ``PoolDecision`` is one cycle's answer, a frozen record the caller acts
on and reports: the replicas the pool should have, the hub retiring, what to do now
(``ScaleAction``, whose values are the Kubernetes Events' reasons), why in words with the
numbers, and the flags alerts are made of (``pinned``, ``stalled``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from hedwig.errors import UsageError
from hedwig.metadata.records import HubLoad


@dataclass(frozen=True, slots=True)
class PoolScalingConfig:
    # Never fewer hubs: at least the replication's ensemble (a ledger needs that many hubs).
    min_hubs: int = 3
    # Never more: the cluster's room or the budget. A pool that needs more is "pinned".
    max_hubs: int = 10
    # Messages/s in plus out one hub carries comfortably (as RebalanceConfig.hub_capacity).
    hub_capacity: float = 50_000.0
    # The share of the pool's capacity aimed at: room for one hub's loss (its load spread over
    # the others) and for a burst until the next change.
    target_utilisation: float = 0.6
    # Scale in only while one hub fewer would carry at most this share of the target: after
    # the change the load must rise by a sixth before hubs are added again (no flapping).
    scale_in_below: float = 0.85
    # Seconds the load must stay above the target before hubs are added: a shorter burst is
    # the rebalancer's to spread.
    scale_out_window_s: float = 120.0
    # Seconds one hub fewer must fit before one is drained (Pulsar's users asked for 600,
    # apache/pulsar-helm-chart PR #391; the Kubernetes HPA's default is 300).
    scale_in_window_s: float = 600.0
    # Seconds after a change completes with no scale-in: moved topics report low at their
    # new hubs until their rates catch up, and the moves settle.
    cooldown_s: float = 300.0
    # Hubs added at most in one step: enough for a load step at once; more is a fault in
    # the load (a runaway producer), better met by the next step after another window.
    max_scale_out_step: int = 4
    # Seconds after which a load report is ignored (as RebalanceConfig.max_report_age_s).
    max_report_age_s: float = 60.0
    # Seconds after a topic's plan changed during which its owner and delivery hubs are not
    # drained: its subscribers or publishers are moving between hubs already.
    reconfiguration_s: float = 120.0
    # A draining hub below this share of a hub's capacity hands its cold rest over itself.
    hand_off_rest_below: float = 0.02
    # Seconds after which a change not complete is reported stalled (a pod that cannot be
    # scheduled, a drain that cannot finish).
    stall_after_s: float = 600.0

    def __post_init__(self) -> None:
        if not 1 <= self.min_hubs <= self.max_hubs:
            raise UsageError("pool scaling needs 1 <= min_hubs <= max_hubs")
        if self.hub_capacity <= 0 or not 0 < self.target_utilisation <= 1:
            raise UsageError("hub_capacity must be positive and target_utilisation in (0, 1]")
        if not 0 < self.scale_in_below < 1:
            raise UsageError("scale_in_below must be between 0 and 1 (a band below the target)")
        times = (
            self.scale_out_window_s,
            self.scale_in_window_s,
            self.cooldown_s,
            self.reconfiguration_s,
        )
        if min(times) < 0 or self.max_report_age_s <= 0 or self.stall_after_s <= 0:
            raise UsageError("windows, cooldown and ages must not be negative")
        if self.max_scale_out_step < 1 or not 0 <= self.hand_off_rest_below < 1:
            raise UsageError("max_scale_out_step >= 1 and hand_off_rest_below in [0, 1)")


class PoolState(str, Enum):
    STEADY = "steady"
    SCALING_OUT = "scaling-out"
    COOLING_DOWN = "cooling-down"
    DRAINING = "draining"
    SCALING_IN = "scaling-in"


class Event(str, Enum):
    BELOW_MIN = "below-min"
    ABOVE_MAX = "above-max"
    OVERLOADED = "overloaded"
    UNDERLOADED = "underloaded"
    HUBS_UP = "hubs-up"
    COOLED = "cooled"
    HUB_LOST = "hub-lost"
    LOAD_BACK = "load-back"
    EMPTIED = "emptied"
    HUB_GONE = "hub-gone"
    RESIZED = "resized"


class ScaleAction(str, Enum):
    """What a decision asks of the caller; the value is the Kubernetes Event's reason."""

    NONE = "NoChange"
    HOLD = "ScalingHeld"  # a guard holds (a rollout, hubs missing): nothing decided
    SCALE_OUT = "ScalingOut"  # set replicas to ``decision.replicas`` (more)
    DRAIN = "DrainStarted"  # start retiring ``decision.drain``
    CANCEL = "DrainCancelled"  # stop retiring it: the load came back
    SCALE_IN = "ScalingIn"  # set replicas to ``decision.replicas`` (one fewer)
    COMPLETE = "ScaleCompleted"  # the change in progress has completed


@dataclass(frozen=True, slots=True)
class PoolDecision:
    state: PoolState
    action: ScaleAction
    # What the pool's replicas should be now.
    replicas: int
    # The hub retiring (draining, then removed): pass it to the rebalancer while set.
    drain: str | None
    reason: str
    # The region's messages/s, and its share of the serving hubs' capacity.
    load: float
    utilisation: float
    # Hubs the load needs at the target, before min_hubs and max_hubs are applied.
    needed: int
    # The pool is at max_hubs and needs more; the change in progress is overdue.
    pinned: bool = False
    stalled: bool = False
    # Ask the draining hub to hand its remaining (cold) topics over itself.
    hand_off_rest: bool = False
    event: Event | None = None


def hub_rate(load: HubLoad) -> float:
    """A hub's messages/s in plus out: its totals, or what it lists if the totals are lower."""
    listed = sum(t.msg_in + t.msg_out for t in load.topic_loads.values())
    return max(load.rate, listed)
