"""The memory store's namespaces (``NamespaceManager``): policies by name, a watch of the list
firing at any policy's change (as the real stores' watch of their parent does), and each
namespace's count of topics with a marker per topic counted, changed together as one step (the
real stores' transaction)."""

from __future__ import annotations

from collections.abc import Callable

from hedwig.errors import MetadataError, QuotaExceededError
from hedwig.metadata.memory.session import MemorySession
from hedwig.metadata.records import ANY_VERSION, NEW_VERSION, Version, Versioned
from hedwig.metadata.records.namespaces import NamespacePolicy, checked_namespace
from hedwig.protocol.names import encode_name

# The key whose watches fire when any namespace's policy changes; the kinds of key kept here
# (a topic's deletion leaves them alone).
NAMESPACES_CHANGED = "namespaces-changed"
KINDS = ("namespace", "ns-count", "ns-topic")


class MemoryNamespaces(MemorySession):
    async def list_namespaces(
        self, watch: Callable[[], None] | None = None
    ) -> dict[str, Versioned[NamespacePolicy]]:
        self._check()
        out = {
            key[2]: Versioned(e.value, Version(e.version))
            for key, e in self._b.data.items()
            if key[:2] == (self.region, "namespace")
        }
        if watch is not None:
            self._b.watches.setdefault(self._k(NAMESPACES_CHANGED), []).append(watch)
        return out

    async def read_namespace(self, name: str) -> Versioned[NamespacePolicy] | None:
        e = self._get(self._k("namespace", checked_namespace(name)))
        return None if e is None else Versioned(e.value, Version(e.version))

    async def write_namespace(
        self, name: str, policy: NamespacePolicy, version: Version
    ) -> Version:
        key = self._k("namespace", checked_namespace(name))
        if version == NEW_VERSION or (version == ANY_VERSION and self._get(key) is None):
            got = Version(self._create(key, policy).version)
        else:
            missing = MetadataError(f"no namespace {name!r}")
            got = Version(self._set(key, policy, version, missing))
        self._b.fire(self._k(NAMESPACES_CHANGED))
        return got

    async def delete_namespace(self, name: str, version: Version) -> None:
        key = self._k("namespace", checked_namespace(name))
        self._delete(key, version, MetadataError(f"no namespace {name!r}"))
        self._b.fire(self._k(NAMESPACES_CHANGED))

    async def topic_count(self, name: str) -> int:
        e = self._get(self._k("ns-count", checked_namespace(name)))
        return 0 if e is None else int(e.value)

    async def count_topic(self, name: str, topic: str, limit: int | None) -> int:
        count = await self.topic_count(name)
        marker = self._k("ns-topic", name, encode_name(topic))
        if self._get(marker) is not None:
            return count
        if limit is not None and count >= limit:
            raise QuotaExceededError.of(name, "max_topics", limit, f"it holds {limit} topics")
        self._put_count(name, count + 1)
        self._create(marker, b"")
        return count + 1

    async def uncount_topic(self, name: str, topic: str) -> None:
        marker = self._k("ns-topic", checked_namespace(name), encode_name(topic))
        if self._get(marker) is None:
            return
        self._delete(marker, ANY_VERSION, MetadataError(f"{topic!r} is not counted"))
        self._put_count(name, max(0, await self.topic_count(name) - 1))

    def _put_count(self, name: str, count: int) -> None:
        key = self._k("ns-count", name)
        if self._get(key) is None:
            self._create(key, count)
        else:
            self._set(key, count, ANY_VERSION, MetadataError(f"no count of {name!r}"))
