"""The topic plan record: validation, its JSON, and the stability of subscriber placement."""

from __future__ import annotations

import pytest

from hedwig.errors import MetadataError
from hedwig.metadata import PlanMode, TopicPlan


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
    with pytest.raises(MetadataError, match="not implemented"):
        TopicPlan(PlanMode.INGEST)
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
