"""The real client against real hubs, wired together in memory: ordering through moves,
failures and reconnects, re-subscription and early deliveries, in milliseconds.

Hubs run their real code on the in-memory metadata store and a ``MemoryNetwork`` (their
ledgers on a tmpfs, so fsync costs nothing); faults are made on purpose: a lost storage
replica (publishes fail and are retried), a metadata store out of reach, cut connections, a
frozen hub, graceful moves.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import pytest

from hedwig.client import HedwigClient, PublishResult, RetryPolicy, routing
from hedwig.client.routing import Router
from hedwig.clock import ManualClock
from hedwig.errors import (
    ConnectionLostError,
    HedwigError,
    MetadataError,
    NoSuchSubscriptionError,
    NoSuchTopicError,
    NotResponsibleError,
    OwnerUnreachableError,
    SubscriptionBusyError,
    TlsClosedError,
    UsageError,
)
from hedwig.hub.owning import claims, owner_watch, takeover
from hedwig.hub.owning.choices import HUBS_CACHE_S, HUBS_FRESH_S
from hedwig.hub.owning.topic import OwnedTopic
from hedwig.hub.reporting.events import LossKind
from hedwig.metadata.memory import MemoryMetadataStore
from hedwig.net import MemoryNetwork
from hedwig.net.connection import HubConnection
from hedwig.net.transport import Listener
from hedwig.protocol import (
    DeleteTopic,
    MoveKind,
    Published,
    Subscribed,
    TopicStats,
    Unsubscribe,
)
from tests.cycle_garbage import frames_left_for_the_collector
from tests.memory_region import FAST_RETRY, Region, ToldOrder, memory_region, stored
from tests.waiting import until

P = TypeVar("P", bound=asyncio.Protocol)


@pytest.fixture
async def region() -> AsyncIterator[Region]:
    async for r in memory_region(2):
        yield r


async def stored_values(client: HedwigClient, topic: str) -> list[bytes]:
    return [m.value for m in await stored(client, topic)]


async def publish_around(
    client: HedwigClient, topic: str, count: int, fault: Callable[[], Awaitable[None]]
) -> list[int]:
    """Publish ``count`` messages pipelined, with ``fault`` in the middle; the acked seqs.
    Whatever the fault, the results come in the order the messages were published."""
    futures = [client.publish_nowait(topic, b"m%05d" % i) for i in range(count // 2)]
    await asyncio.sleep(0)  # the first batches are on their way
    await fault()
    futures += [client.publish_nowait(topic, b"m%05d" % i) for i in range(count // 2, count)]
    told = tell_order(futures)
    seqs = [(await f).seq for f in futures]
    await asyncio.sleep(0)
    assert told == list(range(count))
    return seqs


def tell_order(futures: list[asyncio.Future[PublishResult]]) -> list[int]:
    """The indexes of ``futures`` in the order they resolve (filled in as they do)."""
    told = ToldOrder()
    for f in futures:
        told.add(f)
    return told.order


def expected(count: int) -> list[bytes]:
    return [b"m%05d" % i for i in range(count)]


# ordering ---------------------------------------------------------------------------------


async def test_order_kept_through_a_graceful_move(region: Region) -> None:
    async with region.client(max_batch_messages=50) as c:
        await c.publish("move", b"warm-up")
        source = region.owner("move")
        dest = next(h for h in region.hubs if h is not source)

        async def move() -> None:
            await source.requests.moves.move("move", dest.address, MoveKind.REQUESTED, "test")

        seqs = await publish_around(c, "move", 2000, move)
        assert seqs == list(range(2, 2002))
        assert region.owner("move") is dest
        assert await stored_values(c, "move") == [b"warm-up", *expected(2000)]


async def test_order_kept_through_failed_batches(region: Region) -> None:
    """The owner loses its storage replica with batches in flight: its log breaks, it gives
    the topic up, and the other hub takes it over. Every failed batch is sent again, in
    order, and stored once."""
    async with region.client(max_batch_messages=20) as c:
        await c.publish("fail", b"warm-up")
        owner = region.owner("fail")
        replica = next(h for h in region.hubs if h is not owner)

        async def cut() -> None:
            # Every connection to the replica, the owner's too, for a moment.
            region.network.sever(replica.address, refuse=True)
            asyncio.get_running_loop().call_later(0.2, region.network.restore, replica.address)

        seqs = await publish_around(c, "fail", 1000, cut)
        assert seqs == list(range(2, 1002))
        assert await stored_values(c, "fail") == [b"warm-up", *expected(1000)]
        # The owner gave its record up and left the topic to the other hub.
        assert region.owner("fail") is replica
        assert owner.topics.stats.losses == 1


async def test_publishing_goes_on_while_the_metadata_store_is_out_of_reach(
    region: Region,
) -> None:
    """No request of an owned topic needs the store: publishes, deliveries and reads go on
    while the owner's session is suspended, and the consume marks catch up afterwards."""
    async with region.client(max_batch_messages=20) as c:
        sub = await c.subscribe("outage", "reader")
        await c.publish("outage", b"warm-up")
        owner = region.owner("outage")
        store = owner.store
        assert isinstance(store, MemoryMetadataStore)
        store.disconnect()
        try:
            results = [await c.publish("outage", b"during-%d" % i) for i in range(50)]
            assert [r.seq for r in results] == list(range(2, 52))
            got = [await sub.next(2) for _ in range(51)]
            assert [m.seq for m in got] == list(range(1, 52))
            sub.consume(51)
            assert await stored_values(c, "outage") == [b"warm-up"] + [
                b"during-%d" % i for i in range(50)
            ]
            assert owner.topics.stats.losses == 0
        finally:
            store.reconnect()
        sub_state = owner.topics.topics["outage"].subscriptions.get("reader")
        assert sub_state is not None

        async def flushed() -> bool:
            await sub_state.flush()
            return sub_state.persisted_seq == 51

        async with asyncio.timeout(5):
            while not await flushed():
                await asyncio.sleep(0.05)


async def test_an_owner_cut_off_from_the_store_steps_down_once_fenced() -> None:
    """The owner cannot reach the store and its session ends there: another hub takes the
    topic over and fences the ledger. The old owner, still cut off, acknowledges nothing more;
    it learns from the fenced replicas that it lost the topic, and its subscriber moves on."""
    async for region in memory_region(3):
        await cut_off_owner_steps_down(region)


async def cut_off_owner_steps_down(region: Region) -> None:
    async with region.client(max_batch_messages=20) as c:
        await c.publish("partitioned", b"before")
        old = region.owner("partitioned")
        new = next(h for h in region.hubs if h is not old)
        watcher = await c.subscribe("partitioned", "watcher")
        store = old.store
        assert isinstance(store, MemoryMetadataStore)
        store.disconnect()
        store.expire()  # the store's view: the session timed out; the owner does not know yet
        await asyncio.sleep(HUBS_CACHE_S + 0.1)  # the other hub sees it gone from the registry
        # A client of the other hub publishes there: it claims the topic, which fences the old
        # owner's ledger first.
        async with HedwigClient([new.address], network=region.network) as other:
            r = await other.publish("partitioned", b"after")
        now = region.owner_among("partitioned", [h for h in region.hubs if h is not old])
        assert r.seq == 2 and now is not None
        # The old owner finds its ledger fenced (after the session timeout) and drops it.
        async with asyncio.timeout(10):
            while "partitioned" in old.topics.topics:
                await asyncio.sleep(0.05)
        assert await stored_values(c, "partitioned") == [b"before", b"after"]
        # The subscriber was attached to the old owner: it followed the topic to the new one.
        assert (await watcher.next(10)).value == b"after"
        store.reconnect()


async def test_order_kept_through_a_reconnect(region: Region) -> None:
    """Every connection to the owner is cut with batches in flight: some were stored, some
    not; the client reconnects, re-sends them, and the duplicates are recognised."""
    async with region.client(max_batch_messages=25) as c:
        await c.publish("cut", b"warm-up")
        owner = region.owner("cut")

        async def cut() -> None:
            region.network.sever(owner.address)

        seqs = await publish_around(c, "cut", 1000, cut)
        values = await stored_values(c, "cut")
        assert values == [b"warm-up", *expected(1000)]
        assert sorted(s for s in seqs if s) == sorted(set(s for s in seqs if s))


async def test_results_come_in_publishing_order_when_a_later_batch_is_answered_first(
    region: Region, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hub stores batches in order, but the answer to one comes late (as when its first
    answer was lost and the re-send is answered as a duplicate after the next batch): the
    futures still resolve in the order the messages were published."""
    async with region.client(max_batch_messages=1) as c:
        await c.publish("late", b"warm-up")
        real = OwnedTopic.publish
        delayed: list[int] = []

        async def answer_late(
            self: OwnedTopic, peer: Any, req: Any, check: Any = None
        ) -> Published:
            answer = await real(self, peer, req, check)
            if req.publisher_seq == 2:
                delayed.append(answer.first_seq)
                await asyncio.sleep(
                    0.2
                )  # the test: stored already, its answer comes after the next
            return answer

        monkeypatch.setattr(OwnedTopic, "publish", answer_late)
        futures = [c.publish_nowait("late", b"m%d" % i) for i in range(4)]
        told = tell_order(futures)
        seqs = [(await f).seq for f in futures]
        await asyncio.sleep(0)  # the done callbacks of those resolved with the last one
        assert delayed == [2]
        assert told == [0, 1, 2, 3]
        assert seqs == [2, 3, 4, 5]


async def test_new_topic_pipelined_to_several_hubs_stays_ordered(region: Region) -> None:
    """Nobody owns the topic yet: batches must not reach two would-be owners at once."""
    async with region.client(max_batch_messages=10) as c:
        seqs = [(await f).seq for f in [c.publish_nowait("fresh", b"%d" % i) for i in range(300)]]
        assert seqs == list(range(1, 301))


# subscribers ------------------------------------------------------------------------------


async def test_subscriber_resubscribes_after_its_connection_is_cut(region: Region) -> None:
    async with region.client() as pub, region.client() as subc:
        sub = await subc.subscribe("resub", "s")
        for i in range(50):
            await pub.publish("resub", b"%d" % i)
        got = [await sub.next(2) for _ in range(50)]
        for m in got[:20]:
            sub.consume(m.seq)
        region.network.sever(region.owner("resub").address)
        for i in range(50, 100):
            await pub.publish("resub", b"%d" % i)
        while len(got) < 100:
            got.append(await sub.next(2))
        assert [m.seq for m in got] == list(range(1, 101))  # redeliveries dropped, none lost
        assert sub.resubscriptions >= 1


async def test_subscriber_follows_a_move(region: Region) -> None:
    async with region.client() as c:
        sub = await c.subscribe("follow", "s", auto_consume=True)
        await c.publish("follow", b"before")
        assert (await sub.next(2)).value == b"before"
        dest = await region.move_away("follow")
        await c.publish("follow", b"after")
        assert (await sub.next(2)).value == b"after"
        assert region.owner("follow") is dest


async def test_messages_handed_out_in_lists_keep_their_order_with_next(region: Region) -> None:
    """``batches`` (Kafka's ``consume(num_messages)``) hands out lists from one delivered
    batch each, and shares one order with ``next``: a list goes on where ``next`` stopped in a
    batch, ``next`` where a list stopped. With ``auto_consume``, a list is consumed when the
    next one is asked for."""
    async with region.client(max_batch_messages=50) as c:
        sub = await c.subscribe("lists", "s", auto_consume=True)
        await c.publish_batch("lists", [b"%d" % i for i in range(200)])
        await c.publish("lists", b"k", key=b"key")
        seen = [(await sub.next(2)).seq]
        lists = sub.batches(7)
        while seen[-1] < 201:
            got = await asyncio.wait_for(lists.__anext__(), 2)
            assert 1 <= len(got) <= 7
            assert len({m.lane for m in got}) == 1
            seen += [m.seq for m in got]
            if len(seen) == 30:
                seen.append((await sub.next(2)).seq)
        assert seen == list(range(1, 202))
        await c.publish("lists", b"last")
        assert [m.value for m in await asyncio.wait_for(lists.__anext__(), 2)] == [b"last"]
        assert await sub.sync()
        with pytest.raises(UsageError):
            sub.batches(0)
    # Everything handed out before the last list was consumed: attaching again starts there.
    async with region.client() as c:
        again = await c.subscribe("lists", "s")
        assert (await again.next(2)).value == b"last"


async def test_deliveries_that_overtake_the_subscribed_answer_are_held(region: Region) -> None:
    """Attaching to a subscription with a backlog: the hub writes SUBSCRIBED and the first
    DELIVER in one go, and they arrive in one read, before the subscribe call has its answer."""
    async with region.client() as c:
        sub = await c.subscribe("early", "s")
        await sub.close()
        for i in range(30):
            await c.publish("early", b"%d" % i)
        sub = await c.subscribe("early", "s")
        got = [await sub.next(2) for _ in range(30)]
        assert [m.seq for m in got] == list(range(1, 31))
        assert sub.held_deliveries >= 1


async def test_a_subscription_taken_over_stops_and_does_not_fight_back(region: Region) -> None:
    async with region.client() as a, region.client() as b:
        first = await a.subscribe("taken", "s")
        await b.subscribe("taken", "s", force_attach=True)
        with pytest.raises(SubscriptionBusyError):
            await first.next(2)
        assert first.resubscriptions == 0


# timeouts on the injected clock -----------------------------------------------------------


async def test_a_frozen_hub_is_dropped_on_the_clients_clock(region: Region) -> None:
    """Keepalive runs on the client's clock: a hub that stops answering is dropped once that
    clock has moved past the keepalive interval and timeout, however little real time passed."""
    clock = ManualClock()
    async with region.client(clock=clock) as c:
        await c.publish("frozen", b"x")
        owner = region.owner("frozen").address
        conn = await c.connection(owner)
        region.network.freeze(owner)
        for _ in range(40):  # 4 s of the client's clock, in steps
            clock.advance(0.1)
            await asyncio.sleep(0.001)
            if conn.closed:
                break
        assert conn.closed
        region.network.thaw(owner)


class CutOff:
    """A client's view of the network in which some hubs cannot be reached (a partition
    between this client and them; the hubs still reach each other)."""

    def __init__(self, network: MemoryNetwork, unreachable: set[str]) -> None:
        self.network = network
        self.unreachable = unreachable
        self.attempts: dict[str, int] = {}

    async def connect(self, address: str, factory: Callable[[], P], *, timeout_s: float) -> P:
        self.attempts[address] = self.attempts.get(address, 0) + 1
        if address in self.unreachable:
            raise ConnectionLostError(f"cannot connect to hub {address}: unreachable")
        return await self.network.connect(address, factory, timeout_s=timeout_s)

    async def listen(self, address: str, factory: Callable[[], asyncio.Protocol]) -> Listener:
        return await self.network.listen(address, factory)


class ClosedAtOnce(CutOff):
    """Connections to some hubs end as a TLS connection a hub closes right after accepting
    it: ``times`` more times, then they go through."""

    def __init__(self, network: MemoryNetwork, times: int) -> None:
        super().__init__(network, set())
        self.times = times

    async def connect(self, address: str, factory: Callable[[], P], *, timeout_s: float) -> P:
        self.attempts[address] = self.attempts.get(address, 0) + 1
        if self.times > 0:
            self.times -= 1
            raise TlsClosedError(f"hub {address} closed the TLS connection as soon as it was made")
        return await self.network.connect(address, factory, timeout_s=timeout_s)


async def test_a_tls_connection_closed_at_once_is_tried_again_once(region: Region) -> None:
    """A hub killed as a client connects looks like a hub refusing the client's certificate
    (under TLS 1.3 both close at once). One more connection tells them apart: a dead hub then
    refuses the TCP connection (retried like any lost hub), a refusal happens again and is
    final at once, as bad credentials must be."""
    once = ClosedAtOnce(region.network, times=1)
    async with HedwigClient([region.hubs[0].address], network=once, retry=FAST_RETRY) as c:
        assert (await c.publish("closed-once", b"m")).seq == 1
    always = ClosedAtOnce(region.network, times=1_000)
    async with HedwigClient([region.hubs[0].address], network=always, retry=FAST_RETRY) as c:
        started = asyncio.get_running_loop().time()
        with pytest.raises(TlsClosedError):
            await c.publish("closed-once", b"n")
        assert asyncio.get_running_loop().time() - started < 2
    assert always.attempts == {region.hubs[0].address: 2}


async def test_a_client_cut_off_from_a_healthy_owner_says_what_it_waits_for() -> None:
    """The owner is alive, so the other hubs keep naming it and nobody may take its topic over:
    the client cannot go elsewhere. It waits, asking the other hubs instead of the owner again
    and again, tells its ``on_wait`` hook why, and goes on once the owner is reachable."""
    async for region in memory_region(3):
        await cut_off_client_waits(region)


async def cut_off_client_waits(region: Region) -> None:
    async with region.client() as c:
        await c.publish("island", b"before")
    owner = region.owner("island")
    view = CutOff(region.network, {owner.address})
    waits: list[HedwigError] = []
    async with HedwigClient(
        [h.address for h in region.hubs],
        network=view,
        retry=RetryPolicy(initial_delay_s=0.01, max_delay_s=0.05, deadline_s=10),
        on_wait=lambda _topic, why, _s: waits.append(why),
    ) as cut_off:
        pending = asyncio.ensure_future(cut_off.publish("island", b"during"))
        async with asyncio.timeout(5):
            while sum(isinstance(w, OwnerUnreachableError) for w in waits) < 10:
                await asyncio.sleep(0.01)
        unreachable = [w for w in waits if isinstance(w, OwnerUnreachableError)]
        assert isinstance(unreachable[0], OwnerUnreachableError)
        assert unreachable[0].owner == owner.address
        assert "does not answer this client" in str(unreachable[0])
        # Ten rounds of waiting, but the owner itself was tried only once in them.
        assert view.attempts[owner.address] == 1
        view.unreachable.clear()  # the partition heals
        result = await asyncio.wait_for(pending, 10)
    assert result.seq == 2 and region.owner("island") is owner


async def test_a_hub_that_failed_is_tried_last_once_its_hold_runs_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client with no owner known for a topic goes round the hubs. One that failed it and
    has not answered since is passed over even after its hold: behind a partition, dialling
    it costs a connect timeout while the other hubs answer at once (and would redirect the
    client to it if it owned the topic)."""
    monkeypatch.setattr(routing, "UNREACHABLE_S", 0.05)
    async for region in memory_region(3):
        gone = region.hubs[0]
        topics = []
        async with region.client() as c:
            for n in range(40):
                await c.publish(f"round/{n}", b"m")
                if region.owner(f"round/{n}") is not gone:
                    topics.append(f"round/{n}")
        assert len(topics) >= 12
        view = CutOff(region.network, {gone.address})
        async with HedwigClient(
            [h.address for h in region.hubs], network=view, retry=FAST_RETRY
        ) as c:
            for topic in topics[:12]:
                assert (await c.publish(topic, b"n")).seq == 2
                await asyncio.sleep(0.06)  # the hold on the hub that failed is over
        assert view.attempts[gone.address] == 1


async def test_an_unowned_topic_is_not_sent_to_a_hub_that_just_died() -> None:
    """A hub's session just ended, so its topics are unowned. A hub asked for one chooses the
    owner from a list of alive hubs read at most ``HUBS_FRESH_S`` ago, not from the list it
    keeps for ``HUBS_CACHE_S`` (which still shows the dead hub: clients sent there would wait
    until the choice ran out)."""
    async for region in memory_region(3):
        dead, asked, _ = region.hubs
        choices = asked.topics.choices
        # Past its share, so the placement policy chooses (within it, the hub would keep
        # every topic asked of it: ``keeps_here``).
        choices.owned = lambda: 1_000
        await choices.owner_for("warm")  # the alive hubs are read and kept
        store = dead.store
        assert isinstance(store, MemoryMetadataStore)
        store.disconnect()
        store.expire()
        await asyncio.sleep(HUBS_FRESH_S + 0.05)
        assert HUBS_FRESH_S + 0.05 < HUBS_CACHE_S
        chosen = {await choices.owner_for(f"orphan/{n}") for n in range(30)}
        assert dead.address not in chosen and len(chosen) == 2
        store.reconnect()


async def test_a_move_told_with_the_subscribed_answer_is_not_missed(region: Region) -> None:
    """The topic moves right after the hub answered a re-subscription, and its TOPIC_MOVED is
    handled before the subscriber has taken the answer in. Attached at a hub that no longer
    serves the topic, it would wait for ever; it subscribes again instead."""
    async with region.client() as c:
        sub = await c.subscribe("racing", "r")
        await c.publish("racing", b"before")
        assert (await sub.next(5)).value == b"before"
        owner = region.owner("racing")
        dest = next(h for h in region.hubs if h is not owner)
        original = c.router.topic_request
        armed = [True]

        async def racing(topic: str, make: Any, **kw: Any) -> Any:
            answer, conn = await original(topic, make, **kw)
            if isinstance(answer, Subscribed) and armed:
                armed.clear()
                await owner.requests.moves.move(topic, dest.address, MoveKind.REQUESTED, "race")
                await asyncio.sleep(0.05)  # its TOPIC_MOVED reaches the client first
            return answer, conn

        c.router.topic_request = racing  # type: ignore[method-assign]
        region.network.sever(owner.address)  # the subscriber re-subscribes
        async with asyncio.timeout(5):
            while armed:
                await asyncio.sleep(0.01)
        r = await c.publish("racing", b"after")
        assert r.seq == 2 and region.owner("racing") is dest
        assert (await sub.next(5)).value == b"after"


async def test_a_pure_subscriber_follows_a_graceful_move(region: Region) -> None:
    """A subscriber that does not publish on its connection is told of a hand-off too. The
    hub used to detach subscriptions before collecting whom to tell, so such a subscriber
    stayed attached to a hub that no longer served the topic and waited for ever."""
    async with region.client() as reader, region.client() as writer:
        sub = await reader.subscribe("handed", "r")
        await writer.publish("handed", b"before")
        assert (await sub.next(5)).value == b"before"
        dest = await region.move_away("handed")
        await writer.publish("handed", b"after")
        assert region.owner("handed") is dest
        assert (await sub.next(5)).value == b"after"
        assert sub.resubscriptions >= 1


async def test_a_subscriber_goes_on_when_its_old_owner_never_wrote_the_mark(region: Region) -> None:
    """The owner lost the topic before it could write the consume mark (its metadata store
    was out of reach): the next owner starts from an older mark and redelivers what this
    subscriber has consumed already. The subscriber says its mark again on attaching; before,
    it dropped the redeliveries as seen without consuming them, they filled the message window
    and the hub sent nothing more (found by the one-way partition from ZooKeeper)."""
    async with region.client() as writer, region.client() as reader:
        sub = await reader.subscribe("marks", "s", message_window=5)
        for i in range(20):
            await writer.publish("marks", b"%d" % i)
        for i in range(20):
            m = await sub.next(5)
            assert m.value == b"%d" % i
            sub.consume(m.seq)
        await sub.sync()
        owner = region.owner("marks")
        got = await owner.store.subscriptions.read_subscription_data("marks", "s")
        # Not written yet (every 50 messages or each second): the record is behind.
        assert got is not None and got.value.state is not None
        assert got.value.state.consumed_seq < 20
        owner.topics.lose("marks", LossKind.SESSION, "ZooKeeper session expired")
        for i in range(20, 40):
            await writer.publish("marks", b"%d" % i)
        for i in range(20, 40):
            m = await sub.next(5)
            assert m.value == b"%d" % i
            sub.consume(m.seq)


async def test_the_next_owner_knows_the_last_batch_of_a_long_log(
    region: Region, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a change of owner the duplicate table is rebuilt from the end of the log, and
    must hold its very last batch: that is the one whose acknowledgement the previous owner
    most likely could not send, so the one its publisher re-sends. With a log longer than the
    window read back, the read stopped one message short of the end, and the re-sent batch was
    stored a second time (found by the lab's failover rounds: "stored more than once")."""
    monkeypatch.setattr(takeover, "DEDUP_WINDOW", 50)
    async with region.client(publisher_id="p") as c:
        for i in range(120):
            await c.publish("long", b"%d" % i)
        owner = region.owner("long")
        owner.topics.lose("long", LossKind.SESSION, "ZooKeeper session expired")
        r = await c.publish("long", b"next")  # claims it again, reading the log back
        assert r.seq == 121
        table = region.owner("long").topics.topics["long"].publisher_table
        for pseq in (120, 119, 71):  # the end of the log, and inside the window read back
            known = await table.check("p", pseq, 1)
            assert known is not None and known.first_seq == pseq, pseq


async def test_unowned_topics_are_not_sent_to_a_hub_this_hub_cannot_reach() -> None:
    """A hub that just failed to reach another (its storage requests there failed) does not
    send clients of unowned topics to it: cut off by a partition, that hub stays registered
    until its session expires, and clients sent there would wait for that (found by the lab's
    failover rounds: an owner whose two-replica ledger lost a replica gave its topics up and
    redirected them to the very hub that had gone)."""
    async for region in memory_region(3):
        a, b, c = region.hubs
        a.choices.owned = lambda: 1_000  # past its share: the policy chooses (``keeps_here``)
        chosen = {await a.choices.owner_for(f"t{i}") for i in range(60)}
        assert b.address in chosen  # reachable: it gets its share
        a.replicas.suspect(b.hub_id)
        chosen = {await a.choices.owner_for(f"u{i}") for i in range(60)}
        assert b.address not in chosen and chosen
        # Cut off from every other hub (this one's own link is the broken one, say) and unable
        # to store the topic itself: it still names one, which the clients may reach.
        a.replicas.suspect(c.hub_id)
        a.choices.cannot_store("v")
        assert await a.choices.owner_for("v") in {b.address, c.address}


async def test_two_hubs_that_lost_a_topic_do_not_send_it_back_and_forth() -> None:
    """Two hubs each lost a topic when its log failed (fenced by a new owner, say; found by the
    lab's failover rounds), then its owner died. Each held the topic off for 30 s and sent
    its clients to the other, which sent them back: the topic had no owner until a hold ran
    out. A hub that reaches an ack quorum of alive hubs is fit to store it again."""
    async for region in memory_region(3):
        a, b, dead = region.hubs
        store = dead.store
        assert isinstance(store, MemoryMetadataStore)
        store.disconnect()
        store.expire()
        for hub in (a, b):
            hub.choices.cannot_store("bounced")
        async with HedwigClient(
            [a.address, b.address],
            network=region.network,
            retry=RetryPolicy(initial_delay_s=0.005, max_delay_s=0.05, deadline_s=3),
        ) as c:
            assert (await c.publish("bounced", b"m")).seq == 1
        # A hub that still cannot reach the others holds the topic off as before.
        a.replicas.suspect(b.hub_id)
        a.choices.cannot_store("held")
        assert not a.choices.can_store("held") and a.choices.can_store("other")
        store.reconnect()


async def test_a_hub_registers_again_though_the_store_refuses_the_first_attempt(
    region: Region,
) -> None:
    """After a session loss a hub registers again. A store that has just come back (etcd
    restarted under load) refused that once, and the hub stayed unregistered for good: out of
    every ensemble and placement ("only 1 hubs are usable" on the others). It retries."""
    hub = region.hubs[0]
    await hub.store.hubs.unregister_hub(hub.address)
    list_hubs = hub.store.hubs.list_hubs
    refusals = [MetadataError("etcd unavailable (UNAVAILABLE)")]

    async def flaky() -> Any:
        if refusals:
            raise refusals.pop()
        return await list_hubs()

    hub.store.hubs.list_hubs = flaky  # type: ignore[method-assign]
    await asyncio.wait_for(hub.registration.reregister(), 5)
    assert not refusals
    assert hub.address in {h.address for h in await list_hubs() if h.alive}


async def test_a_topic_just_created_is_claimed_without_reading_what_it_cannot_have(
    region: Region,
) -> None:
    """The hub that creates a topic knows it has no owner, configuration or ledgers yet, and
    skips those three reads; a topic that existed is read. A record made meanwhile
    still fails the claim's compare-and-set (the conformance suite holds ``ensure_topic`` to
    saying whether it created the topic)."""
    reads: list[str] = []
    for hub in region.hubs:
        store = hub.store
        for manager, name in (
            (store.ownership, "read_owner_info"),
            (store.topics, "read_topic_config"),
            (store.persistence, "read_topic_persistence_info"),
        ):
            real = getattr(manager, name)

            async def counted(topic: str, _real: Any = real, _name: str = name) -> Any:
                reads.append(_name)
                return await _real(topic)

            setattr(manager, name, counted)
    async with region.client() as c:
        assert (await c.publish("new-topic", b"m")).seq == 1
        # At most the owner, read by a hub before it redirects or creates the topic.
        assert reads in ([], ["read_owner_info"])
        owner = region.owner("new-topic")
        assert await owner.topics.release("new-topic", "test")
        assert (await c.publish("new-topic", b"n")).seq == 2
        # Its configuration comes with the claim where the store reads it there (memory and
        # etcd); its log is read. Its owner is not: topics asked of this hub were unowned
        # lately, so the claim went first (``CLAIM_FIRST``) and would have named any owner.
        assert "read_topic_persistence_info" in reads
        assert "read_topic_config" not in reads


async def test_a_hub_told_to_claim_an_existing_topic_claims_it_without_reading_the_owner_first(
    region: Region,
) -> None:
    """A take-over's claim (a hub sent here to claim a topic that exists) is the claim
    itself: the owner record's compare-and-set, whose record is in the way learnt from the
    failed claim, and the topic's configuration from the one that succeeds, not from reads
    before or after them."""
    a, b = region.hubs
    async with region.client() as c:
        assert (await c.publish("existing", b"m")).seq == 1
    owner = region.owner("existing")
    other = b if owner is a else a
    reads: list[str] = []
    for manager, name in (
        (other.store.ownership, "read_owner_info"),
        (other.store.topics, "read_topic_config"),
    ):
        real = getattr(manager, name)

        async def counted(topic: str, _real: Any = real, _name: str = name) -> Any:
            reads.append(_name)
            return await _real(topic)

        setattr(manager, name, counted)
    # Owned elsewhere: refused, with the owner named, and nothing read.
    with pytest.raises(NotResponsibleError) as told:
        await other.topics.acquire("existing", redirected=True)
    assert told.value.owner == owner.address and reads == []
    # Unowned (released): claimed, its history kept, and neither its owner nor its
    # configuration read apart (the memory store reads it in the claim, as etcd does).
    assert await owner.topics.release("existing", "test")
    await other.topics.acquire("existing", redirected=True)
    assert reads == [] and region.owner("existing") is other
    async with region.client() as c:
        assert (await c.publish("existing", b"n")).seq == 2


async def test_a_hub_told_to_claim_claims_though_a_request_it_redirected_is_pending(
    region: Region,
) -> None:
    """A hand-off's destination is asked to claim (redirected) while a client's plain request
    for the topic is being redirected elsewhere (this hub had chosen another hub for it a
    moment ago). The request told to claim must claim, not share the other's redirect; and
    requests that waited claim one at a time: two claims at once took each other's record
    ("ownership record removed")."""
    a, b = region.hubs
    a.choices.assign("told", b.address)
    read_owner = a.store.ownership.read_owner_info

    async def slow_read(topic: str) -> Any:
        await asyncio.sleep(0.01)  # a store round trip: the requests overlap
        return await read_owner(topic)

    a.store.ownership.read_owner_info = slow_read  # type: ignore[method-assign]
    plain, told, again = await asyncio.gather(
        a.topics.acquire("told", redirected=False),
        a.topics.acquire("told", redirected=True),
        a.topics.acquire("told", redirected=True),
        return_exceptions=True,
    )
    assert isinstance(plain, NotResponsibleError) and plain.owner == b.address
    assert told is again and told is a.topics.topics["told"]
    assert region.owner("told") is a and a.topics.stats.losses == 0


async def test_a_request_redirected_to_the_old_owner_after_a_hand_off_goes_on(
    region: Region,
) -> None:
    """A client redirected to the owner before a hand-off arrives there just after it, with
    the redirected flag that tells a hub to claim: the old owner sends it on to the hand-off's
    destination rather than claim the topic back from under it (the move would not happen)."""
    async with region.client() as c:
        await c.publish("handed", b"warm-up")
        source = region.owner("handed")
        dest = next(h for h in region.hubs if h is not source)
        assert await source.requests.moves.move("handed", dest.address, MoveKind.REQUESTED, "test")
        with pytest.raises(NotResponsibleError) as told:
            await source.topics.acquire("handed", redirected=True)
        assert told.value.owner == dest.address
        await until(lambda: "handed" in dest.topics.topics)
        assert (await c.publish("handed", b"after")).seq == 2


async def test_a_move_during_the_owners_claim_waits_for_it(region: Region) -> None:
    """A move that reaches the owner between its writing the owner record and its serving
    the topic waits for the claim to finish, then hands the topic over (it used to find the
    topic not served here, ask the destination, which saw the record, and move nothing)."""
    a, b = region.hubs
    # A new topic's record is written with the topic (``claim_topic``).
    claim_new = a.store.ownership.claim_topic
    written = asyncio.Event()

    async def slow_write(*args: Any, **kwargs: Any) -> Any:
        version = await claim_new(*args, **kwargs)
        written.set()
        await asyncio.sleep(0.05)  # the record is there; the take-over is not done
        return version

    a.store.ownership.claim_topic = slow_write  # type: ignore[method-assign]
    claim = asyncio.create_task(a.topics.acquire("claiming", redirected=True))
    await written.wait()
    assert "claiming" not in a.topics.topics
    assert await a.requests.moves.move("claiming", b.address, MoveKind.REQUESTED, "test")
    await claim
    await until(lambda: "claiming" in b.topics.topics)
    assert "claiming" not in a.topics.topics


class Unanswered(CutOff):
    """Connections to ``silent`` hubs are never answered (a partition drops the SYN): each
    attempt fails once its timeout has passed. Records the timeout each attempt was given."""

    def __init__(self, network: MemoryNetwork, silent: set[str]) -> None:
        super().__init__(network, set())
        self.silent = silent
        self.timeouts: list[float] = []

    async def connect(self, address: str, factory: Callable[[], P], *, timeout_s: float) -> P:
        if address in self.silent:
            self.timeouts.append(timeout_s)
            raise ConnectionLostError(f"cannot connect to hub {address}: timed out")
        return await self.network.connect(address, factory, timeout_s=timeout_s)


async def test_a_hub_behind_a_partition_is_held_off_longer_each_time_and_dialled_briefly() -> None:
    """Behind a partition a connect waits for nothing. A hub that failed is skipped for 2 s,
    then 4, 8, up to 16 (failures of one outage count once), and when it is tried again it
    gets one second to answer, not the full connect timeout: a client that spent five seconds
    on it, while another hub could take its topics over, would wait the partition out."""
    clock = ManualClock()
    view = Unanswered(MemoryNetwork(), {"memory:1"})
    router = Router(
        ["memory:1", "memory:2"],
        retry=FAST_RETRY,
        request_timeout_s=5.0,
        connect_timeout_s=5.0,
        clock=clock,
        network=view,
        on_event=lambda _c, _e: None,
        on_close=lambda _c: None,
    )
    for hold in (2.0, 4.0, 8.0, 16.0, 16.0):
        with pytest.raises(ConnectionLostError):
            await router.connection("memory:1")
        router._failed("memory:1")
        router._failed("memory:1")  # the same outage, seen by another request
        clock.advance(hold - 0.1)
        assert router.unreachable("memory:1")
        clock.advance(0.2)
        assert not router.unreachable("memory:1")
    assert view.timeouts == [5.0, 1.0, 1.0, 1.0, 1.0]


async def test_placement_and_ensembles_share_one_registry_read(
    region: Region, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Callers that find the hub list too old share one read of the registry, and a failed
    read reaches each of them. (Every claim of a wave of hundreds read and parsed every hub's
    load report, for its placement and again for its ledger's ensemble: a fifth of a
    claiming hub's time.)"""
    hub = region.hubs[0]
    store_hubs = hub.store.hubs
    read = store_hubs.list_hubs
    reads = 0

    async def slow_read() -> Any:
        nonlocal reads
        reads += 1
        await asyncio.sleep(0.02)
        return await read()

    monkeypatch.setattr(store_hubs, "list_hubs", slow_read)
    hub.choices._hubs = None
    ensembles = asyncio.gather(*(hub.choices.ensemble(2, 1) for _ in range(20)))
    owners = asyncio.gather(*(hub.choices.owner_for(f"wave-{i}") for i in range(20)))
    got, _ = await asyncio.gather(ensembles, owners)
    assert reads == 1
    everyone = {h.hub_id for h in region.hubs}
    assert all(set(e) == everyone for e in got)

    async def failing_read() -> Any:
        nonlocal reads
        reads += 1
        await asyncio.sleep(0.01)
        raise MetadataError("the store is out of reach")

    monkeypatch.setattr(store_hubs, "list_hubs", failing_read)
    hub.choices._hubs = None
    results = await asyncio.gather(
        hub.choices.ensemble(2, 1), hub.choices.ensemble(2, 1), return_exceptions=True
    )
    assert reads == 2 and all(isinstance(r, MetadataError) for r in results)
    monkeypatch.setattr(store_hubs, "list_hubs", read)
    assert set(await hub.choices.ensemble(2, 1)) == everyone  # the next call reads again


async def test_every_owner_watch_firing_at_once_is_checked_a_bounded_number_at_a_time(
    region: Region,
) -> None:
    """A watch stream that breaks fires every owner watch of the hub at once. Each used to
    start a task reading its record: a hub of 300,000 topics took gigabytes. They are checked
    ``OWNER_CHECKS_AT_ONCE`` at a time, each still owned topic watched again, and one whose
    record went is let go."""
    a, b = region.hubs
    names = [f"many/{i:04d}" for i in range(1_000)]
    for name in names:
        a.choices.assign(name, a.address)
    await asyncio.gather(*(a.topics.acquire(n, redirected=True) for n in names))
    read_owner = a.store.ownership.read_owner_info
    reading = most = 0

    async def counted(topic: str) -> Any:
        nonlocal reading, most
        reading += 1
        most = max(most, reading)
        try:
            await asyncio.sleep(0.001)
            return await read_owner(topic)
        finally:
            reading -= 1

    a.store.ownership.read_owner_info = counted  # type: ignore[method-assign]
    tasks = len(asyncio.all_tasks())
    by_topic = a.topics.claims
    assert isinstance(by_topic, claims.TopicClaims)
    for name in names:
        by_topic.owners.fired(name)
    assert len(asyncio.all_tasks()) <= tasks + 1
    await until(lambda: reading == 0 and not by_topic.owners.to_check)
    assert 1 < most <= owner_watch.OWNER_CHECKS_AT_ONCE
    assert set(names) <= set(a.topics.topics) and a.topics.stats.losses == 0
    # Watched again: the record of one removed, the hub lets the topic go.
    got = await read_owner("many/0007")
    assert got is not None
    await b.store.ownership.delete_owner_info("many/0007", got.version)
    await until(lambda: "many/0007" not in a.topics.topics)


async def test_a_hub_stopping_hands_its_topics_over_a_bounded_number_at_a_time(
    region: Region,
) -> None:
    """All at once, a hub of 300,000 topics that stopped took gigabytes (a task and a store
    request each)."""
    a = region.hubs[0]
    names = [f"leaving/{i:04d}" for i in range(800)]
    for name in names:
        a.choices.assign(name, a.address)
    await asyncio.gather(*(a.topics.acquire(n, redirected=True) for n in names))
    release = a.topics.release
    releasing = most = 0

    async def counted(topic: str, reason: str, new_owner: str | None = None) -> bool:
        nonlocal releasing, most
        releasing += 1
        most = max(most, releasing)
        try:
            await asyncio.sleep(0.001)  # a store round trip: the releases overlap
            return await release(topic, reason, new_owner)
        finally:
            releasing -= 1

    a.topics.release = counted  # type: ignore[method-assign]
    await a.topics.release_all("test")
    assert not a.topics.topics
    assert 1 < most <= claims.RELEASES_AT_ONCE
    for name in names[:3]:
        assert await a.store.ownership.read_owner_info(name) is None


async def test_a_subscriber_told_of_a_hand_off_asks_the_destination_to_claim() -> None:
    """TOPIC_MOVED names the new owner. A subscriber re-subscribing there must say it was
    sent (redirected), as a publisher does: unredirected, the destination chose an owner by
    placement and could send it to a third hub, which claimed the topic before the hand-off's
    own request to claim reached the destination (the monitoring end-to-end test's topics
    ended on the wrong hub about half the time)."""
    async for region in memory_region(3):
        await subscriber_follows_a_hand_off(region)


async def subscriber_follows_a_hand_off(region: Region) -> None:
    async with region.client() as c:
        await c.publish("handed", b"x")
        sub = await c.subscribe("handed", "reader")
        old = region.owner("handed")
        dest, third = [h for h in region.hubs if h is not old]

        async def elsewhere(topic: str) -> str | None:
            return third.address  # the destination's placement would pick the third hub

        real = old.requests.moves._ask_to_claim
        asked = asyncio.Event()

        async def slow_ask(destination: str, topic: str) -> None:
            await asyncio.sleep(0.5)  # the test: a slow ask, the subscriber comes first
            await real(destination, topic)
            asked.set()

        dest.topics.choices.owner_for = elsewhere  # type: ignore[method-assign]
        old.requests.moves._ask_to_claim = slow_ask  # type: ignore[method-assign]
        assert await old.requests.moves.move("handed", dest.address, MoveKind.REQUESTED, "test")
        await until(lambda: region.owner_among("handed", region.hubs) is not None)
        await asyncio.wait_for(asked.wait(), 10)  # the destination asked to claim, and did
        assert region.owner("handed") is dest
        await c.publish("handed", b"y")  # the subscription, re-attached there, goes on
        assert (await sub.next(5)).value == b"y"


async def test_a_claim_wave_spread_over_the_hubs_takes_no_redirects() -> None:
    """Random placement: a client sending its new topics to each hub in turn has each claimed
    where it landed, no redirect (two thirds of a wave's topics took one); a client that
    reaches one hub only fills that hub to its share, and the others get the rest."""
    async for region in memory_region(3):
        async with region.client() as c:
            for i in range(60):
                await c.publish(f"spread/{i}", b"x")
                if i % 3 == 2:  # each hub's load reported, as within 0.2 s of a claim,
                    for hub in region.hubs:  # and read by the others, at most 0.2 s later
                        await hub.loops.report_load(count_hubs=False, resample=False)
                    await asyncio.sleep(HUBS_FRESH_S + 0.01)
        assert sum(h.topics.stats.redirects for h in region.hubs) == 0
        assert sorted(len(h.topics.topics) for h in region.hubs) == [20, 20, 20]
        first = region.hubs[0]
        async with HedwigClient(first.address, network=region.network, retry=FAST_RETRY) as c:
            for i in range(150):
                await c.publish(f"one-door/{i}", b"x")
        kept = sum(1 for t in first.topics.topics if t.startswith("one-door/"))
        others = [
            sum(1 for t in h.topics.topics if t.startswith("one-door/")) for h in region.hubs[1:]
        ]
        assert kept < 100 and all(n > 10 for n in others), (kept, others)


async def test_a_hub_claims_first_while_topics_asked_of_it_are_unowned_and_reads_first_after() -> (
    None
):
    """In a claim wave a hub claims a topic it keeps before reading its owner record (the
    read found nothing every time: a store round trip of the four a claim makes). Once most
    topics asked of it are owned elsewhere (clients that do not know their owners yet), it
    reads first again: there a claim first is a failed claim, and on ZooKeeper a request
    more than the read alone."""
    async for region in memory_region(3):
        first = region.hubs[0]
        reads: list[str] = []
        real = first.store.ownership.read_owner_info

        async def counted(topic: str, _reads: list[str] = reads, _real: Any = real) -> Any:
            _reads.append(topic)
            return await _real(topic)

        first.store.ownership.read_owner_info = counted  # type: ignore[method-assign]
        started: list[str] = []

        async def start(
            topic: str,
            md: Any,
            _real: Any = first.store.persistence.start_topic_log,
            _started: list[str] = started,
        ) -> Any:
            _started.append(topic)
            return await _real(topic, md)

        first.store.persistence.start_topic_log = start  # type: ignore[method-assign,assignment]
        async with region.client() as c:
            for i in range(30):
                await c.publish(f"wave/{i}", b"x")
                if i % 3 == 2:  # loads reported and read, as in the wave above
                    for hub in region.hubs:
                        await hub.loops.report_load(count_hubs=False, resample=False)
                    await asyncio.sleep(HUBS_FRESH_S + 0.01)
        assert len(first.topics.topics) == 10
        assert reads == []  # ten claims, no owner read
        assert started == []  # and each log started with its claim, in the same request
        elsewhere = [t for h in region.hubs[1:] for t in h.topics.topics]
        async with HedwigClient(first.address, network=region.network, retry=FAST_RETRY) as c:
            for topic in elsewhere:  # each asked of the first hub, owned by another
                await c.publish(topic, b"y")
            by_topic = first.topics.claims
            assert isinstance(by_topic, claims.TopicClaims)
            assert by_topic._unowned_lately < claims.CLAIM_FIRST
            reads.clear()
            await c.publish("wave/late", b"z")
        assert "wave/late" in first.topics.topics
        assert reads == ["wave/late"]  # read, found unowned, then claimed
        assert all(len(h.topics.topics) == 10 for h in region.hubs[1:])  # none taken


async def test_a_redirected_request_leaves_nothing_for_the_cycle_collector(
    region: Region,
) -> None:
    """A request for a topic owned elsewhere is answered with its owner, and the exception
    that carried the answer lets go of its traceback (``drop_tracebacks``): its frames held
    the claim's shared future, which held the exception, a cycle only the cycle collector
    could free. A failover's redirects were a fifth of what it walked. Requests that wait
    for another's claim share its exception."""
    async with region.client() as c:
        await c.publish("elsewhere", b"x")
    owner = region.owner("elsewhere")
    other = next(h for h in region.hubs if h is not owner)
    conn = await HubConnection.open(other.address, network=region.network)
    try:

        async def ask() -> None:
            with pytest.raises(NotResponsibleError) as info:
                await conn.request(TopicStats(request_id=conn.next_id(), topic="elsewhere"))
            assert info.value.owner == owner.address

        await ask()
        read_owner = other.store.ownership.read_owner_info

        async def slow_read(topic: str) -> Any:
            await asyncio.sleep(0.005)  # a store round trip: requests wait for one claim
            return await read_owner(topic)

        other.store.ownership.read_owner_info = slow_read  # type: ignore[method-assign]
        with frames_left_for_the_collector("/hedwig/hub/") as hub_frames:
            for _ in range(5):
                await asyncio.gather(ask(), ask(), ask(), ask())
        assert hub_frames == []
    finally:
        conn.close()


def lose_the_first_answer_to(kind: type[Any], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The hub does the first request of ``kind`` and its answer never comes back (it stopped
    answering, the connection went); returns the topics whose answer was lost."""
    real = HubConnection.request
    lost: list[str] = []

    async def answer_lost(self: HubConnection, frame: Any, timeout: float | None = 30.0) -> Any:
        answer = await real(self, frame, timeout)
        if isinstance(frame, kind) and not lost:
            lost.append(frame.topic)
            raise ConnectionLostError(f"hub {self.address} did not answer in {timeout}s")
        return answer

    monkeypatch.setattr(HubConnection, "request", answer_lost)
    return lost


async def test_a_delete_whose_answer_was_lost_is_done_when_sent_again(
    region: Region, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sent again after its answer was lost, the delete finds no topic, which is what was
    asked, not ``NoSuchTopicError``. A delete of a topic that is not there, with no attempt
    in doubt, still says so."""
    async with region.client() as client:
        await client.publish("lost-answer", b"x")
        lost = lose_the_first_answer_to(DeleteTopic, monkeypatch)
        await client.delete_topic("lost-answer")
        assert lost == ["lost-answer"]
        with pytest.raises(NoSuchTopicError):
            await client.delete_topic("lost-answer")
        with pytest.raises(NoSuchTopicError):
            await client.delete_topic("never-there")


async def test_a_delete_whose_first_attempt_never_connected_is_not_in_doubt(
    region: Region,
) -> None:
    """An attempt that could not connect was never sent: nothing is in doubt, so the next
    attempt deletes a topic that is there, and a topic that is not there is still
    ``NoSuchTopicError``. Each client tries first a hub that refuses connections."""
    refusing = "127.0.0.1:1"
    hubs = [refusing, *(h.address for h in region.hubs)]
    async with region.client() as client:
        await client.publish("never-connected", b"x")
    for topic in ("never-connected", "never-there"):
        async with HedwigClient(hubs, network=region.network, retry=FAST_RETRY) as client:
            if topic == "never-there":
                with pytest.raises(NoSuchTopicError):
                    await client.delete_topic(topic)
            else:
                await client.delete_topic(topic)
            assert client.router.unreachable(refusing), "the refusing hub was not tried first"
    assert not await region.hubs[0].store.topics.topic_exists("never-connected")


async def test_an_unsubscribe_whose_answer_was_lost_is_done_when_sent_again(
    region: Region, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for a subscription: sent again after its answer was lost, the unsubscribe
    finds no subscription and is done; one that was never there still says so."""
    async with region.client() as client:
        await client.publish("lost-unsubscribe", b"x")
        sub = await client.subscribe("lost-unsubscribe", "reader")
        await sub.close()
        lost = lose_the_first_answer_to(Unsubscribe, monkeypatch)
        await client.unsubscribe("lost-unsubscribe", "reader")
        assert lost == ["lost-unsubscribe"]
        assert (await client.describe_topic("lost-unsubscribe")).subscriptions == ()
        with pytest.raises(NoSuchSubscriptionError):
            await client.unsubscribe("lost-unsubscribe", "reader")
