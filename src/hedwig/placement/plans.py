"""Changing a topic's plan (``hedwig.metadata.plans``): which hubs, and the compare-and-set.

``choose_delivery_hubs`` is the pure choice: keep the current delivery hubs that are still
alive (every hub kept is a subscriber share not moved), then add the least loaded alive hubs
by bytes out, the owner last (it already carries every write), then drop the most loaded
beyond the count. ``next_lanes`` is the choice for ingest: open lanes are added with numbers
never used, each meant for the least loaded hub by bytes in that no open lane is meant for
yet, and removed by sealing the newest. ``set_topic_mode`` reads the plan, decides, and writes
it back with a compare-and-set on the version it read, trying again if another writer got
there first.

A new lane starts with a subscription for each of its topic's subscriptions, at the lane's
start, written before the plan that opens the lane and again after it (for a subscription
made in between): publishers reach a lane only through that plan, so no subscriber of the
topic misses a message of a lane. A subscription made later starts at the lane's end, as it
starts at the topic's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from hedwig.clock import Clock
from hedwig.errors import (
    BadVersionError,
    NoSuchTopicError,
    SubscriptionExistsError,
    UsageError,
)
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.plans import MAX_PLAN_HUBS, Lane, PlanMode, TopicPlan
from hedwig.metadata.records import (
    NEW_VERSION,
    HubStatus,
    SubscriptionData,
    SubscriptionState,
)
from hedwig.protocol.names import MAX_LANE, lane_name, lane_of

# Compare-and-set attempts before giving up (another writer keeps changing the plan).
MAX_ATTEMPTS = 5


def choose_delivery_hubs(
    hubs: Sequence[HubStatus], *, owner: str | None, current: Sequence[str], count: int
) -> list[str]:
    if count < 1 or count > MAX_PLAN_HUBS:
        raise UsageError(f"a fan-out topic needs 1 to {MAX_PLAN_HUBS} delivery hubs, not {count}")
    alive = [h for h in hubs if h.alive]
    by_address = {h.address: h for h in alive}

    def weight(address: str) -> tuple[int, float, str]:
        load = by_address[address].load
        return (address == owner, load.bytes_out if load is not None else 0.0, address)

    kept = sorted((a for a in current if a in by_address), key=weight)
    rest = sorted((a for a in by_address if a not in kept), key=weight)
    chosen = (kept + rest)[:count] if len(kept) < count else kept[:count]
    if not chosen:
        raise UsageError("no hub is alive to deliver the topic")
    return sorted(chosen)


def next_lanes(
    current: TopicPlan, hubs: Sequence[HubStatus], *, owner: str | None, count: int
) -> tuple[Lane, ...]:
    """The lanes of an ingest plan with ``count`` open lanes, from ``current``."""
    if count < 1 or count > MAX_PLAN_HUBS:
        raise UsageError(f"an ingest topic has 1 to {MAX_PLAN_HUBS} lanes, not {count}")
    lanes = {lane.index: lane for lane in current.lanes}
    lanes.setdefault(0, Lane(0))
    open_ = [i for i in sorted(lanes) if not lanes[i].sealed]
    for index in reversed(open_[count:]):
        lanes[index] = Lane(index, lanes[index].hub, sealed=True)
    missing = count - len(open_)
    if missing > 0:
        alive = sorted(
            (h for h in hubs if h.alive),
            key=lambda h: (h.load.bytes_in if h.load is not None else 0.0, h.address),
        )
        meant = {owner} | {lanes[i].hub for i in open_}
        free = [h.address for h in alive if h.address not in meant]
        reuse = [h.address for h in alive]
        index = max(lanes) + 1
        for n in range(missing):
            if index > MAX_LANE:
                raise UsageError(f"topic has used every lane number up to {MAX_LANE}")
            hub = free[n] if n < len(free) else (reuse[n % len(reuse)] if reuse else "")
            lanes[index] = Lane(index, hub)
            index += 1
    return tuple(lanes[i] for i in sorted(lanes))


async def _open_lanes(store: MetadataStore, topic: str, lanes: Sequence[Lane], now_ms: int) -> None:
    """Make each new lane's topic, with its topic's config, and a subscription at its start
    for each of its topic's subscriptions (those already there are left alone)."""
    config = await store.topics.read_topic_config(topic)
    subs = await store.subscriptions.read_subscriptions(topic)
    for lane in lanes:
        name = lane_name(topic, lane.index)
        if config is None:
            await store.topics.ensure_topic(name)
        else:
            existing = await store.topics.read_topic_config(name)
            await store.topics.write_topic_config(
                name, config.value, existing.version if existing is not None else NEW_VERSION
            )
        for sub, got in subs.items():
            # A lane's subscription is its topic's: the same type, delivery policy and owner.
            state = SubscriptionState(0, now_ms, now_ms)
            data = SubscriptionData(got.value.preferences, state, got.value.policy, got.value.owner)
            with contextlib.suppress(SubscriptionExistsError):
                await store.subscriptions.create_subscription_data(name, sub, data)


async def set_topic_mode(
    store: MetadataStore,
    topic: str,
    mode: PlanMode,
    *,
    hubs: int = 2,
    reason: str = "",
    clock: Clock,
) -> TopicPlan:
    """Set ``topic``'s plan; the plan written (``TopicPlan()`` for single). ``hubs``:
    delivery hubs (fan-out) or open lanes (ingest)."""
    if lane_of(topic)[1]:
        raise UsageError(f"{topic!r} is a lane: set the mode of its topic")
    if not await store.topics.topic_exists(topic):
        raise NoSuchTopicError(f"topic {topic!r} does not exist")
    for _ in range(MAX_ATTEMPTS):
        got = await store.plans.read_plan(topic)
        current = got.value if got is not None else TopicPlan()
        version = got.version if got is not None else NEW_VERSION
        # Leaving ingest seals every lane but lane 0; sealed lanes stay for their readers.
        sealed = tuple(
            Lane(lane.index, lane.hub, sealed=True) for lane in current.lanes if lane.index
        )
        try:
            if mode is PlanMode.SINGLE:
                if not sealed:
                    if got is not None:
                        await store.plans.delete_plan(topic, got.version)
                    return TopicPlan()
                plan = TopicPlan(
                    PlanMode.SINGLE,
                    generation=current.generation + 1,
                    reason=reason,
                    changed_ms=clock.wall_ms(),
                    lanes=sealed,
                )
                if current.mode is PlanMode.SINGLE and current.lanes == plan.lanes:
                    return current
                await store.plans.write_plan(topic, plan, version)
                return plan
            owner_info = await store.ownership.read_owner_info(topic)
            owner = owner_info.value.address if owner_info is not None else None
            registry = await store.hubs.list_hubs()
            if mode is PlanMode.INGEST:
                lanes = next_lanes(current, registry, owner=owner, count=hubs)
                if current.mode is PlanMode.INGEST and lanes == current.lanes:
                    return current
                known = {lane.index for lane in current.lanes}
                new = [lane for lane in lanes if lane.index not in known and lane.index]
                now = clock.wall_ms()
                await _open_lanes(store, topic, new, now)
                plan = TopicPlan(
                    PlanMode.INGEST,
                    generation=current.generation + 1,
                    reason=reason,
                    changed_ms=now,
                    lanes=lanes,
                )
                await store.plans.write_plan(topic, plan, version)
                await _open_lanes(store, topic, new, now)
                return plan
            chosen = choose_delivery_hubs(registry, owner=owner, current=current.hubs, count=hubs)
            plan = TopicPlan(
                PlanMode.FAN_OUT,
                tuple(sorted(set(chosen))),
                generation=current.generation + 1,
                reason=reason,
                changed_ms=clock.wall_ms(),
                lanes=sealed,
            )
            if (
                plan.hubs == current.hubs
                and current.mode is PlanMode.FAN_OUT
                and plan.lanes == current.lanes
            ):
                return current
            await store.plans.write_plan(topic, plan, version)
            return plan
        except BadVersionError:
            continue
    raise BadVersionError(f"the plan of {topic!r} kept changing under us; try again")
