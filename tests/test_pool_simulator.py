"""Hub pool autoscaling in the simulator: the rebalancer empties a retiring hub, the HPA model
follows the Kubernetes controller's rules, and an hour of rising and falling load (and a load
step) under the pool policy and under a CPU-based HPA."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest

from hedwig.cli.main import main
from hedwig.clock import ManualClock
from hedwig.errors import UsageError
from hedwig.metadata.records import HubLoad, HubStatus, TopicLoad
from hedwig.placement.hpa import HpaConfig, HpaModel
from hedwig.placement.pool_simulator import Workload, simulate_pool
from hedwig.placement.rebalance import RebalanceConfig, Rebalancer
from hedwig.protocol.kinds import MoveKind


def statuses(clock: ManualClock, hubs: Mapping[str, Mapping[str, float]]) -> list[HubStatus]:
    return [
        HubStatus(
            h,
            True,
            1,
            HubLoad(
                timestamp_ms=clock.wall_ms(),
                topics=len(ts),
                topic_loads={t: TopicLoad(msg_in=r) for t, r in ts.items()},
            ),
        )
        for h, ts in hubs.items()
    ]


def test_the_rebalancer_empties_a_retiring_hub_hottest_first_whatever_the_cooldowns() -> None:
    clock = ManualClock()
    policy = Rebalancer(RebalanceConfig(max_moves_per_cycle=2, cooldown_s=600), clock)
    hubs = {"a": {"t1": 100.0}, "b": {"t2": 100.0}, "c": {"t3": 50.0, "t4": 300.0, "t5": 10.0}}
    # t3 moved a moment ago (its cooldown runs): it moves anyway.
    (first,) = policy.plan(statuses(clock, {"a": {"t1": 100.0}, "x": {"t3": 50.0}}), retiring=["x"])
    assert first.topic == "t3" and policy.in_cooldown("t3")
    moves = policy.plan(statuses(clock, hubs), retiring=["c"])
    assert [(m.topic, m.source, m.kind) for m in moves] == [
        ("t4", "c", MoveKind.DRAIN),
        ("t3", "c", MoveKind.DRAIN),
    ]
    assert all(m.destination in ("a", "b") for m in moves)
    assert "c is retiring" in moves[0].reason
    for m in moves:
        assert m.destination is not None
        hubs[m.destination][m.topic] = hubs["c"].pop(m.topic)
    clock.advance(60)
    (last,) = policy.plan(statuses(clock, hubs), retiring=["c"])
    assert (last.topic, last.source) == ("t5", "c")
    hubs["a"]["t5"] = hubs["c"].pop("t5")
    clock.advance(60)
    # Empty and still retiring: nothing pulls load back onto it (it is not in the mean either).
    for _ in range(5):
        assert all(m.destination != "c" for m in policy.plan(statuses(clock, hubs), retiring=["c"]))
        clock.advance(60)


def test_the_hpa_keeps_its_count_within_the_tolerance_and_otherwise_scales_by_the_ratio() -> None:
    hpa = HpaModel(
        HpaConfig(target_utilisation=0.5, min_replicas=1, max_replicas=20), ManualClock()
    )
    assert hpa.decide(4, [0.54] * 4) == 4  # ratio 1.08: within 0.1
    assert hpa.decide(4, [0.8] * 4) == 7  # ceil(4 x 1.6)
    # Pods not ready count as idle on the way up: 4 x 0.8 over 6 pods is 1.07, within 0.1.
    assert HpaModel(HpaConfig(target_utilisation=0.5), ManualClock()).decide(6, [0.8] * 4, 2) == 6


def test_the_hpa_holds_the_highest_recommendation_of_its_scale_down_window() -> None:
    clock = ManualClock()
    hpa = HpaModel(HpaConfig(target_utilisation=0.5, min_replicas=1, max_replicas=20), clock)
    assert hpa.decide(8, [0.5] * 8) == 8
    clock.advance(15)
    for _ in range(19):  # the load halves: 4 recommended, 8 still in the window for 300 s
        assert hpa.decide(8, [0.25] * 8) == 8
        clock.advance(15)
    assert hpa.decide(8, [0.25] * 8) == 4


def test_the_hpa_adds_at_most_four_pods_or_doubles_per_period() -> None:
    clock = ManualClock()
    hpa = HpaModel(HpaConfig(target_utilisation=0.5, min_replicas=1, max_replicas=50), clock)
    assert hpa.decide(2, [2.0] * 2) == 6  # wants 8: 2 + 4
    clock.advance(5)
    assert hpa.decide(6, [1.0] * 6) == 6  # wants 12; 4 already added this period
    clock.advance(15)
    assert hpa.decide(6, [1.0] * 6) == 12  # a new period: doubling allowed
    with pytest.raises(UsageError):
        HpaConfig(min_replicas=0)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_an_hour_of_rising_and_falling_load(seed: int) -> None:
    w = Workload()
    hedwig = simulate_pool("hour", "hedwig", seed=seed)
    hpa = simulate_pool("hour", "hpa", seed=seed)
    for r in (hedwig, hpa):
        assert all(w.min_hubs <= after <= w.max_hubs for _, _, after in r["replicas"]), r
        assert r["max_replicas"] >= 8  # the peak needs eight hubs at the target
    # The pool policy: up and then down, one reversal (the load's own), no hub removed
    # before it was empty, never a hub over its capacity, and fewer changes and moves.
    assert hedwig["reversals"] == 1
    assert hedwig["topics_on_removed_hubs"] == 0 < hpa["topics_on_removed_hubs"]
    assert hedwig["overloaded_hub_minutes"] == 0
    assert hedwig["scale_changes"] < hpa["scale_changes"]
    assert hedwig["topic_moves"] < 0.8 * hpa["topic_moves"]
    assert hedwig["topics_moved_more_than_twice"] < hpa["topics_moved_more_than_twice"]
    assert all(before - after <= 1 for _, before, after in hedwig["replicas"])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_load_step_settles_without_oscillation(seed: int) -> None:
    r = simulate_pool("step", "hedwig", seed=seed)
    # The load steps up at 10 minutes and down at 40: every change before 40 adds hubs, every
    # one after removes them, and the first is a step of several hubs at once.
    up = [after - before for t, before, after in r["replicas"] if t < 40]
    down = [after - before for t, before, after in r["replicas"] if t >= 40]
    assert up and all(s > 0 for s in up) and up[0] >= 3, r
    assert down and all(s == -1 for s in down), r
    assert r["replicas"][0][0] < 13  # within the window (2 min) and a cycle of the step


def test_hedwig_sim_prints_both_autoscalers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--scenario", "step", "--minutes", "20", "--topics", "60"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["autoscaler"] for r in lines] == ["hedwig", "hpa"]
    assert all(r["scenario"] == "step" and r["minutes"] == 20 for r in lines)
