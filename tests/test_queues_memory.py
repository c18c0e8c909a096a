"""Subscriptions shared by several consumers (shared, failover), served by real hubs wired in
memory: messages spread over the consumers, acknowledged one by one, delivered again after a
nack, an ack timeout or a consumer's leaving, with their delivery counts, and refused where a
connection acknowledges what it does not hold."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

import pytest

from hedwig.client import HedwigClient, SubscriptionType
from hedwig.client.subscribing import Subscriber
from hedwig.clock import SystemClock
from hedwig.errors import (
    DeadlineExceededError,
    InvalidRequestError,
    SubscriptionExistsError,
    UsageError,
)
from hedwig.hub.serving.queue import QueueSubscription
from hedwig.metadata import PlanMode
from hedwig.metadata.memory import MemoryMetadataStore
from hedwig.metadata.records import (
    DeliveryPolicy,
    SubscriptionData,
    SubscriptionPreferences,
    SubscriptionState,
)
from hedwig.placement.plans import set_topic_mode
from hedwig.protocol import DeliveredMessage
from hedwig.settings import QueueSettings
from tests.memory_region import Region, memory_region

SHARED = SubscriptionType.SHARED
FAILOVER = SubscriptionType.FAILOVER


@pytest.fixture
async def region() -> AsyncIterator[Region]:
    async for r in memory_region(2):
        yield r


async def _publish(c: HedwigClient, topic: str, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        await c.publish(topic, b"%d" % i)


async def _drain(sub: Subscriber, quiet: float = 0.3) -> list[DeliveredMessage]:
    got = []
    while True:
        try:
            got.append(await sub.next(quiet))
        except DeadlineExceededError:
            return got


async def _create(region: Region, topic: str, name: str, policy: DeliveryPolicy) -> None:
    """A subscription made with its policy in the store, as the CLI or operator will."""
    store = MemoryMetadataStore(region.backend, "mem")
    async with store:
        await store.topics.ensure_topic(topic)
        await store.subscriptions.create_subscription_data(
            topic,
            name,
            SubscriptionData(SubscriptionPreferences(), SubscriptionState(0, 1, 1), policy),
        )


async def test_shared_spreads_over_consumers_and_each_ack_counts_once(region: Region) -> None:
    async with region.client() as a, region.client() as b, region.client() as c:
        subs = [
            await x.subscribe("jobs", "pool", type=SHARED, message_window=20) for x in (a, b, c)
        ]
        await _publish(a, "jobs", 300)
        seen: Counter[int] = Counter()
        per: list[int] = []

        async def work(sub: Subscriber) -> None:
            n = 0
            while True:
                try:
                    m = await sub.next(0.5)
                except DeadlineExceededError:
                    per.append(n)
                    return
                assert m.delivery_count == 1
                seen[m.seq] += 1
                sub.ack(m)
                n += 1

        await asyncio.gather(*(work(s) for s in subs))
        assert sorted(seen) == list(range(1, 301)) and set(seen.values()) == {1}
        assert all(n > 0 for n in per), per  # every consumer had a share
        owner = region.owner("jobs")
        state = owner.topics.topics["jobs"].subscriptions["pool"]
        assert state.consumed_seq == 300 and state.backlog == 0


async def test_a_nack_delivers_again_with_its_count(region: Region) -> None:
    async with region.client() as a:
        sub = await a.subscribe("retry", "w", type=SHARED)
        await _publish(a, "retry", 3)
        first = [await sub.next(2) for _ in range(3)]
        sub.ack(first[0])
        sub.ack(first[2])
        sub.nack(first[1])
        again = await sub.next(2)
        assert (again.seq, again.delivery_count, again.value) == (2, 2, b"1")
        sub.nack(again, delay=0.3)
        with pytest.raises(DeadlineExceededError):
            await sub.next(0.15)  # held back for its delay
        third = await sub.next(2)
        assert (third.seq, third.delivery_count) == (2, 3)
        owner = region.owner("retry")
        owner.loops.refresh_gauges()
        labels = {"topic": "retry", "subscriber": "w"}
        sample = owner.metrics.registry.get_sample_value
        assert sample("hedwig_queue_redeliveries", labels) == 2
        assert sample("hedwig_queue_unacked", labels) == 1
        assert sample("hedwig_queue_consumers", labels) == 1
        assert (sample("hedwig_queue_oldest_unacked_seconds", labels) or 0) >= 0.3
        sub.ack(third)
        assert await _drain(sub) == []


async def test_an_unacknowledged_message_times_out_to_another_consumer(region: Region) -> None:
    await _create(region, "slow", "w", DeliveryPolicy(SHARED, ack_timeout_ms=300))
    async with region.client() as a, region.client() as b:
        stuck = await a.subscribe("slow", "w", type=SHARED, message_window=1)
        await _publish(a, "slow", 1)
        m = await stuck.next(2)  # and never acknowledged
        other = await b.subscribe("slow", "w", type=SHARED, message_window=5)
        again = await other.next(3)
        assert (again.seq, again.delivery_count) == (m.seq, 2)
        other.ack(again)
        stuck.ack(m)  # too late: no longer held there
        await asyncio.sleep(0.1)
        assert stuck.not_held == 1
        assert await _drain(stuck, 0.5) == []


async def test_what_a_leaving_consumer_held_goes_to_the_others(region: Region) -> None:
    async with region.client() as a, region.client() as b:
        leaving = await a.subscribe("churn", "w", type=SHARED, message_window=10)
        await _publish(a, "churn", 10)
        held = [await leaving.next(2) for _ in range(10)]
        stay = await b.subscribe("churn", "w", type=SHARED, message_window=10)
        with pytest.raises(DeadlineExceededError):
            await stay.next(0.2)  # everything is held by the first
        await leaving.close()
        got = await _drain(stay)
        assert [m.seq for m in got] == [m.seq for m in held]
        assert {m.delivery_count for m in got} == {2}


async def test_failover_delivers_to_one_and_the_next_takes_over_in_order(region: Region) -> None:
    async with region.client() as a, region.client() as b:
        active = await a.subscribe("fo", "w", type=FAILOVER, message_window=100)
        standby = await b.subscribe("fo", "w", type=FAILOVER, message_window=100)
        await _publish(a, "fo", 20)
        got = [await active.next(2) for _ in range(20)]
        assert [m.seq for m in got] == list(range(1, 21))
        with pytest.raises(DeadlineExceededError):
            await standby.next(0.2)
        for m in got[:12]:
            active.ack(m)
        await asyncio.sleep(0.05)
        await active.close()
        await _publish(a, "fo", 5, start=20)
        rest = await _drain(standby)
        assert [m.seq for m in rest] == list(range(13, 26))  # in order, from the unacked


async def test_acknowledgements_survive_a_move(region: Region) -> None:
    async with region.client() as a:
        sub = await a.subscribe("moving", "w", type=SHARED, message_window=50)
        await _publish(a, "moving", 20)
        got = [await sub.next(2) for _ in range(20)]
        for m in got:
            if m.seq % 2:
                sub.ack(m)  # the odd ones, out of order for the mark
        await asyncio.sleep(0.05)
        owner = region.owner("moving")
        other = next(h for h in region.hubs if h is not owner)
        await a.move_topic("moving", other.address)
        again = await _drain(sub, 1.0)
        assert sorted(m.seq for m in again) == list(range(2, 21, 2))
        assert {m.delivery_count for m in again} == {2}


async def test_the_wrong_kind_of_attach_is_refused(region: Region) -> None:
    async with region.client() as a, region.client() as b:
        await a.subscribe("kinds", "q", type=SHARED)
        with pytest.raises(InvalidRequestError, match="shared"):
            await b.subscribe("kinds", "q")  # exclusive, cumulative: no
        with pytest.raises(InvalidRequestError, match="not failover"):
            await b.subscribe("kinds", "q", type=FAILOVER)
        plain = await b.subscribe("kinds", "cursor")
        with pytest.raises(InvalidRequestError, match="exclusive"):
            await a.subscribe("kinds", "cursor", type=SHARED)
        with pytest.raises(UsageError, match="acknowledge each message"):
            (await b.subscribe("kinds", "q2", type=SHARED)).consume(1)
        await plain.close()


async def test_a_shared_subscription_over_lanes_spreads_every_lanes_messages(
    region: Region,
) -> None:
    await region.add_hub()
    async with region.client() as admin:
        await admin.publish("wide", b"first")
        a = await admin.subscribe("wide", "pool", type=SHARED, message_window=50)
        await set_topic_mode(
            region.hubs[0].store, "wide", PlanMode.INGEST, hubs=3, clock=SystemClock()
        )
        async with region.client() as b:
            other = await b.subscribe("wide", "pool", type=SHARED, message_window=50)
            clients = [region.client(publisher_id=f"p{i}") for i in range(6)]
            sent = set()
            for i, c in enumerate(clients):
                for j in range(20):
                    value = b"p%d:%d" % (i, j)
                    await c.publish("wide", value)
                    sent.add(value)
            got: list[DeliveredMessage] = []
            for sub in (a, other):
                for m in await _drain(sub, 0.5):
                    got.append(m)
                    sub.ack(m)
            for c in clients:
                await c.close()
        assert {m.value for m in got} == sent and len(got) == len(sent)
        assert len({m.lane for m in got}) > 1  # from more than one lane


async def test_a_policy_made_with_the_subscription_is_applied_by_the_owner(
    region: Region,
) -> None:
    async with region.client() as a:
        mark = await a.create_subscription(
            "policy", "w", type=SHARED, max_deliveries=2, backoff=(0.2,)
        )
        assert mark == 0
        with pytest.raises(SubscriptionExistsError):
            await a.create_subscription("policy", "w", type=SHARED)
        sub = await a.subscribe("policy", "w", type=SHARED)
        await _publish(a, "policy", 2)
        m1, m2 = await sub.next(2), await sub.next(2)
        sub.ack(m2)
        sub.nack(m1)
        with pytest.raises(DeadlineExceededError):
            await sub.next(0.1)  # its backoff step
        again = await sub.next(2)
        assert (again.seq, again.delivery_count) == (1, 2)
        sub.nack(again)  # its last delivery: dropped, not delivered a third time
        assert await _drain(sub, 0.5) == []
        state = region.owner("policy").topics.topics["policy"].subscriptions["w"]
        assert state.consumed_seq == 2 and isinstance(state, QueueSubscription)
        assert state.dropped == 1
        with pytest.raises(InvalidRequestError, match="max deliveries"):
            await a.create_subscription("policy", "bad", type=SHARED, max_deliveries=5000)


KEY_SHARED = SubscriptionType.KEY_SHARED


async def _publish_keyed(c: HedwigClient, topic: str, n: int, keys: int, start: int = 0) -> None:
    for i in range(start, start + n):
        await c.publish(topic, b"%d" % i, key=b"k%d" % (i % keys))


async def test_key_shared_keeps_each_key_on_one_consumer_in_order(region: Region) -> None:
    async with region.client() as a, region.client() as b, region.client() as c:
        subs = [
            await x.subscribe("keyed", "w", type=KEY_SHARED, message_window=30) for x in (a, b, c)
        ]
        await _publish_keyed(a, "keyed", 300, keys=12)
        per_key: dict[bytes | None, list[tuple[int, int]]] = {}

        async def work(i: int, sub: Subscriber) -> None:
            for m in await _drain(sub, 0.5):
                per_key.setdefault(m.key, []).append((i, m.seq))
                sub.ack(m)

        # Drained in turns, acknowledging as they go: each consumer's share.
        for _ in range(20):
            await asyncio.gather(*(work(i, s) for i, s in enumerate(subs)))
            if sum(len(v) for v in per_key.values()) >= 300:
                break
        assert sum(len(v) for v in per_key.values()) == 300
        for key, got in per_key.items():
            assert len({i for i, _ in got}) == 1, f"{key!r} went to several consumers"
            seqs = [s for _, s in got]
            assert seqs == sorted(seqs), f"{key!r} out of order"
        assert len({got[0][0] for got in per_key.values()}) > 1  # keys spread over consumers


async def test_a_joining_consumer_gets_a_key_only_after_its_earlier_messages_settle(
    region: Region,
) -> None:
    async with region.client() as a, region.client() as b:
        first = await a.subscribe("rekey", "w", type=KEY_SHARED, message_window=200)
        await _publish_keyed(a, "rekey", 40, keys=8)
        held = [await first.next(2) for _ in range(40)]  # all of them, none acknowledged yet
        late = await b.subscribe("rekey", "w", type=KEY_SHARED, message_window=200)
        await _publish_keyed(a, "rekey", 40, keys=8, start=40)
        # Every key is pinned to the first consumer while it holds that key's messages: the
        # new ones go there too, none to the consumer that joined.
        more = [await first.next(2) for _ in range(40)]
        with pytest.raises(DeadlineExceededError):
            await late.next(0.3)
        for m in held + more:
            first.ack(m)
        await asyncio.sleep(0.05)
        await _publish_keyed(a, "rekey", 80, keys=8, start=80)
        seen: dict[bytes | None, set[int]] = {}
        for i, sub in enumerate((first, late)):
            for m in await _drain(sub, 0.5):
                seen.setdefault(m.key, set()).add(i)
                sub.ack(m)
        assert all(len(v) == 1 for v in seen.values())  # still one consumer per key
        assert {i for v in seen.values() for i in v} == {0, 1}  # now some keys moved


async def test_what_a_leaving_key_consumer_held_goes_to_another_in_key_order(
    region: Region,
) -> None:
    async with region.client() as a, region.client() as b:
        x = await a.subscribe("keyleave", "w", type=KEY_SHARED, message_window=100)
        y = await b.subscribe("keyleave", "w", type=KEY_SHARED, message_window=100)
        await _publish_keyed(a, "keyleave", 60, keys=6)
        from_x = await _drain(x, 0.3)
        from_y = await _drain(y, 0.3)
        for m in from_y:
            y.ack(m)
        assert len(from_x) + len(from_y) == 60
        await x.close()  # leaves with everything it held unacknowledged
        await _publish_keyed(a, "keyleave", 30, keys=6, start=60)
        rest = await _drain(y, 0.5)
        by_key: dict[bytes | None, list[int]] = {}
        for m in rest:
            by_key.setdefault(m.key, []).append(m.seq)
            y.ack(m)
        assert sorted(m.seq for m in rest) == sorted([m.seq for m in from_x] + list(range(61, 91)))
        for key, seqs in by_key.items():
            assert seqs == sorted(seqs), f"{key!r} out of order after the hand-over"


async def test_the_hubs_queue_settings_bound_what_a_subscription_holds() -> None:
    """``HubConfig.queues`` reaches every queue the hub serves: with ``max_unacked`` 5, a
    consumer with room for 20 holds 5 until it acknowledges some."""
    async for region in memory_region(2, queues=QueueSettings(max_unacked=5)):
        async with region.client() as c:
            sub = await c.subscribe("bounded", "pool", type=SHARED, message_window=20)
            await _publish(c, "bounded", 12)
            first = await _drain(sub)
            assert len(first) == 5
            for m in first:
                sub.ack(m)
            second = await _drain(sub)
            assert len(second) == 5 and {m.seq for m in second}.isdisjoint(m.seq for m in first)


async def test_an_ack_timeout_takes_a_message_back_from_a_full_window(region: Region) -> None:
    """The consumer's window is full and it never acknowledges: the timeout still takes the
    message back (and the owner sleeps until it, rather than looking again and again for
    room), so it comes again."""
    async with region.client() as a:
        await a.create_subscription("full", "w", type=SHARED, ack_timeout=0.3)
        sub = await a.subscribe("full", "w", type=SHARED, message_window=1)
        await _publish(a, "full", 2)
        m = await sub.next(5)
        assert (m.seq, m.delivery_count) == (1, 1)
        again = await sub.next(5)
        assert (again.seq, again.delivery_count) == (1, 2)
