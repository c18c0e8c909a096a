"""Topic reconciliation: the topic's znode holds the spec's configuration, a hub owns it, and
the resource's status says so (or says exactly why not).

Rules, in the order they are checked:

1. The spec must parse and its ``topicName`` must be one the hubs accept (the core's
   ``validate_name``): otherwise Ready=False, reason InvalidSpec / InvalidTopicName. Nothing is
   retried: the user must change the spec.
2. The pool must exist in the Topic's namespace: otherwise Ready=False, reason PoolNotFound.
   The pool's worker reconciles the Topic again once the pool appears.
3. One Topic resource manages one topic of a pool. When several claim the same topic name, the
   oldest (creation time, then name) manages it; the others get Ready=False, reason
   ResourceConflict, and never touch the topic (not even when they are deleted).
4. The topic's znode is created with the configuration, or updated when it differs
   (compare-and-set on its version, so a concurrent writer is noticed, not overwritten).
5. If no hub owns the topic, one is asked to take it (``HubRequests.activate``).
6. Status: Ready=True (reason Owned) with the owner, subscribers, backlog and message rates.

Deleting a Topic with ``deletionPolicy: Delete`` deletes the topic's znodes and its ledgers'
metadata (``delete_topic_data``), behind a finalizer that ``hedwig.io/finalizer: "false"``
turns off. ``Keep`` needs no finalizer: nothing happens to the data.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hedwig.clock import SystemClock
from hedwig.errors import (
    BadVersionError,
    HedwigError,
    InvalidTopicError,
    MetadataError,
    NoLedgerMetadataError,
)
from hedwig.metadata import (
    ANY_VERSION,
    NEW_VERSION,
    HubStatus,
    MetadataStore,
    PlanMode,
    TopicLoad,
    TopicPlan,
)
from hedwig.placement.plans import set_topic_mode
from hedwig.protocol.names import lane_name, validate_name
from hedwig_operator.conditions import condition, now_iso
from hedwig_operator.context import Context
from hedwig_operator.kube import ObjectRef
from hedwig_operator.recorder import record_event
from hedwig_operator.resources import (
    ANNOTATION_FINALIZER,
    API_VERSION,
    POOL_KIND,
)
from hedwig_operator.specs import (
    DeletionPolicy,
    PoolSpec,
    ScalingMode,
    SpecError,
    TopicSpec,
    parse_pool,
    parse_topic,
)
from hedwig_operator.specs.topic import DEFAULT_FAN_OUT_HUBS

log = logging.getLogger(__name__)


class TransientError(Exception):
    """Reconciliation failed for a reason that may go away (ZooKeeper or the API server
    unreachable); the status says so and the caller retries later."""


@dataclass(frozen=True, slots=True)
class TopicClaim:
    """A Topic resource's claim on a topic name of a pool (the value of the claims index)."""

    namespace: str
    name: str
    pool: str
    topic_name: str
    creation_timestamp: str
    uid: str = ""
    # ``spec.scaling``: the pool's scaling policy changes the plan only under ``auto``.
    scaling: ScalingMode = ScalingMode.AUTO
    max_hubs: int | None = None

    @property
    def order(self) -> tuple[str, str]:
        # RFC 3339 timestamps in UTC sort as strings; the name breaks ties within a second.
        return (self.creation_timestamp, self.name)


def claim_of(body: Mapping[str, Any]) -> TopicClaim | None:
    """The claim a Topic makes, or None if its spec cannot claim anything."""
    try:
        spec = parse_topic(body)
        validate_name(spec.topic_name)
    except (SpecError, InvalidTopicError):
        return None
    return TopicClaim(
        spec.namespace,
        spec.name,
        spec.pool,
        spec.topic_name,
        spec.creation_timestamp,
        spec.uid,
        scaling=spec.scaling_mode,
        max_hubs=spec.max_hubs,
    )


def claims_key(namespace: str, pool: str) -> tuple[str, str]:
    return (namespace, pool)


def conflict_winner(claims: Iterable[TopicClaim], topic_name: str) -> TopicClaim | None:
    """The Topic resource that manages ``topic_name``: the oldest claim."""
    rivals = [c for c in claims if c.topic_name == topic_name]
    return min(rivals, key=lambda c: c.order) if rivals else None


@dataclass(frozen=True, slots=True)
class TopicSnapshot:
    """What ZooKeeper says about a topic, for its status."""

    owner: str | None
    subscribers: int
    backlog: int
    last_seq: int
    load: TopicLoad | None
    plan: TopicPlan | None = None


def pool_ref(namespace: str, pool: str) -> ObjectRef:
    return ObjectRef(API_VERSION, POOL_KIND, namespace, pool)


async def read_snapshot(
    store: MetadataStore, topic: str, hubs: Sequence[HubStatus] | None = None
) -> TopicSnapshot:
    owner = await store.ownership.read_owner_info(topic)
    subs = await store.subscriptions.read_subscriptions(topic)
    ranges = await store.persistence.read_topic_persistence_info(topic)
    last_seq = ranges.value.last_seq if ranges is not None else 0
    load: TopicLoad | None = None
    if owner is not None:
        for h in hubs if hubs is not None else await store.hubs.list_hubs():
            if h.address == owner.value.address and h.load is not None:
                load = h.load.topic_loads.get(topic)
    if load is not None:
        backlog = load.backlog
    else:
        # From the closed ledgers only (the open tail's end is known to its owner alone).
        backlog = sum(
            max(0, last_seq - s.value.state.consumed_seq)
            for s in subs.values()
            if s.value.state is not None
        )
    plan = await store.plans.read_plan(topic)
    return TopicSnapshot(
        owner=owner.value.address if owner is not None else None,
        subscribers=len(subs),
        backlog=backlog,
        last_seq=last_seq,
        load=load,
        plan=plan.value if plan is not None else None,
    )


def build_topic_status(
    *,
    generation: int,
    topic_name: str | None,
    ready: bool,
    reason: str,
    message: str,
    previous: Mapping[str, Any] | None,
    snapshot: TopicSnapshot | None = None,
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """The Topic's status (a merge patch: ``None`` removes a field that no longer applies)."""
    previous = previous or {}
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "topicName": topic_name,
        "conditions": [condition("Ready", ready, reason, message, previous.get("conditions"), now)],
    }
    if snapshot is not None:
        status["owner"] = snapshot.owner
        status["subscribers"] = snapshot.subscribers
        status["backlog"] = snapshot.backlog
        status["lastSeq"] = snapshot.last_seq
        plan = snapshot.plan or TopicPlan()
        status["plan"] = {
            "mode": MODE_NAMES[plan.mode],
            "hubs": list(plan.hubs),
            "generation": plan.generation,
            # ingest: the lanes, each with the hub it was meant for and whether it is sealed.
            "lanes": [
                {"index": lane.index, "hub": lane.hub, "sealed": lane.sealed} for lane in plan.lanes
            ],
        }
        load = snapshot.load
        status["rates"] = (
            {
                "messagesInPerSecond": load.msg_in,
                "messagesOutPerSecond": load.msg_out,
                "bytesInPerSecond": load.bytes_in,
                "bytesOutPerSecond": load.bytes_out,
            }
            if load is not None
            else None
        )
    return status


# The plan's modes as the Topic's spec and status name them.
MODE_NAMES = {
    PlanMode.SINGLE: ScalingMode.SINGLE.value,
    PlanMode.FAN_OUT: ScalingMode.FAN_OUT.value,
    PlanMode.INGEST: ScalingMode.INGEST.value,
}


async def _ensure_scaling(store: MetadataStore, spec: TopicSpec) -> TopicPlan | None:
    """Make the topic's plan what ``spec.scaling`` pins; the plan written, or None if nothing
    was pinned or nothing changed. ``auto`` leaves the plan to the pool's scaling policy (the
    rebalancing cycle, ``spec.rebalancing.fanOut``), ``hedwig topic mode`` and the hubs'
    ``--auto-fan-out``."""
    mode = spec.scaling_mode
    if mode is ScalingMode.AUTO:
        return None
    current = await store.plans.read_plan(spec.topic_name)
    if mode is ScalingMode.SINGLE:
        if current is None:
            return None
        return await set_topic_mode(
            store, spec.topic_name, PlanMode.SINGLE, reason="Topic spec.scaling", clock=_CLOCK
        )
    hubs = spec.max_hubs or DEFAULT_FAN_OUT_HUBS
    plan = await set_topic_mode(
        store,
        spec.topic_name,
        PlanMode.INGEST if mode is ScalingMode.INGEST else PlanMode.FAN_OUT,
        hubs=hubs,
        reason="Topic spec.scaling",
        clock=_CLOCK,
    )
    return None if current is not None and current.value == plan else plan


_CLOCK = SystemClock()


async def _ensure_config(store: MetadataStore, spec: TopicSpec) -> str | None:
    """Make the topic's znode hold the spec's configuration; what changed, or None."""
    wanted = spec.config()
    for _ in range(3):
        current = await store.topics.read_topic_config(spec.topic_name)
        try:
            if current is None:
                await store.topics.write_topic_config(spec.topic_name, wanted, NEW_VERSION)
                return "created"
            if current.value == wanted:
                await store.topics.ensure_topic(spec.topic_name)  # subscriber root, if missing
                return None
            await store.topics.write_topic_config(spec.topic_name, wanted, current.version)
            return "updated"
        except BadVersionError:
            continue  # someone wrote in between: read again
    raise TransientError(f"the znode of topic {spec.topic_name!r} keeps changing under us")


async def reconcile_topic(
    ctx: Context,
    body: Mapping[str, Any],
    claims: Iterable[TopicClaim],
    *,
    pool_body: Mapping[str, Any] | None = None,
    hubs: Sequence[HubStatus] | None = None,
    now: dt.datetime | None = None,
) -> tuple[dict[str, Any], bool]:
    """Reconcile one Topic; returns (its new status, whether to retry later).

    ``pool_body`` and ``hubs`` may be passed by a caller that already read them (the pool's
    worker refreshing all its Topics); otherwise they are read here.
    """
    previous = body.get("status") or {}
    generation = int(body.get("metadata", {}).get("generation", 0))

    def result(
        ready: bool,
        reason: str,
        message: str,
        *,
        topic: str | None = None,
        snapshot: TopicSnapshot | None = None,
        retry: bool = False,
    ) -> tuple[dict[str, Any], bool]:
        status = build_topic_status(
            generation=generation,
            topic_name=topic,
            ready=ready,
            reason=reason,
            message=message,
            previous=previous,
            snapshot=snapshot,
            now=now,
        )
        return status, retry

    try:
        spec = parse_topic(body)
    except SpecError as exc:
        return result(False, "InvalidSpec", str(exc))
    try:
        validate_name(spec.topic_name)
    except InvalidTopicError as exc:
        return result(
            False,
            "InvalidTopicName",
            f"the hubs refuse topic name {spec.topic_name!r}: {exc.reason}",
        )
    topic = spec.topic_name
    winner = conflict_winner(claims, topic)
    if winner is not None and winner.name != spec.name:
        return result(
            False,
            "ResourceConflict",
            f"topic {topic!r} of pool {spec.pool!r} is managed by Topic "
            f"{winner.namespace}/{winner.name}, created earlier",
            topic=topic,
        )
    if pool_body is None:
        pool_body = await ctx.kube.get(pool_ref(spec.namespace, spec.pool))  # KubeError: retry
    if pool_body is None:
        return result(
            False,
            "PoolNotFound",
            f"HubPool {spec.namespace}/{spec.pool} does not exist",
            topic=topic,
        )
    try:
        pool = parse_pool(pool_body)
    except SpecError as exc:
        return result(False, "PoolInvalid", f"HubPool {spec.pool} is invalid: {exc}", topic=topic)
    try:
        store = await ctx.metadata.get(pool.zk_connect, pool.region, pool.store_secret)
        await _ensure_config(store, spec)
        if hubs is None:
            hubs = await store.hubs.list_hubs()
        snapshot = await read_snapshot(store, topic, hubs)
        if snapshot.owner is None:
            alive = [h.address for h in hubs if h.alive]
            if not alive:
                return result(
                    False,
                    "NoHubs",
                    f"no hub of region {pool.region!r} is alive to own the topic",
                    topic=topic,
                    snapshot=snapshot,
                    retry=True,
                )
            ctx.trust.note_hubs(pool, alive)
            try:
                await ctx.hubs.activate(alive, topic, ctx.settings.activate_timeout_s)
            except (HedwigError, TimeoutError, OSError) as exc:
                return result(
                    False,
                    "NotOwned",
                    f"no hub has taken the topic yet: {exc!r}",
                    topic=topic,
                    snapshot=snapshot,
                    retry=True,
                )
            snapshot = await read_snapshot(store, topic)
    except (MetadataError, TransientError) as exc:
        return result(
            False,
            "ZooKeeperUnavailable",
            f"ZooKeeper of pool {pool.name} ({pool.zk_connect}): {exc}",
            topic=topic,
            retry=True,
        )
    if snapshot.owner is None:
        return result(
            False,
            "NotOwned",
            "a hub was asked to take the topic but no owner is recorded yet",
            topic=topic,
            snapshot=snapshot,
            retry=True,
        )
    try:
        changed = await _ensure_scaling(store, spec)
    except (MetadataError, TransientError) as exc:
        return result(
            False,
            "ZooKeeperUnavailable",
            f"ZooKeeper of pool {pool.name} ({pool.zk_connect}): {exc}",
            topic=topic,
            snapshot=snapshot,
            retry=True,
        )
    except HedwigError as exc:  # no hub alive to deliver, and the like
        return result(False, "ScalingFailed", str(exc), topic=topic, snapshot=snapshot, retry=True)
    if changed is not None:
        where = f" on {', '.join(changed.hubs)}" if changed.hubs else ""
        if changed.mode is PlanMode.INGEST:
            where = f" by lanes {', '.join(str(i) for i in changed.open_lanes)}"
        message = f"topic {topic!r} is served {MODE_NAMES[changed.mode]}{where} (spec.scaling)"
        log.info("%s", message)
        await record_event(ctx.kube, body, "ModeChanged", message)
        keep = changed.hubs or changed.lanes
        snapshot = dataclasses.replace(snapshot, plan=changed if keep else None)
    return result(
        True,
        "Owned",
        f"topic {topic!r} is configured in region {pool.region!r} and owned by {snapshot.owner}",
        topic=topic,
        snapshot=snapshot,
    )


def wants_finalizer(body: Mapping[str, Any]) -> bool:
    """Whether deleting this Topic must wait for its data to be deleted."""
    spec = body.get("spec") or {}
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    if str(annotations.get(ANNOTATION_FINALIZER, "")).lower() == "false":
        return False
    return spec.get("deletionPolicy") == DeletionPolicy.DELETE.value


async def delete_topic_data(
    ctx: Context, body: Mapping[str, Any], claims: Iterable[TopicClaim]
) -> str:
    """Delete the topic's znodes and ledger records; returns what was done, for the event.

    Raises ``TransientError`` if ZooKeeper cannot be reached (the caller retries, holding the
    finalizer). Does nothing to a topic another Topic resource manages, or whose pool is gone
    (there is then no way to know where its data is; the data is kept and an event says so).
    """
    try:
        spec = parse_topic(body)
        validate_name(spec.topic_name)
    except (SpecError, InvalidTopicError):
        return "nothing to delete: the Topic never named a valid topic"
    topic = spec.topic_name
    winner = conflict_winner(claims, topic)
    if winner is not None and winner.name != spec.name:
        return f"data kept: topic {topic!r} is managed by Topic {winner.name}"
    pool_body = await ctx.kube.get(pool_ref(spec.namespace, spec.pool))
    if pool_body is None:
        return f"data kept: HubPool {spec.pool} is gone, so its ZooKeeper is unknown"
    pool: PoolSpec = parse_pool(pool_body)
    try:
        store = await ctx.metadata.get(pool.zk_connect, pool.region, pool.store_secret)
        if not await store.topics.topic_exists(topic):
            return f"topic {topic!r} did not exist in region {pool.region!r}"
        plan = await store.plans.read_plan(topic)
        lanes = [lane.index for lane in plan.value.lanes if lane.index] if plan else []
        alive = [h.address for h in await store.hubs.list_hubs() if h.alive]
        done = await _delete_one(ctx, store, alive, topic)
        # Its lanes after it (``docs/architecture.md``, "Lanes"), the same way.
        for index in lanes:
            name = lane_name(topic, index)
            if await store.topics.topic_exists(name):
                await _delete_one(ctx, store, alive, name)
    except MetadataError as exc:
        raise TransientError(f"ZooKeeper of pool {pool.name}: {exc}") from exc
    lanes_done = f" and its {len(lanes)} lane(s)" if lanes else ""
    return f"deleted topic {topic!r}{lanes_done} from region {pool.region!r} {done}"


async def _delete_one(ctx: Context, store: MetadataStore, alive: list[str], topic: str) -> str:
    """Delete one topic (or lane): through its owner if a hub can, else its records."""
    ranges = await store.persistence.read_topic_persistence_info(topic)
    # Best: the owner deletes it (its ledgers' replicas too) through the protocol.
    why_not = (
        await ctx.hubs.delete(alive, topic, ctx.settings.activate_timeout_s)
        if alive
        else "no hub is alive"
    )
    if why_not is None:
        return "through its owner"
    log.info("topic %r: deleting its records directly (%s)", topic, why_not)
    # The topic node first: its owner notices its owner record vanish and stops serving.
    await store.topics.delete_topic(topic)
    ledgers = [r.ledger_id for r in ranges.value.ranges] if ranges is not None else []
    for ledger_id in ledgers:
        with contextlib.suppress(NoLedgerMetadataError):
            await store.ledgers.delete_ledger(ledger_id, ANY_VERSION)
    return f"with the metadata of {len(ledgers)} ledger(s)"


__all__ = [
    "TopicClaim",
    "TopicSnapshot",
    "TransientError",
    "build_topic_status",
    "claim_of",
    "claims_key",
    "conflict_winner",
    "delete_topic_data",
    "now_iso",
    "read_snapshot",
    "reconcile_topic",
    "wants_finalizer",
]
