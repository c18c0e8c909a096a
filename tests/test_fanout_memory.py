"""Fan-out on real hubs wired in memory: delivery hubs, subscribers spread by id, and every
reconfiguration (single -> fan-out, adding and removing a delivery hub, fan-out -> single,
a delivery hub lost) under load with nothing skipped and each subscriber's order kept."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import pytest

from hedwig.client import HedwigClient, Subscriber
from hedwig.clock import SystemClock
from hedwig.errors import HedwigError, NotResponsibleError, TopicInUseError
from hedwig.hub.serving.topic_subscriptions import HAND_OVER_OVERLAP_S
from hedwig.hub.spreading.tail import TailLog
from hedwig.metadata import HubLoad, HubStatus, PlanMode
from hedwig.metadata.memory import MemoryMetadataStore
from hedwig.net import MemoryNetwork
from hedwig.net.transport import Listener
from hedwig.placement.plans import choose_delivery_hubs
from hedwig.placement.scaling import ScalingConfig
from hedwig.protocol import MoveKind, Subscribe
from hedwig.settings import BalanceSettings
from tests.memory_region import FAST_RETRY, Region, memory_region
from tests.waiting import until

CLOCK = SystemClock()
P = TypeVar("P", bound=asyncio.Protocol)
# Messages acknowledged before a fault of ``publishing`` begins: the fault comes mid-stream.
UNDER_WAY = 20


@pytest.fixture
async def region() -> AsyncIterator[Region]:
    async for r in memory_region(3, replication="2/2/2"):
        yield r


def serving(region: Region, topic: str) -> dict[str, set[str]]:
    """Which hub has each attached subscription of ``topic`` (owner or delivery hub)."""
    out: dict[str, set[str]] = {}
    for hub in region.hubs:
        names: set[str] = set()
        owned = hub.topics.topics.get(topic)
        if owned is not None:
            names |= {n for n, s in owned.subscriptions.items() if s.peer is not None}
        delivery = hub.fanout.delivering.get(topic)
        if delivery is not None:
            names |= {n for n, s in delivery.subs.by_name.items() if s.peer is not None}
        out[hub.address] = names
    return out


class Reader:
    """One subscriber, consuming everything; records the sequence ids it was handed."""

    def __init__(self, sub: Subscriber) -> None:
        self.sub = sub
        self.seqs: list[int] = []
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        async for m in self.sub:
            self.seqs.append(m.seq)
            self.sub.consume(m.seq)


async def readers(client: HedwigClient, topic: str, count: int) -> list[Reader]:
    return [Reader(await client.subscribe(topic, f"s{i:02d}")) for i in range(count)]


async def publishing(
    client: HedwigClient, topic: str, count: int, during: Callable[[], Awaitable[None]]
) -> int:
    """Publish ``count`` messages one batch at a time while ``during`` runs, from when the
    first ``UNDER_WAY`` are acknowledged; the last seq."""
    last = 0
    acked = 0

    async def publish() -> None:
        nonlocal last, acked
        for i in range(count):
            last = (await client.publish(topic, b"m%05d" % i)).seq
            acked += 1
            await asyncio.sleep(0.001)

    task = asyncio.get_running_loop().create_task(publish())
    await until(lambda: acked >= UNDER_WAY or task.done(), what="publishing under way")
    await during()
    await task
    return last


async def all_delivered(rs: list[Reader], last: int, first: int = 2, *, stop: bool = True) -> None:
    """Every reader got ``first`` .. ``last`` in order, nothing skipped (they subscribed
    after the topic's first message, so they start after it)."""
    await until(lambda: all(r.seqs and r.seqs[-1] >= last for r in rs), 10.0)
    for r in rs:
        assert r.seqs == list(range(first, last + 1)), r.sub.name
        if stop:
            r.task.cancel()


def test_choice_prefers_current_idle_hubs_and_the_owner_last() -> None:
    def hub(address: str, out: float, alive: bool = True) -> HubStatus:
        return HubStatus(address, alive, 1, HubLoad(bytes_out=out))

    hubs = [hub("a", 5), hub("b", 1), hub("c", 3), hub("d", 0, alive=False), hub("o", 0)]
    assert choose_delivery_hubs(hubs, owner="o", current=(), count=2) == ["b", "c"]
    assert choose_delivery_hubs(hubs, owner="o", current=("a", "d"), count=2) == ["a", "b"]
    assert choose_delivery_hubs(hubs, owner="o", current=(), count=4) == ["a", "b", "c", "o"]
    assert choose_delivery_hubs(hubs, owner="o", current=("a", "b", "c"), count=1) == ["b"]


async def test_fan_out_spreads_subscribers_over_delivery_hubs(region: Region) -> None:
    async with region.client() as pub, region.client() as subc:
        await pub.publish("hot", b"first")
        owner = region.owner("hot")
        plan = await region.set_mode("hot", PlanMode.FAN_OUT, hubs=2)
        assert owner.address not in plan.hubs and len(plan.hubs) == 2
        rs = await readers(subc, "hot", 12)
        last = await publishing(pub, "hot", 100, lambda: asyncio.sleep(0))
        await all_delivered(rs, last, stop=False)
        where = serving(region, "hot")
        assert not where[owner.address]
        assert all(where[h] for h in plan.hubs)  # both delivery hubs serve a share
        for h in plan.hubs:
            mine = {f"s{i:02d}" for i in range(12) if plan.delivery_hub(f"s{i:02d}") == h}
            assert where[h] == mine
            tail = region.hub_at(h).fanout.delivering["hot"].tail
            assert tail.upstream == owner.address and tail.polls > 0
        # The owner's gauges show the plan; each delivery hub counts the topic it delivers.
        sample = owner.metrics.registry.get_sample_value

        def serving_hubs() -> float | None:
            owner.loops.refresh_gauges()  # (reads the plan in the background the first time)
            return sample("hedwig_topic_serving_hubs", {"topic": "hot"})

        await until(lambda: serving_hubs() == 2)
        assert sample("hedwig_topic_mode", {"topic": "hot", "mode": "fan-out"}) == 1
        for h in plan.hubs:
            region.hub_at(h).loops.refresh_gauges()
            assert (
                region.hub_at(h).metrics.registry.get_sample_value("hedwig_topics_delivering") == 1
            )
        # A delivery hub's load report counts what it delivers, without listing the topic.
        busy = region.hub_at(plan.hubs[0])
        busy.loops.load_report()
        for i in range(20):
            await pub.publish("hot", b"more %d" % i)
        await until(lambda: all(r.seqs[-1] >= last + 20 for r in rs))
        report = busy.loops.load_report()
        assert report.msg_out > 0 and "hot" not in report.topic_loads
        for r in rs:
            r.task.cancel()
        # The publisher still writes to the owner; subscribing elsewhere is redirected.
        assert pub.router.owner_of("hot") == owner.address
        conn = await pub.router.connection(owner.address)
        with pytest.raises(NotResponsibleError) as err:
            await conn.request(Subscribe(request_id=conn.next_id(), topic="hot", subscriber="s00"))
        assert err.value.owner == plan.delivery_hub("s00")


async def test_every_reconfiguration_under_load_skips_nothing(region: Region) -> None:
    """single -> fan-out(2) -> fan-out(1) (a hub removed) -> fan-out(2) (added) -> single."""
    async with region.client() as pub, region.client() as subc:
        await pub.publish("re", b"first")
        rs = await readers(subc, "re", 10)

        async def reconfigure() -> None:
            for mode, hubs in (
                (PlanMode.FAN_OUT, 2),
                (PlanMode.FAN_OUT, 1),
                (PlanMode.FAN_OUT, 2),
                (PlanMode.SINGLE, 0),
            ):
                await asyncio.sleep(0.1)  # publishing goes on a while in each configuration
                await region.set_mode("re", mode, hubs)

        last = await publishing(pub, "re", 300, reconfigure)
        await all_delivered(rs, last)
        owner = region.owner("re")
        everyone = {f"s{i:02d}" for i in range(10)}
        await until(lambda: serving(region, "re")[owner.address] == everyone)  # all back home
        assert sum(h.fanout.handed_over for h in region.hubs) >= 10
        await until(lambda: all(not h.fanout.delivering for h in region.hubs))


async def test_a_lost_delivery_hub_gives_its_subscribers_to_the_others(region: Region) -> None:
    async with region.client() as pub, region.client() as subc:
        await pub.publish("lost", b"first")
        plan = await region.set_mode("lost", PlanMode.FAN_OUT, hubs=2)
        rs = await readers(subc, "lost", 8)
        victim = region.hub_at(plan.hubs[0])
        assert serving(region, "lost")[victim.address]

        async def crash() -> None:
            # As kill -9 does: its connections drop, it answers nothing, its session ends.
            region.network.sever(victim.address, refuse=True)
            victim.fanout.stop()
            victim.loops.stop()
            assert isinstance(victim.store, MemoryMetadataStore)
            victim.store.expire()

        last = await publishing(pub, "lost", 200, crash)
        await all_delivered(rs, last)
        assert serving(region, "lost")[plan.hubs[1]] == {f"s{i:02d}" for i in range(8)}
        region.hubs.remove(victim)
        with contextlib.suppress(Exception):
            await victim.stop()


async def test_reset_and_unsubscribe_act_where_the_subscription_is_served(
    region: Region,
) -> None:
    async with region.client() as pub, region.client() as subc, region.client() as admin:
        await pub.publish("rs", b"first")
        plan = await region.set_mode("rs", PlanMode.FAN_OUT, hubs=2)
        sub = await subc.subscribe("rs", "x", auto_consume=True)
        for i in range(5):
            await pub.publish("rs", b"%d" % i)
        assert [(await sub.next(5)).seq for _ in range(5)] == [2, 3, 4, 5, 6]
        # Another client resets it: the delivery hub does it and tells the subscriber.
        assert await admin.reset_subscription("rs", "x", 3) == 2
        assert [(await sub.next(5)).seq for _ in range(4)] == [3, 4, 5, 6]
        served_by = plan.delivery_hub("x")
        assert sub.connection is not None and sub.connection.address == served_by
        # Deleting it there stops the subscriber; the record is gone.
        await admin.unsubscribe("rs", "x")
        with pytest.raises(HedwigError, match="deleted"):
            await sub.next(5)
        assert await region.hubs[0].store.subscriptions.read_subscription_data("rs", "x") is None


async def test_moving_a_fan_out_topic_keeps_its_delivery_hubs_going(region: Region) -> None:
    """The topic moves between hubs (to one of its delivery hubs, then back): the tails follow
    the owner by redirect and no subscriber misses anything."""
    async with region.client() as pub, region.client() as subc:
        await pub.publish("mv", b"first")
        plan = await region.set_mode("mv", PlanMode.FAN_OUT, hubs=2)
        first_owner = region.owner("mv")
        rs = await readers(subc, "mv", 8)

        async def moves() -> None:
            for dest in (plan.hubs[0], first_owner.address):
                source = region.owner("mv")
                await source.requests.moves.move("mv", dest, MoveKind.REQUESTED, "test")
                await until(lambda d=dest: "mv" in region.hub_at(d).topics.topics)  # type: ignore[misc]
                await asyncio.sleep(0.1)  # publishing goes on a while at each owner

        last = await publishing(pub, "mv", 200, moves)
        await all_delivered(rs, last)
        tail = region.hub_at(plan.hubs[1]).fanout.delivering["mv"].tail
        assert tail.upstream == first_owner.address


async def test_deleting_a_fan_out_topic_stops_its_subscribers_at_delivery_hubs(
    region: Region,
) -> None:
    async with region.client() as pub, region.client() as subc:
        await pub.publish("del", b"first")
        await region.set_mode("del", PlanMode.FAN_OUT, hubs=2)
        sub = await subc.subscribe("del", "x")
        await pub.publish("del", b"second")
        assert (await sub.next(5)).value == b"second"
        await pub.delete_topic("del", force=True)
        with pytest.raises(HedwigError, match="deleted"):
            await sub.next(5)
        await until(lambda: all("del" not in h.fanout.delivering for h in region.hubs))


class Gate:
    """A client's network on which connections to any hub but ``open_to`` wait for ``opened``."""

    def __init__(self, network: MemoryNetwork, open_to: str) -> None:
        self.network = network
        self.open_to = open_to
        self.opened = asyncio.Event()

    async def connect(self, address: str, factory: Callable[[], P], *, timeout_s: float) -> P:
        if address != self.open_to:
            await self.opened.wait()
        return await self.network.connect(address, factory, timeout_s=timeout_s)

    async def listen(self, address: str, factory: Callable[[], asyncio.Protocol]) -> Listener:
        return await self.network.listen(address, factory)


async def test_a_subscriber_moved_by_the_plan_reads_on_until_attached_there(
    region: Region,
) -> None:
    """Make-before-break: the hub a subscriber is moved away from delivers on while it attaches
    at its delivery hub (here held up on purpose); once attached there it closes the old
    attachment, and its messages go on with nothing skipped or handed out twice."""
    async with region.client() as pub:
        await pub.publish("mbb", b"first")
        owner = region.owner("mbb")
        gate = Gate(region.network, owner.address)
        async with HedwigClient([owner.address], network=gate, retry=FAST_RETRY) as subc:
            reader = Reader(await subc.subscribe("mbb", "s"))
            await pub.publish("mbb", b"second")
            await until(lambda: reader.seqs == [2])
            plan = await region.set_mode("mbb", PlanMode.FAN_OUT, hubs=1)
            subs = owner.topics.topics["mbb"].subs
            await until(lambda: "s" in subs.leaving)
            # Moved, and cannot reach its delivery hub yet: it reads on at the owner.
            for i in range(5):
                await pub.publish("mbb", b"during %d" % i)
            await until(lambda: len(reader.seqs) == 6)
            assert serving(region, "mbb")[plan.hubs[0]] == set()
            gate.opened.set()
            await until(lambda: serving(region, "mbb")[plan.hubs[0]] == {"s"})
            # It said it attached there: the owner stopped delivering before the overlap ran out.
            await until(lambda: "s" not in subs.leaving, timeout=HAND_OVER_OVERLAP_S / 2)
            for i in range(5):
                await pub.publish("mbb", b"after %d" % i)
            await until(lambda: len(reader.seqs) == 11)
            assert reader.seqs == list(range(2, 13))
            reader.task.cancel()


async def test_a_delete_without_force_sees_subscribers_at_delivery_hubs(region: Region) -> None:
    """The owner has none attached itself; the delivery hubs do: refused, naming the hub, until
    the subscriber is gone (a delete without force never strands an attached subscriber)."""
    async with region.client() as pub, region.client() as subc:
        await pub.publish("busy", b"first")
        plan = await region.set_mode("busy", PlanMode.FAN_OUT, hubs=2)
        sub = await subc.subscribe("busy", "x")
        await pub.publish("busy", b"second")
        assert (await sub.next(5)).value == b"second"
        at = plan.delivery_hub("x")
        assert at is not None
        with pytest.raises(TopicInUseError, match=f"attached at its delivery hub {at}"):
            await pub.delete_topic("busy")
        assert (await pub.publish("busy", b"third")).seq == 3  # nothing was closed
        assert (await sub.next(5)).value == b"third"
        await sub.close()
        await until(lambda: not serving(region, "busy")[at])
        await pub.delete_topic("busy")
        assert not await region.hubs[0].store.topics.topic_exists("busy")


async def test_the_scaling_policy_fans_a_hot_topic_out_and_brings_it_back() -> None:
    """Real hubs' load reports in, the owner changes its topic's plan, subscribers follow."""
    scaling = ScalingConfig(
        hub_capacity=100, confirmations=1, cooldown_s=0, fan_out_above=0.7, back_below=0.3
    )
    async for r in memory_region(
        3, replication="2/2/2", balance=BalanceSettings(self_balance=False, scaling=scaling)
    ):
        await scale_and_back(r)


async def scale_and_back(region: Region) -> None:
    """Load reports in, the owner changes its topic's plan, subscribers follow."""
    async with region.client() as pub, region.client() as subc:
        await pub.publish("auto", b"first")
        owner = region.owner("auto")
        rs = await readers(subc, "auto", 5)

        async def report_all() -> None:
            for hub in region.hubs:
                await hub.loops.report_load()

        await report_all()
        for i in range(100):
            await pub.publish("auto", b"%d" % i)
        await until(lambda: all(r.seqs and r.seqs[-1] >= 101 for r in rs))
        await report_all()
        (change,) = await owner.loops.scale_once()
        assert change.mode is PlanMode.FAN_OUT and "msg/s" in change.reason
        plan = await region.hubs[0].store.plans.read_plan("auto")
        assert plan is not None and owner.address not in plan.value.hubs
        await until(lambda: not serving(region, "auto")[owner.address])
        # Quiet now: the rates decay, and the topic goes back to its owner alone.
        for _ in range(8):
            await asyncio.sleep(0.05)
            await report_all()
            changes = await owner.loops.scale_once()
            if changes:
                break
        assert [c.mode for c in changes] == [PlanMode.SINGLE]
        assert await region.hubs[0].store.plans.read_plan("auto") is None
        await until(lambda: len(serving(region, "auto")[owner.address]) == 5)
        last = (await pub.publish("auto", b"after")).seq
        await all_delivered(rs, last)


async def test_callers_that_find_the_alive_hubs_stale_share_one_read(
    region: Region, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second caller during the first one's registry read waits for that read. (It used to
    get the list from before the read, empty at first: the owner of a topic just spread then
    found no delivery hub alive and kept every subscriber.)"""
    fanout = region.hubs[0].fanout
    hubs = region.hubs[0].store.hubs
    read = hubs.list_hubs
    reads = 0

    async def slow_list_hubs() -> list[HubStatus]:
        nonlocal reads
        reads += 1
        await asyncio.sleep(0.05)
        return await read()

    monkeypatch.setattr(hubs, "list_hubs", slow_list_hubs)
    everyone = frozenset(h.address for h in region.hubs)
    assert (
        list(await asyncio.gather(fanout.plans.alive_hubs(), fanout.plans.alive_hubs()))
        == [everyone] * 2
    )
    assert reads == 1
    assert await fanout.plans.alive_hubs() == everyone and reads == 1  # fresh: not read again
    assert await fanout.plans.alive_hubs(fresh=True) == everyone and reads == 2


async def test_a_lagging_tail_learns_what_a_read_through_the_owner_brought(
    region: Region,
) -> None:
    """A delivery hub's tail that has not caught up (its long poll backing off after the
    owner died, say) while a subscriber's read reaches the owner: the read extends the tail,
    so everything delivered is within ``last_seq`` and the subscriber's consumes of it count.
    (They were capped at the lagging ``last_seq``: the subscriber's window filled with
    messages it had consumed and delivery to it stopped for good.)"""
    async with region.client() as pub:
        for i in range(30):
            await pub.publish("lag", b"%d" % i)
        owner = region.owner("lag")
        hub = next(h for h in region.hubs if h is not owner)
        tail = TailLog("lag", address=hub.address, store=hub.store, dialer=hub.dialer, clock=CLOCK)
        await tail.start()
        assert tail._task is not None
        tail._task.cancel()  # the poll is not getting through
        assert tail.last_seq == 30
        for i in range(30):
            await pub.publish("lag", b"more %d" % i)
        got = await tail.read(2, 1000, 1 << 20)
        assert [b.first_seq for b in got][:1] == [2] and got[-1].last_seq == 60
        assert tail.last_seq == 60
        assert tail._from_cache(45, 1000, 1 << 20)[-1].last_seq == 60  # and keeps it
        tail.stop()


async def test_a_topic_without_a_plan_costs_no_plan_read_and_learns_of_a_new_one(
    region: Region, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hub reads which topics have a plan once (with a watch), not each topic's plan:
    topics without one cost no read, watch or cache entry; a plan created later reaches the
    hub through the set's watch, as a plan's own watch would."""
    hub = region.hubs[0]
    reads: list[str] = []
    read = hub.store.plans.read_plan

    async def counted(topic: str, watch: Callable[[], None] | None = None) -> object:
        reads.append(topic)
        return await read(topic, watch)

    monkeypatch.setattr(hub.store.plans, "read_plan", counted)
    for i in range(50):
        await hub.store.topics.ensure_topic(f"plain/{i}")
        assert await hub.plans.plan(f"plain/{i}") is None
    assert reads == []
    assert hub.plans.peek("plain/7") == (True, None)
    assert not any(t.startswith("plain/") for t in hub.plans._plans)
    ingest = await region.set_mode("plain/7", PlanMode.INGEST, hubs=2)
    await until(lambda: hub.plans.peek("plain/7") == (True, ingest))
    assert set(reads) == {"plain/7"}  # its plan alone (again after each change)
    # Back to one hub: the plan's record goes (or stays, naming sealed lanes); either way
    # the hub follows it.
    single = await region.set_mode("plain/7", PlanMode.SINGLE)
    await until(lambda: hub.plans.peek("plain/7") in ((True, single), (True, None)))


async def test_a_plan_changed_while_it_is_being_read_is_read_again(
    region: Region, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watch a plan read sets can fire before the read's answer is handled. The answer
    from before the change used to be cached anyway, with no watch left to replace it: the
    hub served the old plan for good (an owner that never sent publishers to the lanes)."""
    hub = region.hubs[0]
    await hub.store.topics.ensure_topic("racy")
    await region.set_mode("racy", PlanMode.FAN_OUT)  # planned: its plan is read
    plans = hub.store.plans
    read = plans.read_plan
    answered = asyncio.Event()
    reading = asyncio.Event()

    async def slow_answer(topic: str, watch: Callable[[], None] | None = None) -> object:
        got = await read(topic, watch)  # the watch is set with this read
        if watch is not None and not answered.is_set():
            reading.set()
            await answered.wait()  # the answer is still on its way when the plan changes
        return got

    monkeypatch.setattr(plans, "read_plan", slow_answer)
    first = asyncio.get_running_loop().create_task(hub.plans.plan("racy"))
    await reading.wait()
    ingest = await region.set_mode("racy", PlanMode.INGEST, hubs=2)
    answered.set()
    await first
    await until(lambda: hub.plans.peek("racy") == (True, ingest))
    # And the watch is in place for the next change.
    single = await region.set_mode("racy", PlanMode.SINGLE)
    await until(lambda: hub.plans.peek("racy") == (True, single))
