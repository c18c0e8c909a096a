"""A topic's ledger list on ZooKeeper (``topics/<T>/ledgers``), written by compare-and-set,
and the log's first and next ledgers made with it in one ``multi`` each.
"""

from __future__ import annotations

from collections.abc import Sequence

from msgspec.structs import replace

from hedwig.errors import (
    BadVersionError,
    NoTopicPersistenceInfoError,
)
from hedwig.metadata.layout import Layout
from hedwig.metadata.records import (
    NEW_VERSION,
    LedgerMetadata,
    LedgerRanges,
    Version,
    Versioned,
)
from hedwig.metadata.topic_logs import first_ranges, next_ranges, start_in_steps
from hedwig.metadata.zookeeper.client import NodeExists, NoNode, Op, ZkClient
from hedwig.metadata.zookeeper.ledgers import ZkLedgers
from hedwig.metadata.zookeeper.versions import zk_version


class ZkPersistence:
    def __init__(self, zk: ZkClient, layout: Layout, ledgers: ZkLedgers) -> None:
        self._zk = zk
        self._layout = layout
        self._ledgers = ledgers

    async def start_topic_log(
        self, topic: str, first: LedgerMetadata
    ) -> tuple[Versioned[LedgerMetadata], Version]:
        """One ``multi``: the ledger's id comes from this process's block
        (``ZkLedgers.new_id``), so the record can name it in the same request. Two requests
        (a sequential znode, then the record naming its number) were half of a first
        publish's ZooKeeper requests."""
        lid = await self._ledgers.new_id()
        md = replace(first, ledger_id=lid)
        path = self._layout.persistence(topic)
        made_ledger, made_record = await self._zk.transaction(
            [
                Op("create", self._layout.ledger(lid), value=md.to_json()),
                Op("create", path, value=first_ranges(lid).to_json()),
            ]
        )
        if made_ledger is None and made_record is None:
            return Versioned(md, Version(0)), Version(0)  # a new znode's version
        if isinstance(made_record, NodeExists):
            raise BadVersionError.at(path, NEW_VERSION)
        # The topic's node is gone (deleted meanwhile), or the id was taken (never, unless
        # ids were given twice): as before, in two steps, which make the path if need be.
        return await start_in_steps(self._ledgers, self, topic, first)

    async def create_topic_with_log(
        self, topic: str, first: LedgerMetadata
    ) -> tuple[Versioned[LedgerMetadata], Version] | None:
        """One ``multi``: the topic's znodes (as ``ZkTopics.ensure_topic``), its first ledger
        and the record naming it. A new topic of an owned bundle made three requests."""
        lid = await self._ledgers.new_id()
        md = replace(first, ledger_id=lid)
        layout = self._layout
        made, _, made_ledger, made_record = await self._zk.transaction(
            [
                Op("create", layout.topic(topic)),
                Op("create", layout.subscribers(topic)),
                Op("create", layout.ledger(lid), value=md.to_json()),
                Op("create", layout.persistence(topic), value=first_ranges(lid).to_json()),
            ]
        )
        if made is None and made_ledger is None and made_record is None:
            return Versioned(md, Version(0)), Version(0)  # new znodes' versions
        if isinstance(made, NodeExists):
            return None
        # The region's tree is not there yet, or only the log's records were in the way (a
        # record left by a deletion cut short, an id given twice): in steps, which make the
        # path if need be and settle each race on its own.
        created = False
        for path in (layout.topic(topic), layout.subscribers(topic)):
            try:
                await self._zk.create(path, b"", makepath=True)
                created = True
            except NodeExists:
                pass
        if not created:
            return None
        return await start_in_steps(self._ledgers, self, topic, first)

    async def continue_topic_log(
        self,
        topic: str,
        ranges: Versioned[LedgerRanges],
        closed: Sequence[Versioned[LedgerMetadata]],
        following: LedgerMetadata,
    ) -> tuple[Versioned[LedgerMetadata], Versioned[LedgerRanges]]:
        """One ``multi`` where a take-over made three requests (close, create, record)."""
        lid = await self._ledgers.new_id()
        md = replace(following, ledger_id=lid)
        record = next_ranges(ranges.value, lid)
        path = self._layout.persistence(topic)
        ops = [
            Op(
                "set",
                self._layout.ledger(c.value.ledger_id),
                zk_version(c.version),
                c.value.to_json(),
            )
            for c in closed
        ]
        ops.append(Op("create", self._layout.ledger(lid), value=md.to_json()))
        ops.append(Op("set", path, zk_version(ranges.version), record.to_json()))
        failed = [r for r in await self._zk.transaction(ops) if r is not None]
        if failed:
            raise BadVersionError(
                f"taking over {topic!r}: {failed[0]}", path=path, expected=int(ranges.version)
            )
        # A set adds one to the znode's version; a created znode's is 0.
        return Versioned(md, Version(0)), Versioned(record, Version(int(ranges.version) + 1))

    async def read_topic_persistence_info(self, topic: str) -> Versioned[LedgerRanges] | None:
        got = await self._zk.get_or_none(self._layout.persistence(topic))
        if got is None:
            return None
        return Versioned(LedgerRanges.from_json(got[0]), Version(got[1].version))

    async def write_topic_persistence_info(
        self, topic: str, ranges: LedgerRanges, version: Version
    ) -> Version:
        path = self._layout.persistence(topic)
        if version == NEW_VERSION:
            try:
                _, stat = await self._zk.create(path, ranges.to_json(), makepath=True)
            except NodeExists as exc:
                raise BadVersionError.at(path, version) from exc
            return Version(stat.version)
        try:
            stat = await self._zk.set(path, ranges.to_json(), zk_version(version))
        except NoNode as exc:
            raise NoTopicPersistenceInfoError(topic) from exc
        return Version(stat.version)

    async def delete_topic_persistence_info(self, topic: str, version: Version) -> None:
        try:
            await self._zk.delete(self._layout.persistence(topic), zk_version(version))
        except NoNode as exc:
            raise NoTopicPersistenceInfoError(topic) from exc
