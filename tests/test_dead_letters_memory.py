"""Dead letters held by the hub, on real hubs wired in memory: a message delivered
``max_deliveries`` times is published to the dead-letter topic (wherever that is owned) with
its origin in headers, and then acknowledged; a letter published twice is stored once; one
that cannot be published waits, unacknowledged, until it can; one whose subscription's creator
may no longer publish there is refused before it is sent; bad dead-letter topics are refused
at creation."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from hedwig.client import HedwigClient, SubscriptionType
from hedwig.client.subscribing import Subscriber
from hedwig.errors import DeadlineExceededError, ForbiddenError, InvalidRequestError
from hedwig.hub import Hub
from hedwig.hub.serving.dead_letters import (
    HEADER_DELIVERIES,
    HEADER_REASON,
    HEADER_SEQ,
    HEADER_SUBSCRIPTION,
    HEADER_TOPIC,
    DeadLetter,
)
from hedwig.hub.serving.deliveries import Reason
from hedwig.hub.serving.queue import QueueSubscription
from hedwig.hub.spreading.dead_letters import DeadLetterPublisher
from hedwig.metadata.acls import Operation
from hedwig.protocol import DeliveredMessage, Message
from tests.memory_region import Region, memory_region
from tests.waiting import eventually, until

SHARED = SubscriptionType.SHARED


@pytest.fixture
async def region() -> AsyncIterator[Region]:
    async for r in memory_region(2):
        yield r


async def _dead_letters(c: HedwigClient, topic: str) -> list[DeliveredMessage]:
    answer = await c.read(topic, 1, max_messages=10_000)
    return [m for b in answer.batches for m in b.delivered()]


def _queue(region: Region, topic: str, name: str) -> QueueSubscription:
    got = region.owner(topic).topics.topics[topic].subscriptions[name]
    assert isinstance(got, QueueSubscription)
    return got


async def _nack_until_gone(sub: Subscriber, seq: int, times: int) -> None:
    """Nack ``seq`` each time it comes, ``times`` times; acknowledge every other message."""
    nacked = 0
    while nacked < times:
        m = await sub.next(5)
        if m.seq == seq:
            assert m.delivery_count == nacked + 1
            sub.nack(m)
            nacked += 1
        else:
            sub.ack(m)


async def _apart(region: Region, client: HedwigClient, topic: str, dlq: str) -> None:
    """``dlq`` owned by another hub than ``topic``."""
    owner = region.owner(topic)
    if region.owner(dlq) is owner:
        other = next(h for h in region.hubs if h is not owner)
        await client.move_topic(dlq, other.address)
    assert region.owner(dlq) is not region.owner(topic)


async def test_a_message_past_its_last_delivery_is_dead_lettered_and_acknowledged(
    region: Region,
) -> None:
    async with region.client() as a:
        await a.publish("jobs.dlq", b"earlier")  # the dead-letter topic exists first
        await a.create_subscription(
            "jobs", "w", type=SHARED, max_deliveries=2, dead_letter="jobs.dlq"
        )
        await a.publish("jobs", b"warm")
        await _apart(region, a, "jobs", "jobs.dlq")
        sub = await a.subscribe("jobs", "w", type=SHARED)
        for i in range(3):
            await a.publish("jobs", b"m%d" % i, key=b"k%d" % i)
        await _nack_until_gone(sub, 3, 2)  # m1 (seq 3) nacked on both its deliveries
        with pytest.raises(DeadlineExceededError):
            await sub.next(0.3)  # not delivered a third time
        queue = _queue(region, "jobs", "w")
        await until(lambda: queue.dead_lettered == 1, what="the letter stored")
        assert queue.consumed_seq == 4 and queue.deliveries.unacked == 0
        letters = await _dead_letters(a, "jobs.dlq")
        assert [m.value for m in letters] == [b"earlier", b"m1"]
        letter = letters[1]
        headers = dict(letter.headers)
        assert letter.key == b"k1"
        assert headers[HEADER_TOPIC] == b"jobs" and headers[HEADER_SEQ] == b"3"
        assert headers[HEADER_SUBSCRIPTION] == b"w" and headers[HEADER_DELIVERIES] == b"2"
        assert headers[HEADER_REASON] == b"nacked"
        owner = region.owner("jobs")
        owner.loops.refresh_gauges()
        value = owner.metrics.registry.get_sample_value(
            "hedwig_queue_dead_lettered", {"topic": "jobs", "subscriber": "w"}
        )
        assert value == 1


async def test_a_letter_published_twice_is_stored_once(region: Region) -> None:
    async with region.client() as a:
        await a.publish("twice.dlq", b"first")
        hub: Hub = region.hubs[0]
        letter = DeadLetter("twice", "w", 7, 3, Reason.ACK_TIMEOUT, 1, Message(value=b"poison"))
        # The owner crashed after publishing, before its acknowledgement was written: the
        # next owner publishes the same letter again, from whichever hub it is.
        await hub.dead_letters.publish("twice.dlq", None, [letter])
        await region.hubs[1].dead_letters.publish("twice.dlq", None, [letter])
        values = [m.value for m in await _dead_letters(a, "twice.dlq")]
        assert values == [b"first", b"poison"]


async def test_a_letter_that_cannot_be_published_waits_unacknowledged(region: Region) -> None:
    async with region.client() as a:
        await a.publish("held.dlq", b"x")
        await a.create_subscription(
            "held", "w", type=SHARED, max_deliveries=1, dead_letter="held.dlq"
        )
        await a.delete_topic("held.dlq", force=True)  # gone: the letter has nowhere to go
        sub = await a.subscribe("held", "w", type=SHARED)
        await a.publish("held", b"poison")
        m = await sub.next(5)
        sub.nack(m)
        queue = _queue(region, "held", "w")
        await until(lambda: queue._letters_failing, what="a failed publish")
        # Not acknowledged, not lost: kept by the subscription, retried.
        assert queue.consumed_seq == 0 and queue.deliveries.unacked == 1
        await a.publish("held.dlq", b"y")  # the topic again
        await until(lambda: queue.dead_lettered == 1, timeout=10, what="the letter stored")
        assert queue.consumed_seq == 1

        async def stored() -> bool:
            return [m.value for m in await _dead_letters(a, "held.dlq")] == [b"y", b"poison"]

        await eventually(stored, what="the letter in the dead-letter topic")


async def test_bad_dead_letter_topics_are_refused_at_creation(region: Region) -> None:
    async with region.client() as a:
        await a.publish("bad", b"x")
        await a.publish("exists", b"x")
        cases = {
            "bad": "another topic",
            "bad~lane2": "another topic",
            "nowhere": "does not exist",
            "": "dead-letter topic name is empty",
        }
        for target, why in cases.items():
            with pytest.raises(InvalidRequestError, match=why):
                await a.create_subscription(
                    "bad", "w", type=SHARED, max_deliveries=3, dead_letter=target
                )
        with pytest.raises(InvalidRequestError, match="needs max deliveries"):
            await a.create_subscription("bad", "w", type=SHARED, dead_letter="exists")


async def test_a_letter_its_creator_may_no_longer_publish_is_refused(region: Region) -> None:
    async with region.client() as a:
        await a.publish("revoked.dlq", b"first")
        hub = region.hubs[0]
        asked: list[tuple[str | None, Operation, str]] = []

        def permits(principal: str | None, op: Operation, topic: str) -> bool:
            asked.append((principal, op, topic))
            return False  # the creator's rule revoked since the subscription was made

        publisher = DeadLetterPublisher(
            address=lambda: hub.address,
            store=hub.store,
            dialer=hub.dialer,
            clock=hub.clock,
            permits=permits,
        )
        letter = DeadLetter("revoked", "w", 1, 2, Reason.NACKED, 1, Message(value=b"no"))
        with pytest.raises(ForbiddenError, match="alice may not publish"):
            await publisher.publish("revoked.dlq", "alice", [letter])
        assert asked == [("alice", Operation.PUBLISH, "revoked.dlq")]
        assert [m.value for m in await _dead_letters(a, "revoked.dlq")] == [b"first"]
