"""The pool's worker (status refresh) and the kopf handlers, called as plain functions."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

import kopf
import pytest
from hedwig_operator import handlers
from hedwig_operator.kube import KubeError
from hedwig_operator.topics import claim_of
from hedwig_operator.workers import PoolWorker, TopicEntry, Workers

from .fakes import World, pool_body, topic_body
from .test_rebalancing import settled_statefulset


def entries(*bodies: dict[str, Any]) -> list[TopicEntry]:
    out = []
    for b in bodies:
        claim = claim_of(b)
        assert claim is not None
        out.append(TopicEntry(claim, b))
    return out


async def test_refresh_applies_children_and_writes_pool_and_topic_status() -> None:
    w = await World().start()
    pool = pool_body(spec={"region": "r1", "replicas": 2})
    w.kube.put(pool)
    w.kube.put(settled_statefulset())
    w.kube.objects[("StatefulSet", "ns", "pool")]["status"].update(replicas=2)
    topic = topic_body()
    w.kube.put(topic)
    await w.register("hub-0", {"orders": 3.0})
    worker = PoolWorker(w.ctx, pool, lambda key: entries(topic) if key == ("ns", "pool") else [])
    await worker.refresh(worker_pool(worker))
    kinds = sorted(m["kind"] for m in w.kube.applied)
    assert kinds == ["ConfigMap", "PodDisruptionBudget", "Service", "Service", "StatefulSet"]
    status = w.kube.objects[("HubPool", "ns", "pool")]["status"]
    assert status["readyHubs"] == 2
    assert status["replicas"] == 2
    assert status["aliveHubs"] == 1
    assert status["region"] == "r1"
    assert status["observedGeneration"] == 1
    assert status["conditions"][0]["reason"] == "HubsReady"
    (hub,) = status["hubs"]
    assert hub["address"] == "hub-0" and hub["messagesInPerSecond"] == 3.0
    topic_status = w.kube.objects[("Topic", "ns", "orders")]["status"]
    assert topic_status["owner"] == "hub-0"
    assert topic_status["conditions"][0]["reason"] == "Owned"

    # A second refresh with nothing changed writes no status.
    worker.body = w.kube.objects[("HubPool", "ns", "pool")]
    patches = len(w.kube.status_patches)
    topic_now = w.kube.objects[("Topic", "ns", "orders")]
    worker.topics_of = lambda key: entries(topic_now)
    await worker.refresh(worker_pool(worker))
    assert len(w.kube.status_patches) == patches


def worker_pool(worker: PoolWorker):  # type: ignore[no-untyped-def]
    from hedwig_operator.specs import parse_pool

    return parse_pool(worker.body)


async def test_pool_status_when_zookeeper_is_down() -> None:
    w = await World().start()
    w.zookeeper_down()
    pool = pool_body()
    w.kube.put(pool)
    w.kube.put(settled_statefulset())
    worker = PoolWorker(w.ctx, pool, lambda key: [])
    await worker.refresh(worker_pool(worker))
    cond = w.kube.objects[("HubPool", "ns", "pool")]["status"]["conditions"][0]
    assert (cond["status"], cond["reason"]) == ("False", "ZooKeeperUnavailable")


async def test_worker_runs_and_stops() -> None:
    w = await World().start()
    w.ctx.settings = type(w.ctx.settings)(status_interval_s=0.01)
    pool = pool_body(spec={"region": "r1"})
    w.kube.put(pool)
    workers = Workers(w.ctx, lambda key: [])
    worker = workers.ensure(pool)
    assert workers.ensure(pool) is worker
    for _ in range(100):
        if w.kube.applied:
            break
        await __import__("asyncio").sleep(0.01)
    assert w.kube.applied
    await workers.stop_all()
    assert workers.get(("ns", "pool")) is None


class FakeIndex(dict):  # type: ignore[type-arg]
    """kopf.Index is a mapping of key to a collection of values."""


def handler(fn: object) -> Callable[..., Any]:
    """A kopf handler, called directly with the keyword arguments it uses (kopf's types for a
    decorated handler ask for every argument kopf could pass)."""
    return cast(Callable[..., Any], fn)


def kopf_body(raw: dict[str, Any]) -> kopf.Body:
    return kopf.Body(cast(Any, raw))


@pytest.fixture
def world_state(monkeypatch: pytest.MonkeyPatch) -> Callable[[], Awaitable[World]]:
    async def make() -> World:
        w = await World().start()
        monkeypatch.setattr(handlers.STATE, "ctx", w.ctx)
        return w

    return make


async def test_topic_handler_writes_status_through_the_patch(
    world_state: Callable[[], Awaitable[World]],
) -> None:
    w = await world_state()
    w.kube.put(pool_body(spec={"region": "r1"}))
    await w.register("hub-0")
    body = topic_body()
    index = FakeIndex({("ns", "pool", "orders"): [e.claim for e in entries(body)]})
    patch = kopf.Patch()
    await handler(handlers.topic_changed)(body=kopf_body(body), patch=patch, topic_claims=index)
    assert patch["status"]["conditions"][0]["reason"] == "Owned"
    assert patch["status"]["owner"] == "hub-0"


async def test_topic_delete_handler_retries_while_zookeeper_is_down(
    world_state: Callable[[], Awaitable[World]],
) -> None:
    w = await world_state()
    w.kube.put(pool_body())
    w.zookeeper_down()
    body = topic_body(spec={"deletionPolicy": "Delete"})
    with pytest.raises(kopf.TemporaryError):
        await handler(handlers.topic_deleted)(body=kopf_body(body), topic_claims=FakeIndex())


async def test_pool_handler_applies_children_and_reports_failures(
    world_state: Callable[[], Awaitable[World]],
) -> None:
    w = await world_state()
    body = pool_body(spec={"region": "r1"})
    patch = kopf.Patch()
    await handler(handlers.pool_changed)(body=kopf_body(body), patch=patch)
    assert len(w.kube.applied) == 5
    assert patch["status"]["observedGeneration"] == 1
    assert patch["status"]["selector"] == (
        "app.kubernetes.io/instance=pool,app.kubernetes.io/name=hedwig-hub"
    )
    w.kube.fail_apply = KubeError(403, "Forbidden", "no")
    with pytest.raises(kopf.TemporaryError):
        await handler(handlers.pool_changed)(body=kopf_body(body), patch=kopf.Patch())
    (event,) = w.kube.events_for("HubPool", "pool")
    assert event["type"] == "Warning" and event["reason"] == "ApplyFailed"

    bad = pool_body(spec={"placement": "nearest"})
    patch = kopf.Patch()
    with pytest.raises(kopf.PermanentError):
        await handler(handlers.pool_changed)(body=kopf_body(bad), patch=patch)
    assert patch["status"]["conditions"][0]["reason"] == "InvalidSpec"


def test_topic_index_holds_valid_claims_only() -> None:
    body = topic_body()
    (value,) = handler(handlers.topic_entries)(body=kopf_body(body)).values()
    assert value.claim.topic_name == "orders"
    assert handler(handlers.topic_claims)(body=kopf_body(body)) == {
        ("ns", "pool", "orders"): value.claim
    }
    assert (
        handler(handlers.topic_entries)(body=kopf_body(topic_body(spec={"topicName": "a\x00"})))
        == {}
    )


async def test_deleting_a_pool_tells_its_topics() -> None:
    w = await World().start()
    topic = topic_body()
    w.kube.put(topic)
    workers = Workers(w.ctx, lambda key: entries(topic) if key == ("ns", "pool") else [])
    await workers.pool_deleted(("ns", "pool"))
    cond = w.kube.objects[("Topic", "ns", "orders")]["status"]["conditions"][0]
    assert (cond["status"], cond["reason"]) == ("False", "PoolNotFound")


async def test_only_spec_or_annotation_changes_wake_the_worker() -> None:
    w = await World().start()
    pool = pool_body()
    worker = PoolWorker(w.ctx, pool, lambda key: [])
    worker.update({**pool, "status": {"readyHubs": 1}})
    assert not worker._wake.is_set()
    worker.update({**pool, "metadata": {**pool["metadata"], "generation": 2}})
    assert worker._wake.is_set()


async def test_topic_refresh_is_bounded_and_takes_the_topics_that_need_it_first() -> None:
    """A pool's worker refreshes at most ``topic_refreshes_per_s`` times the interval Topics a
    tick: the ones not Ready first, then the longest unrefreshed; a Topic whose owner is no
    longer alive goes ahead of those, and one whose spec kopf has not handled yet (its create
    handler is about to reconcile it) after all of them."""
    w = await World().start()
    w.ctx.settings = type(w.ctx.settings)(status_interval_s=1.0, topic_refreshes_per_s=4.0)
    pool = pool_body(spec={"region": "r1"})
    w.kube.put(pool)
    w.kube.put(settled_statefulset())
    await w.register("hub-0")
    names = [f"t{i}" for i in range(10)]
    handled = {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "False"}]}
    for name in names:
        w.kube.put(topic_body(name, status=handled))
    w.kube.put(topic_body("new"))  # not handled by kopf yet

    def now() -> list[dict[str, Any]]:
        return [w.kube.objects[("Topic", "ns", n)] for n in names]

    def owned() -> set[str]:
        return {
            b["metadata"]["name"]
            for b in now()
            if (b.get("status") or {}).get("conditions", [{}])[0].get("reason") == "Owned"
        }

    worker = PoolWorker(
        w.ctx, pool, lambda key: entries(w.kube.objects[("Topic", "ns", "new")], *now())
    )
    for expected in (4, 8, 10):
        await worker.refresh(worker_pool(worker))
        assert len(owned()) == expected
    assert "status" not in w.kube.objects[("Topic", "ns", "new")]
    # Every Topic is Ready: t1..t3 and t8, t9 were refreshed longest ago. t7's status names a
    # hub that is gone: it is refreshed first, and gets its real owner back.
    w.kube.objects[("Topic", "ns", "t7")]["status"]["owner"] = "hub-gone"
    patches = len(w.kube.status_patches)
    await worker.refresh(worker_pool(worker))
    assert w.kube.objects[("Topic", "ns", "t7")]["status"]["owner"] == "hub-0"
    patched = [ref.name for ref, _ in w.kube.status_patches[patches:] if ref.kind == "Topic"]
    assert patched == ["t7"]


def test_the_topic_index_keeps_what_the_operator_reads_only() -> None:
    """The index holds a copy of every Topic: without its managed fields and kopf's own
    annotations (most of a body's size), with what the reconcilers read."""
    body = topic_body(spec={"deletionPolicy": "Delete"}, status={"owner": "hub-0"})
    body["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    body["metadata"]["annotations"] = {
        "operator.hedwig.io/last-handled-configuration": '{"spec": {}}',
        "hedwig.io/finalizer": "false",
    }
    body["metadata"]["resourceVersion"] = "42"
    (value,) = handler(handlers.topic_entries)(body=kopf_body(body)).values()
    kept = value.body
    assert "managedFields" not in kept["metadata"] and "resourceVersion" not in kept["metadata"]
    assert kept["metadata"]["annotations"] == {"hedwig.io/finalizer": "false"}
    assert kept["spec"] == body["spec"] and kept["status"] == body["status"]
    assert claim_of(kept) == value.claim
    body["spec"]["pool"] = "changed"  # a detached copy
    assert kept["spec"]["pool"] == "pool"
