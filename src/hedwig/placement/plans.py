"""Changing a topic's plan (``hedwig.metadata.plans``): which hubs, and the compare-and-set.

``choose_delivery_hubs`` is the pure choice: keep the current delivery hubs that are still
alive (every hub kept is a subscriber share not moved), then add the least loaded alive hubs
by bytes out, the owner last (it already carries every write), then drop the most loaded
beyond the count. ``set_topic_mode`` reads the plan, decides, and writes it back with a
compare-and-set on the version it read, trying again if another writer got there first.
"""

from __future__ import annotations

from collections.abc import Sequence

from hedwig.clock import Clock
from hedwig.errors import BadVersionError, NoSuchTopicError, UsageError
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.plans import MAX_PLAN_HUBS, PlanMode, TopicPlan
from hedwig.metadata.records import NEW_VERSION, HubStatus

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


async def set_topic_mode(
    store: MetadataStore,
    topic: str,
    mode: PlanMode,
    *,
    hubs: int = 2,
    reason: str = "",
    clock: Clock,
) -> TopicPlan:
    """Set ``topic``'s plan; the plan written (``TopicPlan()`` for single)."""
    if mode is PlanMode.INGEST:
        raise UsageError("ingest lanes are not implemented yet: a topic can be single or fan-out")
    if not await store.topics.topic_exists(topic):
        raise NoSuchTopicError(f"topic {topic!r} does not exist")
    for _ in range(MAX_ATTEMPTS):
        got = await store.plans.read_plan(topic)
        current = got.value if got is not None else TopicPlan()
        try:
            if mode is PlanMode.SINGLE:
                if got is not None:
                    await store.plans.delete_plan(topic, got.version)
                return TopicPlan()
            owner = await store.ownership.read_owner_info(topic)
            chosen = choose_delivery_hubs(
                await store.hubs.list_hubs(),
                owner=owner.value.address if owner is not None else None,
                current=current.hubs,
                count=hubs,
            )
            plan = TopicPlan.fan_out(
                chosen,
                generation=current.generation + 1,
                reason=reason,
                at_ms=clock.wall_ms(),
            )
            if plan.hubs == current.hubs and current.mode is PlanMode.FAN_OUT:
                return current
            await store.plans.write_plan(
                topic, plan, got.version if got is not None else NEW_VERSION
            )
            return plan
        except BadVersionError:
            continue
    raise BadVersionError(f"the plan of {topic!r} kept changing under us; try again")
