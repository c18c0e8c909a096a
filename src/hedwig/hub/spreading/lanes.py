"""Lanes of an ingest topic, as a hub serves them (``hedwig.metadata.plans``).

Rules:

- A lane is a topic of its own (lane 0 is the topic itself), owned, stored, moved and
  subscribed to like any other; what makes it a lane is only the plan of its topic.
- A publish to a lane is stored only for a publisher the plan sends to that lane. Any other
  publisher is answered USE_LANE naming its lane, and that answer comes after the duplicate
  check: a batch this lane already stored is answered as stored, wherever its publisher
  belongs now, so a batch re-sent after a failure is never stored in two lanes. A sealed lane
  sends every publisher to the open lanes.
- A name with the lane suffix is served only as a lane its topic's plan lists, so nobody can
  make a topic that shadows a lane. Before refusing, the plan is read again from the store:
  the hub a publisher was just sent to may not have seen the new plan yet.
- DESCRIBE_LANES is answered by any hub from the plans it watches (``TopicPlans``).
- A sealed lane is dropped by its owner once every subscription of it has consumed all it
  holds (``drop_if_finished``, with garbage collection): first from the plan, by
  compare-and-set, so no subscriber looks for it again, then the lane's topic itself, whose
  attached subscribers are told it was deleted (a lane's subscriber then just stops).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

from hedwig.errors import (
    BadVersionError,
    InvalidTopicError,
    MetadataError,
    NoSuchTopicError,
    UseLaneError,
)
from hedwig.hub.owning.ownership import TopicOwnership
from hedwig.hub.owning.topic import OwnedTopic
from hedwig.hub.spreading.plans import TopicPlans
from hedwig.metadata.managers import MetadataStore, SessionState
from hedwig.metadata.plans import PlanMode, TopicPlan
from hedwig.metadata.records import Versioned
from hedwig.protocol import DescribeLanes, LaneInfo, Lanes, lane_name, lane_of

# A publisher's lane is remembered per plan for this many (publisher, plan) pairs: the hash is
# computed once per publisher and plan, not once per batch.
LANE_CACHE = 65_536

# Checks one publisher id before its batch is stored; raises ``UseLaneError``.
PublisherCheck = Callable[[str], None]


@functools.lru_cache(maxsize=LANE_CACHE)
def _lane_for(plan: TopicPlan, publisher: str) -> int:
    return plan.lane_for(publisher)


class TopicLanes:
    def __init__(self, *, plans: TopicPlans, store: MetadataStore) -> None:
        self._plans = plans
        self._store = store

    async def _plan(self, topic: str) -> TopicPlan | None:
        known, plan = self._plans.peek(topic)
        return plan if known else await self._plans.plan(topic)

    async def check_name(self, name: str) -> TopicPlan | None:
        """The plan of ``name``'s topic; ``InvalidTopicError`` if ``name`` is a lane's name
        that the plan does not list."""
        base, index = lane_of(name)
        plan = await self._plan(base)
        if index and (plan is None or plan.lane(index) is None):
            got = await self._store.plans.read_plan(base)  # fresher than the watched copy
            plan = got.value if got is not None else None
            if plan is None or plan.lane(index) is None:
                raise InvalidTopicError.for_name(
                    name, f"the name of lane {index} of {base!r}, which has no such lane"
                )
        return plan

    async def publish_check(self, name: str) -> PublisherCheck | None:
        """What a publish to ``name`` must pass once it is known not to be a duplicate;
        ``None``: every publisher is welcome (a topic not served by lanes).

        Publishing must not need the metadata store (an owner goes on acknowledging through a
        store outage). So a plan not known yet is read only while the store answers; else the
        publish passes unchecked. That is safe: a client sends a topic's lane only what it was
        told belongs there, and a lane keeps each publisher's order and duplicates on its own,
        so at worst a lane takes a publisher the plan meant for another until the plan is read.
        """
        base, index = lane_of(name)
        known, plan = self._plans.peek(base)
        if not known or (index and (plan is None or plan.lane(index) is None)):
            if self._store.session.state is not SessionState.CONNECTED:
                return None
            try:
                plan = await self.check_name(name)
            except MetadataError:
                return None
        if plan is None or (index == 0 and not plan.lanes):
            return None
        if plan.mode is not PlanMode.INGEST and index == 0:
            return None

        lane = plan.lane(index)
        why = "is sealed" if lane is not None and lane.sealed else "is not its"

        def check(publisher: str) -> None:
            target = _lane_for(plan, publisher)
            if target != index:
                raise UseLaneError(
                    f"topic {base!r} is served by lanes: lane {index} {why}; publisher "
                    f"{publisher!r} publishes to lane {target}",
                    lane=lane_name(base, target),
                )

        return check

    async def hub_hint(self, name: str) -> str | None:
        """The hub the plan chose to own lane ``name`` first (``None``: not a lane, or none)."""
        base, index = lane_of(name)
        if not index:
            return None
        plan = await self._plan(base)
        lane = plan.lane(index) if plan is not None else None
        return (lane.hub or None) if lane is not None else None

    async def drop_if_finished(self, owned: OwnedTopic, ownership: TopicOwnership) -> bool:
        """Drop the sealed lane ``owned`` if its subscribers have consumed all of it; whether
        it was dropped."""
        base, index = lane_of(owned.name)
        plan = await self._plan(base) if index else None
        lane = plan.lane(index) if plan is not None else None
        if lane is None or not lane.sealed:
            return False
        await owned.flush_marks()
        if await owned.keep_from_seq() <= owned.log.last_seq:
            return False  # a subscriber has not read it all yet
        got = await self._store.plans.read_plan(base)
        if got is None or got.value.lane(index) is None:
            return False
        try:
            await self._without(base, index, got)
        except BadVersionError:
            return False  # changed meanwhile: looked at again at the next collection
        await ownership.delete(owned.name, force=True)
        return True

    async def _without(self, base: str, index: int, got: Versioned[TopicPlan]) -> None:
        plan = got.value
        lanes = tuple(lane for lane in plan.lanes if lane.index != index)
        if plan.mode is PlanMode.SINGLE and not lanes:
            await self._store.plans.delete_plan(base, got.version)
            return
        await self._store.plans.write_plan(
            base,
            dataclasses.replace(plan, lanes=lanes, generation=plan.generation + 1),
            got.version,
        )

    async def describe(self, req: DescribeLanes) -> Lanes:
        base, index = lane_of(req.topic)
        if index:
            raise InvalidTopicError.for_name(req.topic, "a lane has no lanes: ask its topic")
        plan = await self._plan(base)
        if plan is None:
            if not await self._store.topics.topic_exists(base):
                raise NoSuchTopicError(f"topic {base!r} does not exist")
            return Lanes(request_id=req.request_id, generation=0, lanes=(LaneInfo(0, False),))
        lanes = [LaneInfo(lane.index, lane.sealed) for lane in plan.lanes]
        if not lanes or lanes[0].index != 0:
            lanes.insert(0, LaneInfo(0, False))
        return Lanes(request_id=req.request_id, generation=plan.generation, lanes=tuple(lanes))
