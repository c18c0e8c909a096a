"""Topics' plans on ZooKeeper (``topics/<T>/plan``), and the ``planned/`` index of the
topics that have one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from hedwig.errors import (
    BadVersionError,
    MetadataError,
)
from hedwig.metadata.layout import Layout
from hedwig.metadata.plans import TopicPlan
from hedwig.metadata.records import (
    ANY_VERSION,
    NEW_VERSION,
    Version,
    Versioned,
)
from hedwig.metadata.zookeeper.client import NodeExists, NoNode, Op, ZkClient
from hedwig.metadata.zookeeper.versions import zk_version

# The data of the ``planned`` index once it lists every plan (see ``ZkPlans``).
INDEXED = b"indexed"
# Topics looked at together while indexing the plans of a region written before the index.
_INDEX_BATCH = 500
# Tries of a plan's creation when its mark goes meanwhile (a deletion of the plan racing it).
_MARK_TRIES = 5


class ZkPlans:
    """Plans live under their topic (``topics/<T>/plan``) and each planned topic is also
    marked in ``planned/<T>``, so hubs learn which topics have a plan from one watched list
    instead of a read and a watch per topic (most topics have none).

    The rule kept: a plan exists only while its mark does. A creation marks the topic first
    and creates the plan in one transaction with a check that the mark is still there; a
    deletion removes both in one transaction. A mark without a plan (a deletion cut short)
    costs a read; the reverse would hide the plan, and cannot happen.

    A region written before the index existed has plans without marks: the first
    ``planned_topics`` of a store marks them (once; the index's data says it is done)."""

    def __init__(self, zk: ZkClient, layout: Layout) -> None:
        self._zk = zk
        self._layout = layout
        self._indexed = False

    async def planned_topics(self, watch: Callable[[], None] | None = None) -> frozenset[str]:
        if not self._indexed:
            await self._index()
            self._indexed = True
        path = self._layout.planned
        if watch is None:
            names = await self._zk.children(path)
        else:
            names = await self._zk.children_watched(path, self._zk.one_shot(watch))
        return frozenset(Layout.name_of(n) for n in names)

    async def _index(self) -> None:
        """Mark every topic that has a plan, unless the index says it was done."""
        path = self._layout.planned
        got = await self._zk.get_or_none(path)
        if got is not None and got[0] == INDEXED:
            return
        if got is None:
            with contextlib.suppress(NodeExists):
                await self._zk.create(path, b"", makepath=True)
        try:
            topics = [Layout.name_of(n) for n in await self._zk.children(self._layout.topics)]
        except NoNode:
            topics = []
        for i in range(0, len(topics), _INDEX_BATCH):
            batch = topics[i : i + _INDEX_BATCH]
            found = await asyncio.gather(*(self._zk.exists(self._layout.plan(t)) for t in batch))
            for topic, stat in zip(batch, found, strict=True):
                if stat is not None:
                    await self._mark(topic)
        await self._zk.set(path, INDEXED)

    async def _mark(self, topic: str) -> None:
        with contextlib.suppress(NodeExists):
            await self._zk.create(self._layout.planned_marker(topic), b"", makepath=True)

    async def read_plan(
        self, topic: str, watch: Callable[[], None] | None = None
    ) -> Versioned[TopicPlan] | None:
        path = self._layout.plan(topic)
        if watch is None:
            got = await self._zk.get_or_none(path)
        else:
            # A data watch when the record exists, else an exists watch (which also fires on
            # creation); whichever is set fires once.
            fire = self._zk.one_shot(watch)
            got = await self._zk.get_watched(path, fire)
            if got is None and await self._zk.exists_watched(path, fire) is not None:
                got = await self._zk.get_watched(path, fire)  # created meanwhile
        if got is None:
            return None
        return Versioned(TopicPlan.from_json(got[0]), Version(got[1].version))

    async def write_plan(self, topic: str, plan: TopicPlan, version: Version) -> Version:
        path = self._layout.plan(topic)
        if version in (NEW_VERSION, ANY_VERSION):
            created = await self._create(topic, plan)
            if created is not None:
                return created
            if version == NEW_VERSION:
                raise BadVersionError.at(path, version)
        try:
            stat = await self._zk.set(path, plan.to_json(), zk_version(version))
        except NoNode as exc:
            raise MetadataError(f"topic {topic!r} has no plan") from exc
        return Version(stat.version)

    async def _create(self, topic: str, plan: TopicPlan) -> Version | None:
        """Create the plan (``None``: there is one already)."""
        path, marker = self._layout.plan(topic), self._layout.planned_marker(topic)
        for _ in range(_MARK_TRIES):
            if await self._zk.exists(self._layout.topic(topic)) is None:
                raise MetadataError(f"topic {topic!r} does not exist")
            await self._mark(topic)
            check, create = await self._zk.transaction(
                [Op("check", marker), Op("create", path, value=plan.to_json())]
            )
            if check is None and create is None:
                return Version(0)
            if isinstance(create, NodeExists):
                return None
            if isinstance(create, NoNode):
                raise MetadataError(f"topic {topic!r} does not exist")
            if not isinstance(check, NoNode):
                raise check or create or MetadataError(f"creating {path} failed")
            # The mark went between our marking and the transaction: mark again.
        raise MetadataError(f"topic {topic!r}: its plan is being created and deleted at once")

    async def delete_plan(self, topic: str, version: Version) -> None:
        path = self._layout.plan(topic)
        plan, mark = await self._zk.transaction(
            [
                Op("delete", path, zk_version(version)),
                Op("delete", self._layout.planned_marker(topic)),
            ]
        )
        if plan is None and mark is None:
            return
        if isinstance(plan, NoNode):
            raise MetadataError(f"topic {topic!r} has no plan")
        if isinstance(plan, BadVersionError):
            raise plan
        if isinstance(mark, NoNode):  # a plan from before the index, not marked yet
            try:
                await self._zk.delete(path, zk_version(version))
            except NoNode as exc:
                raise MetadataError(f"topic {topic!r} has no plan") from exc
            return
        raise plan or mark or MetadataError(f"deleting {path} failed")
