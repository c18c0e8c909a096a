"""Ledger metadata on ZooKeeper (``ledgers/L<id>``), and ledger ids handed out in blocks."""

from __future__ import annotations

import asyncio

from msgspec.structs import replace

from hedwig.errors import (
    BadVersionError,
    NoLedgerMetadataError,
)
from hedwig.metadata.id_blocks import IdBlocks
from hedwig.metadata.layout import Layout
from hedwig.metadata.records import (
    LedgerMetadata,
    LedgerRanges,
    Version,
    Versioned,
)
from hedwig.metadata.topic_logs import holds_ledger
from hedwig.metadata.zookeeper.client import NodeExists, NoNode, ZkClient
from hedwig.metadata.zookeeper.versions import zk_version

# Ledger listings at least this long are parsed off the event loop.
LEDGER_IDS_ON_THREAD = 50_000


def _ledger_ids(names: list[str]) -> list[int]:
    return sorted(map(Layout.ledger_id_of, names))


# Ledger ids a hub takes at once from ``ledger-ids``.
LEDGER_ID_BLOCK = 1024
# The first block's first id: past every id the earlier scheme (each ledger a sequential
# znode, numbered by a signed 32-bit counter) can have given or will give, so hubs of both
# schemes side by side (a rolling upgrade) never give one id twice.
FIRST_BLOCK_ID = 1 << 31


class ZkLedgers:
    """Ledger metadata, a znode per ledger, ids handed out in blocks from ``ledger-ids``.

    A ledger id must be unique in the region for good (a replica may still hold a deleted
    ledger's entries). Each id was a sequential znode's number, known only once the znode was
    made, so a topic's first ledger and the record naming it took two requests. Now the
    ``ledger-ids`` znode holds the first id not yet taken and a hub takes ``LEDGER_ID_BLOCK``
    of them with one compare-and-set (as on etcd); ids it does not use are never used.
    """

    def __init__(self, zk: ZkClient, layout: Layout) -> None:
        self._zk = zk
        self._layout = layout
        self._ids = IdBlocks(self._take_block)

    async def new_id(self) -> int:
        """A ledger id no other ledger of the region has had or will have."""
        return await self._ids.next()

    async def _take_block(self) -> tuple[int, int]:
        # A write whose answer was lost (the connection broke) may have been applied: the
        # next try reads the znode again and takes the block after it. Ids are skipped,
        # never given twice.
        path = self._layout.ledger_ids
        while True:
            got = await self._zk.get_or_none(path)
            first = FIRST_BLOCK_ID if got is None else int(got[0])
            end = first + LEDGER_ID_BLOCK
            try:
                if got is None:
                    await self._zk.create(path, str(end).encode(), makepath=True)
                else:
                    await self._zk.set(path, str(end).encode(), got[1].version)
            except (NodeExists, BadVersionError):
                continue  # another hub took one first
            return first, end

    async def create_ledger(self, metadata: LedgerMetadata) -> Versioned[LedgerMetadata]:
        while True:
            md = replace(metadata, ledger_id=await self.new_id())
            try:
                _, stat = await self._zk.create(
                    self._layout.ledger(md.ledger_id), md.to_json(), makepath=True
                )
            except NodeExists:
                continue  # only if an id was given twice: never reuse it
            return Versioned(md, Version(stat.version))

    async def read_ledger(self, ledger_id: int) -> Versioned[LedgerMetadata] | None:
        got = await self._zk.get_or_none(self._layout.ledger(ledger_id))
        if got is None:
            return None
        md = LedgerMetadata.from_json(got[0], ledger_id)
        return Versioned(md, Version(got[1].version))

    async def write_ledger(self, metadata: LedgerMetadata, version: Version) -> Version:
        try:
            stat = await self._zk.set(
                self._layout.ledger(metadata.ledger_id), metadata.to_json(), zk_version(version)
            )
        except NoNode as exc:
            raise NoLedgerMetadataError(str(metadata.ledger_id)) from exc
        return Version(stat.version)

    async def delete_ledger(self, ledger_id: int, version: Version) -> None:
        try:
            await self._zk.delete(self._layout.ledger(ledger_id), zk_version(version))
        except NoNode as exc:
            raise NoLedgerMetadataError(str(ledger_id)) from exc

    async def list_ledgers(self) -> list[int]:
        try:
            names = await self._zk.children(self._layout.ledgers)
        except NoNode:
            return []
        if len(names) < LEDGER_IDS_ON_THREAD:
            return _ledger_ids(names)
        # A region's every ledger (1.3 million after a failover at a million topics): parsed
        # and sorted on the loop, the hub stood still for 2 s. On a thread, the loop keeps
        # its turns (the interpreter switches every few milliseconds).
        return await asyncio.get_running_loop().run_in_executor(None, _ledger_ids, names)

    async def left_over(self, ledger_id: int, topic: str) -> bool:
        # The ledger's czxid never changes, so two reads are as good as one: what is
        # decided on is the record as read, last written at its mzxid.
        ledger = await self._zk.exists(self._layout.ledger(ledger_id))
        record = await self._zk.get_or_none(self._layout.persistence(topic))
        if ledger is None or record is None or record[1].mzxid <= ledger.czxid:
            return False
        return not holds_ledger(LedgerRanges.from_json(record[0]), ledger_id)
