"""``publish_batch``: many messages at once, with the guarantees of publishing them one by one;
and ``send``: one message with nobody waiting on it, the same guarantees without a future.

Against real hubs wired in memory (``tests/memory_region.py``): order through interleaving
with single publishes, through a graceful move and through failed batches re-sent; each
message stored once; a bad message refusing the whole call; and the chunking rules alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from hedwig.client import BatchPublishResult, HedwigClient, PublishResult
from hedwig.client.publishing.chunks import chunk_messages
from hedwig.client.retry import RetryPolicy
from hedwig.errors import HedwigError, MessageTooLargeError, SendFailedError, UsageError
from hedwig.protocol import Message, MoveKind
from hedwig.protocol.messages import EncodedMessages
from tests.memory_region import Region, memory_region


@pytest.fixture
async def region() -> AsyncIterator[Region]:
    async for r in memory_region(2):
        yield r


async def stored(client: HedwigClient, topic: str) -> list[Message]:
    answer = await client.read(topic, 1, max_messages=100_000)
    return [m.message for b in answer.batches for m in b.delivered()]


def values(lo: int, hi: int) -> list[bytes]:
    return [b"m%05d" % i for i in range(lo, hi)]


async def test_a_batch_is_stored_in_order_with_keys_and_headers(region: Region) -> None:
    async with region.client(max_batch_messages=7, max_batch_bytes=200) as c:
        given: list[bytes | Message] = [*values(0, 50)]
        given[3] = Message(value=b"k", key=b"key-3", headers=(("h", b"v"),))
        given[40] = bytearray(b"ba")  # type: ignore[call-overload]
        result = await c.publish_batch("batch", given)
        assert isinstance(result, BatchPublishResult)
        assert len(result) == 50
        assert [r.seq for r in result] == list(range(1, 51))
        assert result[0] == PublishResult(1) and result[-1] == PublishResult(50)
        assert result[2:4] == [PublishResult(3), PublishResult(4)]
        assert sum(n for _, n, _ in result.runs) == 50
        got = await stored(c, "batch")
        assert got[3] == Message(value=b"k", key=b"key-3", headers=(("h", b"v"),))
        assert got[40].value == b"ba"
        assert [m.value for m in got[4:40]] == values(4, 40)


async def test_batches_and_single_publishes_keep_their_order(region: Region) -> None:
    async with region.client(max_batch_messages=30) as c:
        futs: list[asyncio.Future[PublishResult]] = []
        batches: list[asyncio.Future[BatchPublishResult]] = []
        for round_ in range(10):
            lo = round_ * 100
            futs += [c.publish_nowait("mixed", v) for v in values(lo, lo + 20)]
            batches.append(c.publish_batch_nowait("mixed", values(lo + 20, lo + 100)))
        await c.flush("mixed")
        assert all(f.done() for f in futs) and all(b.done() for b in batches)
        seqs = sorted([(await f).seq for f in futs] + [r.seq for b in batches for r in b.result()])
        assert seqs == list(range(1, 1001))
        assert [m.value for m in await stored(c, "mixed")] == values(0, 1000)


async def test_order_kept_through_a_graceful_move(region: Region) -> None:
    async with region.client(max_batch_messages=50) as c:
        await c.publish("move", b"warm-up")
        source = region.owner("move")
        dest = next(h for h in region.hubs if h is not source)
        first = c.publish_batch_nowait("move", values(0, 1000))
        await asyncio.sleep(0)
        await source.requests.moves.move("move", dest.address, MoveKind.REQUESTED, "test")
        second = c.publish_batch_nowait("move", values(1000, 2000))
        results = [r.seq for r in await first] + [r.seq for r in await second]
        assert results == list(range(2, 2002))
        assert [m.value for m in await stored(c, "move")] == [b"warm-up", *values(0, 2000)]
        assert region.owner("move") is dest


async def test_order_kept_through_failed_batches(region: Region) -> None:
    """The owner loses its storage replica with chunks in flight: they are sent again, in
    order, and stored once (as ``test_client_memory`` checks for single publishes)."""
    async with region.client(max_batch_messages=20) as c:
        await c.publish("fail", b"warm-up")
        owner = region.owner("fail")
        replica = next(h for h in region.hubs if h is not owner)
        first = c.publish_batch_nowait("fail", values(0, 500))
        await asyncio.sleep(0)
        region.network.sever(replica.address, refuse=True)
        asyncio.get_running_loop().call_later(0.2, region.network.restore, replica.address)
        second = c.publish_batch_nowait("fail", values(500, 1000))
        assert [r.seq for r in await first] + [r.seq for r in await second] == list(range(2, 1002))
        assert [m.value for m in await stored(c, "fail")] == [b"warm-up", *values(0, 1000)]


async def test_a_bad_message_refuses_the_whole_call(region: Region) -> None:
    async with region.client(max_message_size=10) as c:
        with pytest.raises(MessageTooLargeError):
            c.publish_batch_nowait("bad", [b"ok", b"x" * 11])
        with pytest.raises(UsageError):
            c.publish_batch_nowait("bad", [b"ok", "text"])  # type: ignore[list-item]
        assert len(await c.publish_batch("bad", [])) == 0
        await c.publish("bad", b"after")
        assert [m.value for m in await stored(c, "bad")] == [b"after"]


def test_chunks_respect_the_batch_limits() -> None:
    given: list[bytes | Message] = [b"x" * (i % 13) for i in range(1000)]
    chunks = chunk_messages(given, max_message_size=100, max_batch_messages=64, max_batch_bytes=300)
    assert sum(n for _, n in chunks) == 1000
    assert all(n <= 64 and (len(p) <= 300 or n == 1) for p, n in chunks)
    # The chunks are the messages, in order, each encoded as a single publish encodes it.
    joined = EncodedMessages.parse(b"".join(p for p, _ in chunks), 1000)
    assert [m.value for m in joined.decode()] == given
    with_messages = chunk_messages(
        [Message(value=b"v", key=b"k"), b"w"],
        max_message_size=100,
        max_batch_messages=1,
        max_batch_bytes=300,
    )
    assert [n for _, n in with_messages] == [1, 1]
    # A message larger than a batch's bytes still gets a chunk of its own.
    big = chunk_messages(
        [b"a", b"x" * 90, b"b"], max_message_size=100, max_batch_messages=10, max_batch_bytes=50
    )
    assert [n for _, n in big] == [1, 1, 1]


# ``send``: one message, no future ---------------------------------------------------------


async def test_sent_messages_keep_their_order_among_awaited_ones(region: Region) -> None:
    """``send`` queues a message nobody waits on; ``flush`` waits until it is durable, also
    while it is still queued (no batch, no future anywhere yet)."""
    async with region.client(max_batch_messages=7, max_inflight_batches=2) as c:
        futs: dict[int, asyncio.Future[PublishResult]] = {}
        for i, v in enumerate(values(0, 500)):
            if i % 50 == 0:
                futs[i] = c.publish_nowait("sent", v)
            else:
                c.send("sent", v)
        c.send("sent", b"k", key=b"key", headers=(("h", b"v"),))
        await c.flush("sent")
        assert {i: f.result().seq for i, f in futs.items()} == {i: i + 1 for i in futs}
        got = await stored(c, "sent")
        assert [m.value for m in got[:500]] == values(0, 500)
        assert got[500] == Message(value=b"k", key=b"key", headers=(("h", b"v"),))
        with pytest.raises(MessageTooLargeError):
            c.send("sent", b"x" * (c.max_message_size + 1))
        with pytest.raises(UsageError):
            c.send("sent", "text")  # type: ignore[arg-type]


async def test_sent_messages_keep_their_order_through_failed_batches(region: Region) -> None:
    async with region.client(max_batch_messages=20) as c:
        await c.publish("sent-fail", b"warm-up")
        owner = region.owner("sent-fail")
        replica = next(h for h in region.hubs if h is not owner)
        for v in values(0, 500):
            c.send("sent-fail", v)
        await asyncio.sleep(0)
        region.network.sever(replica.address, refuse=True)
        asyncio.get_running_loop().call_later(0.2, region.network.restore, replica.address)
        for v in values(500, 1000):
            c.send("sent-fail", v)
        await c.flush()
        assert [m.value for m in await stored(c, "sent-fail")] == [b"warm-up", *values(0, 1000)]


async def test_a_failed_send_is_raised_by_the_next_flush_once(region: Region) -> None:
    """Nobody holds a future for a sent message, so its failure is kept for ``flush``: every
    message that failed counted, the first failure as the cause, raised once."""
    retry = RetryPolicy(initial_delay_s=0.005, max_delay_s=0.02, deadline_s=0.3)
    async with region.client(retry=retry, max_batch_messages=4) as c:
        await c.publish("lost", b"warm-up")
        for hub in region.hubs:
            region.network.sever(hub.address, refuse=True)
        for v in values(0, 10):
            c.send("lost", v)
        with pytest.raises(SendFailedError) as failed:
            await c.flush()
        assert failed.value.count == 10
        assert isinstance(failed.value.__cause__, HedwigError)
        assert failed.value.first is failed.value.__cause__
        await c.flush()  # raised once
        for hub in region.hubs:
            region.network.restore(hub.address)
        c.send("lost", b"after")
        await c.flush()
        assert [m.value for m in await stored(c, "lost")] == [b"warm-up", b"after"]
