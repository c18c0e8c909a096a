"""The memory store's topic plans (``TopicPlanManager``): each planned topic's plan, watched by
its key, and the set of planned topics, watched as one (created and deleted plans change it;
so does deleting a planned topic)."""

from __future__ import annotations

from collections.abc import Callable

from hedwig.errors import MetadataError
from hedwig.metadata.memory.session import MemorySession
from hedwig.metadata.plans import TopicPlan
from hedwig.metadata.records import ANY_VERSION, NEW_VERSION, Version, Versioned

# The key whose watches fire when the set of planned topics changes.
PLANNED_CHANGED = "planned-changed"


class MemoryPlans(MemorySession):
    async def planned_topics(self, watch: Callable[[], None] | None = None) -> frozenset[str]:
        self._check()
        if watch is not None:
            self._b.watches.setdefault(self._k(PLANNED_CHANGED), []).append(watch)
        return frozenset(
            k[2] for k in self._b.data if k[0] == self.region and k[1] == "plan" and len(k) == 3
        )

    async def read_plan(
        self, topic: str, watch: Callable[[], None] | None = None
    ) -> Versioned[TopicPlan] | None:
        key = self._k("plan", topic)
        e = self._get(key)
        if watch is not None:
            # Keyed by the record: creating, writing or deleting it (or the topic) fires it.
            self._b.watches.setdefault(key, []).append(watch)
        return None if e is None else Versioned(e.value, Version(e.version))

    async def write_plan(self, topic: str, plan: TopicPlan, version: Version) -> Version:
        key = self._k("plan", topic)
        if self._get(self._k("topic", topic)) is None:
            raise MetadataError(f"topic {topic!r} does not exist")
        if version == NEW_VERSION or (version == ANY_VERSION and self._get(key) is None):
            created = Version(self._create(key, plan).version)
            self._b.fire(self._k(PLANNED_CHANGED))
            return created
        return Version(self._set(key, plan, version, MetadataError(f"topic {topic!r} has no plan")))

    async def delete_plan(self, topic: str, version: Version) -> None:
        self._delete(self._k("plan", topic), version, MetadataError(f"topic {topic!r} has no plan"))
        self._b.fire(self._k(PLANNED_CHANGED))
