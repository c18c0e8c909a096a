"""A subscription reset to a publish time (RESET_SUBSCRIPTION ``to`` TIME) on real hubs in
memory, their clock injected: delivery restarts at the first message published at or after
the time, for times before, between, inside and after the batches; the same after the topic
moved to another hub (the times are the log's); bad times refused."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from hedwig.clock import ManualClock
from hedwig.errors import UsageError
from hedwig.hub.serving.positions import first_published_at
from hedwig.protocol import Batch, EncodedMessages, ResetTo, encode_values
from tests.memory_region import Region, memory_region

START_MS = 1_700_000_000_000


@pytest.fixture
async def timed() -> AsyncIterator[tuple[Region, ManualClock]]:
    clock = ManualClock(wall_ms=START_MS)
    async for region in memory_region(2, clock=clock):
        yield region, clock


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(START_MS / 1000 + seconds, UTC)


async def test_delivery_restarts_at_the_first_message_published_then_or_later(
    timed: tuple[Region, ManualClock],
) -> None:
    region, clock = timed
    async with region.client() as c:
        sub = await c.subscribe("timed", "s")
        # Five publishes a minute apart (one batch each, at 0, 60, ... 240 s), then one
        # batch of five at 300 s.
        for i in range(5):
            await c.publish("timed", b"%d" % i)
            clock.advance(60)
        await c.publish_batch("timed", [b"b%d" % i for i in range(5)])
        await sub.close()
        assert await c.reset_subscription("timed", "s", at(120)) == 2  # exactly at a batch
        assert await c.reset_subscription("timed", "s", at(90)) == 2  # between two
        assert await c.reset_subscription("timed", "s", at(-3600)) == 0  # before them all
        assert await c.reset_subscription("timed", "s", at(299)) == 5  # the batch of five
        assert await c.reset_subscription("timed", "s", at(301)) == 10  # after them all
        assert await c.reset_subscription("timed", "s", at(120)) == 2
        sub = await c.subscribe("timed", "s")
        assert [(await sub.next(2)).value for _ in range(3)] == [b"2", b"3", b"4"]
        await sub.close()

        # The times are the log's: the same answers from the hub the topic moved to.
        await region.move_away("timed")
        assert await c.reset_subscription("timed", "s", at(180)) == 3
        assert await c.reset_subscription("timed", "s", at(299)) == 5

        with pytest.raises(UsageError, match="time zone"):
            await c.reset_subscription("timed", "s", datetime(2026, 12, 2, 10))
        with pytest.raises(UsageError, match="before 1970"):
            await c.reset_subscription("timed", "s", datetime(1960, 1, 1, tzinfo=UTC))
        with pytest.raises(UsageError, match="pass a datetime"):
            await c.reset_subscription("timed", "s", ResetTo.TIME)


class Stored:
    """Batches as a log holds them (first, last and the batch holding a sequence id)."""

    def __init__(self, batches: list[Batch]) -> None:
        self.batches = batches
        self.reads = 0

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq

    @property
    def last_seq(self) -> int:
        b = self.batches[-1]
        return b.first_seq + b.count - 1

    async def read(self, start: int, limit: int, max_bytes: int) -> list[Batch]:
        self.reads += 1
        return [b for b in self.batches if b.first_seq + b.count > start][:1]


def batch(first: int, count: int, time_ms: int) -> Batch:
    return Batch(
        first_seq=first,
        publish_time_ms=time_ms,
        publisher_id="p",
        publisher_seq=0,
        messages=EncodedMessages(count=count, payload=encode_values([b"x"] * count)),
    )


async def test_the_search_reads_a_batch_a_step_and_lands_on_batch_edges() -> None:
    # 100,000 batches of ten messages, a millisecond apart, the first kept at 1,000,001.
    log = Stored([batch(1_000_001 + 10 * i, 10, 5_000 + i) for i in range(100_000)])
    assert await first_published_at(log, 5_000 + 4_321) == 1_000_001 + 43_210
    assert log.reads <= 21  # log2 of a million messages, not a scan
    assert await first_published_at(log, 0) == log.first_seq
    assert await first_published_at(log, 10**13) == log.last_seq + 1
    # Equal times over several batches: the first of them.
    same = Stored([batch(1, 3, 10), batch(4, 3, 20), batch(7, 3, 20), batch(10, 3, 30)])
    assert await first_published_at(same, 20) == 4
    assert await first_published_at(same, 21) == 10
