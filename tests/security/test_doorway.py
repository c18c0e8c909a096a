"""What an unauthenticated connection may cost a hub: bounded frames, time and numbers.

Thirty anonymous TLS connections each holding all but the last byte of a 16 MiB frame took a
hub from 214 to 832 MB; 2,000 idle and 300 slowloris connections were all still open a minute
later, and nothing was logged. Against a secured hub in this process: a large frame before
authenticating is answered MESSAGE_TOO_LARGE unbuffered (and allowed once authenticated), an
idle connection and one that leaves a frame incomplete are closed on time, one connection over
the per-peer or per-hub count is closed as it connects, each closure is counted by reason; and
the doorway's rules on a manual clock, with the closure log's summary.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from hedwig.clock import ManualClock
from hedwig.errors import MessageTooLargeError
from hedwig.hub.front.doorway import (
    DETAILED_PER_INTERVAL,
    SUMMARY_INTERVAL_S,
    ClosureLog,
    DoorLimits,
    Doorway,
)
from hedwig.hub.front.memory import AFTER_CLOSED, CHECK_S, MemoryRelease
from hedwig.hub.reporting.disconnects import Disconnect
from hedwig.hub.reporting.events import NoEvents
from hedwig.metadata.memory import MemoryBackend
from hedwig.net.connection import HubConnection
from hedwig.net.peers import peer_group
from hedwig.net.transport import TcpNetwork
from hedwig.protocol import Authenticate, Connection, Error, Role, error_from_frame
from hedwig.protocol.codec import encode_frame
from hedwig.protocol.wire import HEADER, PROTOCOL_VERSION
from hedwig.security import StaticToken
from tests.security.conftest import SecureRegion, running_hubs, secure_config
from tests.security.fixtures import Pki, TokenIssuer

PUBLISH = 0x01


@pytest.fixture
async def guarded(pki: Pki, issuer: TokenIssuer) -> AsyncIterator[SecureRegion]:
    """One secured hub with tight doorway bounds (and 1/1/1, so it publishes alone)."""
    region = SecureRegion(pki, issuer, MemoryBackend())
    config = secure_config(
        pki,
        issuer,
        replication="1/1/1",
        unauthenticated_timeout_s=2.0,
        incomplete_frame_timeout_s=1.0,
        unauthenticated_connections=8,
        unauthenticated_connections_per_ip=4,
    )
    async with running_hubs(region.hubs, [config], region.store):
        yield region


@dataclass
class Raw:
    """A TLS connection that writes bytes as they are given and reads frames back."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    conn: Connection = field(default_factory=lambda: Connection(Role.CLIENT))
    frames: list[object] = field(default_factory=list)

    @classmethod
    async def open(cls, region: SecureRegion) -> Raw:
        host, port = region.hubs[0].address.rsplit(":", 1)
        tls = ssl.create_default_context(cafile=region.pki.path("hub-ca.crt"))
        reader, writer = await asyncio.open_connection(host, int(port), ssl=tls)
        return cls(reader, writer)

    async def answer(self) -> object:
        while True:
            self.frames.extend(self.conn.next_frames())
            if self.frames:
                return self.frames.pop(0)
            chunk = await asyncio.wait_for(self.reader.read(65536), 5)
            assert chunk, "closed instead of answering"
            self.conn.receive_data(chunk)

    async def closed_within(self, seconds: float) -> bool:
        try:
            async with asyncio.timeout(seconds):
                while await self.reader.read(65536):
                    pass
        except TimeoutError:
            return False
        except (ConnectionError, ssl.SSLError):
            pass
        return True

    def close(self) -> None:
        self.writer.close()


def closed_count(region: SecureRegion, reason: Disconnect) -> float:
    counter = region.hubs[0].metrics.connections_closed.labels(reason.value)
    return float(counter._value.get())


async def test_a_large_frame_before_authenticating_is_refused_unread(
    guarded: SecureRegion,
) -> None:
    raw = await Raw.open(guarded)
    size = 16 * 1024 * 1024
    raw.writer.write(HEADER.pack(size - 4, PROTOCOL_VERSION, PUBLISH, 0, 7))
    raw.writer.write(b"\x00" * (256 * 1024))
    answer = await raw.answer()
    assert isinstance(answer, Error) and answer.request_id == 7
    error = error_from_frame(answer)
    assert isinstance(error, MessageTooLargeError)
    assert "limit of 65536 before authenticating" in str(error)
    hub_side = next(iter(guarded.hubs[0].front.connections))
    assert hub_side._conn.pending_bytes > 0 and len(hub_side._conn._buf) < 65536
    raw.close()
    # Authenticated, the same connection's limit is the hub's again: a 200 KiB message goes.
    security = guarded.security(token_for="admin")
    async with guarded.client(security=security) as admin:
        await admin.publish("big", b"x" * (200 * 1024))


async def test_an_idle_connection_and_a_slow_frame_are_closed_on_time(
    guarded: SecureRegion,
) -> None:
    idle = await Raw.open(guarded)
    slow = await Raw.open(guarded)
    frame = encode_frame(Authenticate(request_id=1, mechanism="token", credentials="x" * 4000))
    slow.writer.write(frame[:1000])  # all but the rest of a frame under the limit
    assert await slow.closed_within(3), "a frame left incomplete was kept"
    assert not await idle.closed_within(0.1)
    assert await idle.closed_within(3), "an idle unauthenticated connection was kept"
    assert closed_count(guarded, Disconnect.INCOMPLETE_FRAME) == 1
    assert closed_count(guarded, Disconnect.UNAUTHENTICATED_TIMEOUT) == 1
    assert guarded.hubs[0].front.connections == set()
    # An authenticated connection stays, idle or not.
    conn = await HubConnection.open(
        guarded.hubs[0].address,
        network=TcpNetwork(client_tls=guarded.security().tls),
        credentials=StaticToken(guarded.issuer.token("admin")),
    )
    await asyncio.sleep(3.5)
    assert not conn.closed
    conn.close()


async def test_one_connection_over_the_counts_is_closed_as_it_connects(
    guarded: SecureRegion,
) -> None:
    held = [await Raw.open(guarded) for _ in range(4)]  # the per-address count
    extra = await Raw.open(guarded)
    assert await extra.closed_within(2)
    assert closed_count(guarded, Disconnect.PEER_LIMIT) == 1
    # One of them authenticates: it no longer counts, and another may come.
    first = held.pop(0)
    first.writer.write(
        encode_frame(
            Authenticate(request_id=1, mechanism="token", credentials=guarded.issuer.token("admin"))
        )
    )
    await first.answer()
    again = await Raw.open(guarded)
    assert not await again.closed_within(0.3)
    for raw in (first, again, *held):
        raw.close()


async def test_connections_before_their_tls_handshake_are_counted_too(
    guarded: SecureRegion,
) -> None:
    """A connection that never starts its TLS handshake is past no door yet: 2,000 of them
    from one address were all held for 30 s (enough take every file descriptor of the hub).
    The listener holds the door's per-peer count of them, and closes one more as it comes."""
    host, port = guarded.hubs[0].address.rsplit(":", 1)
    silent = [await asyncio.open_connection(host, int(port)) for _ in range(4)]
    extra_reader, extra_writer = await asyncio.open_connection(host, int(port))
    async with asyncio.timeout(2):
        assert await extra_reader.read(1) == b"", "one over the count was held"
    extra_writer.close()
    for _, writer in silent:
        writer.close()
    # Gone, they no longer count: a client gets in (its handshake counted, then released).
    security = guarded.security(token_for="admin")
    async with guarded.client(security=security) as admin:
        await admin.publish("after", b"x")


# The rules on a manual clock ------------------------------------------------------------


@dataclass(eq=False)
class Visitor:
    name: str
    peer_host: str
    incomplete_since: float | None = None
    closed_for: Disconnect | None = None
    aborted: bool = False

    def close(self) -> None:
        self.aborted = True

    def abort(self) -> None:
        self.aborted = True


def _doorway(clock: ManualClock, *, per_hub: int, per_peer: int) -> Doorway:
    """A doorway on ``clock`` with 10 s to identify, 5 s for a frame begun, and these counts."""
    return Doorway(
        DoorLimits(
            frame_bytes=65536, timeout_s=10, incomplete_s=5, per_hub=per_hub, per_peer=per_peer
        ),
        clock=clock,
        closures=ClosureLog(clock=clock, events=NoEvents()),
    )


def test_the_doorway_bounds_numbers_per_hub_and_per_peer() -> None:
    clock = ManualClock()
    door = _doorway(clock, per_hub=4, per_peer=2)
    a = [Visitor(f"10.0.0.1:{i}", "10.0.0.1") for i in range(3)]
    assert [door.arrived(v) for v in a] == [True, True, False]
    assert a[2].closed_for is Disconnect.PEER_LIMIT and a[2].aborted
    # IPv6 peers count by their /64; an IPv4-mapped address as its IPv4 one.
    v6 = [Visitor(f"[2001:db8::{i}]:1", f"2001:db8::{i}") for i in range(1, 4)]
    assert [door.arrived(v) for v in v6] == [True, True, False]
    assert peer_group("::ffff:10.0.0.1") == "10.0.0.1"
    assert door.arrived(Visitor("10.9.9.9:1", "10.9.9.9")) is False  # 4 wait: the hub's count
    door.identified(a[0])
    assert door.arrived(Visitor("10.0.0.1:9", "10.0.0.1")) is True


def test_the_doorway_closes_on_deadlines_once_each() -> None:
    clock = ManualClock()
    door = _doorway(clock, per_hub=10, per_peer=10)
    idle, slow, done = (Visitor(f"h:{i}", "10.0.0.1") for i in range(3))
    for v in (idle, slow, done):
        door.arrived(v)
    clock.advance(2)
    slow.incomplete_since = clock.monotonic()
    clock.advance(4.9)
    assert door.sweep() == 0
    clock.advance(0.2)
    assert door.sweep() == 1 and slow.closed_for is Disconnect.INCOMPLETE_FRAME
    door.identified(done)
    clock.advance(3)
    assert door.sweep() == 1 and idle.closed_for is Disconnect.UNAUTHENTICATED_TIMEOUT
    assert done.closed_for is None and door.waiting == 0
    assert door.sweep() == 0


def test_closures_are_logged_a_few_one_by_one_then_summed_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    closures = ClosureLog(clock=clock, events=NoEvents())
    with caplog.at_level(logging.WARNING, logger="hedwig.hub.front.doorway"):
        for i in range(2000):
            closures.closed(
                Visitor(f"10.0.{i % 200}.1:1", f"10.0.{i % 200}.1"),
                Disconnect.UNAUTHENTICATED_TIMEOUT if i % 2 else Disconnect.PEER_LIMIT,
                "why",
            )
        closures.tick()
        assert len(caplog.records) == DETAILED_PER_INTERVAL
        clock.advance(SUMMARY_INTERVAL_S)
        closures.tick()
        closures.tick()
    assert len(caplog.records) == DETAILED_PER_INTERVAL + 1
    summary = caplog.records[-1].getMessage()
    assert summary.startswith("closed 2000 connections in the last 60 s (5 logged one by one)")
    assert "unauthenticated_timeout 1000" in summary and "peer_limit 1000" in summary
    assert "most from others (1360), 10.0.0.1 (10)" in summary


def test_the_memory_of_a_flood_is_given_back_after_it_and_once_more_at_its_end() -> None:
    clock = ManualClock()
    trims: list[float] = []
    release = MemoryRelease(clock, trim=lambda: trims.append(clock.monotonic()))
    gone = 0
    for closed in [5, 150, 400, 20, 0, 0, 120, 0]:
        gone += closed
        clock.advance(CHECK_S)
        release.check(gone)
        assert not release.check(gone), "at most one trim per check period"
    # The flood's checks (150, 400, 120) and the one after each (20, 0 after 400; 0 after 120).
    assert len(trims) == 5 and release.trims == 5
    assert AFTER_CLOSED == 100


def test_a_flood_closed_slowly_is_given_back_too() -> None:
    """A hub short of CPU closes a flood's connections over minutes, fewer than AFTER_CLOSED
    each check: they are counted from the last trim, so they are given back all the same."""
    clock = ManualClock()
    trims: list[int] = []
    gone = 0
    release = MemoryRelease(clock, trim=lambda: trims.append(gone))
    for _ in range(12):
        gone += AFTER_CLOSED // 3
        clock.advance(CHECK_S)
        release.check(gone)
    assert len(trims) >= 3, trims  # counted by check: none at all
    assert gone - trims[-1] < AFTER_CLOSED
