"""A subscription's fixed delay (a retry subscription), on real hubs wired in memory: every
message is delivered no earlier than the delay after its publish time, through a move of the
topic to another hub before the delay has passed; an absurd delay is refused."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from hedwig.client import SubscriptionType
from hedwig.errors import DeadlineExceededError, InvalidRequestError
from tests.memory_region import Region, memory_region

SHARED = SubscriptionType.SHARED
DELAY_S = 0.4


@pytest.fixture
async def region() -> AsyncIterator[Region]:
    async for r in memory_region(2):
        yield r


async def test_messages_wait_the_subscriptions_delay_through_a_move(region: Region) -> None:
    async with region.client() as a:
        await a.create_subscription("later", "retry", type=SHARED, delay=DELAY_S)
        sub = await a.subscribe("later", "retry", type=SHARED)
        published = time.time()
        for i in range(3):
            await a.publish("later", b"m%d" % i)
        owner = region.owner("later")
        other = next(h for h in region.hubs if h is not owner)
        await a.move_topic("later", other.address)  # the next owner holds them back too
        with pytest.raises(DeadlineExceededError):
            await sub.next(DELAY_S / 4)
        got = [await sub.next(5) for _ in range(3)]
        assert [m.value for m in got] == [b"m0", b"m1", b"m2"]
        for m in got:
            sub.ack(m)
            # Not before its publish time (the owner's clock) and the delay.
            assert time.time() * 1000 >= m.publish_time_ms + DELAY_S * 1000
        assert time.time() - published >= DELAY_S
        assert region.owner("later") is other


async def test_an_absurd_delay_is_refused(region: Region) -> None:
    async with region.client() as a:
        with pytest.raises(InvalidRequestError, match="delay must be"):
            await a.create_subscription("later", "w", type=SHARED, delay=8 * 24 * 3600)
        with pytest.raises(InvalidRequestError, match="exclusive"):
            await a.create_subscription("later", "w", type=SubscriptionType.EXCLUSIVE, delay=1.0)
