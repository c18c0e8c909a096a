"""Hubs tell the replicas of idle ledgers their last confirmed entry (WRITE_LACS), over the
storage frames between real hubs (in memory), so a take-over after a crash writes nothing
back (the unit-level rules are in ``tests/test_ledger.py``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from hedwig.hub import Hub
from hedwig.ledger.lac_notices import EXPLICIT_LAC_S
from hedwig.ledger.storage import LocalStorage
from hedwig.metadata.memory import MemoryMetadataStore
from tests.memory_region import Region, memory_region


@pytest.fixture
async def region() -> AsyncIterator[Region]:
    async for r in memory_region(3, replication="3/3/2"):
        yield r


class WriteBacks:
    """Counts the recovery write-backs a replica receives."""

    def __init__(self, storage: LocalStorage) -> None:
        self.seen: list[tuple[int, int]] = []
        self._add_entry = storage.add_entry
        storage.add_entry = self.add_entry  # type: ignore[method-assign]

    async def add_entry(
        self, ledger_id: int, entry_id: int, lac: int, payload: bytes, *, recovery: bool = False
    ) -> None:
        if recovery:
            self.seen.append((ledger_id, entry_id))
        await self._add_entry(ledger_id, entry_id, lac, payload, recovery=recovery)


async def test_a_take_over_of_idle_topics_after_a_crash_writes_nothing_back(
    region: Region,
) -> None:
    topics = [f"idle-{i}" for i in range(12)]
    async with region.client() as client:
        for t in topics:
            for i in range(3):
                await client.publish(t, b"%s-%d" % (t.encode(), i))
        victim = region.owner(topics[0])
        mine = [t for t in topics if t in victim.topics.topics]
        survivors = [h for h in region.hubs if h is not victim]
        ledgers = [victim.topics.topics[t].log.ledger_id for t in mine]
        # Each replica learns that entry 2, the last, was confirmed (the adds carried 1).
        async with asyncio.timeout(EXPLICIT_LAC_S + 5):
            while {
                (await h.storage.read_lac(lid, fence=False))[0]
                for h in survivors
                for lid in ledgers
            } != {2}:
                await asyncio.sleep(0.02)
        assert victim.topics.takeover.lac_notices.failed == 0
        write_backs = [WriteBacks(h.storage) for h in survivors]
        crash(region, victim)
        for t in mine:
            assert (await client.publish(t, b"after")).seq == 4
        assert not [w.seen for w in write_backs if w.seen], "recovery wrote entries back"
        for t in mine:
            answer = await client.read(t, 1, max_messages=10)
            values = [m.value for b in answer.batches for m in b.delivered()]
            assert values == [b"%s-%d" % (t.encode(), i) for i in range(3)] + [b"after"]
    region.hubs.remove(victim)
    with contextlib.suppress(Exception):
        await victim.stop()


def crash(region: Region, victim: Hub) -> None:
    """As kill -9 does: its connections drop, it answers nothing, its session ends."""
    region.network.sever(victim.address, refuse=True)
    victim.loops.stop()
    assert isinstance(victim.store, MemoryMetadataStore)
    victim.store.expire()
