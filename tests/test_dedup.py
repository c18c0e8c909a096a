"""Duplicate detection: exact answers for re-sent batches, and holes never taken for duplicates."""

from __future__ import annotations

import asyncio

import pytest

from hedwig.errors import OutOfOrderError
from hedwig.hub.owning.dedup import RECENT, Known, PublisherTable


async def test_resent_batch_gets_its_place() -> None:
    t = PublisherTable()
    t.learn("p", 1, 3, first_seq=10)
    t.learn("p", 4, 2, first_seq=20)
    assert await t.check("p", 1, 3) == Known(10, 12)
    assert await t.check("p", 4, 2) == Known(20, 21)
    assert await t.check("p", 6, 1) is None  # new
    assert await t.check("other", 1, 1) is None


async def test_a_publisher_seen_once_is_remembered_as_exactly() -> None:
    """One batch is kept without a table (most topics): the same answers as with one."""
    t = PublisherTable()
    t.learn("p", 5, 3, first_seq=40)
    assert await t.check("p", 5, 3) == Known(40, 42)
    assert await t.check("p", 4, 1) == Known(0, 0)  # before it: stored, place forgotten
    assert await t.check("p", 8, 1) is None
    t.learn("p", 5, 3, first_seq=40)  # learnt again (a read-back after a move)
    t.learn("p", 8, 1, first_seq=43)
    assert await t.check("p", 5, 3) == Known(40, 42)
    assert await t.check("p", 8, 1) == Known(43, 43)
    assert await t.check("p", 4, 1) == Known(0, 0)


async def test_a_lone_publisher_kept_alone_joins_a_table_when_a_second_comes() -> None:
    """The first publisher is kept without a table; a second one makes it, and both keep
    what they were: their places, their order, and which was seen last."""
    from hedwig.hub.owning import dedup

    t = PublisherTable()
    t.learn("p", 1, 2, first_seq=1)
    with pytest.raises(OutOfOrderError):
        await t.check("p", 5, 1)
    assert await t.check("q", 7, 1) is None  # unknown: taken where it starts
    t.learn("q", 7, 1, first_seq=3)
    t.learn("p", 3, 1, first_seq=4)
    assert await t.check("p", 1, 2) == Known(1, 2)
    assert await t.check("p", 3, 1) == Known(4, 4)
    assert await t.check("q", 7, 1) == Known(3, 3)
    with pytest.raises(OutOfOrderError) as refused:
        await t.check("q", 9, 1)
    assert refused.value.expected == 8
    # "p" was seen last: a full table forgets "q" first.
    for i in range(dedup.MAX_PUBLISHERS - 1):
        t.learn(f"r{i}", 1, 1, first_seq=10 + i)
    assert await t.check("q", 7, 1) is None
    assert await t.check("p", 3, 1) == Known(4, 4)


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
    t.begin("p", 5, 1)
    waiter = asyncio.create_task(t.check("p", 5, 1))
    await asyncio.sleep(0)
    assert not waiter.done()
    t.learn("p", 5, 1, first_seq=42)
    t.end("p", 5, Known(42, 42))
    assert await waiter == Known(42, 42)


async def test_least_recently_seen_publishers_are_forgotten() -> None:
    from hedwig.hub.owning import dedup

    t = PublisherTable()
    for i in range(dedup.MAX_PUBLISHERS + 5):
        t.learn(f"p{i}", 1, 1, first_seq=i + 1)
    assert await t.check("p0", 1, 1) is None  # forgotten
    assert await t.check(f"p{dedup.MAX_PUBLISHERS + 4}", 1, 1) == Known(
        dedup.MAX_PUBLISHERS + 5, dedup.MAX_PUBLISHERS + 5
    )


async def test_a_known_publishers_gap_is_refused_until_the_earlier_batch_is_stored() -> None:
    t = PublisherTable()
    t.learn("p", 1, 10, first_seq=1)
    with pytest.raises(OutOfOrderError) as refused:
        await t.check("p", 21, 10)  # 11..20 went elsewhere, or are being retried
    assert refused.value.expected == 11
    assert await t.check("p", 11, 10) is None
    t.begin("p", 11, 10)  # being written: the next one may follow it at once (pipelined)
    assert await t.check("p", 21, 10) is None
    t.begin("p", 21, 10)
    with pytest.raises(OutOfOrderError):
        await t.check("p", 41, 10)
    t.learn("p", 11, 10, first_seq=11)
    t.end("p", 11, Known(11, 20))
    t.learn("p", 21, 10, first_seq=21)
    t.end("p", 21, Known(21, 30))
    assert await t.check("p", 31, 10) is None


async def test_an_unknown_publisher_starts_anywhere() -> None:
    t = PublisherTable()
    assert await t.check("new", 500, 1) is None  # its earlier messages may be long gone
    t.begin("new", 500, 1)
    with pytest.raises(OutOfOrderError):
        await t.check("new", 502, 1)


async def test_a_publisher_seen_again_is_forgotten_after_the_others() -> None:
    from hedwig.hub.owning import dedup

    t = PublisherTable()
    for i in range(dedup.MAX_PUBLISHERS):
        t.learn(f"p{i}", 1, 1, first_seq=i + 1)
    t.learn("p0", 2, 1, first_seq=50_000)  # seen again: the most recent now
    t.learn("new", 1, 1, first_seq=50_001)
    assert await t.check("p1", 1, 1) is None  # the least recently seen went
    assert await t.check("p0", 2, 1) == Known(50_000, 50_000)
    assert await t.check("p0", 1, 1) == Known(1, 1)
