"""The topic catalog on ZooKeeper: a topic exists once its znode ``topics/<T>`` does (its
data: the topic's configuration), with its subscriber root; region defaults in ``defaults``.
"""

from __future__ import annotations

import contextlib

from hedwig.errors import (
    BadVersionError,
    MetadataError,
)
from hedwig.metadata.layout import Layout
from hedwig.metadata.records import (
    NEW_VERSION,
    TopicConfig,
    Version,
    Versioned,
)
from hedwig.metadata.zookeeper.client import NodeExists, NoNode, ZkClient
from hedwig.metadata.zookeeper.versions import zk_version


class ZkTopics:
    def __init__(self, zk: ZkClient, layout: Layout) -> None:
        self._zk = zk
        self._layout = layout

    async def ensure_topic(self, topic: str) -> bool:
        created = True
        for path in (self._layout.topic(topic), self._layout.subscribers(topic)):
            try:
                await self._zk.create(path, b"", makepath=True)
            except NodeExists:
                created = False
        return created

    async def topic_exists(self, topic: str) -> bool:
        # A read, not an ``exists``: reads of a turn go together in one ``multiRead`` (a
        # wave of claims asks whether each topic exists, one request each before), and a
        # topic's data is its configuration, a few bytes.
        return await self._zk.get_or_none(self._layout.topic(topic)) is not None

    async def read_topic_config(self, topic: str) -> Versioned[TopicConfig] | None:
        got = await self._zk.get_or_none(self._layout.topic(topic))
        if got is None:
            return None
        return Versioned(TopicConfig.from_json(got[0]), Version(got[1].version))

    async def write_topic_config(
        self, topic: str, config: TopicConfig, version: Version
    ) -> Version:
        path = self._layout.topic(topic)
        if version == NEW_VERSION:
            try:
                _, stat = await self._zk.create(path, config.to_json(), makepath=True)
            except NodeExists as exc:
                raise BadVersionError.at(path, version) from exc
            await self.ensure_topic(topic)
            return Version(stat.version)
        try:
            stat = await self._zk.set(path, config.to_json(), zk_version(version))
        except NoNode as exc:
            raise MetadataError(f"topic {topic!r} does not exist") from exc
        return Version(stat.version)

    async def list_topics(self) -> list[str]:
        try:
            names = await self._zk.children(self._layout.topics)
        except NoNode:
            return []
        return sorted(Layout.name_of(n) for n in names)

    async def delete_topic(self, topic: str) -> None:
        # Its mark in the index of planned topics first: a mark left by a deletion cut short
        # only costs hubs a read of a plan that is not there, while a plan left without its
        # mark would be ignored by them. (A plan written meanwhile marks the topic again.)
        with contextlib.suppress(NoNode):
            await self._zk.delete(self._layout.planned_marker(topic))
        await self._zk.delete_recursive(self._layout.topic(topic))

    async def read_region_defaults(self) -> TopicConfig:
        got = await self._zk.get_or_none(self._layout.defaults)
        return TopicConfig.from_json(got[0]) if got else TopicConfig()

    async def write_region_defaults(self, config: TopicConfig) -> None:
        try:
            await self._zk.set(self._layout.defaults, config.to_json())
        except NoNode:
            await self._zk.create(self._layout.defaults, config.to_json(), makepath=True)
