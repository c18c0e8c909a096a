"""Topics' plans on etcd (``hedwig.metadata.plans``): a key per spread topic, compare-and-set on
its mod revision; deleting the topic deletes it (and so fires its watch).

Hubs learn which topics have a plan from one range read of the plans' prefix (keys only) and
one watch of it (``planned_topics``), and read and watch the plans of those topics alone. The
per-topic watches share one etcd watch of the prefix, as owner watches do: a watch each was a
request and an answer on the watch stream per topic, and a watcher in etcd per topic for good.
"""

from __future__ import annotations

from collections.abc import Callable

from hedwig.errors import MetadataError
from hedwig.metadata.etcd.client import EtcdClient
from hedwig.metadata.etcd.keys import Keys, delete_key, put_beside_topic, set_key
from hedwig.metadata.etcd.watches import PrefixWatch
from hedwig.metadata.etcd.wire import get
from hedwig.metadata.plans import TopicPlan
from hedwig.metadata.records import ANY_VERSION, NEW_VERSION, Version, Versioned


class EtcdPlans:
    """Topics' plans (``hedwig.metadata.plans``): a key per spread topic, compare-and-set on
    its mod revision; deleting the topic deletes it (and so fires its watch).

    Hubs learn which topics have a plan from one range read of the plans' prefix (keys only)
    and one watch of it (``planned_topics``), and read and watch the plans of those topics
    alone. The per-topic watches share one etcd watch of the prefix, as owner watches do: a
    watch each was a request and an answer on the watch stream per topic, and a watcher in
    etcd per topic for good."""

    def __init__(self, etcd: EtcdClient, keys: Keys) -> None:
        self._etcd = etcd
        self._keys = keys
        self.watches = PrefixWatch(etcd.watches, keys.family("plans"), etcd.watch_from)

    async def planned_topics(self, watch: Callable[[], None] | None = None) -> frozenset[str]:
        prefix = self._keys.family("plans")
        items, revision = await self._etcd.range(prefix, keys_only=True)
        if watch is not None:
            # From the read's revision: a plan created or deleted since fires it.
            self._etcd.watch_from(prefix, revision, watch, prefix=True)
        return frozenset(Keys.name_of(i.key) for i in items)

    async def read_plan(
        self, topic: str, watch: Callable[[], None] | None = None
    ) -> Versioned[TopicPlan] | None:
        key = self._keys.plan(topic)
        # Read in a transaction for its header revision: a watch from there misses nothing,
        # and fires on creation too when there is no plan yet.
        res = await self._etcd.txn([], [get(key)])
        got = res.reads[0]
        if watch is not None:
            self.watches.add(key, res.revision, watch)
        return None if got is None else Versioned(TopicPlan.from_json(got.value), Version(got.mod))

    async def write_plan(self, topic: str, plan: TopicPlan, version: Version) -> Version:
        key = self._keys.plan(topic)
        if version in (NEW_VERSION, ANY_VERSION):
            return await put_beside_topic(
                self._etcd, topic, self._keys.topic(topic), key, plan.to_json(), version
            )
        try:
            return await set_key(self._etcd, key, plan.to_json(), version)
        except LookupError as exc:
            raise MetadataError(f"topic {topic!r} has no plan") from exc

    async def delete_plan(self, topic: str, version: Version) -> None:
        try:
            await delete_key(self._etcd, self._keys.plan(topic), version)
        except LookupError as exc:
            raise MetadataError(f"topic {topic!r} has no plan") from exc
