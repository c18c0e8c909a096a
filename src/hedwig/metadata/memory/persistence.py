"""The memory store's topic logs (``TopicPersistenceManager``): each topic's ledger list, and
the calls that start a log or continue it with its next ledger.

``continue_topic_log`` checks every version it was given before it writes anything, so it is
all or nothing, as the real stores' single request (a ZooKeeper multi, an etcd transaction).
"""

from __future__ import annotations

from collections.abc import Sequence

from hedwig.errors import BadVersionError, NoTopicPersistenceInfoError
from hedwig.metadata.memory.ledgers import MemoryLedgers
from hedwig.metadata.records import (
    NEW_VERSION,
    LedgerMetadata,
    LedgerRanges,
    TopicConfig,
    Version,
    Versioned,
)
from hedwig.metadata.topic_logs import next_ranges, start_in_steps


class MemoryPersistence(MemoryLedgers):
    async def read_topic_persistence_info(self, topic: str) -> Versioned[LedgerRanges] | None:
        e = self._get(self._k("ledgers", topic))
        return None if e is None else Versioned(e.value, Version(e.version))

    async def write_topic_persistence_info(
        self, topic: str, ranges: LedgerRanges, version: Version
    ) -> Version:
        key = self._k("ledgers", topic)
        if version == NEW_VERSION:
            return Version(self._create(key, ranges).version)
        return Version(self._set(key, ranges, version, NoTopicPersistenceInfoError(topic)))

    async def delete_topic_persistence_info(self, topic: str, version: Version) -> None:
        self._delete(self._k("ledgers", topic), version, NoTopicPersistenceInfoError(topic))

    async def start_topic_log(
        self, topic: str, first: LedgerMetadata
    ) -> tuple[Versioned[LedgerMetadata], Version]:
        return await start_in_steps(self, self, topic, first)

    async def create_topic_with_log(
        self, topic: str, first: LedgerMetadata
    ) -> tuple[Versioned[LedgerMetadata], Version] | None:
        if self._get(self._k("topic", topic)) is not None:
            return None
        self._create(self._k("topic", topic), TopicConfig())
        return await start_in_steps(self, self, topic, first)

    async def continue_topic_log(
        self,
        topic: str,
        ranges: Versioned[LedgerRanges],
        closed: Sequence[Versioned[LedgerMetadata]],
        following: LedgerMetadata,
    ) -> tuple[Versioned[LedgerMetadata], Versioned[LedgerRanges]]:
        # Every version checked before anything is written: all or nothing, as the stores'.
        key = self._k("ledgers", topic)
        expected = [(key, ranges.version)]
        expected += [(self._k("ledger", str(c.value.ledger_id)), c.version) for c in closed]
        for k, version in expected:
            entry = self._get(k)
            if entry is None or entry.version != version:
                raise BadVersionError.at("/".join(k), version)
        for c in closed:
            await self.write_ledger(c.value, c.version)
        created = await self.create_ledger(following)
        record = next_ranges(ranges.value, created.value.ledger_id)
        version = await self.write_topic_persistence_info(topic, record, ranges.version)
        return created, Versioned(record, version)
