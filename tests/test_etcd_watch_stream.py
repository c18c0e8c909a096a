"""The one watch stream of the etcd client (``hedwig.metadata.etcd.watch_stream``) against a real
etcd: watches created together and told their own changes, a watch done or cancelled, a
compacted start, and a break: one-shot watches end, the others resume from after their last
change, the stream made again after a back-off on its clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from aetcd import rpc  # type: ignore[import-untyped]

from hedwig.clock import Clock, ManualClock, SystemClock
from hedwig.devcluster.etcd import EtcdServer
from hedwig.metadata.etcd.client import EtcdClient
from hedwig.metadata.etcd.connection import Connection
from hedwig.metadata.etcd.kv import prefix_end
from hedwig.metadata.etcd.watch_stream import BACKOFF_S, WatchStream
from hedwig.metadata.etcd.wire import put

pytestmark = pytest.mark.integration


class Handler:
    """A watch's handler that keeps what it is told; ``once``: done at its first changes."""

    def __init__(self, *, once: bool = False) -> None:
        self.once = once
        self.changes: list[tuple[bytes, int]] = []
        self.told: list[str] = []

    def changed(self, events: Sequence[Any]) -> bool:
        self.changes.extend((bytes(e.kv.key), int(e.kv.mod_revision)) for e in events)
        return self.once

    def created(self) -> None:
        self.told.append("created")

    def interrupted(self) -> None:
        self.told.append("interrupted")

    def ended(self) -> None:
        self.told.append("ended")


async def until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        assert loop.time() < deadline, "not within the time"
        await asyncio.sleep(0.01)


async def on(address: str, clock: Clock) -> tuple[Connection, WatchStream]:
    connection = Connection(address, clock=clock)
    connection.open()
    return connection, WatchStream(connection, clock=clock)


@pytest.fixture
async def writer(etcd_server: EtcdServer) -> AsyncIterator[EtcdClient]:
    client = EtcdClient(etcd_server.address, ttl_s=10.0)
    await client.start()
    yield client
    await client.close()


async def write(client: EtcdClient, key: bytes, value: bytes = b"v") -> int:
    return (await client.txn((), (put(key, value),))).revision


async def test_watches_made_together_are_told_their_own_changes(
    etcd_server: EtcdServer, writer: EtcdClient, region: str
) -> None:
    connection, stream = await on(etcd_server.address, SystemClock())
    try:
        base = f"/ws/{region}/".encode()
        now = await write(writer, base + b"start")
        handlers = {i: Handler() for i in range(50)}
        for i, h in handlers.items():
            stream.watch(base + b"%02d" % i, b"", now + 1, h)
        prefix = Handler()
        stream.watch(base, prefix_end(base), now + 1, prefix)
        await until(lambda: all(h.told == ["created"] for h in handlers.values()))
        written = {i: await write(writer, base + b"%02d" % i) for i in reversed(range(50))}
        await until(lambda: all(h.changes for h in handlers.values()))
        for i, h in handlers.items():
            assert h.changes == [(base + b"%02d" % i, written[i])]
        await until(lambda: len(prefix.changes) == 50)
        assert [rev for _, rev in prefix.changes] == sorted(written.values())
    finally:
        await stream.close()
        await connection.close()


async def test_a_watch_done_or_cancelled_hears_nothing_more(
    etcd_server: EtcdServer, writer: EtcdClient, region: str
) -> None:
    connection, stream = await on(etcd_server.address, SystemClock())
    try:
        key = f"/ws/{region}/k".encode()
        now = await write(writer, key)
        once, cancelled, kept = Handler(once=True), Handler(), Handler()
        stream.watch(key, b"", now + 1, once)
        gone = stream.watch(key, b"", now + 1, cancelled)
        stream.watch(key, b"", now + 1, kept)
        stream.cancel(gone)
        first = await write(writer, key)
        await until(lambda: len(kept.changes) == 1 and len(once.changes) == 1)
        second = await write(writer, key)
        await until(lambda: len(kept.changes) == 2)
        await asyncio.sleep(0.2)
        assert once.changes == [(key, first)]
        assert kept.changes == [(key, first), (key, second)]
        assert cancelled.changes == [] and cancelled.told == []
        assert once.told == ["created"], "a watch that is done is not ended as well"
    finally:
        await stream.close()
        await connection.close()


async def test_a_watch_from_a_compacted_revision_ends_at_once(
    etcd_server: EtcdServer, writer: EtcdClient, region: str
) -> None:
    """etcd cancels a watch whose start it has compacted: its holder must read again, and a
    watch made to resume does not resume from there."""
    connection, stream = await on(etcd_server.address, SystemClock())
    try:
        key = f"/ws/{region}/compacted".encode()
        old = await write(writer, key)
        head = await write(writer, key)
        # History up to the head is gone.
        await writer.call(writer.connection.kv.Compact, rpc.CompactionRequest(revision=head), "")
        one_shot, resuming = Handler(once=True), Handler()
        stream.watch(key, b"", old, one_shot)
        stream.watch(key, b"", old, resuming, resume=True)
        await until(lambda: "ended" in one_shot.told and "ended" in resuming.told)
        assert one_shot.changes == [] and resuming.changes == []
        await write(writer, key)
        await asyncio.sleep(0.2)
        assert resuming.changes == [] and resuming.told.count("ended") == 1
    finally:
        await stream.close()
        await connection.close()


async def test_a_break_ends_one_shot_watches_and_resumes_the_others_after_a_back_off(
    tmp_path: Path,
) -> None:
    """etcd killed: one-shot watches end (their holders read again) and resuming ones are
    told. The stream is made again after 0.2 s of its clock, then twice as long after each
    failed try, 2 s at most. With etcd back, a change made before the stream is (its clock
    held) reaches the resumed watch, which missed nothing and is told nothing twice."""
    (tmp_path / "etcd").mkdir()
    server = EtcdServer(data_dir=str(tmp_path / "etcd"))
    server.start()
    clock = ManualClock()
    connection, stream = await on(server.address, clock)
    writer = EtcdClient(server.address, ttl_s=30.0)
    try:
        await writer.start()
        key = b"/ws/break/k"
        now = await write(writer, key)
        one_shot, resuming = Handler(once=True), Handler()
        stream.watch(key, b"", now + 1, one_shot)
        stream.watch(key, b"", now + 1, resuming, resume=True)
        await until(lambda: resuming.told == ["created"] and one_shot.told == ["created"])
        before = await write(writer, key)
        await until(lambda: resuming.changes == [(key, before)])
        # (the one-shot watch was done at that change: a second one-shot watch to end)
        ending = Handler(once=True)
        stream.watch(key, b"", before + 1, ending)
        await until(lambda: ending.told == ["created"])

        await asyncio.to_thread(server.kill)
        await until(lambda: stream.breaks == 1)
        assert ending.told == ["created", "ended"]
        assert resuming.told == ["created", "interrupted"]
        # Made again only as the clock moves: 0.2, 0.4, 0.8, 1.6, 2.0, 2.0 s apart.
        step = 1 / 32
        waits = []
        for _ in range(6):
            opened, waited = stream.opened, 0.0
            while stream.opened == opened:
                await asyncio.sleep(0.02)  # the stream waits for the clock, not for time
                if stream.opened == opened:
                    clock.advance(step)
                    waited += step
            waits.append(waited)
            await until(lambda: stream.breaks == stream.opened)  # etcd still gone
        expected = [0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
        assert waits == [pytest.approx(w, abs=step) for w in expected]
        assert (expected[0], expected[-1]) == BACKOFF_S

        await asyncio.to_thread(server.start)
        meanwhile = None
        for _ in range(100):  # the writer reconnects on its own clock
            try:
                meanwhile = await write(writer, key, b"meanwhile")
                break
            except Exception:
                await asyncio.sleep(0.1)
        assert meanwhile is not None
        assert resuming.changes == [(key, before)], "nothing while the stream is down"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while len(resuming.changes) < 2 and loop.time() < deadline:
            clock.advance(BACKOFF_S[1])  # (until gRPC has its connection again)
            await asyncio.sleep(0.1)
        assert resuming.changes == [(key, before), (key, meanwhile)]
        assert resuming.told[-1] == "created"
        after = await write(writer, key)
        await until(lambda: len(resuming.changes) == 3)
        assert resuming.changes == [(key, before), (key, meanwhile), (key, after)]
        assert one_shot.told == ["created"] and ending.changes == []
    finally:
        await stream.close()
        await connection.close()
        await writer.close()
        server.stop()
