"""Duplicate detection: exact answers for re-sent batches, and holes never taken for duplicates."""

from __future__ import annotations

import asyncio

from hedwig.hub.dedup import RECENT, Known, PublisherTable


async def test_resent_batch_gets_its_place() -> None:
    t = PublisherTable()
    t.learn("p", 1, 3, first_seq=10)
    t.learn("p", 4, 2, first_seq=20)
    assert await t.check("p", 1, 3) == Known(10, 12)
    assert await t.check("p", 4, 2) == Known(20, 21)
    assert await t.check("p", 6, 1) is None  # new
    assert await t.check("other", 1, 1) is None


async def test_hole_inside_the_window_is_stored_not_dropped() -> None:
    t = PublisherTable()
    t.learn("p", 1, 1, first_seq=1)
    t.learn("p", 3, 1, first_seq=2)  # 2 never arrived (re-sent out of order)
    assert await t.check("p", 2, 1) is None


async def test_very_old_batch_is_a_duplicate_of_unknown_place() -> None:
    t = PublisherTable()
    for i in range(1, RECENT + 10):
        t.learn("p", i, 1, first_seq=i)
    assert await t.check("p", 1, 1) == Known(0, 0)


async def test_resend_during_the_original_write_waits_for_it() -> None:
    t = PublisherTable()
    t.begin("p", 5)
    waiter = asyncio.create_task(t.check("p", 5, 1))
    await asyncio.sleep(0)
    assert not waiter.done()
    t.learn("p", 5, 1, first_seq=42)
    t.end("p", 5, Known(42, 42))
    assert await waiter == Known(42, 42)


async def test_least_recently_seen_publishers_are_forgotten() -> None:
    from hedwig.hub import dedup

    t = PublisherTable()
    for i in range(dedup.MAX_PUBLISHERS + 5):
        t.learn(f"p{i}", 1, 1, first_seq=i + 1)
    assert await t.check("p0", 1, 1) is None  # forgotten
    assert await t.check(f"p{dedup.MAX_PUBLISHERS + 4}", 1, 1) == Known(
        dedup.MAX_PUBLISHERS + 5, dedup.MAX_PUBLISHERS + 5
    )
