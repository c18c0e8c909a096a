"""Ingest lanes on real hubs wired in memory: publishers spread over lanes by id, subscribers
reading every lane, and the reconfigurations (single -> ingest, adding and sealing lanes,
ingest -> single) under load, with nothing acknowledged lost, nothing stored twice, and each
publisher's messages in order in every lane."""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator, Callable

import pytest

from hedwig.client import HedwigClient, PublishResult, Subscriber
from hedwig.clock import SystemClock
from hedwig.errors import InvalidTopicError, UseLaneError
from hedwig.metadata import PlanMode, TopicPlan
from hedwig.metadata.plans import Lane, publisher_base
from hedwig.net.connection import HubConnection
from hedwig.protocol import (
    DeliveredMessage,
    EncodedMessages,
    Published,
    lane_name,
)
from hedwig.protocol import (
    Publish as PublishFrame,
)
from tests.memory_region import Region, ToldOrder, memory_region
from tests.waiting import until

CLOCK = SystemClock()


@pytest.fixture
async def region() -> AsyncIterator[Region]:
    async for r in memory_region(3, replication="2/2/2"):
        yield r


class Reader:
    """One subscriber reading every lane; keeps what it was handed, per lane."""

    def __init__(self, sub: Subscriber) -> None:
        self.sub = sub
        self.got: list[DeliveredMessage] = []
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        async for m in self.sub:
            self.got.append(m)
            self.sub.consume(m.seq, m.lane)

    def values(self) -> set[bytes]:
        return {m.value for m in self.got}


class Publishers:
    """``count`` publishers (a client each, ids ``p0``...), each publishing numbered messages
    one at a time until stopped; what each had acknowledged, in order."""

    def __init__(self, clients: list[HedwigClient], topic: str) -> None:
        self.clients = clients
        self.topic = topic
        self.acked: dict[str, list[bytes]] = defaultdict(list)
        self._stop = asyncio.Event()
        self.tasks = [asyncio.get_running_loop().create_task(self._run(c)) for c in clients]

    async def _run(self, client: HedwigClient) -> None:
        i = 0
        while not self._stop.is_set():
            value = b"%s:%06d" % (client.publisher_id.encode(), i)
            await client.publish(self.topic, value)
            self.acked[client.publisher_id].append(value)
            i += 1
            await asyncio.sleep(0.001)

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self.tasks)

    def total(self) -> int:
        return sum(len(v) for v in self.acked.values())


@contextlib.asynccontextmanager
async def publishers(region: Region, topic: str, n: int) -> AsyncIterator[Publishers]:
    clients = [region.client(publisher_id=f"p{i}") for i in range(n)]
    pubs = Publishers(clients, topic)
    try:
        yield pubs
    finally:
        await pubs.stop()
        for c in clients:
            await c.close()


def check_history(pubs: Publishers, readers: list[Reader]) -> None:
    """Each reader got every acknowledged message, none twice, and in each lane each
    publisher's messages in the order they were published."""
    acked = {v for vs in pubs.acked.values() for v in vs}
    for r in readers:
        values = [m.value for m in r.got]
        assert acked <= set(values), f"{r.sub.name} misses {sorted(acked - set(values))[:5]}"
        assert len(values) == len(set(values)), f"{r.sub.name} got duplicates"
        per_lane: dict[tuple[int, str], list[int]] = defaultdict(list)
        for m in r.got:
            head, n = m.value.split(b":")
            per_lane[(m.lane, head.decode())].append(int(n))
        for (lane, name), ns in per_lane.items():
            assert ns == sorted(ns), f"{r.sub.name}: {name} out of order in lane {lane}"


async def test_single_to_ingest_to_more_lanes_to_single_under_load(region: Region) -> None:
    async with region.client() as admin:
        await admin.publish("ingest", b"first:0")
        owner = region.owner("ingest")
        readers = [Reader(await admin.subscribe("ingest", f"s{i}")) for i in range(3)]
        async with publishers(region, "ingest", 8) as pubs:
            await until(lambda: pubs.total() > 40)
            plan = await region.set_mode("ingest", PlanMode.INGEST, hubs=3)
            assert plan.open_lanes == (0, 1, 2)
            # Each new lane was meant for a hub that serves no other lane.
            hints = {lane.hub for lane in plan.lanes if lane.index}
            assert len(hints) == 2 and owner.address not in hints
            await until(
                lambda: all(region.owner_among(lane_name("ingest", i), region.hubs) for i in (1, 2))
            )
            lane_owners = {region.owner(lane_name("ingest", i)).address for i in (1, 2)}
            assert lane_owners == hints
            # Publishers reach the lanes the plan gives them.
            await until(
                lambda: all(
                    any(
                        m.lane == plan.lane_for(p)
                        for m in readers[0].got
                        if m.value.startswith(p.encode() + b":")
                    )
                    for p in (f"p{i}" for i in range(8))
                )
            )
            switched = sum(c._publishers["ingest"].lane_switches for c in pubs.clients)
            assert switched == sum(1 for i in range(8) if plan.lane_for(f"p{i}") != 0)
            # A fourth lane, then back to two (lanes 2 and 3 sealed), then single.
            more = await region.set_mode("ingest", PlanMode.INGEST, hubs=4)
            assert more.open_lanes == (0, 1, 2, 3)
            await until(lambda: any(m.lane == 3 for m in readers[0].got))
            fewer = await region.set_mode("ingest", PlanMode.INGEST, hubs=2)
            assert fewer.open_lanes == (0, 1) and fewer.readable_lanes == (0, 1, 2, 3)
            mark = pubs.total()
            await until(lambda: pubs.total() > mark + 80)
            back = await region.set_mode("ingest", PlanMode.SINGLE)
            assert back.mode is PlanMode.SINGLE and back.readable_lanes == (0, 1, 2, 3)
            mark = pubs.total()
            await until(lambda: pubs.total() > mark + 80)
            # Every publisher is back on lane 0 now: the last messages of each are there.
            await pubs.stop()
            lasts = {p: vs[-1] for p, vs in pubs.acked.items()}
            await until(lambda: all(r.values() >= set(lasts.values()) for r in readers))
            for p, last in lasts.items():
                (m,) = [m for m in readers[0].got if m.value == last]
                assert m.lane == 0, p
        check_history(pubs, readers)
        for r in readers:
            assert {m.lane for m in r.got} == {0, 1, 2, 3}
            r.task.cancel()
        # A subscriber that comes back reads the sealed lanes it had not finished, too.
        description = await admin.describe_lanes("ingest")
        assert [(x.index, x.sealed) for x in description.lanes] == [
            (0, False),
            (1, True),
            (2, True),
            (3, True),
        ]


async def test_a_new_subscriber_reads_every_lane(region: Region) -> None:
    async with region.client() as admin:
        await admin.publish("wide", b"first:0")
        await region.set_mode("wide", PlanMode.INGEST, hubs=3)
        # A small window: a lane's messages stop coming unless consumes reach its hub.
        sub = await admin.subscribe("wide", "late", message_window=20)
        assert set(sub.lanes) == {1, 2}
        reader = Reader(sub)
        async with publishers(region, "wide", 6) as pubs:
            await until(lambda: pubs.total() > 120)
        check_history(pubs, [reader])
        assert {m.lane for m in reader.got} == {0, 1, 2}
        reader.task.cancel()


async def stored_then_sent_to_lane_one(
    region: Region, admin: HedwigClient, topic: str
) -> tuple[str, HubConnection, Callable[[int], PublishFrame], Published, TopicPlan]:
    """``topic`` published to, a batch of a publisher that two lanes would send to lane 1
    stored on it (by hand, on ``admin``'s connection to the owner), then the topic given two
    lanes and the owner seeing so. The publisher, the connection, its batches by sequence,
    the stored one's answer, the plan."""
    two = TopicPlan(PlanMode.INGEST, lanes=(Lane(0), Lane(1)))
    pid = next(p for p in (f"x{i}" for i in range(100)) if two.lane_for(p) == 1)
    await admin.publish(topic, b"first")
    owner = region.owner(topic)
    conn = await admin.connection(owner.address)

    def frame(pseq: int) -> PublishFrame:
        return PublishFrame(
            request_id=conn.next_id(),
            topic=topic,
            publisher_id=pid,
            publisher_seq=pseq,
            messages=EncodedMessages.of_values([b"a", b"b"]),
        )

    stored = await conn.request(frame(1), 5)
    assert isinstance(stored, Published) and not stored.duplicate
    plan = await region.set_mode(topic, PlanMode.INGEST, hubs=2)

    def seen() -> bool:
        known, current = owner.plans.peek(topic)
        return known and current is not None and current.mode is PlanMode.INGEST

    await until(seen)
    return pid, conn, frame, stored, plan


async def test_a_resent_batch_is_a_duplicate_even_if_its_publisher_belongs_elsewhere_now(
    region: Region,
) -> None:
    """The lane check comes after the duplicate check: a batch stored on lane 0 before the
    topic had lanes, re-sent after, is answered as stored, not sent to another lane."""
    async with region.client() as admin:
        pid, conn, frame, stored, plan = await stored_then_sent_to_lane_one(region, admin, "dups")
        assert plan.open_lanes == (0, 1)
        again = await conn.request(frame(1), 5)
        assert isinstance(again, Published) and again.duplicate
        assert (again.first_seq, again.last_seq) == (stored.first_seq, stored.last_seq)
        with pytest.raises(UseLaneError) as refused:
            await conn.request(frame(3), 5)
        assert refused.value.lane == lane_name("dups", 1)
        assert publisher_base(f"{pid}~3") == pid


async def test_a_batch_after_one_sent_to_another_lane_is_sent_there_too(region: Region) -> None:
    """A publisher's pipelined batches: the first one the new plan sends to another lane is
    not stored, so the next would leave a gap in its sequence here. That one is answered
    USE_LANE as well, not OUT_OF_ORDER: an earlier batch that will never be stored here is
    nothing to wait for, and the publisher, holding the lane change until every batch has
    settled, used to retry it until its deadline (its lane took nothing meanwhile)."""
    async with region.client() as admin:
        _, conn, frame, _, _ = await stored_then_sent_to_lane_one(region, admin, "gap")
        for pseq in (3, 5):  # 5 after 3, which was not stored
            with pytest.raises(UseLaneError) as refused:
                await conn.request(frame(pseq), 5)
            assert refused.value.lane == lane_name("gap", 1)


async def test_pipelined_results_come_in_publishing_order_across_a_lane_switch(
    region: Region,
) -> None:
    """Batches in flight when the plan sends their publisher to another lane: the ones the
    topic refuses are sent again there, and every future still resolves in the order its
    message was published: lane 0's results, then the new lane's, each lane's in sequence."""
    two = TopicPlan(PlanMode.INGEST, lanes=(Lane(0), Lane(1)))
    pid = next(p for p in (f"x{i}" for i in range(100)) if two.lane_for(p) == 1)
    async with region.client(publisher_id=pid, max_batch_messages=5) as c:
        await c.publish("turn", b"first")
        told = ToldOrder()
        futures = told.futures

        def more(n: int) -> None:
            for _ in range(n):
                told.add(c.publish_nowait("turn", b"m%05d" % len(futures)))

        more(100)
        await futures[9]  # two batches stored in lane 0, the others on their way or queued
        await region.set_mode("turn", PlanMode.INGEST, hubs=2)
        publisher = c._publishers["turn"]
        async with asyncio.timeout(10):
            while not publisher.lane_switches:
                more(20)  # pipelined while the hubs learn the plan
                await asyncio.sleep(0.001)
        more(100)
        results: list[PublishResult] = [await f for f in futures]
        await asyncio.sleep(0)  # the done callbacks of those resolved with the last one
    assert told.order == list(range(len(futures)))
    lanes = [r.lane for r in results]
    switch = lanes.index(1)
    assert set(lanes[:switch]) == {0} and set(lanes[switch:]) == {1}, "back and forth"
    for part in (results[:switch], results[switch:]):
        seqs = [r.seq for r in part]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "a gap or a swap in a lane"
    assert not any(r.duplicate for r in results)
    assert publisher.lane_switches == 1


async def test_lane_names_are_served_only_as_lanes(region: Region) -> None:
    async with region.client() as admin:
        await admin.publish("named", b"x")
        with pytest.raises(InvalidTopicError, match="no such lane"):
            await admin.publish(lane_name("named", 1), b"sneaky")
        with pytest.raises(InvalidTopicError, match="no such lane"):
            await admin.subscribe("nothing~lane4", "s")
        await region.set_mode("named", PlanMode.INGEST, hubs=2)
        await admin.publish(lane_name("named", 1), b"direct")  # a lane the plan lists
        with pytest.raises(InvalidTopicError, match="a lane has no lanes"):
            await admin.describe_lanes(lane_name("named", 1))


async def test_deleting_a_topic_deletes_its_lanes(region: Region) -> None:
    async with region.client() as admin:
        await admin.publish("gone", b"x")
        await region.set_mode("gone", PlanMode.INGEST, hubs=3)
        for i in (1, 2):
            await admin.publish(lane_name("gone", i), b"y")
        await admin.delete_topic("gone")
        topics = await region.hubs[0].store.topics.list_topics()
        assert not [t for t in topics if t.startswith("gone")]


async def test_a_sealed_lane_is_dropped_once_its_readers_have_read_it(region: Region) -> None:
    store = region.hubs[0].store
    async with region.client() as admin:
        await admin.publish("drop", b"first:0")
        await (await admin.subscribe("drop", "behind")).close()  # reads nothing
        reader = Reader(await admin.subscribe("drop", "r"))
        await region.set_mode("drop", PlanMode.INGEST, hubs=2)
        lane = lane_name("drop", 1)
        async with publishers(region, "drop", 6) as pubs:
            await until(lambda: pubs.total() > 60 and any(m.lane == 1 for m in reader.got))
            await region.set_mode("drop", PlanMode.SINGLE)  # lane 1 sealed
            mark = pubs.total()
            await until(lambda: pubs.total() > mark + 30)
        acked = {v for vs in pubs.acked.values() for v in vs}
        await until(lambda: reader.values() >= acked)
        assert await reader.sub.sync()
        owner = region.owner(lane)
        # Not while a subscription has not read it all...
        await owner.loops.collect_garbage()
        assert await store.topics.topic_exists(lane)
        # ... but once that one is gone (with its lanes' subscriptions), the lane goes: from
        # the plan first, then its topic; the reader goes on as if nothing happened.
        await admin.unsubscribe("drop", "behind")
        assert await store.subscriptions.read_subscription_data(lane, "behind") is None
        await owner.loops.collect_garbage()
        assert not await store.topics.topic_exists(lane)
        assert await store.plans.read_plan("drop") is None  # single, no lane left: no plan
        await until(lambda: 1 not in reader.sub.lanes)
        assert reader.sub.error is None and not reader.task.done()
        await admin.publish("drop", b"after:0")
        await until(lambda: b"after:0" in reader.values())
        reader.task.cancel()


async def test_ingest_to_fan_out_and_back_to_ingest(region: Region) -> None:
    """Straight from lanes to delivery hubs (the lanes sealed, still read) and back to lanes
    (new ones: sealed lanes are never reopened), under load."""
    async with region.client() as admin:
        await admin.publish("swap", b"first:0")
        readers = [Reader(await admin.subscribe("swap", f"s{i}")) for i in range(4)]
        async with publishers(region, "swap", 6) as pubs:
            for mode, hubs in ((PlanMode.INGEST, 3), (PlanMode.FAN_OUT, 2), (PlanMode.INGEST, 2)):
                plan = await region.set_mode("swap", mode, hubs)
                mark = pubs.total()
                await until(lambda m=mark: pubs.total() > m + 60)  # type: ignore[misc]
            assert plan.open_lanes == (0, 3) and plan.readable_lanes == (0, 1, 2, 3)
        acked = {v for vs in pubs.acked.values() for v in vs}
        await until(lambda: all(r.values() >= acked for r in readers))
        check_history(pubs, readers)
        for r in readers:
            r.task.cancel()
