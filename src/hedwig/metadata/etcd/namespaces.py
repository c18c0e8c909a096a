"""Namespaces on etcd: a policy each under ``namespaces/<tenant%2Fnamespace>``, listed in one
range read and watched as one prefix from its revision (as the ACL entries are); and each
namespace's count of topics, ``namespace-counts/<tenant%2Fnamespace>`` (the count in decimal),
with a marker per topic counted, ``namespace-topics/<tenant%2Fnamespace>/<T>``.

Counting a topic is one transaction: the marker put while it is missing and the count put while
it is at the revision read (or missing, with the namespace's first topic). Two hubs counting at
once cannot both win: the one that lost reads again and decides again, so the count stops
exactly at the limit.
"""

from __future__ import annotations

from collections.abc import Callable

from hedwig.errors import MetadataError, QuotaExceededError
from hedwig.metadata.etcd.client import EtcdClient
from hedwig.metadata.etcd.keys import Keys, create_key, delete_key, set_key
from hedwig.metadata.etcd.kv import Item, delete
from hedwig.metadata.etcd.wire import get, missing, modified_at, put
from hedwig.metadata.records import ANY_VERSION, NEW_VERSION, Version, Versioned
from hedwig.metadata.records.namespaces import NamespacePolicy, checked_namespace
from hedwig.protocol.names import encode_name

# Rounds of a count lost to another writer before giving up (each round one hub wins).
MAX_ROUNDS = 1000


class EtcdNamespaces:
    def __init__(self, etcd: EtcdClient, keys: Keys) -> None:
        self._etcd = etcd
        self._keys = keys

    def _policy(self, name: str) -> bytes:
        return self._keys.family("namespaces") + encode_name(checked_namespace(name)).encode()

    def _count_key(self, name: str) -> bytes:
        return self._keys.family("namespace-counts") + encode_name(checked_namespace(name)).encode()

    def _marker(self, name: str, topic: str) -> bytes:
        ns = encode_name(checked_namespace(name))
        return self._keys.family("namespace-topics") + f"{ns}/{encode_name(topic)}".encode()

    async def list_namespaces(
        self, watch: Callable[[], None] | None = None
    ) -> dict[str, Versioned[NamespacePolicy]]:
        prefix = self._keys.family("namespaces")
        items, revision = await self._etcd.range(prefix)
        if watch is not None:
            await self._etcd.watch_once(prefix, revision, watch, prefix=True)
        return {
            Keys.name_of(i.key): Versioned(NamespacePolicy.from_json(i.value), Version(i.mod))
            for i in items
        }

    async def read_namespace(self, name: str) -> Versioned[NamespacePolicy] | None:
        got = await self._etcd.get(self._policy(name))
        if got is None:
            return None
        return Versioned(NamespacePolicy.from_json(got.value), Version(got.mod))

    async def write_namespace(
        self, name: str, policy: NamespacePolicy, version: Version
    ) -> Version:
        key = self._policy(name)
        if version == NEW_VERSION:
            return await create_key(self._etcd, key, policy.to_json())
        if version == ANY_VERSION:
            res = await self._etcd.txn([], [put(key, policy.to_json())])
            return Version(res.revision)
        try:
            return await set_key(self._etcd, key, policy.to_json(), version)
        except LookupError as exc:
            raise MetadataError(f"no namespace {name!r}") from exc

    async def delete_namespace(self, name: str, version: Version) -> None:
        try:
            await delete_key(self._etcd, self._policy(name), version)
        except LookupError as exc:
            raise MetadataError(f"no namespace {name!r}") from exc

    async def topic_count(self, name: str) -> int:
        return _number(await self._etcd.get(self._count_key(name)), name)

    async def count_topic(self, name: str, topic: str, limit: int | None) -> int:
        count_key, marker = self._count_key(name), self._marker(name, topic)
        for _ in range(MAX_ROUNDS):
            got, counted = (await self._etcd.txn((), (get(count_key), get(marker)))).reads
            count = _number(got, name)
            if counted is not None:
                return count
            if limit is not None and count >= limit:
                raise QuotaExceededError.of(name, "max_topics", limit, f"it holds {limit} topics")
            guard = missing(count_key) if got is None else modified_at(count_key, got.mod)
            res = await self._etcd.txn(
                [guard, missing(marker)],
                [put(count_key, str(count + 1).encode()), put(marker, b"")],
            )
            if res.succeeded:
                return count + 1
            # Another hub counted first (this topic, or another: the count moved): again.
        raise MetadataError(f"could not count topic {topic!r} in {name!r}: too much contention")

    async def uncount_topic(self, name: str, topic: str) -> None:
        count_key, marker = self._count_key(name), self._marker(name, topic)
        for _ in range(MAX_ROUNDS):
            got, counted = (await self._etcd.txn((), (get(count_key), get(marker)))).reads
            if got is None or counted is None:
                return
            value = str(max(0, _number(got, name) - 1)).encode()
            res = await self._etcd.txn(
                [modified_at(count_key, got.mod), modified_at(marker, counted.mod)],
                [put(count_key, value), delete(marker)],
            )
            if res.succeeded:
                return
        raise MetadataError(f"could not uncount topic {topic!r} in {name!r}: too much contention")


def _number(item: Item | None, name: str) -> int:
    if item is None:
        return 0
    try:
        return int(item.value.decode() or "0")
    except (UnicodeDecodeError, ValueError) as exc:
        raise MetadataError(f"corrupt count of namespace {name!r}: {item.value[:32]!r}") from exc
