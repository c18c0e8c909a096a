"""Messages published to be delivered later (``deliver_after``/``deliver_at``), on real hubs
wired in memory: a shared subscription gives each no earlier than its time while the messages
behind it go at once; the owner wakes for it with nothing else happening, on its own (injected)
clock; an index smaller
than the delayed backlog spills and finds the rest again in the log; a move of the topic
keeps them delayed; key-shared and failover hold them too; an exclusive subscription gets them
in log order at once; and a bad delivery time is refused where it is made."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import datetime

import pytest

from hedwig.client import SubscriptionType
from hedwig.client.subscribing import Subscriber
from hedwig.clock import ManualClock
from hedwig.errors import DeadlineExceededError, InvalidRequestError, UsageError
from hedwig.hub.serving.queue import QueueSubscription
from hedwig.protocol import DeliveredMessage
from hedwig.protocol.messages import DELIVER_AT, deliver_at_of
from hedwig.settings import QueueSettings
from tests.memory_region import Region, memory_region

SHARED = SubscriptionType.SHARED


@pytest.fixture
async def region() -> AsyncIterator[Region]:
    async for r in memory_region(2):
        yield r


async def _drain(sub: Subscriber, quiet: float) -> list[DeliveredMessage]:
    """Every message until none comes for ``quiet`` seconds, each acknowledged and checked
    not to have come before its delivery time."""
    got: list[DeliveredMessage] = []
    while True:
        try:
            m = await sub.next(quiet)
        except DeadlineExceededError:
            return got
        if deliver_at_of(m.headers) is not None:
            _not_early(m, int(time.time() * 1000))
        got.append(m)
        sub.ack(m)


def _not_early(m: DeliveredMessage, arrived_ms: int) -> None:
    at = deliver_at_of(m.headers)
    assert at is not None and arrived_ms >= at, (m.seq, arrived_ms - (at or 0))


def _queue(region: Region, topic: str, name: str) -> QueueSubscription:
    q = region.owner(topic).topics.topics[topic].subscriptions[name]
    assert isinstance(q, QueueSubscription)
    return q


async def test_a_delayed_message_waits_and_the_ones_behind_it_do_not(region: Region) -> None:
    async with region.client() as a:
        sub = await a.subscribe("later", "pool", type=SHARED)
        await a.publish("later", b"late", deliver_after=0.6)
        for i in range(3):
            await a.publish("later", b"m%d" % i)
        first = [await sub.next(5) for _ in range(3)]
        assert [m.value for m in first] == [b"m0", b"m1", b"m2"]
        for m in first:
            sub.ack(m)
        # Nothing else happens: the owner's timer alone wakes delivery for it.
        late = await sub.next(5)
        _not_early(late, int(time.time() * 1000))
        assert (late.value, late.seq, late.delivery_count) == (b"late", 1, 1)
        sub.ack(late)
        assert await _drain(sub, 0.3) == []


async def test_a_delayed_backlog_beyond_the_index_is_found_again_in_the_log() -> None:
    async for region in memory_region(2, queues=QueueSettings(max_delayed=3)):
        async with region.client() as a:
            sub = await a.subscribe("many", "pool", type=SHARED)
            now = time.time()
            # Twelve delayed, the later published the sooner due, between plain ones.
            for i in range(12):
                await a.publish("many", b"d%d" % i, deliver_at=now + 1.5 - i * 0.08)
                await a.publish("many", b"p%d" % i)
            got = await _drain(sub, 2.5)
            plain = [m for m in got if m.value.startswith(b"p")]
            delayed = [m for m in got if m.value.startswith(b"d")]
            assert len(plain) == 12 and len(delayed) == 12, [m.value for m in got]
            assert len({m.seq for m in got}) == 24
            assert all(m.delivery_count == 1 for m in got)
            q = _queue(region, "many", "pool")
            assert q.delays.spilled > 0 and q.delays.passes > 0
            assert len(q.delays) == 0 and not q.delays.spilling
            assert q.consumed_seq == 24
            owner = region.owner("many")
            owner.loops.refresh_gauges()
            labels = {"topic": "many", "subscriber": "pool"}
            sample = owner.metrics.registry.get_sample_value
            assert sample("hedwig_queue_delays_spilled", labels) == q.delays.spilled
            assert sample("hedwig_queue_delayed", labels) == 0


async def test_delayed_messages_stay_delayed_through_a_move(region: Region) -> None:
    async with region.client() as a:
        sub = await a.subscribe("moving", "pool", type=SHARED)
        for i in range(3):
            await a.publish("moving", b"d%d" % i, deliver_after=0.8)
        await a.publish("moving", b"plain")
        m = await sub.next(5)
        assert m.value == b"plain"
        sub.ack(m)
        owner = region.owner("moving")
        other = next(h for h in region.hubs if h is not owner)
        await a.move_topic("moving", other.address)  # the next owner indexes them anew
        got = await _drain(sub, 1.5)
        assert region.owner("moving") is other
        # (``plain`` may come again: its acknowledgement can race the move.)
        delayed = [m for m in got if m.value != b"plain"]
        assert sorted(m.value for m in delayed) == [b"d0", b"d1", b"d2"]


@pytest.mark.parametrize("kind", [SubscriptionType.KEY_SHARED, SubscriptionType.FAILOVER])
async def test_key_shared_and_failover_hold_them_too(
    region: Region, kind: SubscriptionType
) -> None:
    async with region.client() as a:
        sub = await a.subscribe("kinds", "q", type=kind)
        await a.publish("kinds", b"late", key=b"k", deliver_after=0.5)
        await a.publish("kinds", b"now", key=b"k")
        first = await sub.next(5)
        assert first.value == b"now"
        sub.ack(first)
        late = await sub.next(5)
        assert late.value == b"late"
        _not_early(late, int(time.time() * 1000))
        sub.ack(late)


async def test_an_exclusive_subscription_gets_them_in_log_order_at_once(region: Region) -> None:
    async with region.client() as a:
        sub = await a.subscribe("excl", "one")
        await a.publish("excl", b"late", deliver_after=3600)
        await a.publish("excl", b"now")
        got = [await sub.next(5), await sub.next(5)]
        assert [m.value for m in got] == [b"late", b"now"]
        assert deliver_at_of(got[0].headers) is not None  # it carries the header still


async def test_bad_delivery_times_are_refused(region: Region) -> None:
    async with region.client() as a:
        with pytest.raises(UsageError, match="deliver_after"):
            await a.publish("bad", b"x", deliver_after=-1)
        with pytest.raises(UsageError, match="timezone-aware"):
            await a.publish("bad", b"x", deliver_at=datetime(2030, 1, 1))
        # Further ahead than the hub allows (a week by default): refused, not retried.
        with pytest.raises(InvalidRequestError, match="ahead is allowed"):
            await a.publish("bad", b"x", deliver_after=8 * 24 * 3600)
        with pytest.raises(InvalidRequestError, match=DELIVER_AT):
            await a.publish("bad", b"x", headers=[(DELIVER_AT, b"soon")])
        # The topic still works.
        assert (await a.publish("bad", b"fine")).seq >= 1


async def test_the_owner_wakes_for_a_delayed_message_on_its_own_clock() -> None:
    """The hubs run on a manual clock: a message due a minute from the hubs' now comes when
    that clock passes its time, and not a moment of it before, however long one waits."""
    clock = ManualClock()
    async for region in memory_region(2, clock=clock):
        async with region.client() as a:
            # No ack timeout: the minute the clock jumps must not take "now" back before
            # its acknowledgement arrives.
            await a.create_subscription("clocked", "pool", type=SHARED, ack_timeout=0)
            sub = await a.subscribe("clocked", "pool", type=SHARED)
            due_ms = clock.wall_ms() + 60_000
            await a.publish("clocked", b"late", deliver_at=due_ms / 1000)
            await a.publish("clocked", b"now")
            m = await sub.next(5)
            assert m.value == b"now"
            sub.ack(m)
            clock.advance(59)
            with pytest.raises(DeadlineExceededError):
                await sub.next(0.3)  # real time passes; the hubs' clock does not
            clock.advance(2)
            late = await sub.next(5)
            assert late.value == b"late" and deliver_at_of(late.headers) == due_ms
            assert clock.wall_ms() >= due_ms
            sub.ack(late)
