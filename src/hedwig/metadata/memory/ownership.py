"""The memory store's topic ownership (``TopicOwnershipManager``): owner records that die
with their session, claims, and watches of them.

A claim reads the record in its way in the claim itself (as etcd's transaction does); a claim
that creates its topic makes the owner record with it and, given a first ledger, the topic's
log too. ``watch_owner`` fires at once if the record is gone or moved past the version the
caller saw (the gap between a read and its watch).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from hedwig.errors import MetadataError, NoTopicOwnerInfoError
from hedwig.metadata.memory.persistence import MemoryPersistence
from hedwig.metadata.records import (
    NEW_VERSION,
    HubInfo,
    LedgerMetadata,
    LedgerRanges,
    TopicClaim,
    TopicConfig,
    Version,
    Versioned,
)
from hedwig.metadata.topic_call import TopicCall
from hedwig.metadata.topic_logs import start_in_steps


class MemoryOwnership(MemoryPersistence):
    async def read_owner_info(self, topic: str) -> Versioned[HubInfo] | None:
        e = self._get(self._k("owner", topic))
        return None if e is None else Versioned(e.value, Version(e.version))

    async def claim_topic(
        self, topic: str, owner: HubInfo, first: LedgerMetadata | None = None
    ) -> TopicClaim:
        held = self._get(self._k("owner", topic))  # read in the claim, as etcd's transaction
        if held is not None:
            return TopicClaim(None, owner=Versioned(held.value, Version(held.version)))
        if (config := self._get(self._k("topic", topic))) is not None:
            version = await self.write_owner_info(topic, owner, NEW_VERSION)
            ranges = await self.read_topic_persistence_info(topic)
            return TopicClaim(
                version,
                config=Versioned(config.value, Version(config.version)),
                ranges=ranges or Versioned(LedgerRanges(), NEW_VERSION),
            )
        self._create(self._k("topic", topic), TopicConfig())
        made = self._create(self._k("owner", topic), owner, ephemeral=True)
        log = None
        if first is not None and self._get(self._k("ledgers", topic)) is None:
            log = await start_in_steps(self, self, topic, first)
        return TopicClaim(Version(made.version), new=True, log=log)

    async def write_owner_info(self, topic: str, owner: HubInfo, version: Version) -> Version:
        key = self._k("owner", topic)
        if version == NEW_VERSION:
            if self._get(self._k("topic", topic)) is None:
                raise MetadataError(f"topic {topic!r} does not exist")
            return Version(self._create(key, owner, ephemeral=True).version)
        return Version(self._set(key, owner, version, NoTopicOwnerInfoError(topic)))

    async def delete_owner_info(self, topic: str, version: Version) -> None:
        self._delete(self._k("owner", topic), version, NoTopicOwnerInfoError(topic))

    def watch_owner(
        self, topic: str, callback: Callable[[str], None], version: Version | None = None
    ) -> None:
        call = TopicCall(callback, topic)
        key = self._k("owner", topic)
        e = self._b.data.get(key)
        if e is not None and version is not None and e.version != version:
            asyncio.get_running_loop().call_soon(call)  # changed since the caller saw it
            return
        if key not in self._b.data:
            asyncio.get_running_loop().call_soon(call)
            return
        self._b.watches.setdefault(key, []).append(call)
