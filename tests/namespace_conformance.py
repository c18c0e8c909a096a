"""The namespaces part of the conformance suite (``NamespaceManager``): policies by name,
compare-and-set and watched; each namespace's count of topics, a topic counted once however
often it is counted, stopping exactly at the limit when two stores count at once, and lowered
when a topic is uncounted. Every store's test class takes it with ``MetadataConformance``."""

from __future__ import annotations

import asyncio

import pytest

from hedwig.errors import BadVersionError, InvalidTopicError, MetadataError, QuotaExceededError
from hedwig.metadata import ANY_VERSION, NEW_VERSION, MetadataStore, TopicConfig
from hedwig.metadata.records.namespaces import NamespacePolicy

POLICY = NamespacePolicy(topics=TopicConfig(retention_ms=60_000), max_topics=3)


class NamespaceConformance:
    async def test_namespace_policy_cas_and_watch(
        self, store: MetadataStore, other: MetadataStore
    ) -> None:
        fired = asyncio.Event()
        assert await other.namespaces.list_namespaces(watch=fired.set) == {}
        assert await other.namespaces.read_namespace("acme/web") is None
        v = await store.namespaces.write_namespace("acme/web", POLICY, NEW_VERSION)
        await asyncio.wait_for(fired.wait(), 10)
        with pytest.raises(BadVersionError):
            await other.namespaces.write_namespace("acme/web", POLICY, NEW_VERSION)
        got = await other.namespaces.read_namespace("acme/web")
        assert got is not None and got.value == POLICY and got.version == v
        fired.clear()
        listed = await other.namespaces.list_namespaces(watch=fired.set)
        assert {n: p.value for n, p in listed.items()} == {"acme/web": POLICY}
        changed = NamespacePolicy(max_topics=5, auto_create=False)
        v2 = await store.namespaces.write_namespace("acme/web", changed, v)
        await asyncio.wait_for(fired.wait(), 10)
        with pytest.raises(BadVersionError):
            await other.namespaces.write_namespace("acme/web", POLICY, v)
        v3 = await other.namespaces.write_namespace("acme/web", POLICY, ANY_VERSION)
        assert v3 != v2
        fired.clear()
        await other.namespaces.list_namespaces(watch=fired.set)
        with pytest.raises(BadVersionError):
            await store.namespaces.delete_namespace("acme/web", v2)
        await store.namespaces.delete_namespace("acme/web", v3)
        await asyncio.wait_for(fired.wait(), 10)
        assert await other.namespaces.list_namespaces() == {}
        with pytest.raises(MetadataError):
            await store.namespaces.delete_namespace("acme/web", ANY_VERSION)
        # ANY_VERSION creates as well.
        await store.namespaces.write_namespace("acme/jobs", POLICY, ANY_VERSION)
        assert list(await other.namespaces.list_namespaces()) == ["acme/jobs"]

    @pytest.mark.parametrize("name", ["acme", "acme/web/x", "../x", "acme/", "a b/c", "é/x"])
    async def test_a_namespace_name_is_checked(self, store: MetadataStore, name: str) -> None:
        with pytest.raises(InvalidTopicError):
            await store.namespaces.write_namespace(name, POLICY, NEW_VERSION)
        with pytest.raises(InvalidTopicError):
            await store.namespaces.count_topic(name, "t", None)

    async def test_a_namespace_named_as_a_topic_outlives_the_topic(
        self, store: MetadataStore
    ) -> None:
        await store.namespaces.write_namespace("acme/web", POLICY, NEW_VERSION)
        await store.namespaces.count_topic("acme/web", "acme/web", None)
        assert await store.topics.ensure_topic("acme/web")
        await store.topics.delete_topic("acme/web")
        assert await store.namespaces.read_namespace("acme/web") is not None
        assert await store.namespaces.topic_count("acme/web") == 1

    async def test_topics_are_counted_once_and_uncounted(
        self, store: MetadataStore, other: MetadataStore
    ) -> None:
        ns = "acme/web"
        assert await store.namespaces.topic_count(ns) == 0
        assert await store.namespaces.count_topic(ns, "acme/web/a", 2) == 1
        assert await other.namespaces.count_topic(ns, "acme/web/a", 2) == 1  # counted already
        assert await other.namespaces.count_topic(ns, "acme/web/b", 2) == 2
        # At the limit: a topic counted already still is, a new one is refused.
        assert await store.namespaces.count_topic(ns, "acme/web/b", 2) == 2
        with pytest.raises(QuotaExceededError) as refused:
            await store.namespaces.count_topic(ns, "acme/web/c", 2)
        err = refused.value
        assert (err.namespace, err.quota, err.limit) == (ns, "max_topics", 2)
        assert not err.retriable and "max_topics" in str(err) and ns in str(err)
        assert await other.namespaces.topic_count(ns) == 2
        await other.namespaces.uncount_topic(ns, "acme/web/a")
        await other.namespaces.uncount_topic(ns, "acme/web/a")  # not counted: nothing
        assert await store.namespaces.topic_count(ns) == 1
        assert await store.namespaces.count_topic(ns, "acme/web/c", 2) == 2
        assert await store.namespaces.topic_count("acme/jobs") == 0
        # Names a topic can have are markers too.
        assert await store.namespaces.count_topic("acme/odd", "acme/odd/../x y/ü", None) == 1
        await store.namespaces.uncount_topic("acme/odd", "acme/odd/../x y/ü")
        assert await store.namespaces.topic_count("acme/odd") == 0

    async def test_counting_at_once_stops_exactly_at_the_limit(
        self, store: MetadataStore, other: MetadataStore
    ) -> None:
        ns, limit = "acme/race", 7

        async def count(s: MetadataStore, i: int) -> bool:
            try:
                await s.namespaces.count_topic(ns, f"acme/race/t{i}", limit)
            except QuotaExceededError:
                return False
            return True

        made = await asyncio.gather(*(count((store, other)[i % 2], i) for i in range(20)))
        assert sum(made) == limit
        assert await store.namespaces.topic_count(ns) == limit
