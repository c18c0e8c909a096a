"""In-memory stand-ins for the Kubernetes API and the hubs, for the reconcilers' unit tests."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from hedwig_operator.conditions import find
from hedwig_operator.context import Context
from hedwig_operator.kube import KubeError, ObjectRef, Objects
from hedwig_operator.metadata import MetadataConnections
from hedwig_operator.security import PoolTrust
from hedwig_operator.settings import OperatorSettings

from hedwig.errors import MetadataUnavailableError
from hedwig.metadata import NEW_VERSION, HubInfo, HubLoad, MetadataStore, TopicLoad
from hedwig.metadata.memory import MemoryBackend, MemoryMetadataStore
from hedwig.protocol import MoveKind

Key = tuple[str, str, str]


def _merge(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, Mapping) and isinstance(target.get(k), dict):
            _merge(target[k], v)
        else:
            target[k] = copy.deepcopy(v)


class FakeKube:
    """Objects by (kind, namespace, name); records applies, status patches, deletions and
    events."""

    def __init__(self) -> None:
        self.objects: dict[Key, dict[str, Any]] = {}
        self.applied: list[dict[str, Any]] = []
        self.status_patches: list[tuple[ObjectRef, dict[str, Any]]] = []
        self.patches: list[tuple[ObjectRef, dict[str, Any]]] = []
        self.events: list[dict[str, Any]] = []
        self.deleted: list[ObjectRef] = []
        self.fail_apply: KubeError | None = None

    def put(self, body: Mapping[str, Any]) -> None:
        meta = body["metadata"]
        self.objects[(body["kind"], meta["namespace"], meta["name"])] = copy.deepcopy(dict(body))

    async def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        if self.fail_apply is not None:
            raise self.fail_apply
        self.applied.append(copy.deepcopy(dict(manifest)))
        meta = manifest["metadata"]
        key = (manifest["kind"], meta["namespace"], meta["name"])
        stored = self.objects.setdefault(key, {"status": {}})
        stored.update(copy.deepcopy(dict(manifest)))
        return stored

    async def get(self, ref: ObjectRef) -> dict[str, Any] | None:
        got = self.objects.get((ref.kind, ref.namespace, ref.name))
        return copy.deepcopy(got) if got is not None else None

    async def patch_status(self, ref: ObjectRef, status: Mapping[str, Any]) -> None:
        key = (ref.kind, ref.namespace, ref.name)
        if key not in self.objects:
            raise KubeError(404, "NotFound", f"{ref.kind} {ref.name} not found")
        self.status_patches.append((ref, copy.deepcopy(dict(status))))
        _merge(self.objects[key].setdefault("status", {}), status)

    async def patch(self, ref: ObjectRef, body: Mapping[str, Any]) -> None:
        key = (ref.kind, ref.namespace, ref.name)
        if key not in self.objects:
            raise KubeError(404, "NotFound", f"{ref.kind} {ref.name} not found")
        self.patches.append((ref, copy.deepcopy(dict(body))))
        _merge(self.objects[key], body)

    async def create(self, manifest: Mapping[str, Any]) -> None:
        self.events.append(copy.deepcopy(dict(manifest)))

    async def close(self) -> None:
        pass

    def events_for(self, kind: str, name: str) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events
            if e["involvedObject"]["kind"] == kind and e["involvedObject"]["name"] == name
        ]

    # Last in the class: below them, ``list`` in an annotation would name the method.
    async def list(
        self, api_version: str, kind: str, namespace: str, label_selector: Mapping[str, str]
    ) -> Objects:
        found: Objects = []
        for (k, ns, _), body in sorted(self.objects.items()):
            labels = (body.get("metadata") or {}).get("labels") or {}
            if k == kind and ns == namespace and label_selector.items() <= labels.items():
                found.append(copy.deepcopy(body))
        return found

    async def delete(self, ref: ObjectRef) -> None:
        key = (ref.kind, ref.namespace, ref.name)
        stored = self.objects.get(key)
        if stored is None:
            return
        uid = (stored.get("metadata") or {}).get("uid")
        if ref.uid and uid and uid != ref.uid:
            raise KubeError(409, "Conflict", f"{ref.kind} {ref.name}: uid is {uid}")
        self.deleted.append(ref)
        del self.objects[key]


class FakeHubs:
    """Hubs that claim a topic when asked (the first address wins), and optionally hand
    topics over when asked to (``graceful``)."""

    def __init__(self, hub_store: MetadataStore, *, graceful: bool = False) -> None:
        self.store = hub_store
        self.graceful = graceful
        self.activations: list[tuple[list[str], str]] = []
        self.releases: list[tuple[str, str, str | None]] = []
        self.deletions: list[str] = []
        self.fail_activation: Exception | None = None

    async def activate(self, addresses: Sequence[str], topic: str, timeout_s: float) -> None:
        self.activations.append((list(addresses), topic))
        if self.fail_activation is not None:
            raise self.fail_activation
        if await self.store.ownership.read_owner_info(topic) is None:
            await self.store.topics.ensure_topic(topic)
            await self.store.ownership.write_owner_info(
                topic, HubInfo(addresses[0], 1), NEW_VERSION
            )

    async def delete(self, addresses: Sequence[str], topic: str, timeout_s: float) -> str | None:
        self.deletions.append(topic)
        return "these hubs do not delete topics"

    async def release(
        self,
        owner: str,
        topic: str,
        destination: str | None,
        reason: str,
        timeout_s: float,
        kind: MoveKind = MoveKind.REQUESTED,
    ) -> str | None:
        self.releases.append((owner, topic, destination))
        if not self.graceful:
            return "the hub refused the hand-off: unsupported"
        current = await self.store.ownership.read_owner_info(topic)
        if current is not None:
            await self.store.ownership.delete_owner_info(topic, current.version)
        if destination:
            await self.store.ownership.write_owner_info(topic, HubInfo(destination, 1), NEW_VERSION)
        return None


class FakeRegions:
    """ZooKeeper's ``/hedwig`` as the operator's admin digest sees it, in memory: the regions
    made under it (region -> the digest its node's ACL names), what the Kubernetes fake held
    when each was made, and ``down`` for an unreachable ensemble."""

    def __init__(self, kube: FakeKube) -> None:
        self.kube = kube
        self.regions: dict[str, str] = {}
        self.calls: list[tuple[str, str, str]] = []  # (url, region, admin digest)
        self.kinds_then: dict[str, set[str]] = {}
        self.down = False

    async def make(self, url: str, region: str, admin_digest: str, region_digest: str) -> bool:
        self.calls.append((url, region, admin_digest))
        if self.down:
            raise MetadataUnavailableError("connection refused")
        if region in self.regions:
            return False
        self.regions[region] = region_digest
        self.kinds_then[region] = {kind for kind, _, _ in self.kube.objects}
        return True


class World:
    """A region in memory: the operator's store, a hub's store, fakes, and a Context."""

    def __init__(self, region: str = "r1", *, graceful: bool = False) -> None:
        self.backend = MemoryBackend()
        self.region = region
        self.operator_store = MemoryMetadataStore(self.backend, region)
        self.hub_store = MemoryMetadataStore(self.backend, region)
        self.kube = FakeKube()
        self.hubs = FakeHubs(self.hub_store, graceful=graceful)
        # As the operator runs: the connections share the pools' digests with its trust.
        self.trust = PoolTrust()
        self.connections = MetadataConnections(
            lambda zk, r: self.operator_store, digests=self.trust.digests
        )
        self.ctx = Context(
            kube=self.kube,
            metadata=self.connections,
            hubs=self.hubs,
            settings=OperatorSettings(activate_timeout_s=1, graceful_move_timeout_s=1),
            trust=self.trust,
        )

    async def start(self) -> World:
        await self.hub_store.start()
        await self.operator_store.start()
        return self

    def zookeeper_down(self) -> None:
        """Every later connection attempt fails, as with an unreachable ZooKeeper."""

        class Down(MemoryMetadataStore):
            async def start(self) -> None:
                raise MetadataUnavailableError("connection refused")

        self.connections = MetadataConnections(
            lambda zk, r: Down(self.backend, r), digests=self.trust.digests
        )
        self.ctx.metadata = self.connections

    async def register(self, address: str, rates: Mapping[str, float] | None = None) -> None:
        """A hub alive in the region, reporting ``rates`` (messages/s in) per topic."""
        loads = {t: TopicLoad(msg_in=r) for t, r in (rates or {}).items()}
        load = HubLoad(
            timestamp_ms=self.ctx.clock.wall_ms(),
            topics=len(loads),
            msg_in=sum(rates.values()) if rates else 0.0,
            topic_loads=loads,
        )
        await self.hub_store.hubs.register_hub(address, load)


# Most reconcilers' tests need no certificates: they run an open pool, said explicitly (a pool
# without spec.security is secured).
OPEN: Mapping[str, Any] = {"enabled": False}


def pool_body(
    name: str = "pool",
    namespace: str = "ns",
    *,
    spec: Mapping[str, Any] | None = None,
    security: Mapping[str, Any] | None = OPEN,
) -> dict[str, Any]:
    """A HubPool as the API server stores it; ``security`` None: without spec.security (then
    secured), and a ``security`` in ``spec`` wins."""
    body_spec: dict[str, Any] = {"image": "hedwig/hub:1.2", "metadata": {"url": "zk:2181"}}
    if security is not None:
        body_spec["security"] = dict(security)
    body_spec.update(spec or {})
    return {
        "apiVersion": "hedwig.io/v1alpha1",
        "kind": "HubPool",
        "metadata": {"name": name, "namespace": namespace, "uid": "pool-uid", "generation": 1},
        "spec": body_spec,
    }


def ready_condition(body: Mapping[str, Any]) -> Mapping[str, Any]:
    """A resource's Ready condition (a pool's status holds Secured too)."""
    found = find((body.get("status") or {}).get("conditions"), "Ready")
    assert found is not None, body.get("status")
    return found


def topic_body(
    name: str = "orders",
    namespace: str = "ns",
    *,
    pool: str = "pool",
    spec: Mapping[str, Any] | None = None,
    created: str = "2026-01-01T00:00:00Z",
    status: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "hedwig.io/v1alpha1",
        "kind": "Topic",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "generation": 1,
            "creationTimestamp": created,
        },
        "spec": {"pool": pool, **(spec or {})},
    }
    if status is not None:
        body["status"] = dict(status)
    return body


def namespace_body(
    name: str = "web",
    namespace: str = "ns",
    *,
    pool: str = "pool",
    spec: Mapping[str, Any] | None = None,
    created: str = "2026-01-01T00:00:00Z",
    generation: int = 1,
) -> dict[str, Any]:
    """A HedwigNamespace as the API server stores it (``spec.name`` acme/web unless given)."""
    return {
        "apiVersion": "hedwig.io/v1alpha1",
        "kind": "HedwigNamespace",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "generation": generation,
            "creationTimestamp": created,
        },
        "spec": {"pool": pool, "name": "acme/web", **(spec or {})},
    }
