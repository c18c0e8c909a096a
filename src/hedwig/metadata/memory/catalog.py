"""The memory store's topic catalog (``TopicCatalog``): which topics exist, their
configuration, the region's defaults, and deleting a topic with every record filed under it
(its ledgers' metadata, the ACLs and the namespaces' records excepted, as in the real stores)."""

from __future__ import annotations

from hedwig.errors import MetadataError
from hedwig.metadata.memory.namespaces import KINDS as NAMESPACE_KINDS
from hedwig.metadata.memory.plans import PLANNED_CHANGED
from hedwig.metadata.memory.session import MemorySession
from hedwig.metadata.records import ANY_VERSION, NEW_VERSION, TopicConfig, Version, Versioned


class MemoryCatalog(MemorySession):
    async def ensure_topic(self, topic: str) -> bool:
        if self._get(self._k("topic", topic)) is None:
            self._create(self._k("topic", topic), TopicConfig())
            return True
        return False

    async def topic_exists(self, topic: str) -> bool:
        return self._get(self._k("topic", topic)) is not None

    async def read_topic_config(self, topic: str) -> Versioned[TopicConfig] | None:
        e = self._get(self._k("topic", topic))
        return None if e is None else Versioned(e.value, Version(e.version))

    async def write_topic_config(
        self, topic: str, config: TopicConfig, version: Version
    ) -> Version:
        key = self._k("topic", topic)
        if version == NEW_VERSION:
            return Version(self._create(key, config).version)
        missing = MetadataError(f"topic {topic!r} does not exist")
        return Version(self._set(key, config, version, missing))

    async def list_topics(self) -> list[str]:
        self._check()
        return sorted(k[2] for k in self._b.data if k[:2] == (self.region, "topic"))

    async def delete_topic(self, topic: str) -> None:
        self._check()
        for key in list(self._b.data):
            if (
                key[0] == self.region
                and len(key) >= 3
                and key[1] not in ("ledger", "acl", *NAMESPACE_KINDS)
                and key[2] == topic
            ):
                del self._b.data[key]
                self._b.fire(key)
                if key[1] == "plan":
                    self._b.fire(self._k(PLANNED_CHANGED))

    async def read_region_defaults(self) -> TopicConfig:
        e = self._get(self._k("defaults"))
        return e.value if e is not None else TopicConfig()

    async def write_region_defaults(self, config: TopicConfig) -> None:
        key = self._k("defaults")
        if self._get(key) is None:
            self._create(key, config)
        else:
            self._set(key, config, ANY_VERSION, MetadataError("defaults"))
