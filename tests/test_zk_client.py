"""The ZooKeeper client against a real ZooKeeper: requests of a turn written together, answers
read together, bounded requests in flight, and every request ending (answered or refused)
when its connection drops under it, with the client sending again on the next one."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from hedwig.devcluster.zookeeper import ZooKeeperServer
from hedwig.errors import MetadataError, MetadataUnavailableError
from hedwig.metadata.zookeeper.client import Op, Phase, ZkClient
from hedwig.metadata.zookeeper.client import connection as connection_module
from hedwig.metadata.zookeeper.client.codes import OpCode
from hedwig.metadata.zookeeper.client.records import GetChildrenResponse
from hedwig.metadata.zookeeper.client.slots import Slots
from tests.zk_wire import WireTap, opcodes

pytestmark = pytest.mark.integration


async def _tapped(zk_server: ZooKeeperServer) -> tuple[ZkClient, WireTap]:
    tap = WireTap()
    client = ZkClient(zk_server.address, session_timeout=10.0, opener=tap)
    await client.start()
    return client, tap


async def _existence_asked_at_once(client: ZkClient, base: str) -> list[bool]:
    """Asks whether 150 znodes exist, all at once (every other one made first); checks each
    answer."""
    names = [f"{base}/{i}" for i in range(150)]
    for name in names[1::2]:
        await client.create(name, b"", makepath=True)
    got = await asyncio.gather(*(client.exists(n) for n in names))
    assert [g is not None for g in got] == [i % 2 == 1 for i in range(len(names))]
    return [g is not None for g in got]


async def test_requests_made_together_go_to_zookeeper_together(
    zk_server: ZooKeeperServer, region: str
) -> None:
    """Requests the event loop makes at once reach ZooKeeper in a few writes, not one each
    (``hedwig.metadata.zookeeper.client.connection``), and each gets its own answer."""
    client, tap = await _tapped(zk_server)
    try:
        await client.ensure_path(f"/together-{region}")
        before = tap.writes
        await _existence_asked_at_once(client, f"/together-{region}")
        writes = tap.writes - before - 75  # the creates, one turn each
        assert writes <= 150 // 3, f"{writes} writes for 150 requests"
    finally:
        await client.close()


async def test_answers_that_arrive_together_are_read_together(
    zk_server: ZooKeeperServer, region: str
) -> None:
    """Answers to requests made at once are handled as they arrive, several to a read of the
    socket, and each request still gets its own answer."""
    client, tap = await _tapped(zk_server)
    try:
        await client.ensure_path(f"/read-together-{region}")
        names = [f"/read-together-{region}/{i}" for i in range(150)]
        before = tap.reads
        got = await asyncio.gather(*(client.exists(n) for n in names))
        assert got == [None] * 150
        # ZooKeeper answers as it goes, so how many arrive together varies.
        assert tap.reads - before < 150, f"{tap.reads - before} reads for 150 answers"
    finally:
        await client.close()


async def test_a_slot_given_back_passes_to_the_first_waiting_request() -> None:
    """A request takes a free slot without waiting (almost every one does); a slot given back
    while requests wait passes to the first of them, so a request arriving meanwhile cannot
    jump the queue; a waiter cancelled after a slot passed to it passes it on; when the
    connection drops, the waiters are refused."""
    connected = True
    slots = Slots(2, lambda: connected)
    assert slots.take_now() and slots.take_now()
    assert not slots.take_now()
    waiting = [asyncio.create_task(slots.take(f"/{i}")) for i in range(4)]
    await asyncio.sleep(0)
    slots.give()
    assert not slots.take_now()  # passed to the first waiter, which has not run yet
    await asyncio.sleep(0)
    assert [t.done() for t in waiting] == [True, False, False, False]
    assert slots.used == 2
    slots.give()
    waiting[1].cancel()  # passed a slot, cancelled before it runs: to the next one
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert waiting[1].cancelled() and waiting[2].done() and not waiting[3].done()
    assert slots.used == 2
    connected = False
    slots.wake_all()
    with pytest.raises(MetadataUnavailableError):
        await waiting[3]
    slots.give()
    slots.give()
    assert slots.used == 0 and slots.take_now()


async def _until_it_works(client: ZkClient, attempt: Any) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 15
    while True:
        try:
            return await attempt()
        except MetadataUnavailableError:
            assert loop.time() < deadline, "the client never sent again"
            await asyncio.sleep(0.1)


async def test_reads_together_when_the_connection_drops_each_end(
    zk_server: ZooKeeperServer, region: str
) -> None:
    """The connection drops as reads sent together are written: each ends, read or
    unavailable; none waits for good, and reads together work on the next connection."""
    client, tap = await _tapped(zk_server)
    base = f"/reads-dropped-{region}"
    try:
        for i in range(1, 80, 2):
            await client.create(f"{base}/{i}", b"x", makepath=True)
        tap.drop_when = lambda data: OpCode.MULTI_READ in opcodes(data)
        names = [f"{base}/{i}" for i in range(80)]
        got = await asyncio.wait_for(
            asyncio.gather(*(client.get_or_none(n) for n in names), return_exceptions=True), 20
        )
        assert tap.dropped == 1
        assert all(r is None or isinstance(r, MetadataUnavailableError) for r in got), got
        assert any(isinstance(r, MetadataUnavailableError) for r in got)

        async def again() -> list[Any]:
            return list(await asyncio.gather(*(client.get_or_none(n) for n in names)))

        before = client.requests
        read = await _until_it_works(client, again)
        assert [r is not None for r in read] == [i % 2 == 1 for i in range(80)]
        assert client.requests - before <= 4  # together: 64 and 16, on the new connection
    finally:
        await client.close()


async def test_a_connection_lost_as_a_batch_is_written_leaves_the_client_sending(
    zk_server: ZooKeeperServer, region: str
) -> None:
    """The connection drops as the client writes a batch of requests, and more are made
    meanwhile. Every request of both waves ends (answered, or unavailable: its outcome
    unknown), none waits for good, and on the next connection requests made at once are
    sent and answered. The session lives on."""
    client, tap = await _tapped(zk_server)
    base = f"/batch-dropped-{region}"
    try:
        for i in range(0, 60, 2):
            await client.create(f"{base}/{i}", b"", makepath=True)
        session = client.session_id
        tap.drop_when = lambda data: len(data) > 500  # the first batch of many
        names = [f"{base}/{i}" for i in range(60)]
        expected = [i % 2 == 0 for i in range(60)]
        first = asyncio.gather(*(client.exists(n) for n in names[:40]), return_exceptions=True)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        second = asyncio.gather(*(client.exists(n) for n in names[40:]), return_exceptions=True)
        got = [*await asyncio.wait_for(first, 20), *await asyncio.wait_for(second, 20)]
        assert tap.dropped == 1
        assert any(isinstance(r, MetadataUnavailableError) for r in got)
        for i, r in enumerate(got):
            assert isinstance(r, MetadataUnavailableError) or (r is not None) == expected[i]

        async def again() -> list[bool]:
            found = await asyncio.gather(*(client.exists(n) for n in names))
            return [f is not None for f in found]

        assert await _until_it_works(client, again) == expected
        assert client.phase is Phase.CONNECTED and client.session_id == session
        assert client.in_flight == 0
    finally:
        await client.close()


async def test_transactions_together_when_the_connection_drops_each_end(
    zk_server: ZooKeeperServer, region: str
) -> None:
    """The connection drops as transactions sent together are written: each ends, made or
    unavailable (its outcome unknown, as any request's in flight); none waits for good, and
    transactions go together again on the next connection."""
    client, tap = await _tapped(zk_server)
    base = f"/writes-dropped-{region}"
    try:
        await client.ensure_path(base)
        tap.drop_when = lambda data: OpCode.MULTI in opcodes(data)
        transactions = [[Op("create", f"{base}/d{i}", value=b"x")] for i in range(40)]
        got = await asyncio.wait_for(
            asyncio.gather(*(client.transaction(t) for t in transactions), return_exceptions=True),
            20,
        )
        assert tap.dropped == 1
        assert all(isinstance(r, MetadataUnavailableError) for r in got), got
        attempt = 0

        async def again() -> tuple[list[list[MetadataError | None]], int]:
            nonlocal attempt
            attempt += 1  # names of its own: a failed attempt may have made some
            ops: Sequence[Sequence[Op]] = [
                [Op("create", f"{base}/a{attempt}-{i}", value=b"x")] for i in range(40)
            ]
            before = client.requests
            made = await asyncio.gather(*(client.transaction(t) for t in ops))
            return list(made), client.requests - before

        made, requests = await _until_it_works(client, again)
        assert made == [[None]] * 40 and requests == 1
    finally:
        await client.close()


async def test_every_request_ends_once_when_the_client_closes_as_it_is_sent(
    zk_server: ZooKeeperServer, region: str
) -> None:
    """Requests made in the turn the client is closed, and others in flight: each ends once,
    answered or unavailable, and every slot is given back (a request answered twice once
    gave its slot back twice)."""
    client = ZkClient(zk_server.address, session_timeout=10.0)
    await client.start()
    await client.ensure_path(f"/closing-{region}")
    flying = [asyncio.ensure_future(client.exists(f"/closing-{region}")) for _ in range(50)]
    await asyncio.sleep(0)
    late = [asyncio.ensure_future(client.get_or_none(f"/closing-{region}/{i}")) for i in range(20)]
    closing = asyncio.ensure_future(client.close())
    ended = await asyncio.wait_for(asyncio.gather(*flying, *late, return_exceptions=True), 10)
    await closing
    assert all(
        isinstance(r, MetadataUnavailableError) or r is None or hasattr(r, "version") for r in ended
    ), ended
    assert client.in_flight == 0 and client.phase is Phase.CLOSED
    with pytest.raises(MetadataUnavailableError):
        await client.exists("/")


async def test_the_client_runs_no_thread(zk_server: ZooKeeperServer, region: str) -> None:
    """Connections, answers, watches and the session's timing all run on the event loop."""
    before = {t.ident for t in threading.enumerate()}
    client = ZkClient(zk_server.address, session_timeout=4.0)
    await client.start()
    fired = asyncio.Event()
    await client.create(f"/threads-{region}", b"")
    client.watch(f"/threads-{region}", fired.set, 0)
    await client.set(f"/threads-{region}", b"x", 0)
    await asyncio.wait_for(fired.wait(), 10)
    await asyncio.sleep(2.0)  # pings
    assert {t.ident for t in threading.enumerate()} <= before
    await client.close()


async def test_a_large_listing_is_decoded_off_the_loop(
    zk_server: ZooKeeperServer, region: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer past ``LARGE_ANSWER`` without a watch (a region's every ledger, tens of
    megabytes at a million topics) is decoded on the loop's executor: right, and the loop
    answers other requests meanwhile. A watched listing is decoded at once (its watch is
    recorded before any notification can follow)."""
    monkeypatch.setattr(connection_module, "LARGE_ANSWER", 1000)
    client = ZkClient(zk_server.address, session_timeout=10.0)
    await client.start()
    base = f"/large-{region}"
    decoders: list[int] = []
    real = GetChildrenResponse.read

    def spying(data: bytes, pos: int) -> tuple[GetChildrenResponse, int]:
        decoders.append(threading.get_ident())
        return real(data, pos)

    try:
        await client.ensure_path(base)
        names = [f"child-{i:04d}" for i in range(200)]  # 200 x 14 bytes: past 1,000
        await asyncio.gather(*(client.create(f"{base}/{n}") for n in names))
        monkeypatch.setattr(GetChildrenResponse, "read", spying)
        listed, small = await asyncio.gather(client.children(base), client.exists(base))
        assert sorted(listed) == names and small is not None
        assert decoders and decoders[0] != threading.get_ident()  # on another thread
        fired = asyncio.Event()
        watched = await client.children_watched(base, client.one_shot(fired.set))
        assert sorted(watched) == names and decoders[1] == threading.get_ident()
        await client.create(f"{base}/one-more")
        await asyncio.wait_for(fired.wait(), 10)
    finally:
        await client.close()
