"""The topic plan record: validation, its JSON, and the stability of subscriber placement."""

from __future__ import annotations

import pytest

from hedwig.errors import MetadataError
from hedwig.metadata import PlanMode, TopicPlan
from hedwig.metadata.plans import Lane, publisher_base
from hedwig.protocol import lane_name, lane_of


def test_round_trip_and_validation() -> None:
    plan = TopicPlan.fan_out(["b:1", "a:1", "b:1"], generation=3, reason="hot", at_ms=5)
    assert plan.hubs == ("a:1", "b:1")
    assert TopicPlan.from_json(plan.to_json()) == plan
    assert TopicPlan.from_json(b"{}") == TopicPlan()
    with pytest.raises(MetadataError, match="at least one"):
        TopicPlan(PlanMode.FAN_OUT)
    with pytest.raises(MetadataError, match="names no"):
        TopicPlan(PlanMode.SINGLE, ("a:1",))
    with pytest.raises(MetadataError, match="sorted"):
        TopicPlan(PlanMode.FAN_OUT, ("b:1", "a:1"))
    with pytest.raises(MetadataError, match="lane 0, open"):
        TopicPlan(PlanMode.INGEST)
    with pytest.raises(MetadataError, match="lane 0, open"):
        TopicPlan(PlanMode.INGEST, lanes=(Lane(0, sealed=True), Lane(1)))
    with pytest.raises(MetadataError, match="distinct and in order"):
        TopicPlan(PlanMode.INGEST, lanes=(Lane(0), Lane(2), Lane(1)))
    with pytest.raises(MetadataError, match="only sealed lanes"):
        TopicPlan(PlanMode.SINGLE, lanes=(Lane(1),))
    with pytest.raises(MetadataError, match="names no"):
        TopicPlan(PlanMode.INGEST, ("a:1",), lanes=(Lane(0),))
    ingest = TopicPlan(
        PlanMode.INGEST, generation=2, lanes=(Lane(0), Lane(1, "h:1"), Lane(2, sealed=True))
    )
    assert TopicPlan.from_json(ingest.to_json()) == ingest
    assert ingest.open_lanes == (0, 1) and ingest.readable_lanes == (0, 1, 2)
    leftover = TopicPlan(PlanMode.SINGLE, generation=3, lanes=(Lane(2, sealed=True),))
    assert TopicPlan.from_json(leftover.to_json()) == leftover
    assert leftover.open_lanes == (0,) and leftover.readable_lanes == (0, 2)
    with pytest.raises(MetadataError, match="corrupt plan"):
        TopicPlan.from_json(b'{"mode": "ingest", "lanes": [{"hub": "x"}]}')
    with pytest.raises(MetadataError, match="corrupt plan"):
        TopicPlan.from_json(b'{"mode": "sideways"}')
    with pytest.raises(MetadataError, match="corrupt plan"):
        TopicPlan.from_json(b'{"mode": "fan-out", "hubs": "a:1"}')


def test_delivery_hub_is_stable_and_moves_few() -> None:
    """Rendezvous hashing: a subscriber's hub depends only on the set, spreads evenly, and
    adding a hub moves only the subscribers the new hub takes."""
    assert TopicPlan().delivery_hub("s") is None
    three = TopicPlan.fan_out(["h1:1", "h2:1", "h3:1"], generation=1)
    four = TopicPlan.fan_out(["h1:1", "h2:1", "h3:1", "h4:1"], generation=2)
    subs = [f"sub-{i}" for i in range(3000)]
    before = {s: three.delivery_hub(s) for s in subs}
    assert before == {
        s: TopicPlan.fan_out(["h3:1", "h1:1", "h2:1"], generation=9).delivery_hub(s) for s in subs
    }
    counts = {h: sum(1 for v in before.values() if v == h) for h in three.hubs}
    assert min(counts.values()) > 800, counts
    after = {s: four.delivery_hub(s) for s in subs}
    moved = [s for s in subs if before[s] != after[s]]
    assert all(after[s] == "h4:1" for s in moved)
    assert 500 < len(moved) < 1000


def test_load_reports_carry_what_a_hub_delivers_and_ignore_unknown_fields() -> None:
    import json

    from hedwig.metadata import HubLoad, TopicLoad

    load = HubLoad(msg_out=2.0, delivering={"hot": TopicLoad(msg_out=2.0)})
    assert HubLoad.from_json(load.to_json()) == load
    assert b"delivering" not in HubLoad().to_json()  # as before fan-out
    newer = json.dumps({"timestamp_ms": 5, "from_a_newer_hub": [1]}).encode()
    assert HubLoad.from_json(newer) == HubLoad(timestamp_ms=5)


def test_a_publisher_keeps_its_lane_and_adding_one_moves_few() -> None:
    """Every identity of a publisher (``id~N`` after a failure or a lane change) has the lane
    of its id; lanes share publishers evenly; a third lane takes publishers only to itself."""
    two = TopicPlan(PlanMode.INGEST, lanes=(Lane(0), Lane(1)))
    three = TopicPlan(PlanMode.INGEST, lanes=(Lane(0), Lane(1), Lane(2)))
    pubs = [f"pub-{i}" for i in range(3000)]
    before = {p: two.lane_for(p) for p in pubs}
    assert all(two.lane_for(f"{p}~7") == before[p] for p in pubs[:100])
    assert publisher_base("a~b~12") == "a~b" and publisher_base("x~") == "x~"
    assert all(abs(sum(1 for v in before.values() if v == i) - 1500) < 150 for i in (0, 1))
    after = {p: three.lane_for(p) for p in pubs}
    moved = [p for p in pubs if after[p] != before[p]]
    assert all(after[p] == 2 for p in moved)
    assert 800 < len(moved) < 1200
    # A sealed lane takes nobody; neither does any lane of a single topic.
    sealed = TopicPlan(PlanMode.INGEST, lanes=(Lane(0), Lane(1, sealed=True), Lane(2)))
    assert {sealed.lane_for(p) for p in pubs} == {0, 2}
    assert TopicPlan(PlanMode.SINGLE, lanes=(Lane(1, sealed=True),)).lane_for("p") == 0


def test_lane_names_are_reserved_and_round_trip() -> None:
    assert lane_name("orders", 0) == "orders"
    assert lane_name("orders", 3) == "orders~lane3"
    assert lane_of("orders~lane3") == ("orders", 3)
    assert lane_of("a~lane1~lane2") == ("a~lane1", 2)
    for plain in ("orders", "orders~lane", "orders~lane0", "orders~lane07", "~lane3", "x~lane٣"):
        assert lane_of(plain) == (plain, 0)
