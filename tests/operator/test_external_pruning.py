"""The external Services of hubs a pool no longer has are deleted, once the hubs are gone
(``hedwig_operator.pruning``), by the pool's worker on the in-memory fakes."""

from __future__ import annotations

from typing import Any

from hedwig_operator.builders.labels import hub_address
from hedwig_operator.pruning import retired_external_services
from hedwig_operator.specs import parse_pool
from hedwig_operator.workers import PoolWorker

from .fakes import World, pool_body
from .test_rebalancing import settled_statefulset

NODE_PORT = {"type": "NodePort", "nodePortBase": 31000}


def external_pool(replicas: int, **spec: Any) -> dict[str, Any]:
    return pool_body(spec={"region": "r1", "replicas": replicas, "external": NODE_PORT, **spec})


def services(w: World, namespace: str = "ns") -> list[str]:
    return sorted(
        name for kind, ns, name in w.kube.objects if kind == "Service" and ns == namespace
    )


def pods_counted(w: World, replicas: int) -> None:
    """The StatefulSet's status: ``replicas`` pods it still has (terminating ones included)."""
    w.kube.objects[("StatefulSet", "ns", "pool")]["status"]["replicas"] = replicas


async def refreshed(w: World, body: dict[str, Any]) -> PoolWorker:
    w.kube.put(body)
    worker = PoolWorker(w.ctx, body, lambda key: [])
    await worker.refresh(parse_pool(body))
    return worker


async def test_scaling_in_deletes_a_hubs_service_only_once_its_pod_is_gone() -> None:
    w = await World().start()
    w.kube.put(settled_statefulset(4))
    pods_counted(w, 4)
    await refreshed(w, external_pool(4))
    assert services(w) == [
        "pool",
        "pool-0-external",
        "pool-1-external",
        "pool-2-external",
        "pool-3-external",
        "pool-headless",
    ]

    # spec.replicas 4 -> 3: the StatefulSet is scaled, its pod pool-3 drains (still counted).
    await refreshed(w, external_pool(3))
    assert w.kube.objects[("StatefulSet", "ns", "pool")]["spec"]["replicas"] == 3
    assert "pool-3-external" in services(w)
    assert w.kube.deleted == []

    # The pod is gone, but its hub is still registered alive: its clients may still reach it.
    pods_counted(w, 3)
    await w.register(hub_address(parse_pool(external_pool(3)), 3))
    await refreshed(w, external_pool(3))
    assert "pool-3-external" in services(w)

    await w.hub_store.hubs.unregister_hub(hub_address(parse_pool(external_pool(3)), 3))
    await refreshed(w, external_pool(3))
    assert services(w) == [
        "pool",
        "pool-0-external",
        "pool-1-external",
        "pool-2-external",
        "pool-headless",
    ]
    assert [(r.name, r.uid) for r in w.kube.deleted] == [("pool-3-external", "")]
    (event,) = w.kube.events_for("HubPool", "pool")
    assert event["reason"] == "ExternalServicesRemoved"
    assert "pool-3-external" in event["message"] and "hubs are gone" in event["message"]

    # Nothing more to delete: the next refresh deletes nothing and posts nothing.
    await refreshed(w, external_pool(3))
    assert len(w.kube.deleted) == 1
    assert len(w.kube.events_for("HubPool", "pool")) == 1


async def test_removing_spec_external_deletes_every_external_service_and_nothing_else() -> None:
    w = await World().start()
    w.kube.put(settled_statefulset(3))
    pods_counted(w, 3)
    await refreshed(w, external_pool(3))
    # Another pool's external Services, in the same namespace and in another one.
    other = pool_body("other", spec={"region": "r2", "replicas": 2, "external": NODE_PORT})
    other["metadata"]["uid"] = "other-uid"
    for ns in ("ns", "ns2"):
        await refreshed(w, {**other, "metadata": {**other["metadata"], "namespace": ns}})
    same_name_elsewhere = pool_body(
        "pool", "ns2", spec={"region": "r3", "replicas": 1, "external": NODE_PORT}
    )
    same_name_elsewhere["metadata"]["uid"] = "pool-ns2-uid"
    await refreshed(w, same_name_elsewhere)
    # A user's Service that copies the pool's labels and its naming, without its owner reference.
    copied = dict(w.kube.objects[("Service", "ns", "pool-2-external")])
    w.kube.put(
        {
            **copied,
            "metadata": {**copied["metadata"], "name": "pool-7-external", "ownerReferences": []},
        }
    )
    before = {ns: services(w, ns) for ns in ("ns", "ns2")}

    body = external_pool(3)
    del body["spec"]["external"]
    await refreshed(w, body)
    assert services(w) == [
        "other",
        "other-0-external",
        "other-1-external",
        "other-headless",
        "pool",
        "pool-7-external",
        "pool-headless",
    ]
    assert services(w, "ns2") == before["ns2"]
    assert sorted(r.name for r in w.kube.deleted) == [
        "pool-0-external",
        "pool-1-external",
        "pool-2-external",
    ]
    (event,) = w.kube.events_for("HubPool", "pool")
    assert "spec.external was removed" in event["message"]


def service(name: str, uid: str = "pool-uid") -> dict[str, Any]:
    owner = {"kind": "HubPool", "name": "pool", "uid": uid, "controller": True}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"s-{name}",
            "ownerReferences": [owner],
        },
    }


def statefulset(replicas: int, pods: int, *, generation: int = 2, observed: int = 2) -> Any:
    return {
        "metadata": {"name": "pool", "namespace": "ns", "generation": generation},
        "spec": {"replicas": replicas},
        "status": {"observedGeneration": observed, "replicas": pods},
    }


def test_which_services_are_retired() -> None:
    pool = parse_pool(external_pool(2))
    found = [service(f"pool-{i}-external") for i in (3, 0, 1, 2)] + [
        service("pool"),
        service("pool-headless"),
        service("pool-x-external"),
        service("pool-9-external", uid="someone-else"),
    ]

    def retired(sts: Any, alive: Any = None) -> list[str]:
        return [r.name for r in retired_external_services(pool, found, sts, alive)]

    # Lowest first, each named with the uid it had when seen.
    assert retired(statefulset(2, 2)) == ["pool-2-external", "pool-3-external"]
    (first, _) = retired_external_services(pool, found, statefulset(2, 2), None)
    assert first.uid == "s-pool-2-external"
    # Parallel pod management: pool-3 gone already, pool-2 still terminating.
    assert retired(statefulset(2, 3)) == ["pool-3-external"]
    # The StatefulSet has not observed its new spec yet: its pod count is the old one's.
    assert retired(statefulset(2, 2, observed=1)) == []
    # Not yet scaled (the apply failed or is behind).
    assert retired(statefulset(4, 2)) == []
    # The hub at ordinal 2 is still registered alive.
    assert retired(statefulset(2, 2), {hub_address(pool, 2)}) == ["pool-3-external"]
    # No StatefulSet: no pods.
    assert retired(None) == ["pool-2-external", "pool-3-external"]
    # A pool that grew back keeps them all.
    assert [
        r.name
        for r in retired_external_services(
            parse_pool(external_pool(4)), found, statefulset(4, 4), None
        )
    ] == []
