"""Topics' logs on etcd: ledger metadata (a key per ledger, ids handed out in blocks) and the
persistence record that names a topic's ledgers, started and moved on in one transaction each.

A ledger made for a topic and the persistence record naming it go in the same transaction
(``start_topic_log``, ``continue_topic_log``): the ledger's id comes from this process's block
of ids, so the record can name it in the request that creates it. A take-over's three writes
(the recovered ledgers closed, the next one created, the record naming it) are one transaction
guarded by the versions the take-over read; if any changed, nothing is written and the
take-over goes step by step.
"""

from __future__ import annotations

from collections.abc import Sequence

from msgspec.structs import replace

from hedwig.errors import BadVersionError, NoLedgerMetadataError, NoTopicPersistenceInfoError
from hedwig.metadata.etcd.client import EtcdClient
from hedwig.metadata.etcd.keys import Keys, create_key, delete_key, set_key
from hedwig.metadata.etcd.wire import get, missing, modified_at, put
from hedwig.metadata.id_blocks import IdBlocks
from hedwig.metadata.records import NEW_VERSION, LedgerMetadata, LedgerRanges, Version, Versioned
from hedwig.metadata.topic_logs import first_ranges, holds_ledger, next_ranges


class EtcdPersistence:
    def __init__(self, etcd: EtcdClient, keys: Keys, ledgers: EtcdLedgers) -> None:
        self._etcd = etcd
        self._keys = keys
        self._ledgers = ledgers

    async def start_topic_log(
        self, topic: str, first: LedgerMetadata
    ) -> tuple[Versioned[LedgerMetadata], Version]:
        """One transaction: the ledger's id comes from this process's block, so the record
        can name it in the same request."""
        lid = await self._ledgers.new_id()
        md = replace(first, ledger_id=lid)
        key, ledger_key = self._keys.persistence(topic), self._keys.ledger(lid)
        res = await self._etcd.txn(
            [missing(key), missing(ledger_key)],
            [put(ledger_key, md.to_json()), put(key, first_ranges(lid).to_json())],
        )
        if not res.succeeded:
            raise BadVersionError.at(key.decode(), NEW_VERSION)
        return Versioned(md, Version(res.revision)), Version(res.revision)

    async def create_topic_with_log(
        self, topic: str, first: LedgerMetadata
    ) -> tuple[Versioned[LedgerMetadata], Version] | None:
        """One transaction: the topic's key (as ``EtcdTopics.ensure_topic``), its first ledger
        and the record naming it; on failure, whether the topic was in the way, read in it."""
        lid = await self._ledgers.new_id()
        md = replace(first, ledger_id=lid)
        topic_key, key = self._keys.topic(topic), self._keys.persistence(topic)
        ledger_key = self._keys.ledger(lid)
        res = await self._etcd.txn(
            [missing(topic_key), missing(key), missing(ledger_key)],
            [
                put(topic_key, b""),
                put(ledger_key, md.to_json()),
                put(key, first_ranges(lid).to_json()),
            ],
            [get(topic_key)],
        )
        if res.succeeded:
            return Versioned(md, Version(res.revision)), Version(res.revision)
        if res.reads[0] is not None:
            return None
        # Only the log's records were in the way (a record left by a deletion cut short):
        # the topic alone, then its log, which says whether the record is still there.
        made = await self._etcd.txn([missing(topic_key)], [put(topic_key, b"")])
        if not made.succeeded:
            return None
        return await self.start_topic_log(topic, first)

    async def continue_topic_log(
        self,
        topic: str,
        ranges: Versioned[LedgerRanges],
        closed: Sequence[Versioned[LedgerMetadata]],
        following: LedgerMetadata,
    ) -> tuple[Versioned[LedgerMetadata], Versioned[LedgerRanges]]:
        """One transaction where a take-over made three (close, create, record)."""
        lid = await self._ledgers.new_id()
        md = replace(following, ledger_id=lid)
        record = next_ranges(ranges.value, lid)
        key, ledger_key = self._keys.persistence(topic), self._keys.ledger(lid)
        guards = [modified_at(self._keys.ledger(c.value.ledger_id), int(c.version)) for c in closed]
        writes = [put(self._keys.ledger(c.value.ledger_id), c.value.to_json()) for c in closed]
        res = await self._etcd.txn(
            [*guards, modified_at(key, int(ranges.version)), missing(ledger_key)],
            [*writes, put(ledger_key, md.to_json()), put(key, record.to_json())],
        )
        if not res.succeeded:
            raise BadVersionError.at(key.decode(), int(ranges.version))
        return Versioned(md, Version(res.revision)), Versioned(record, Version(res.revision))

    async def read_topic_persistence_info(self, topic: str) -> Versioned[LedgerRanges] | None:
        got = await self._etcd.get(self._keys.persistence(topic))
        return (
            None if got is None else Versioned(LedgerRanges.from_json(got.value), Version(got.mod))
        )

    async def write_topic_persistence_info(
        self, topic: str, ranges: LedgerRanges, version: Version
    ) -> Version:
        key = self._keys.persistence(topic)
        if version == NEW_VERSION:
            return await create_key(self._etcd, key, ranges.to_json())
        try:
            return await set_key(self._etcd, key, ranges.to_json(), version)
        except LookupError as exc:
            raise NoTopicPersistenceInfoError(topic) from exc

    async def delete_topic_persistence_info(self, topic: str, version: Version) -> None:
        try:
            await delete_key(self._etcd, self._keys.persistence(topic), version)
        except LookupError as exc:
            raise NoTopicPersistenceInfoError(topic) from exc


# Ledger ids a hub takes at once from ``ledger-ids``.
LEDGER_ID_BLOCK = 1024


class EtcdLedgers:
    """Ledger metadata, a key per ledger.

    A ledger id must be unique in the region for good (a replica may still hold a deleted
    ledger's entries). Each id used to be the revision of a write of ``ledger-ids``: a store
    write per ledger, and a ledger is made at every claim and take-over. Now the key holds the
    first id not yet taken, and a hub takes ``LEDGER_ID_BLOCK`` of them with one
    compare-and-set; the ids it does not use (it stops) are never used. A key left by the
    revision scheme has an empty value: the block starts after its last write, the highest id
    that scheme gave.
    """

    def __init__(self, etcd: EtcdClient, keys: Keys) -> None:
        self._etcd = etcd
        self._keys = keys
        self._ids = IdBlocks(self._take_block)

    async def new_id(self) -> int:
        """A ledger id no other ledger of the region has had or will have."""
        return await self._ids.next()

    async def _take_block(self) -> tuple[int, int]:
        key = self._keys.ledger_ids
        while True:
            got = (await self._etcd.txn((), (get(key),))).reads[0]
            if got is None:
                first, guard = 1, missing(key)
            else:
                first = int(got.value) if got.value else got.mod + 1
                guard = modified_at(key, got.mod)
            end = first + LEDGER_ID_BLOCK
            if (await self._etcd.txn([guard], [put(key, str(end).encode())])).succeeded:
                return first, end

    async def create_ledger(self, metadata: LedgerMetadata) -> Versioned[LedgerMetadata]:
        lid = await self.new_id()
        md = replace(metadata, ledger_id=lid)
        version = await create_key(self._etcd, self._keys.ledger(lid), md.to_json())
        return Versioned(md, version)

    async def read_ledger(self, ledger_id: int) -> Versioned[LedgerMetadata] | None:
        got = await self._etcd.get(self._keys.ledger(ledger_id))
        if got is None:
            return None
        md = LedgerMetadata.from_json(got.value, ledger_id)
        return Versioned(md, Version(got.mod))

    async def write_ledger(self, metadata: LedgerMetadata, version: Version) -> Version:
        try:
            return await set_key(
                self._etcd, self._keys.ledger(metadata.ledger_id), metadata.to_json(), version
            )
        except LookupError as exc:
            raise NoLedgerMetadataError(str(metadata.ledger_id)) from exc

    async def delete_ledger(self, ledger_id: int, version: Version) -> None:
        try:
            await delete_key(self._etcd, self._keys.ledger(ledger_id), version)
        except LookupError as exc:
            raise NoLedgerMetadataError(str(ledger_id)) from exc

    async def list_ledgers(self) -> list[int]:
        items, _ = await self._etcd.range(self._keys.family("ledgers"), keys_only=True)
        return sorted(int(i.key.decode().rsplit("/", 1)[-1].lstrip("L")) for i in items)

    async def left_over(self, ledger_id: int, topic: str) -> bool:
        # Both in one read: the record's mod revision against the ledger's create revision.
        got = await self._etcd.txn(
            (), (get(self._keys.persistence(topic)), get(self._keys.ledger(ledger_id)))
        )
        record, ledger = got.reads
        if record is None or ledger is None or record.mod <= ledger.create:
            return False
        return not holds_ledger(LedgerRanges.from_json(record.value), ledger_id)
