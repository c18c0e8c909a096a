"""The hub pool's scaling policy on a manual clock: scale out after the window, in one hub at
a time through a drain of the cheapest hub (never one mid-reconfiguration), hysteresis, guards,
and no reversal under a constant load."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hedwig.clock import ManualClock
from hedwig.errors import UsageError
from hedwig.metadata import HubLoad, HubStatus, TopicLoad, TopicPlan
from hedwig.metadata.plans import Lane, PlanMode
from hedwig.placement import pool_scaling
from hedwig.placement.pool_records import (
    Event,
    PoolDecision,
    PoolScalingConfig,
    PoolState,
    ScaleAction,
)
from hedwig.placement.pool_scaling import TRANSITIONS, PoolScaler
from hedwig.protocol.names import lane_name

# Hubs of 1,000 msg/s aimed at half full; windows of two and ten 60-s cycles.
CONFIG = PoolScalingConfig(
    min_hubs=2,
    max_hubs=8,
    hub_capacity=1000,
    target_utilisation=0.5,
    scale_in_below=0.8,
    scale_out_window_s=120,
    scale_in_window_s=600,
    cooldown_s=300,
    max_scale_out_step=3,
    reconfiguration_s=120,
)

Hubs = Mapping[str, Mapping[str, float]]


def region(clock: ManualClock, hubs: Hubs) -> list[HubStatus]:
    """Each hub with its topics' rates, reporting now."""
    out = []
    for i, (address, rates) in enumerate(hubs.items()):
        loads = {t: TopicLoad(msg_in=r) for t, r in rates.items()}
        load = HubLoad(
            timestamp_ms=clock.wall_ms(),
            topics=len(rates),
            msg_in=sum(rates.values()),
            topic_loads=loads,
        )
        out.append(HubStatus(address, True, i + 1, load))
    return out


def hubs_of(rates: Mapping[str, Sequence[float]]) -> dict[str, dict[str, float]]:
    return {h: {f"{h}-{k}": r for k, r in enumerate(rs)} for h, rs in rates.items()}


def even(n: int, total: float, topics: int = 4) -> dict[str, dict[str, float]]:
    return hubs_of({f"h{i}": [total / n / topics] * topics for i in range(n)})


class Cycles:
    """The policy called every 60 s."""

    def __init__(self, config: PoolScalingConfig = CONFIG) -> None:
        self.clock = ManualClock()
        self.policy = PoolScaler(config, self.clock)

    def __call__(self, hubs: Hubs, replicas: int, **kw: object) -> PoolDecision:
        d = self.policy.decide(region(self.clock, hubs), replicas=replicas, **kw)  # type: ignore[arg-type]
        self.clock.advance(60)
        return d


def test_a_load_above_the_target_scales_out_after_its_window_to_what_it_needs() -> None:
    cycle = Cycles()
    for held in (0, 60):  # 60 % of three hubs; the target is 50 %
        d = cycle(even(3, 1800), 3)
        assert d.action is ScaleAction.NONE and f"for {held} of 120 s" in d.reason
    d = cycle(even(3, 1800), 3)
    assert (d.action, d.replicas, d.state) == (ScaleAction.SCALE_OUT, 4, PoolState.SCALING_OUT)
    assert "more than 1500 msg/s" in d.reason and "scaling out to 4" in d.reason
    d = cycle(even(3, 1800), 4)
    assert d.action is ScaleAction.NONE and "waiting for 4 hubs, 3 report" in d.reason
    d = cycle(even(4, 1800), 4)
    assert (d.action, d.state) == (ScaleAction.COMPLETE, PoolState.COOLING_DOWN)
    assert cycle.policy.changes == 1
    for _ in range(10):  # 1,800 msg/s is 45 % of four hubs: nothing more
        assert cycle(even(4, 1800), 4).action is ScaleAction.NONE


def test_a_spike_shorter_than_the_window_changes_nothing() -> None:
    cycle = Cycles()
    for total in (900, 2500, 2500, 900, 2500, 2500, 900, 900):
        assert cycle(even(3, total), 3).action is ScaleAction.NONE


def test_a_load_step_is_met_in_one_change_capped_by_the_step() -> None:
    cycle = Cycles()
    for _ in range(3):
        d = cycle(even(2, 2600), 2)
    # 2,600 msg/s needs 6 hubs at 50 %; three more at most in one step.
    assert (d.action, d.replicas, d.needed) == (ScaleAction.SCALE_OUT, 5, 6)
    cycle = Cycles()
    for _ in range(3):
        d = cycle(even(3, 2600), 3)
    assert (d.action, d.replicas) == (ScaleAction.SCALE_OUT, 6)


def test_scale_in_drains_the_cheapest_hub_then_removes_it() -> None:
    cycle = Cycles()
    # 1,100 msg/s over four hubs: three would carry it at 73 % of the target (80 % allowed).
    hubs = hubs_of({"h0": [100] * 3, "h1": [150] * 2 + [100] * 2, "h2": [30] * 5, "h3": [75] * 2})
    for _ in range(10):
        assert cycle(hubs, 4).action is ScaleAction.NONE
    d = cycle(hubs, 4)
    # h3 has the fewest topics.
    assert (d.action, d.replicas, d.drain, d.state) == (
        ScaleAction.DRAIN,
        4,
        "h3",
        PoolState.DRAINING,
    )
    assert "the cheapest to empty" in d.reason and "scale in to 3" in d.reason
    assert cycle(hubs, 4).action is ScaleAction.NONE  # draining
    hubs["h0"].update(hubs["h3"])
    hubs["h3"] = {}
    d = cycle(hubs, 4)
    assert (d.action, d.replicas, d.drain) == (ScaleAction.SCALE_IN, 3, "h3")
    d = cycle(hubs, 3)
    assert d.action is ScaleAction.NONE and d.drain == "h3"  # still alive: still retiring
    del hubs["h3"]
    d = cycle(hubs, 3)
    assert (d.action, d.drain, d.state) == (ScaleAction.COMPLETE, None, PoolState.STEADY)
    # 1,100 msg/s on two hubs would be 110 % of the target: no further scale-in.
    for _ in range(12):
        assert cycle(hubs, 3).action is ScaleAction.NONE
    # A load two would carry: the next drain once it has held for the window (ten cycles);
    # with equal costs the caller's order decides.
    low = hubs_of({"h0": [100], "h1": [100], "h2": [100]})
    for _ in range(10):
        assert cycle(low, 3, removable=["h2", "h1"]).action is ScaleAction.NONE
    d = cycle(low, 3, removable=["h2", "h1"])
    assert (d.action, d.drain) == (ScaleAction.DRAIN, "h2")
    assert cycle.policy.changes == 1


def test_the_longest_window_is_reached_by_cycles_that_are_not_its_multiples() -> None:
    """A real cycle takes time: 60 s apart plus its own work. The load must still be seen to
    hold for the scale-in window, the longest one (the samples' horizon): the newest sample
    before the horizon is kept."""
    clock = ManualClock()
    policy = PoolScaler(CONFIG, clock)
    hubs = even(4, 400)  # 400 msg/s: one hub fewer is far under the line
    for _ in range(11):
        d = policy.decide(region(clock, hubs), replicas=4)
        if d.action is ScaleAction.DRAIN:
            break
        assert "one hub fewer would do" in d.reason
        clock.advance(61.3)
    assert d.action is ScaleAction.DRAIN
    assert "for 600 s" in d.reason


def test_no_scale_in_during_the_cooldown_after_a_scale_out() -> None:
    cycle = Cycles(dataclasses.replace(CONFIG, scale_in_window_s=60, cooldown_s=300))
    for _ in range(3):
        d = cycle(even(3, 1800), 3)
    assert d.action is ScaleAction.SCALE_OUT
    assert cycle(even(4, 1800), 4).action is ScaleAction.COMPLETE
    for _ in range(4):  # the load falls at once: held by the cooldown, not by the window
        d = cycle(even(4, 400), 4)
        assert d.action is ScaleAction.NONE and "cooling down" in d.reason
    assert cycle(even(4, 400), 4).state is PoolState.STEADY
    assert cycle(even(4, 400), 4).action is ScaleAction.DRAIN


def test_a_hub_owning_or_delivering_a_topic_mid_reconfiguration_is_not_drained() -> None:
    hubs = hubs_of({"h0": [50] * 4, "h1": [50] * 3, "h2": [50] * 2, "h3": []})
    # h0 owns t, whose lanes keep changing, lane 1 meant for h3, lane 2 owned by h3; h2
    # delivers u, just fanned out again; h1's topic has a plan changed long ago.
    hubs["h0"]["t"] = 50.0
    hubs["h3"][lane_name("t", 2)] = 10.0

    def plans(now: int, moving: bool = True) -> dict[str, TopicPlan]:
        at = now if moving else now - 10_000_000
        lanes = (Lane(0), Lane(1, "h3"), Lane(2))
        return {
            "t": TopicPlan(PlanMode.INGEST, changed_ms=at, lanes=lanes),
            "u": TopicPlan.fan_out(["h2"], generation=1, at_ms=at),
            "h1-0": TopicPlan.fan_out(["h2"], generation=1, at_ms=now - 10_000_000),
        }

    for moving, chosen in ((True, "h1"), (False, "h3")):
        cycle = Cycles()
        for _ in range(11):
            d = cycle(hubs, 4, plans=plans(cycle.clock.wall_ms(), moving))
        # Without reconfigurations the cheapest is chosen: h3, one topic.
        assert (d.action, d.drain) == (ScaleAction.DRAIN, chosen)


def test_every_hub_busy_means_no_drain_and_says_so() -> None:
    cycle = Cycles()
    hubs = hubs_of({"h0": [50], "h1": [50], "h2": [50]})
    for _ in range(12):
        plans = {f"h{i}-0": TopicPlan(changed_ms=cycle.clock.wall_ms()) for i in range(3)}
        d = cycle(hubs, 3, plans=plans)
        assert d.action is ScaleAction.NONE
    assert "every removable hub is busy" in d.reason


def test_a_drain_is_cancelled_when_the_load_comes_back_and_not_restarted_at_once() -> None:
    cycle = Cycles()
    for _ in range(11):
        d = cycle(even(4, 1000), 4)
    assert d.action is ScaleAction.DRAIN
    drained = d.drain
    # 1,600 msg/s: more than the 1,500 three hubs carry at the target, for the window.
    for _ in range(2):
        assert cycle(even(4, 1600), 4).action is ScaleAction.NONE
    d = cycle(even(4, 1600), 4)
    assert (d.action, d.state, d.drain) == (ScaleAction.CANCEL, PoolState.STEADY, None)
    assert f"drain of {drained} cancelled" in d.reason
    for _ in range(10):  # back at 1,000: the scale-in window starts again
        assert cycle(even(4, 1000), 4).action is ScaleAction.NONE


def test_a_drained_hub_that_dies_cancels_the_drain() -> None:
    cycle = Cycles()
    for _ in range(11):
        d = cycle(even(4, 1000), 4)
    hubs = even(4, 1000)
    del hubs[d.drain or ""]
    d = cycle(hubs, 4)
    assert (d.action, d.state) == (ScaleAction.CANCEL, PoolState.STEADY)
    d = cycle(hubs, 4)  # the StatefulSet brings it back: wait for it
    assert d.action is ScaleAction.HOLD and "3 of 4 hubs report" in d.reason


def test_the_cold_rest_of_a_draining_hub_is_handed_over_by_the_hub() -> None:
    cycle = Cycles()
    hubs = hubs_of({"h0": [300], "h1": [300], "h2": [300], "h3": [5] * 3 + [200]})
    for _ in range(11):
        d = cycle(hubs, 4, removable=["h3"])
    assert (d.action, d.drain, d.hand_off_rest) == (ScaleAction.DRAIN, "h3", False)
    hubs["h0"]["h3-3"] = hubs["h3"].pop("h3-3")
    d = cycle(hubs, 4)
    assert d.hand_off_rest and d.state is PoolState.DRAINING  # 15 msg/s left: under 2 %


def test_no_decision_while_held_or_not_whole_and_the_windows_start_again() -> None:
    cycle = Cycles()
    for _ in range(2):
        cycle(even(3, 1800), 3)
    d = cycle(even(3, 1800), 3, hold="the StatefulSet is rolling out")
    assert d.action is ScaleAction.HOLD and "rolling out" in d.reason
    d = cycle(even(2, 1800), 3)  # a hub restarting
    assert d.action is ScaleAction.HOLD and "2 of 3 hubs report" in d.reason
    # A stale report counts as none.
    stale = region(cycle.clock, even(3, 1800))
    cycle.clock.advance(61)
    d = cycle.policy.decide(stale, replicas=3)
    assert d.action is ScaleAction.HOLD
    for _ in range(2):
        assert cycle(even(3, 1800), 3).action is ScaleAction.NONE
    assert cycle(even(3, 1800), 3).action is ScaleAction.SCALE_OUT


def test_below_the_minimum_it_grows_at_once_above_the_maximum_it_drains_whatever_the_load() -> None:
    cycle = Cycles()
    d = cycle(even(1, 100), 1)
    assert (d.action, d.replicas) == (ScaleAction.SCALE_OUT, 2)
    cycle = Cycles()
    d = cycle(even(9, 4400), 9)  # 98 % of the target on nine hubs, one more than allowed
    assert (d.action, d.replicas) == (ScaleAction.DRAIN, 9)
    for _ in range(5):  # the load cannot cancel it
        d = cycle(even(9, 4400), 9)
        assert d.action is ScaleAction.NONE and d.state is PoolState.DRAINING


def test_a_pool_at_its_maximum_that_needs_more_is_pinned() -> None:
    cycle = Cycles()
    for _ in range(4):
        d = cycle(even(8, 6000), 8)
    assert d.action is ScaleAction.NONE and d.pinned and d.needed == 12
    assert "at the maximum of 8 hubs" in d.reason


def test_replicas_changed_by_someone_else_abandon_the_change() -> None:
    cycle = Cycles()
    for _ in range(3):
        d = cycle(even(3, 1800), 3)
    assert d.replicas == 4
    d = cycle(even(3, 1800), 6)
    assert (d.state, d.replicas, d.event) == (PoolState.STEADY, 6, Event.RESIZED)
    assert "not the 4 decided" in d.reason


def test_a_change_that_does_not_complete_is_reported_stalled() -> None:
    cycle = Cycles(dataclasses.replace(CONFIG, stall_after_s=300))
    for _ in range(3):
        cycle(even(3, 1800), 3)
    stalled = [cycle(even(3, 1800), 4).stalled for _ in range(6)]
    assert stalled == [False] * 4 + [True] * 2


@pytest.mark.parametrize(
    "change",
    [
        {"min_hubs": 0},
        {"min_hubs": 5, "max_hubs": 4},
        {"target_utilisation": 0},
        {"target_utilisation": 1.5},
        {"scale_in_below": 1.0},
        {"scale_out_window_s": -1},
        {"max_scale_out_step": 0},
        {"hub_capacity": 0},
    ],
)
def test_settings_are_validated(change: dict[str, float]) -> None:
    with pytest.raises(UsageError):
        PoolScalingConfig(**change)  # type: ignore[arg-type]


def test_the_table_in_the_docstring_is_the_table_the_code_runs() -> None:
    doc = pool_scaling.__doc__ or ""
    rows = {tuple(line.split()[:3]) for line in doc.splitlines() if line.count("  ") > 3}
    for state, events in TRANSITIONS.items():
        for event, after in events:
            shown = "(any" if event is Event.RESIZED else state.value
            star = "*" if event in pool_scaling.EVEN_WHEN_SHORT else ""
            assert (shown, event.value + star, after.value) in rows or shown == "(any", (
                state,
                event,
            )


@settings(max_examples=150, deadline=None)
@given(
    st.floats(100, 5000),
    st.integers(2, 8),
    st.lists(st.floats(-0.05, 0.05), min_size=40, max_size=40),
)
def test_a_steady_load_moves_the_pool_one_way_and_settles(
    load: float, start: int, noise: list[float]
) -> None:
    """Any load, held within 5 %, from any size: the pool only grows or only shrinks, and ends
    where neither rule fires. The pool applies each decision by the next cycle."""
    cycle = Cycles()
    replicas, steps = start, []
    names = [f"h{i}" for i in range(start)]
    retiring: str | None = None
    for k in range(200):
        total = load * (1 + noise[k % len(noise)])
        hubs = {h: {f"{h}-t": total / len(names)} for h in names if h != retiring}
        if retiring in names:
            hubs[retiring] = {}
        d = cycle(hubs, replicas)
        if d.replicas != replicas:
            steps.append(d.replicas - replicas)
            replicas = d.replicas
        while len(names) < replicas:
            names.append(f"h{len(names) + 10}")
        retiring = d.drain
        if d.action is ScaleAction.SCALE_IN:
            names.remove(retiring or "")
    assert all(s > 0 for s in steps) or all(s < 0 for s in steps), steps
    assert all(s == -1 for s in steps if s < 0)
    assert CONFIG.min_hubs <= replicas <= CONFIG.max_hubs
    capacity = CONFIG.hub_capacity * CONFIG.target_utilisation
    assert replicas == CONFIG.max_hubs or load * 0.95 <= capacity * replicas * 1.06
    assert replicas == CONFIG.min_hubs or load * 1.05 > capacity * (replicas - 1) * 0.8 * 0.95
