"""Topic and subscription lifecycle on real hubs in memory: deleting topics and subscriptions,
reads that never create, resets, expiry on an injected clock, periodic give-up, a lone hub."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable

import pytest

import hedwig.hub.requests.owned as hub_requests
from hedwig.client import RetryPolicy
from hedwig.clock import ManualClock
from hedwig.errors import (
    LedgerError,
    NoSuchSubscriptionError,
    NoSuchTopicError,
    NotEnoughHubsError,
    TopicInUseError,
    UsageError,
)
from hedwig.ledger import TopicLog
from hedwig.ledger.log_reader import LogReader, Unread
from hedwig.ledger.retention import delete_ledger_everywhere
from hedwig.protocol import ResetTo
from tests.memory_region import Region, memory_region


@pytest.fixture
async def region() -> AsyncIterator[Region]:
    async for r in memory_region(2):
        yield r


async def test_reads_statistics_and_descriptions_never_create_a_topic(region: Region) -> None:
    async with region.client() as c:
        for ask in (
            lambda: c.read("typo", 1),
            lambda: c.topic_info("typo"),
            lambda: c.describe_topic("typo"),
            lambda: c.delete_topic("typo"),
            lambda: c.reset_subscription("typo", "s"),
        ):
            with pytest.raises(NoSuchTopicError):
                await ask()
        store = region.hubs[0].store
        assert not await store.topics.topic_exists("typo")
        await c.publish("typo", b"now it exists")
        assert (await c.topic_info("typo")).last_seq == 1


async def test_delete_a_topic_with_a_publisher_and_a_subscriber_attached(region: Region) -> None:
    async with region.client() as pub, region.client() as subc:
        sub = await subc.subscribe("doomed", "s")
        for i in range(20):
            await pub.publish("doomed", b"%d" % i)
        assert [(await sub.next(2)).seq for _ in range(20)] == list(range(1, 21))
        owner = region.owner("doomed")
        ledgers = [r.ledger_id for r in owner.topics.topics["doomed"].log.ranges.ranges]
        with pytest.raises(TopicInUseError):
            await pub.delete_topic("doomed")
        await pub.delete_topic("doomed", force=True)
        with pytest.raises(NoSuchTopicError):
            await sub.next(2)  # the subscriber is told, and stops
        store = owner.store
        assert not await store.topics.topic_exists("doomed")
        assert await store.subscriptions.read_subscriptions("doomed") == {}
        for hub in region.hubs:
            assert not set(ledgers) & set(hub.storage.ledgers()), "replicas left behind"
        for lid in ledgers:
            assert await store.ledgers.read_ledger(lid) is None
        # The publisher goes on: the topic is created afresh, its sequence ids from 1.
        assert (await pub.publish("doomed", b"again")).seq == 1
        description = await pub.describe_topic("doomed")
        assert (description.last_seq, description.subscriptions) == (1, ())


async def test_delete_a_subscription(region: Region) -> None:
    async with region.client() as c:
        sub = await c.subscribe("subs", "gone")
        await c.subscribe("subs", "kept")
        await c.publish("subs", b"x")
        await c.unsubscribe("subs", "gone")
        names = [s.name for s in (await c.describe_topic("subs")).subscriptions]
        assert names == ["kept"]
        assert sub.closed
        with pytest.raises(NoSuchSubscriptionError):
            await c.unsubscribe("subs", "gone")


async def test_reset_a_subscription_while_it_is_attached(region: Region) -> None:
    async with region.client() as c:
        sub = await c.subscribe("rewind", "s")
        for i in range(1, 51):
            await c.publish("rewind", b"%d" % i)
        for _ in range(30):
            sub.consume((await sub.next(2)).seq)
        assert await sub.sync()
        async with region.client() as admin:
            assert await admin.reset_subscription("rewind", "s", 10) == 9
        # The attached subscriber was closed, attached again, and delivery restarted at 10.
        got = [(await sub.next(2)).seq for _ in range(41)]
        assert got == list(range(10, 51))
        description = await c.describe_topic("rewind")
        (info,) = description.subscriptions
        assert info.attached
        assert await c.reset_subscription("rewind", "s", ResetTo.LATEST) == 50
        await c.publish("rewind", b"51")
        assert (await sub.next(2)).seq == 51
        assert await c.reset_subscription("rewind", "s", ResetTo.EARLIEST) == 0
        assert (await sub.next(2)).seq == 1


async def test_reset_a_detached_subscription_and_one_that_does_not_exist(region: Region) -> None:
    async with region.client() as c:
        sub = await c.subscribe("later", "s")
        for i in range(10):
            await c.publish("later", b"%d" % i)
        await sub.close()
        assert await c.reset_subscription("later", "s", 4) == 3
        sub = await c.subscribe("later", "s")
        assert (await sub.next(2)).seq == 4
        with pytest.raises(NoSuchSubscriptionError):
            await c.reset_subscription("later", "nobody", ResetTo.EARLIEST)


async def test_idle_subscriptions_and_then_idle_topics_expire() -> None:
    clock = ManualClock()
    async for region in memory_region(
        2,
        clock=clock,
        default_subscription_expiry_ms=60_000,
        default_inactive_topic_expiry_ms=300_000,
    ):
        async with region.client() as c:
            sub = await c.subscribe("idle", "abandoned")
            live = await c.subscribe("idle", "live")
            await c.publish("idle", b"x")
            await sub.close()
            owner = region.owner("idle")
            clock.advance(61)
            await owner.loops.expire_idle()
            names = [s.name for s in (await c.describe_topic("idle")).subscriptions]
            assert names == ["live"]  # attached: kept however long it has been
            await live.close()
            clock.advance(61)
            await owner.loops.expire_idle()
            assert (await c.describe_topic("idle")).subscriptions == ()
            assert await owner.store.topics.topic_exists("idle")  # idle, but not for long enough
            clock.advance(200)
            await owner.loops.expire_idle()
            assert not await owner.store.topics.topic_exists("idle")
            deletions = owner.metrics.registry.get_sample_value(
                "hedwig_topic_deletions_total", {"reason": "expired"}
            )
            assert deletions == 1
            expiries = owner.metrics.registry.get_sample_value("hedwig_subscription_expiries_total")
            assert expiries == 2


async def test_expiry_is_off_unless_configured(region: Region) -> None:
    async with region.client() as c:
        await c.publish("kept", b"x")
        sub = await c.subscribe("kept", "s")
        await sub.close()
        owner = region.owner("kept")
        owner.clock = ManualClock(start=10**9)  # a long time later, as the hub sees it
        await owner.loops.expire_idle()
        assert [s.name for s in (await c.describe_topic("kept")).subscriptions] == ["s"]
        assert await owner.store.topics.topic_exists("kept")


async def test_topics_given_up_when_their_ledger_rolls_over() -> None:
    async for region in memory_region(2, release_on_rollover=True, ledger_max_bytes=2000):
        async with region.client(max_batch_messages=5) as c:
            seqs = [(await c.publish("drifting", b"x" * 100)).seq for _ in range(200)]
            assert seqs == list(range(1, 201))
            releases = sum(
                h.metrics.registry.get_sample_value(
                    "hedwig_topic_releases_total", {"reason": "periodic"}
                )
                or 0
                for h in region.hubs
            )
            assert releases >= 3


async def test_a_lone_hub_says_it_needs_more_hubs_at_once() -> None:
    async for region in memory_region(1, replication="3/3/2"):
        hub = region.hubs[0]
        ready, why = hub.readiness()
        assert not ready and "1/1/1" in why
        async with region.client(retry=RetryPolicy(deadline_s=30)) as c:
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            with pytest.raises(NotEnoughHubsError, match="start more hubs"):
                await c.publish("lonely", b"x")
            assert loop.time() - t0 < 1  # refused at once, not retried for 30 s
        async with region.client(wait_for_hubs=True) as c:
            waiting = asyncio.ensure_future(c.publish("lonely", b"x"))
            await asyncio.sleep(0.2)
            assert not waiting.done()
            await region.add_hub(replication="3/3/2")
            assert (await waiting).seq == 1


async def test_the_last_hub_does_not_drain_unless_forced() -> None:
    async for region in memory_region(1, replication="1/1/1"):
        hub = region.hubs[0]
        async with region.client() as c:
            await c.publish("stranded", b"x")
        with pytest.raises(UsageError, match="last alive hub"):
            await hub.drain()
        assert await hub.drain(force=True) == 1


async def test_a_log_broken_between_publishes_gives_the_topic_up(region: Region) -> None:
    """A roll-over that fails while no publish waits for it leaves the log broken with nobody
    told: the next publish gives the topic up (a hub claims it, recovering the log: another
    one, or this one again, as it still reaches its replicas), instead of the owner refusing
    every publish as long as it lives."""
    async with region.client(retry=RetryPolicy(initial_delay_s=0.01, deadline_s=5)) as c:
        assert (await c.publish("broken", b"a")).seq == 1
        owner = region.owner("broken")
        broken = owner.topics.topics["broken"]
        broken.log.broken = LedgerError("roll-over failed")
        assert (await c.publish("broken", b"b")).seq == 2
        assert owner.topics.topics.get("broken") is not broken
        answer = await c.read("broken", 1)
        assert [m.value for b in answer.batches for m in b.delivered()] == [b"a", b"b"]


async def test_an_idle_topic_lets_its_batches_in_memory_go_and_still_reads_them() -> None:
    """Batches kept in memory serve subscribers that keep up; a topic nobody reads keeps
    none, one read since keeps them, a topic nobody published to or attached to for a minute
    lets them go (at the next expiry check), and what it held is read from the ledgers after
    that. A topic with a subscriber attached keeps them."""
    clock = ManualClock()
    async for region in memory_region(2, clock=clock):
        async with region.client() as c:
            sub = await c.subscribe("followed", "s")
            for i in range(5):
                await c.publish("quiet", b"q%d" % i)
                await c.publish("followed", b"f%d" % i)
            assert (await sub.next(2)).seq == 1
            quiet = region.owner("quiet").topics.topics["quiet"].log
            followed = region.owner("followed").topics.topics["followed"].log
            assert cached(followed) == 5
            assert cached(quiet) == 0, "nobody reads it: nothing kept"
            assert len((await c.read("quiet", 1, max_messages=10)).batches) == 5
            for i in range(5, 8):
                await c.publish("quiet", b"q%d" % i)
            assert cached(quiet) == 3, "read since: kept"
            clock.advance(59)
            for hub in region.hubs:
                await hub.loops.expire_idle()
            assert cached(quiet) == 3, "idle for less than a minute"
            clock.advance(2)
            for hub in region.hubs:
                await hub.loops.expire_idle()
            assert cached(quiet) == 0 and cached(followed) == 5
            got = await c.read("quiet", 1, max_messages=10)
            assert [m.value for b in got.batches for m in b.delivered()] == [
                b"q%d" % i for i in range(8)
            ]
            await c.publish("quiet", b"q8")
            assert cached(quiet) == 1, "a publish is kept again"


async def test_only_subscribed_topics_are_walked_for_consume_marks(region: Region) -> None:
    """The consume marks of topics with subscriptions in memory are flushed every second;
    the hub keeps those topics aside instead of walking every owned one for them, and drops
    one when it is let go."""
    async with region.client() as c:
        sub = await c.subscribe("followed-marks", "s")
        await c.publish("followed-marks", b"m")
        await c.publish("published-only", b"p")
        got = await sub.next(5)
        sub.consume(got.seq)
        assert await sub.sync()
        owner = region.owner("followed-marks")
        await owner.loops.flush_marks()
        stored = await owner.store.subscriptions.read_subscription_data("followed-marks", "s")
        assert stored is not None and stored.value.state is not None
        assert stored.value.state.consumed_seq == got.seq
        subscribed = {t.name for h in region.hubs for t in h.topics.subscribed_topics()}
        assert subscribed == {"followed-marks"}
        other = next(h for h in region.hubs if h is not owner)
        await c.move_topic("followed-marks", other.address)
        assert "followed-marks" not in {t.name for t in owner.topics.subscribed_topics()}


def cached(log: TopicLog) -> int:
    reader = log._log_reader
    return len(reader._cache or ()) if isinstance(reader, LogReader) else 0


async def test_an_idle_topic_of_one_entry_lets_its_reader_go_and_reads_the_same() -> None:
    """A ledger's first entry makes no reader when nobody waits to read it; idle a minute, a
    topic whose reader holds at most one entry's index per ledger lets the reader go (what a
    new one must index of the open ledger, ``Unread``, in its place). Reads, appends and a
    move after that find every message once and in order (the open ledger's first entry is
    indexed from its range). A topic of several entries keeps its reader (each entry's index
    would be a read)."""
    clock = ManualClock()

    def idle_a_minute() -> list[Awaitable[None]]:
        clock.advance(61)
        return [hub.loops.expire_idle() for hub in region.hubs]

    async def values(topic: str) -> list[bytes]:
        got = await c.read(topic, 1, max_messages=100)
        return [m.value for b in got.batches for m in b.delivered()]

    async for region in memory_region(2, clock=clock):
        async with region.client() as c:
            await c.publish("one", b"a")
            for i in range(3):
                await c.publish("three", b"t%d" % i)
            one = region.owner("one").topics.topics["one"].log
            three = region.owner("three").topics.topics["three"].log
            assert isinstance(one._log_reader, Unread), "one entry, nobody reading: no reader"
            assert isinstance(three._log_reader, LogReader)
            await asyncio.gather(*idle_a_minute())
            assert isinstance(one._log_reader, Unread)
            assert isinstance(three._log_reader, LogReader)
            assert await values("one") == [b"a"]
            assert isinstance(one._log_reader, LogReader), "made again by the read"
            await asyncio.gather(*idle_a_minute())
            assert isinstance(one._log_reader, Unread)
            await c.publish("one", b"b")
            await c.publish("one", b"c")
            assert await values("one") == [b"a", b"b", b"c"]
            await asyncio.gather(*idle_a_minute())
            assert isinstance(one._log_reader, LogReader), "two entries of one ledger: kept"
            # Let go with nothing written to the open ledger (a new owner's) and the closed
            # one's entry indexed: moved, idle, then read and published to.
            await c.publish("solo", b"a")
            owner = region.owner("solo")
            other = next(h for h in region.hubs if h is not owner)
            await c.move_topic("solo", other.address)
            assert (await c.topic_info("solo")).last_seq == 1  # claimed there
            moved = other.topics.topics["solo"].log
            await asyncio.gather(*idle_a_minute())
            assert moved._log_reader is Unread.NOTHING
            await c.publish("solo", b"b")
            assert await values("solo") == [b"a", b"b"]
            await asyncio.gather(*idle_a_minute())
            assert isinstance(moved._log_reader, Unread)
            await c.publish("solo", b"c")
            assert await values("solo") == [b"a", b"b", b"c"]


async def test_a_deletion_cut_short_after_the_ledgers_is_finished_by_its_retry(
    region: Region,
) -> None:
    """A deletion deletes the topic's ledgers, then its records. An owner that dies between
    the two leaves records naming ledgers that are gone: the retried deletion's claim (and a
    publish's) used to fail reading the log's end back, for good, so the topic could be
    neither deleted nor used. The claim now skips what is gone, and the deletion finishes."""
    async with region.client() as c:
        for i in range(5):
            await c.publish("half", b"m%d" % i)
        owner = region.owner("half")
        # The first half of the owner's deletion (its log closed, its ledgers deleted),
        # then its end, as a crash would leave it.
        await owner.topics.topics["half"].log.close()
        ranges = await owner.store.persistence.read_topic_persistence_info("half")
        assert ranges is not None and ranges.value.ranges
        for r in ranges.value.ranges:
            await delete_ledger_everywhere(owner.store.ledgers, owner.topics.replicas, r.ledger_id)
        await owner.topics.release("half", "test: the owner died mid-deletion")
        await c.delete_topic("half", force=True)
        assert not await owner.store.topics.topic_exists("half")
        await c.publish("half", b"again")
        assert (await c.topic_info("half")).last_seq == 1
        # The same with the log still open when its ledger went (its close failed too).
        for i in range(3):
            await c.publish("open", b"m%d" % i)
        owner = region.owner("open")
        ranges = await owner.store.persistence.read_topic_persistence_info("open")
        assert ranges is not None and ranges.value.ranges[-1].end_seq is None
        for r in ranges.value.ranges:
            await delete_ledger_everywhere(owner.store.ledgers, owner.topics.replicas, r.ledger_id)
        await owner.topics.release("open", "test: the owner died mid-deletion")
        await c.delete_topic("open", force=True)
        assert not await owner.store.topics.topic_exists("open")


async def test_a_connection_is_detached_from_every_topic_it_touched_however_many(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A connection's disconnection detaches it from the topics it published to: found by
    name up to ``TOPICS_KEPT`` of them; past that the connection keeps no names (they were
    about 100 bytes a topic for as long as it stayed connected) and every owned topic is
    looked at instead."""
    monkeypatch.setattr(hub_requests, "TOPICS_KEPT", 4)
    async for region in memory_region(1, replication="1/1/1"):
        hub = region.hubs[0]
        for count in (3, 8):
            names = [f"touched-{count}-{i}" for i in range(count)]
            async with region.client() as c:
                for name in names:
                    await c.publish(name, b"x")
                (conn,) = hub.front.connections
                if count > 4:
                    assert conn.topics is None
                else:
                    assert conn.topics == set(names)
                owned = [hub.topics.topics[name] for name in names]
                assert all(o.publishers is conn for o in owned)
            for _ in range(100):
                if all(o.publishers is None for o in owned):
                    break
                await asyncio.sleep(0.01)
            assert all(o.publishers is None for o in owned)
