"""What the metadata store says about a topic, for its Topic's status: owner, subscribers,
backlog, last sequence, rates and plan.

The rates and the backlog come from the owner's load report when it lists the topic (its
hottest topics only); otherwise the backlog is worked out from the closed ledgers alone (the
open tail's end is known to its owner alone), and the rates are unknown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hedwig.metadata import HubStatus, MetadataStore, TopicLoad, TopicPlan


@dataclass(frozen=True, slots=True)
class TopicSnapshot:
    """What ZooKeeper says about a topic, for its status."""

    owner: str | None
    subscribers: int
    backlog: int
    last_seq: int
    load: TopicLoad | None
    plan: TopicPlan | None = None


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
