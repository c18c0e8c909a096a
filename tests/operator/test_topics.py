"""Topic reconciliation against an in-memory region and a fake API server."""

from __future__ import annotations

from hedwig_operator import resources
from hedwig_operator.topics import (
    TopicClaim,
    claim_of,
    conflict_winner,
    delete_topic_data,
    reconcile_topic,
    wants_finalizer,
)

from hedwig.metadata import (
    NEW_VERSION,
    LedgerRange,
    LedgerRanges,
    ReplicationConfig,
    TopicConfig,
)

from .fakes import World, pool_body, topic_body


def ready(status: dict) -> tuple[str, str, str]:  # type: ignore[type-arg]
    (c,) = status["conditions"]
    assert c["type"] == "Ready"
    return c["status"], c["reason"], c["message"]


async def world_with_pool(**spec: object) -> World:
    w = await World().start()
    w.kube.put(pool_body(spec={"region": "r1", **spec}))
    await w.register("hub-0:4080")
    return w


async def test_topic_gets_its_znode_an_owner_and_ready() -> None:
    w = await world_with_pool()
    body = topic_body(
        spec={
            "topicName": "orders/eu",
            "replication": {"ensemble": 1, "writeQuorum": 1, "ackQuorum": 1},
            "retention": {"timeMs": 1000},
        }
    )
    status, retry = await reconcile_topic(w.ctx, body, [claim_of(body)])  # type: ignore[list-item]
    assert not retry
    assert ready(status)[:2] == ("True", "Owned")
    assert status["owner"] == "hub-0:4080"
    assert status["topicName"] == "orders/eu"
    assert status["observedGeneration"] == 1
    stored = await w.operator_store.topics.read_topic_config("orders/eu")
    assert stored is not None
    assert stored.value == TopicConfig(ReplicationConfig(1, 1, 1), retention_ms=1000)
    assert w.hubs.activations == [(["hub-0:4080"], "orders/eu")]

    # A change of spec propagates; an unchanged one writes nothing.
    body["spec"]["retention"] = {"timeMs": 5000}
    await reconcile_topic(w.ctx, body, [claim_of(body)])  # type: ignore[list-item]
    again = await w.operator_store.topics.read_topic_config("orders/eu")
    assert again is not None and again.value.retention_ms == 5000
    await reconcile_topic(w.ctx, body, [claim_of(body)])  # type: ignore[list-item]
    same = await w.operator_store.topics.read_topic_config("orders/eu")
    assert same is not None and same.version == again.version
    assert len(w.hubs.activations) == 1  # owned already: no new activation


async def test_lastTransitionTime_survives_refreshes() -> None:
    w = await world_with_pool()
    body = topic_body()
    first, _ = await reconcile_topic(w.ctx, body, [])
    body["status"] = dict(first, conditions=[dict(first["conditions"][0], lastTransitionTime="T0")])
    second, _ = await reconcile_topic(w.ctx, body, [])
    assert second["conditions"][0]["lastTransitionTime"] == "T0"


async def test_invalid_topic_name_is_not_ready_and_touches_nothing() -> None:
    w = await world_with_pool()
    body = topic_body(spec={"topicName": "é" * 200})  # 400 bytes: too long for the hubs
    assert claim_of(body) is None
    status, retry = await reconcile_topic(w.ctx, body, [])
    state, reason, message = ready(status)
    assert (state, reason, retry) == ("False", "InvalidTopicName", False)
    assert "400 bytes" in message
    assert await w.operator_store.topics.list_topics() == []

    body = topic_body(spec={"topicName": "line\nbreak"})
    status, _ = await reconcile_topic(w.ctx, body, [])
    assert ready(status)[1] == "InvalidTopicName"


async def test_unknown_pool() -> None:
    w = await World().start()
    status, retry = await reconcile_topic(w.ctx, topic_body(pool="nope"), [])
    assert ready(status)[:2] == ("False", "PoolNotFound")
    assert "ns/nope" in ready(status)[2]
    assert not retry


async def test_second_claim_on_a_topic_name_is_a_conflict() -> None:
    w = await world_with_pool()
    first = topic_body("a", spec={"topicName": "shared"}, created="2026-01-01T00:00:00Z")
    later = topic_body("b", spec={"topicName": "shared"}, created="2026-01-01T00:00:05Z")
    claims = [claim_of(later), claim_of(first)]
    assert conflict_winner(claims, "shared").name == "a"  # type: ignore[arg-type, union-attr]
    status, _ = await reconcile_topic(w.ctx, later, claims)  # type: ignore[arg-type]
    state, reason, message = ready(status)
    assert (state, reason) == ("False", "ResourceConflict")
    assert "ns/a" in message
    assert await w.operator_store.topics.list_topics() == []
    status, _ = await reconcile_topic(w.ctx, first, claims)  # type: ignore[arg-type]
    assert ready(status)[:2] == ("True", "Owned")


def test_conflict_ties_are_broken_by_name() -> None:
    claims = [
        TopicClaim("ns", "z", "p", "t", "2026-01-01T00:00:00Z"),
        TopicClaim("ns", "m", "p", "t", "2026-01-01T00:00:00Z"),
        TopicClaim("ns", "a", "p", "t", "2026-01-01T00:00:01Z"),
    ]
    assert conflict_winner(claims, "t").name == "m"  # type: ignore[union-attr]
    assert conflict_winner(claims, "other") is None


async def test_no_hub_alive() -> None:
    w = await World().start()
    w.kube.put(pool_body(spec={"region": "r1"}))
    status, retry = await reconcile_topic(w.ctx, topic_body(), [])
    assert ready(status)[:2] == ("False", "NoHubs")
    assert retry
    # The configuration is written all the same: hubs find it when they come.
    assert await w.operator_store.topics.topic_exists("orders")


async def test_activation_failure_is_reported() -> None:
    w = await world_with_pool()
    w.hubs.fail_activation = TimeoutError()
    status, retry = await reconcile_topic(w.ctx, topic_body(), [])
    assert ready(status)[:2] == ("False", "NotOwned")
    assert retry


async def test_zookeeper_unreachable() -> None:
    w = await world_with_pool()
    w.zookeeper_down()
    status, retry = await reconcile_topic(w.ctx, topic_body(), [])
    assert ready(status)[:2] == ("False", "ZooKeeperUnavailable")
    assert retry


def test_finalizer_only_for_delete_policy_unless_turned_off() -> None:
    assert not wants_finalizer(topic_body())
    assert not wants_finalizer(topic_body(spec={"deletionPolicy": "Keep"}))
    body = topic_body(spec={"deletionPolicy": "Delete"})
    assert wants_finalizer(body)
    body["metadata"]["annotations"] = {resources.ANNOTATION_FINALIZER: "false"}
    assert not wants_finalizer(body)


async def test_delete_removes_the_topic_and_its_ledger_records() -> None:
    w = await world_with_pool()
    body = topic_body(spec={"deletionPolicy": "Delete"})
    await reconcile_topic(w.ctx, body, [claim_of(body)])  # type: ignore[list-item]
    store = w.operator_store
    await store.persistence.write_topic_persistence_info(
        "orders", LedgerRanges((LedgerRange(7, 1, 10),)), NEW_VERSION
    )
    outcome = await delete_topic_data(w.ctx, body, [claim_of(body)])  # type: ignore[list-item]
    assert "deleted topic 'orders'" in outcome and "1 ledger" in outcome
    assert not await store.topics.topic_exists("orders")
    assert await store.ownership.read_owner_info("orders") is None


async def test_delete_removes_the_lanes_too() -> None:
    w = await world_with_pool()
    await w.register("hub-1:4080")
    body = topic_body(spec={"deletionPolicy": "Delete", "scaling": {"mode": "ingest"}})
    await reconcile_topic(w.ctx, body, [claim_of(body)])  # type: ignore[list-item]
    store = w.operator_store
    assert await store.topics.topic_exists("orders~lane1")
    outcome = await delete_topic_data(w.ctx, body, [claim_of(body)])  # type: ignore[list-item]
    assert "and its 1 lane(s)" in outcome
    assert not await store.topics.topic_exists("orders")
    assert not await store.topics.topic_exists("orders~lane1")


async def test_delete_leaves_a_topic_managed_by_another_resource() -> None:
    w = await world_with_pool()
    first = topic_body("a", spec={"topicName": "t"}, created="2026-01-01T00:00:00Z")
    later = topic_body(
        "b", spec={"topicName": "t", "deletionPolicy": "Delete"}, created="2026-01-02T00:00:00Z"
    )
    claims = [claim_of(first), claim_of(later)]
    await reconcile_topic(w.ctx, first, claims)  # type: ignore[arg-type]
    outcome = await delete_topic_data(w.ctx, later, claims)  # type: ignore[arg-type]
    assert outcome.startswith("data kept")
    assert await w.operator_store.topics.topic_exists("t")


async def test_delete_without_pool_keeps_data() -> None:
    w = await World().start()
    outcome = await delete_topic_data(w.ctx, topic_body(spec={"deletionPolicy": "Delete"}), [])
    assert outcome.startswith("data kept: HubPool pool is gone")


async def test_scaling_pins_the_plan_and_the_status_shows_it() -> None:
    w = await world_with_pool()
    for extra in ("hub-1:4080", "hub-2:4080"):
        await w.register(extra)
    body = topic_body(spec={"scaling": {"mode": "fanOut", "maxHubs": 2}})
    status, retry = await reconcile_topic(w.ctx, body, [claim_of(body)])  # type: ignore[list-item]
    assert not retry and ready(status)[:2] == ("True", "Owned")
    assert status["plan"]["mode"] == "fanOut"
    assert status["plan"]["hubs"] == ["hub-1:4080", "hub-2:4080"]  # not the owner, hub-0
    stored = await w.operator_store.plans.read_plan("orders")
    assert stored is not None and stored.value.hubs == ("hub-1:4080", "hub-2:4080")
    (event,) = w.kube.events_for("Topic", "orders")
    assert (
        event["reason"] == "ModeChanged" and "fanOut on hub-1:4080, hub-2:4080" in event["message"]
    )
    # Unchanged spec: nothing written again.
    await reconcile_topic(w.ctx, body, [claim_of(body)])  # type: ignore[list-item]
    again = await w.operator_store.plans.read_plan("orders")
    assert again is not None and again.version == stored.version
    # Back to single: the plan goes.
    body["spec"]["scaling"] = {"mode": "single"}
    status, _ = await reconcile_topic(w.ctx, body, [claim_of(body)])  # type: ignore[list-item]
    assert status["plan"] == {"mode": "single", "hubs": [], "generation": 0, "lanes": []}
    assert await w.operator_store.plans.read_plan("orders") is None
    assert [e["reason"] for e in w.kube.events_for("Topic", "orders")] == ["ModeChanged"] * 2
    # Ingest: three lanes, the new ones meant for the other hubs; the status lists them.
    body["spec"]["scaling"] = {"mode": "ingest", "maxHubs": 3}
    status, retry = await reconcile_topic(w.ctx, body, [claim_of(body)])  # type: ignore[list-item]
    assert not retry and ready(status)[:2] == ("True", "Owned")
    assert status["plan"]["mode"] == "ingest"
    assert [(x["index"], x["sealed"]) for x in status["plan"]["lanes"]] == [
        (0, False),
        (1, False),
        (2, False),
    ]
    assert {x["hub"] for x in status["plan"]["lanes"][1:]} == {"hub-1:4080", "hub-2:4080"}
    assert await w.operator_store.topics.topic_exists("orders~lane2")
    assert "by lanes 0, 1, 2" in w.kube.events_for("Topic", "orders")[-1]["message"]
    # Back to single: the lanes are sealed, kept for their readers.
    body["spec"]["scaling"] = {"mode": "single"}
    status, _ = await reconcile_topic(w.ctx, body, [claim_of(body)])  # type: ignore[list-item]
    assert status["plan"]["mode"] == "single"
    assert [x["sealed"] for x in status["plan"]["lanes"]] == [True, True]
    body["spec"]["scaling"] = {"mode": "sideways"}
    status, _ = await reconcile_topic(w.ctx, body, [claim_of(body)])  # type: ignore[list-item]
    assert ready(status)[1] == "InvalidSpec" and "spec.scaling.mode" in ready(status)[2]
