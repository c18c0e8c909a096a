"""Namespaces on ZooKeeper: a policy each under ``namespaces/<tenant%2Fnamespace>``, read and
watched together (as the ACL entries are); and each namespace's count of topics,
``namespace-topics/<tenant%2Fnamespace>`` (its data the count in decimal) with a marker child
per topic counted.

Counting a topic is one ``multi``: the marker created and the count set at the version read
(or created, with the namespace's first topic). Two hubs counting at once cannot both win: the
one that lost reads again and decides again, so the count stops exactly at the limit. A failed
operation's own error is the one that is not ``RolledBack``.
"""

from __future__ import annotations

from collections.abc import Callable

from hedwig.errors import BadVersionError, MetadataError, QuotaExceededError
from hedwig.metadata.layout import Layout
from hedwig.metadata.records import ANY_VERSION, NEW_VERSION, Version, Versioned
from hedwig.metadata.records.namespaces import NamespacePolicy, checked_namespace
from hedwig.metadata.zookeeper.client import NodeExists, NoNode, Op, RolledBack, ZkClient

# Rounds of a count lost to another writer before giving up (each round one hub wins).
MAX_ROUNDS = 1000


def _failure(results: list[MetadataError | None]) -> MetadataError | None:
    for r in results:
        if r is not None and not isinstance(r, RolledBack):
            return r
    return None


class ZkNamespaces:
    def __init__(self, zk: ZkClient, layout: Layout) -> None:
        self._zk = zk
        self._layout = layout

    async def list_namespaces(
        self, watch: Callable[[], None] | None = None
    ) -> dict[str, Versioned[NamespacePolicy]]:
        parent = self._layout.namespaces
        fire = None if watch is None else self._zk.one_shot(watch)
        try:
            if fire is None:
                names = await self._zk.children(parent)
            else:
                names = await self._zk.children_watched(parent, fire)
        except NoNode:
            await self._zk.ensure_path(parent)
            return await self.list_namespaces(watch)
        out: dict[str, Versioned[NamespacePolicy]] = {}
        for znode in names:
            path = f"{parent}/{znode}"
            got = (
                await self._zk.get_or_none(path)
                if fire is None
                else await self._zk.get_watched(path, fire)
            )
            if got is not None:
                out[Layout.name_of(znode)] = Versioned(
                    NamespacePolicy.from_json(got[0]), Version(got[1].version)
                )
        return out

    async def read_namespace(self, name: str) -> Versioned[NamespacePolicy] | None:
        got = await self._zk.get_or_none(self._layout.namespace(checked_namespace(name)))
        if got is None:
            return None
        return Versioned(NamespacePolicy.from_json(got[0]), Version(got[1].version))

    async def write_namespace(
        self, name: str, policy: NamespacePolicy, version: Version
    ) -> Version:
        path = self._layout.namespace(checked_namespace(name))
        if version in (NEW_VERSION, ANY_VERSION):
            try:
                _, stat = await self._zk.create(path, policy.to_json(), makepath=True)
                return Version(stat.version)
            except NodeExists as exc:
                if version == NEW_VERSION:
                    raise BadVersionError.at(path, version) from exc
        try:
            stat = await self._zk.set(
                path, policy.to_json(), -1 if version == ANY_VERSION else int(version)
            )
        except NoNode as exc:
            raise MetadataError(f"no namespace {name!r}") from exc
        return Version(stat.version)

    async def delete_namespace(self, name: str, version: Version) -> None:
        path = self._layout.namespace(checked_namespace(name))
        try:
            await self._zk.delete(path, -1 if version == ANY_VERSION else int(version))
        except NoNode as exc:
            raise MetadataError(f"no namespace {name!r}") from exc

    async def _count(self, name: str) -> tuple[int, int | None]:
        """The count and its znode's version (``None``: no topic counted yet)."""
        got = await self._zk.get_or_none(self._layout.namespace_count(checked_namespace(name)))
        if got is None:
            return 0, None
        return _number(got[0], name), got[1].version

    async def topic_count(self, name: str) -> int:
        return (await self._count(name))[0]

    async def count_topic(self, name: str, topic: str, limit: int | None) -> int:
        path = self._layout.namespace_count(checked_namespace(name))
        marker = self._layout.namespace_marker(name, topic)
        for _ in range(MAX_ROUNDS):
            count, version = await self._count(name)
            if version is not None and await self._zk.exists(marker) is not None:
                return count
            if limit is not None and count >= limit:
                raise QuotaExceededError.of(name, "max_topics", limit, f"it holds {limit} topics")
            value = str(count + 1).encode()
            first = (
                Op("create", path, value=value)
                if version is None
                else Op("set", path, version, value=value)
            )
            failed = _failure(await self._zk.transaction([first, Op("create", marker)]))
            if failed is None:
                return count + 1
            if isinstance(failed, NoNode) and version is None:
                await self._zk.ensure_path(self._layout.namespace_topics)
            elif not isinstance(failed, NodeExists | BadVersionError):
                raise failed
            # Another hub counted first (this topic, or another: the count moved): again.
        raise MetadataError(f"could not count topic {topic!r} in {name!r}: too much contention")

    async def uncount_topic(self, name: str, topic: str) -> None:
        path = self._layout.namespace_count(checked_namespace(name))
        marker = self._layout.namespace_marker(name, topic)
        for _ in range(MAX_ROUNDS):
            count, version = await self._count(name)
            if version is None or await self._zk.exists(marker) is None:
                return
            value = str(max(0, count - 1)).encode()
            ops = [Op("set", path, version, value=value), Op("delete", marker)]
            failed = _failure(await self._zk.transaction(ops))
            if failed is None:
                return
            if not isinstance(failed, NoNode | BadVersionError):
                raise failed
        raise MetadataError(f"could not uncount topic {topic!r} in {name!r}: too much contention")


def _number(raw: bytes, name: str) -> int:
    try:
        return int(raw.decode() or "0")
    except (UnicodeDecodeError, ValueError) as exc:
        raise MetadataError(f"corrupt count of namespace {name!r}: {raw[:32]!r}") from exc
