"""Rebalancing: guards, moves (forced and graceful), events and status, Prometheus load."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web
from hedwig_operator import resources
from hedwig_operator.builders.labels import hub_address
from hedwig_operator.rebalancing import (
    PrometheusError,
    RebalanceState,
    fetch_prometheus_load,
    merge_prometheus,
    perform_move,
    prometheus_queries,
    rebalance_cycle,
)
from hedwig_operator.rebalancing.load import parse_vector
from hedwig_operator.specs import PrometheusSpec, parse_pool
from hedwig_operator.topics import claim_of

from hedwig.metadata import NEW_VERSION, HubInfo, HubLoad, HubStatus, PlanMode, TopicLoad
from hedwig.placement.rebalance import Move

from .fakes import World, pool_body, topic_body

REBALANCING = {"confirmations": 1, "maxMovesPerCycle": 2, "cooldownSeconds": 600}


def settled_statefulset(replicas: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "pool", "namespace": "ns", "generation": 1},
        "spec": {"replicas": replicas},
        "status": {
            "observedGeneration": 1,
            "currentRevision": "r1",
            "updateRevision": "r1",
            "updatedReplicas": replicas,
            "readyReplicas": replicas,
        },
    }


async def skewed_world(*, graceful: bool = False, **rebalancing: Any) -> World:
    """hub-0 owns topics a, b, c at 100 msg/s each; hub-1 owns nothing."""
    w = await World(graceful=graceful).start()
    w.kube.put(pool_body(spec={"region": "r1", "rebalancing": {**REBALANCING, **rebalancing}}))
    w.kube.put(settled_statefulset())
    for topic in "abc":
        await w.hub_store.topics.ensure_topic(topic)
        await w.hub_store.ownership.write_owner_info(topic, HubInfo("hub-0", 1), NEW_VERSION)
        w.kube.put(topic_body(f"topic-{topic}", spec={"topicName": topic}))
    await w.register("hub-0", {"a": 100, "b": 100, "c": 100})
    await w.register("hub-1", {})
    return w


async def cycle(w: World, state: RebalanceState | None = None) -> dict[str, Any]:
    pool = parse_pool(w.kube.objects[("HubPool", "ns", "pool")])
    claims = [claim_of(b) for (kind, _, _), b in w.kube.objects.items() if kind == "Topic"]
    return await rebalance_cycle(
        w.ctx,
        pool,
        state or RebalanceState(),
        lambda t: [c for c in claims if c is not None and c.topic_name == t],
    )


async def test_overloaded_hub_sheds_a_topic_by_deleting_its_owner_znode() -> None:
    w = await skewed_world()
    summary = await cycle(w)
    assert summary["result"] == "Moved"
    (move,) = summary["moves"]
    assert move["from"] == "hub-0"
    assert move["to"] == "hub-1"
    assert move["method"] == "forced"
    assert "unsupported" in move["detail"]
    assert "hub hub-0 carries 300 msg/s" in move["reason"]
    topic = move["topic"]
    owner = await w.operator_store.ownership.read_owner_info(topic)
    assert owner is not None and owner.value.address == "hub-1"
    # The owner was asked to hand over first; the destination was asked to take it after.
    assert w.hubs.releases == [("hub-0", topic, "hub-1")]
    assert w.hubs.activations[-1] == (["hub-1"], topic)
    # One event on the pool, one on the Topic; the Topic's status has the move.
    for kind, name in (("HubPool", "pool"), ("Topic", f"topic-{topic}")):
        (event,) = w.kube.events_for(kind, name)
        assert event["reason"] == "TopicMoved"
        assert "hub-0" in event["message"] and "300 msg/s" in event["message"]
    last_move = w.kube.objects[("Topic", "ns", f"topic-{topic}")]["status"]["lastMove"]
    assert last_move["from"] == "hub-0" and last_move["to"] == "hub-1"
    assert last_move["reason"] == move["reason"]


async def test_graceful_hand_off_when_the_hub_supports_it() -> None:
    w = await skewed_world(graceful=True)
    summary = await cycle(w)
    (move,) = summary["moves"]
    assert move["method"] == "graceful"
    assert move["to"] == "hub-1"


async def test_graceful_hand_off_can_be_turned_off() -> None:
    w = await skewed_world(graceful=True, gracefulHandOff=False)
    (move,) = (await cycle(w))["moves"]
    assert move["method"] == "forced"
    assert "off for this pool" in move["detail"]
    assert not w.hubs.releases


async def test_guards() -> None:
    w = await skewed_world(paused=True)
    assert (await cycle(w))["result"] == "Paused"
    w = await skewed_world(enabled=False)
    assert (await cycle(w))["result"] == "Disabled"
    w = await skewed_world()
    body = w.kube.objects[("HubPool", "ns", "pool")]
    body["metadata"]["annotations"] = {resources.ANNOTATION_REBALANCE_PAUSED: "true"}
    assert (await cycle(w))["result"] == "Paused"
    w = await skewed_world()
    w.kube.objects[("StatefulSet", "ns", "pool")]["status"]["updateRevision"] = "r2"
    summary = await cycle(w)
    assert summary["result"] == "RolloutInProgress"
    assert "revision r2" in summary["message"]
    assert not w.hubs.releases  # nothing moved while rolling out


async def test_confirmations_are_counted_across_cycles() -> None:
    w = await skewed_world(confirmations=2)
    state = RebalanceState()
    assert (await cycle(w, state))["result"] == "Moved"  # an idle hub pulls load at once
    w = await skewed_world(confirmations=3, underloadMargin=1.0)
    state = RebalanceState()
    assert (await cycle(w, state))["result"] == "Balanced"
    assert (await cycle(w, state))["result"] == "Balanced"
    assert (await cycle(w, state))["result"] == "Moved"


async def test_move_skipped_when_the_owner_changed() -> None:
    w = await skewed_world()
    outcome = await perform_move(
        w.operator_store,
        w.hubs,
        Move("a", "hub-1", "hub-0", "test"),
        ["hub-0", "hub-1"],
        w.ctx.settings,
    )
    assert outcome.method == "skipped"
    assert "now hub-0" in outcome.detail
    assert not w.hubs.releases


def test_prometheus_queries_and_parsing() -> None:
    pool = parse_pool(pool_body())
    queries = prometheus_queries(PrometheusSpec("http://prom"), pool)
    assert queries["msg_in"] == (
        'sum by (pod, topic) (rate(hedwig_messages_in_total{namespace="ns",'
        'pod=~"pool-[0-9]+"}[2m]))'
    )
    answer = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {"metric": {"pod": "pool-0", "topic": "a"}, "value": [1, "12.5"]},
                {"metric": {"pod": "pool-1", "topic": "b"}, "value": [1, "NaN"]},
                {"metric": {"topic": "c"}, "value": [1, "3"]},
            ],
        },
    }
    assert parse_vector(answer, "pod") == {("pool-0", "a"): 12.5}
    with pytest.raises(PrometheusError):
        parse_vector({"status": "error", "error": "bad query"}, "pod")


def test_merge_prometheus_keeps_owned_topics_only() -> None:
    report = HubLoad(
        timestamp_ms=1, topics=1, topic_loads={"a": TopicLoad(msg_in=1, subscribers=2, backlog=5)}
    )
    hubs = [
        HubStatus("pool-0.pool-headless.ns.svc:4080", True, 7, report),
        HubStatus("pool-1.pool-headless.ns.svc:4080", False),
    ]
    samples = {
        "msg_in": {("pool-0", "a"): 40.0, ("pool-0", "gone"): 9.0},
        "msg_out": {("pool-0", "a"): 2.0},
    }
    merged = merge_prometheus(hubs, samples, now_ms=1000)
    load = merged[0].load
    assert load is not None
    assert load.timestamp_ms == 1000
    assert set(load.topic_loads) == {"a"}
    assert load.topic_loads["a"] == TopicLoad(40.0, 0.0, 2.0, 0.0, 2, 5)
    assert load.msg_in == 40.0
    assert merged[1] == hubs[1]


async def test_fetch_prometheus_load_from_a_server() -> None:
    seen: list[str] = []

    async def query(request: web.Request) -> web.Response:
        seen.append(request.query["query"])
        return web.json_response(
            {
                "status": "success",
                "data": {
                    "resultType": "vector",
                    "result": [{"metric": {"pod": "hub-0", "topic": "a"}, "value": [0, "5"]}],
                },
            }
        )

    app = web.Application()
    app.router.add_get("/api/v1/query", query)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        hubs = [HubStatus("hub-0:4080", True, 1, HubLoad(topic_loads={"a": TopicLoad()}))]
        spec = PrometheusSpec(f"http://127.0.0.1:{port}", selector='job="hedwig"')
        merged = await fetch_prometheus_load(spec, parse_pool(pool_body()), hubs, now_ms=5)
        assert merged[0].load is not None
        assert merged[0].load.topic_loads["a"].msg_in == 5.0
        assert len(seen) == 4 and all('{job="hedwig"}' in q for q in seen)
        with pytest.raises(PrometheusError):
            await fetch_prometheus_load(
                PrometheusSpec(f"http://127.0.0.1:{port}/nothing"), parse_pool(pool_body()), hubs, 5
            )
    finally:
        await runner.cleanup()


async def test_low_load_drain_empties_the_last_hub_then_scales_the_pool_down() -> None:
    """Four hubs nearly idle: the drain empties the highest ordinal (the pod a StatefulSet
    removes first), nothing refills it, and once it has stayed empty the pool shrinks by one,
    never below minReplicas."""
    w = await World(graceful=True).start()
    rebalancing = {
        **REBALANCING,
        "lowLoadDrain": True,
        "hubCapacity": 1000,
        "scaleDown": {"enabled": True, "minReplicas": 3, "emptyForSeconds": 0},
    }
    w.kube.put(pool_body(spec={"region": "r1", "replicas": 4, "rebalancing": rebalancing}))
    w.kube.put(settled_statefulset(4))
    pool = parse_pool(w.kube.objects[("HubPool", "ns", "pool")])
    names = [hub_address(pool, i) for i in range(4)]
    topics = {names[0]: {"a": 10.0}, names[1]: {"b": 10.0}, names[2]: {}, names[3]: {"d": 5.0}}
    for address, rates in topics.items():
        for topic in rates:
            await w.hub_store.topics.ensure_topic(topic)
            await w.hub_store.ownership.write_owner_info(topic, HubInfo(address, 1), NEW_VERSION)
        await w.register(address, rates)
    state = RebalanceState()
    summary = await cycle(w, state)
    (move,) = summary["moves"]
    assert move["topic"] == "d" and move["from"] == names[3]
    assert "low-load drain" in move["reason"]
    # The hubs report the move; the drained hub is neither refilled nor kept once empty.
    topics[names[3]] = {}
    topics[move["to"]]["d"] = 5.0
    for address, rates in topics.items():
        await w.hub_store.hubs.update_load(address, load_of(w, rates))
    summary = await cycle(w, state)
    assert summary["result"] == "ScaledDown", summary
    assert w.kube.objects[("HubPool", "ns", "pool")]["spec"]["replicas"] == 3
    (event,) = [e for e in w.kube.events_for("HubPool", "pool") if e["reason"] == "ScaledDown"]
    assert names[3] in event["message"]
    # At minReplicas: no further drain or scale-down, however idle.
    w.kube.put(settled_statefulset(3))
    await w.hub_store.hubs.unregister_hub(names[3])
    for _ in range(3):
        summary = await cycle(w, state)
        assert summary["result"] == "Balanced", summary
    assert w.kube.objects[("HubPool", "ns", "pool")]["spec"]["replicas"] == 3


def load_of(w: World, rates: dict[str, float]) -> HubLoad:
    loads = {t: TopicLoad(msg_in=r) for t, r in rates.items()}
    return HubLoad(timestamp_ms=w.ctx.clock.wall_ms(), topics=len(loads), topic_loads=loads)


async def hot_world(**rebalancing: Any) -> World:
    """hub-0 owns ``hot`` and ``pinned``, each taking 10 msg/s in and delivering 2,400 msg/s
    out (a hub handles 1,000); hub-1..3 own nothing. ``hot``'s Topic leaves the mode to the
    policy with at most 2 hubs; ``pinned``'s pins it single."""
    w = await World().start()
    rules = {**REBALANCING, "maxMovesPerCycle": 0, "hubCapacity": 1000, **rebalancing}
    w.kube.put(pool_body(spec={"region": "r1", "rebalancing": rules}))
    w.kube.put(settled_statefulset(4))
    for topic in ("hot", "pinned"):
        await w.hub_store.topics.ensure_topic(topic)
        await w.hub_store.ownership.write_owner_info(topic, HubInfo("hub-0", 1), NEW_VERSION)
    w.kube.put(topic_body("topic-hot", spec={"topicName": "hot", "scaling": {"maxHubs": 2}}))
    w.kube.put(
        topic_body("topic-pinned", spec={"topicName": "pinned", "scaling": {"mode": "single"}})
    )
    loads = {t: TopicLoad(msg_in=10, msg_out=2400) for t in ("hot", "pinned")}
    load = HubLoad(
        timestamp_ms=w.ctx.clock.wall_ms(),
        topics=2,
        msg_in=20,
        msg_out=4800,
        topic_loads=loads,
    )
    await w.hub_store.hubs.register_hub("hub-0", load)
    for hub in ("hub-1", "hub-2", "hub-3"):
        await w.register(hub, {})
    return w


async def test_a_topic_whose_subscribers_overload_its_hub_is_fanned_out() -> None:
    """The pool's scaling policy (``spec.rebalancing.fanOut``) spreads the auto topic over
    delivery hubs, capped at its Topic's maxHubs, says so in Events and the Topic's status, and
    leaves the topic whose Topic pins the mode alone."""
    w = await hot_world()
    summary = await cycle(w)
    assert summary["result"] == "ModeChanged", summary
    got = await w.operator_store.plans.read_plan("hot")
    assert got is not None and got.value.mode is PlanMode.FAN_OUT
    assert len(got.value.hubs) == 2 and "hub-0" not in got.value.hubs
    assert await w.operator_store.plans.read_plan("pinned") is None
    for kind, name in (("HubPool", "pool"), ("Topic", "topic-hot")):
        (event,) = w.kube.events_for(kind, name)
        assert event["reason"] == "ModeChanged"
        assert "2400 msg/s" in event["message"] and "delivery hubs" in event["message"]
    plan = w.kube.objects[("Topic", "ns", "topic-hot")]["status"]["plan"]
    assert plan == {"mode": "fanOut", "hubs": list(got.value.hubs), "generation": 1}
    assert not w.kube.events_for("Topic", "topic-pinned")


async def test_fan_out_by_the_operator_can_be_turned_off() -> None:
    w = await hot_world(fanOut={"enabled": False})
    summary = await cycle(w)
    assert summary["result"] == "Balanced", summary
    assert await w.operator_store.plans.read_plan("hot") is None
