"""The scaling policy: a topic too hot for one hub is fanned out (its subscribers are the load)
or given lanes (its publishers are), confirmed first, cooled down after, capped per cycle; a
cool one goes back."""

from __future__ import annotations

from hedwig.clock import ManualClock
from hedwig.metadata import HubLoad, HubStatus, PlanMode, TopicLoad, TopicPlan
from hedwig.metadata.plans import Lane
from hedwig.placement.scaling import ScalingConfig, ScalingPolicy

CONFIG = ScalingConfig(hub_capacity=1000, confirmations=2, cooldown_s=60, max_changes_per_cycle=1)


def region(
    owned: dict[str, tuple[float, float]], delivering: dict[str, float] | None = None
) -> list[HubStatus]:
    """Hub a owns ``owned`` (topic: (in, out)); hub b delivers ``delivering``; c, d idle."""
    a = HubLoad(topic_loads={t: TopicLoad(msg_in=i, msg_out=o) for t, (i, o) in owned.items()})
    b = HubLoad(delivering={t: TopicLoad(msg_out=o) for t, o in (delivering or {}).items()})
    return [
        HubStatus("a", True, 1, a),
        HubStatus("b", True, 1, b),
        HubStatus("c", True, 1, HubLoad()),
        HubStatus("d", True, 1, HubLoad()),
    ]


def test_a_subscriber_heavy_topic_is_fanned_out_after_its_confirmations() -> None:
    clock = ManualClock()
    policy = ScalingPolicy(CONFIG, clock)
    hot = region({"hot": (100, 1600), "cool": (10, 10)})
    assert policy.plan(hot, {}) == []  # one cycle is not enough
    (change,) = policy.plan(hot, {})
    assert (change.topic, change.owner, change.mode, change.hubs) == (
        "hot",
        "a",
        PlanMode.FAN_OUT,
        3,
    )
    assert "1600 msg/s" in change.reason
    # Cooling down: nothing more for this topic however hot it stays.
    clock.advance(30)
    assert policy.plan(region({"hot": (100, 2600)}), {}) == []


def test_a_publisher_heavy_topic_gets_lanes_counted_over_its_lanes() -> None:
    clock = ManualClock()
    policy = ScalingPolicy(CONFIG, clock)
    assert policy.plan(region({"ingest": (1300, 1000)}), {}) == []
    (change,) = policy.plan(region({"ingest": (1300, 1000)}), {})
    assert (change.topic, change.owner, change.mode, change.hubs) == (
        "ingest",
        "a",
        PlanMode.INGEST,
        3,
    )
    assert "takes 1300 msg/s" in change.reason and "3 lanes" in change.reason
    # Its lanes report as topics of their own: summed into the topic, it stays as it is...
    lanes = TopicPlan(PlanMode.INGEST, lanes=(Lane(0), Lane(1, "b"), Lane(2, "c")))
    spread = region({"ingest": (450, 400), "ingest~lane1": (450, 400), "ingest~lane2": (400, 300)})
    clock.advance(120)
    for _ in range(3):
        assert policy.plan(spread, {"ingest": lanes}) == []
    # ... and back to single once all lanes together take little.
    quiet = region({"ingest": (50, 40), "ingest~lane1": (60, 40), "ingest~lane2": (50, 40)})
    assert policy.plan(quiet, {"ingest": lanes}) == []
    (back,) = policy.plan(quiet, {"ingest": lanes})
    assert back.mode is PlanMode.SINGLE and "takes 160 msg/s" in back.reason


def test_back_to_single_counts_what_delivery_hubs_deliver() -> None:
    clock = ManualClock()
    policy = ScalingPolicy(CONFIG, clock)
    plans = {"hot": TopicPlan.fan_out(["b", "c"], generation=1)}
    # The owner delivers little itself, but b delivers plenty: stays as it is.
    busy = region({"hot": (100, 5)}, {"hot": 600})
    assert policy.plan(busy, plans) == policy.plan(busy, plans) == []
    quiet = region({"hot": (10, 5)}, {"hot": 100})
    assert policy.plan(quiet, plans) == []
    (change,) = policy.plan(quiet, plans)
    assert change.mode is PlanMode.SINGLE and change.hubs == 0


def test_changes_per_cycle_are_capped_and_a_flapping_load_confirms_nothing() -> None:
    policy = ScalingPolicy(CONFIG, ManualClock())
    two = region({"x": (10, 1500), "y": (10, 1400)})
    policy.plan(two, {})
    assert len(policy.plan(two, {})) == 1  # capped: the hotter first
    assert [c.topic for c in policy.plan(two, {})] == ["y"]
    flapping = ScalingPolicy(CONFIG, ManualClock())
    for load in (1500, 100, 1500, 100):
        assert flapping.plan(region({"z": (10, load)}), {}) == []
