"""The ZooKeeper session's table and its keeper, in memory, on a manual clock.

The keeper (``hedwig.metadata.zookeeper.client.keeper``) talks to scripted servers over
in-memory transports (``Ensemble``): each server speaks ZooKeeper's protocol through the
client's own codec (its server side, ``framing.read_request``/``put_reply``), answers what a
test lets it answer, and records what it was sent. Time moves only when a test moves it, so
pings, read timeouts, connection timeouts and backoff are tested without waiting.
"""

from __future__ import annotations

import asyncio
import functools
import random
from typing import Any

import pytest

from hedwig.clock import ManualClock
from hedwig.errors import UsageError
from hedwig.metadata.zookeeper.client import ZkClient
from hedwig.metadata.zookeeper.client.codes import Xid
from hedwig.metadata.zookeeper.client.framing import (
    FrameSplitter,
    put_connect,
    put_reply,
    read_request,
)
from hedwig.metadata.zookeeper.client.jute import decode_whole
from hedwig.metadata.zookeeper.client.records import (
    AuthRequest,
    CloseRequest,
    ConnectRequest,
    ConnectResponse,
    Empty,
    ExistsRequest,
    PingRequest,
    Request,
    SetWatchesRequest,
    Stat,
    StatResponse,
    WatcherEvent,
)
from hedwig.metadata.zookeeper.client.session import (
    REPORTED,
    TRANSITIONS,
    Backoff,
    Event,
    HostRing,
    Phase,
    Timing,
    next_phase,
)

TIMEOUT = 6.0  # the session timeout every test asks for (and its servers grant)
STAT = Stat(1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 2)


# The table -------------------------------------------------------------------------------------


def test_every_phase_and_event_is_a_row_or_refused() -> None:
    for phase in Phase:
        for event in Event:
            if (phase, event) in TRANSITIONS:
                assert next_phase(phase, event) is TRANSITIONS[(phase, event)]
            else:
                with pytest.raises(UsageError):
                    next_phase(phase, event)
        assert next_phase(phase, Event.CLOSE) is Phase.CLOSED
    # Only ZooKeeper's answer expires a session, and a lost connection only suspends it.
    assert next_phase(Phase.CONNECTED, Event.LOST) is Phase.SUSPENDED
    assert next_phase(Phase.SUSPENDED, Event.LOST) is Phase.SUSPENDED
    assert next_phase(Phase.SUSPENDED, Event.EXPIRED) is Phase.EXPIRED
    assert next_phase(Phase.EXPIRED, Event.CONNECTED) is Phase.CONNECTED
    assert REPORTED[Phase.EXPIRED] == "lost" and REPORTED[Phase.CONNECTING] is None


def test_timing_follows_the_negotiated_timeout() -> None:
    timing = Timing(6.0, servers=3)
    assert (timing.ping_after_s, timing.read_timeout_s, timing.connect_timeout_s) == (2, 4, 2)
    assert timing.due(10.0, last_sent=9.0, last_received=9.0) is None
    assert timing.due(11.0, last_sent=9.0, last_received=10.5) == "ping"
    assert timing.due(13.0, last_sent=12.5, last_received=9.0) == "drop"
    assert timing.next_check(last_sent=9.0, last_received=8.0) == 11.0


def test_backoff_and_the_ring_of_servers() -> None:
    rng = random.Random(3)
    backoff = Backoff()
    assert backoff.delay(0, rng) == 0.0
    delays = [backoff.delay(n, rng) for n in range(1, 8)]
    assert 0.1 <= delays[0] <= 0.15 and 0.2 <= delays[1] <= 0.3
    assert all(1.0 <= d <= 1.5 for d in delays[4:])  # up to a second, stretched by jitter
    ring = HostRing("a:1,b:2,c:3", random.Random(5))
    order = [ring.next() for _ in range(6)]
    assert sorted(order[:3]) == [("a", 1), ("b", 2), ("c", 3)] and order[3:] == order[:3]
    with pytest.raises(UsageError, match="HOST:PORT"):
        HostRing("a:1,nope", rng)


# The keeper, against scripted servers -----------------------------------------------------------


class _Pipe(asyncio.Transport):
    """One side of an in-memory connection: what it writes arrives at the other side."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._loop = loop
        self.peer: _Pipe | None = None
        self.protocol: asyncio.Protocol | None = None
        self._closing = False

    def write(self, data: Any) -> None:
        if self._closing or self.peer is None or self.peer.protocol is None:
            return
        self._loop.call_soon(self.peer._arrive, bytes(data))

    def _arrive(self, data: bytes) -> None:
        if not self._closing and self.protocol is not None:
            self.protocol.data_received(data)

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        for side in (self, self.peer):
            if side is not None and not side._closing:
                side._closing = True
                self._loop.call_soon(side._lost)

    abort = close

    def _lost(self) -> None:
        if self.protocol is not None:
            self.protocol.connection_lost(None)


class Server(asyncio.Protocol):
    """One scripted ZooKeeper server of an ``Ensemble``."""

    def __init__(self, ensemble: Ensemble, name: str) -> None:
        self.ensemble = ensemble
        self.name = name
        self.transport: _Pipe | None = None
        self.splitter = FrameSplitter()
        self.greeted = False
        self.received: list[Request | ConnectRequest] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, _Pipe)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        for frame in self.splitter.feed(data):
            if not self.greeted:
                self.greeted = True
                self.handshake(decode_whole(ConnectRequest.read, frame, 0))
            else:
                xid, request = read_request(frame)
                self.received.append(request)
                self.answer(xid, request)

    def handshake(self, connect: ConnectRequest) -> None:
        self.received.append(connect)
        ensemble = self.ensemble
        if not ensemble.greets:
            return
        if connect.session_id and connect.session_id in ensemble.expired:
            self.send_connect(ConnectResponse(0, 0, 0, b"\0" * 16))
            return
        session = connect.session_id or ensemble.new_session()
        self.send_connect(ConnectResponse(0, int(TIMEOUT * 1000), session, b"pw%d" % session))

    def answer(self, xid: int, request: Request) -> None:
        ensemble = self.ensemble
        if isinstance(request, PingRequest):
            if ensemble.pongs:
                self.reply(Xid.PING, 0, None)
        elif isinstance(request, AuthRequest):
            self.reply(Xid.AUTH, 0, None)
        elif isinstance(request, SetWatchesRequest):
            self.reply(xid, 0, Empty())
            for path in request.data_watches:
                if path in ensemble.changed:  # changed since the client's zxid: notify now
                    self.notify(path)
        elif isinstance(request, ExistsRequest):
            self.reply(xid, 0, StatResponse(STAT))
        elif isinstance(request, CloseRequest):
            self.reply(xid, 0, Empty())
            assert self.transport is not None
            self.transport.close()

    def reply(self, xid: int, err: int, body: Any) -> None:
        out = bytearray()
        put_reply(out, xid, self.ensemble.zxid, err, body)
        assert self.transport is not None
        self.transport.write(out)

    def send_connect(self, answer: ConnectResponse) -> None:
        out = bytearray()
        put_connect(out, answer)
        assert self.transport is not None
        self.transport.write(out)

    def notify(self, path: str) -> None:
        out = bytearray()
        put_reply(out, Xid.NOTIFICATION, self.ensemble.zxid, 0, WatcherEvent(3, 3, path))
        assert self.transport is not None
        self.transport.write(out)

    def drop(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


class Ensemble:
    """Scripted servers ``a:1``, ``b:2``...; the client's ``Opener``."""

    def __init__(self, names: str) -> None:
        self.hosts = names
        self.down: set[str] = set()  # refuse connections
        self.greets = True  # answer handshakes
        self.pongs = True  # answer pings
        self.expired: set[int] = set()  # sessions over
        self.changed: set[str] = set()  # paths changed since any client's zxid
        self.servers: list[Server] = []  # every connection, in order
        self.zxid = 10
        self._sessions = 0x100

    def new_session(self) -> int:
        self._sessions += 1
        return self._sessions

    @property
    def last(self) -> Server:
        return self.servers[-1]

    async def __call__(self, host: str, port: int, protocol: asyncio.Protocol) -> None:
        name = f"{host}:{port}"
        if name in self.down:
            raise ConnectionRefusedError(name)
        loop = asyncio.get_running_loop()
        client, server_side = _Pipe(loop), _Pipe(loop)
        client.peer, server_side.peer = server_side, client
        server = Server(self, name)
        client.protocol, server_side.protocol = protocol, server
        self.servers.append(server)
        server.connection_made(server_side)
        protocol.connection_made(client)


async def turns(n: int = 30) -> None:
    """Let the loop run (nothing here waits for real time)."""
    for _ in range(n):
        await asyncio.sleep(0)


async def advance(clock: ManualClock, seconds: float, step: float = 0.05) -> None:
    """Move the clock by ``seconds``, a step at a time, the loop running between steps."""
    moved = 0.0
    while moved < seconds - 1e-9:
        clock.advance(min(step, seconds - moved))
        moved += step
        await turns(5)


def client(ensemble: Ensemble, clock: ManualClock, **kwargs: Any) -> tuple[ZkClient, list[Phase]]:
    zk = ZkClient(
        ensemble.hosts,
        session_timeout=TIMEOUT,
        clock=clock,
        rng=random.Random(1),
        opener=ensemble,
        **kwargs,
    )
    phases: list[Phase] = []
    zk.add_listener(phases.append)
    return zk, phases


async def test_a_session_is_opened_then_kept_alive_by_pings_on_the_clock() -> None:
    clock, ensemble = ManualClock(), Ensemble("a:1")
    zk, phases = client(ensemble, clock, auth=[("digest", b"u:p")])
    await zk.start()
    assert phases == [Phase.CONNECTED] and zk.session_id == 0x101
    server = ensemble.last
    connect, auth = server.received
    assert isinstance(connect, ConnectRequest) and connect.session_id == 0
    assert connect.time_out == 6000 and isinstance(auth, AuthRequest)
    assert auth.scheme == "digest" and auth.auth == b"u:p"
    # Nothing sent for a third of the timeout: a ping, and none before.
    await advance(clock, 1.9)
    assert not any(isinstance(r, PingRequest) for r in server.received)
    await advance(clock, 0.2)
    assert sum(isinstance(r, PingRequest) for r in server.received) == 1
    # A request counts as something sent: no ping until a third of the timeout after it.
    await zk.exists("/x")
    await advance(clock, 1.9)
    assert sum(isinstance(r, PingRequest) for r in server.received) == 1
    await advance(clock, 60.0)  # answered pings keep it connected for as long as it lasts
    assert phases == [Phase.CONNECTED] and len(ensemble.servers) == 1
    await zk.close()
    assert isinstance(server.received[-1], CloseRequest) and zk.phase is Phase.CLOSED


async def test_a_silent_connection_is_dropped_and_the_session_resumed_on_the_next_server() -> None:
    """Nothing heard for two thirds of the timeout (pings unanswered): the connection is
    dropped, the session is suspended (not lost), and the next server is asked for the same
    session, with its password, the latest zxid seen and the credentials again."""
    clock, ensemble = ManualClock(), Ensemble("a:1,b:2")
    zk, phases = client(ensemble, clock, auth=[("digest", b"u:p")])
    await zk.start()
    first = ensemble.last
    session, password = zk.session_id, zk.session_password
    await zk.exists("/x")  # an answer with a zxid
    ensemble.pongs = False
    await advance(clock, 3.9)
    assert phases == [Phase.CONNECTED]
    await advance(clock, 0.2)
    assert phases == [Phase.CONNECTED, Phase.SUSPENDED]
    await advance(clock, 0.3)  # the backoff after a lost connection, then the next server
    assert phases == [Phase.CONNECTED, Phase.SUSPENDED, Phase.CONNECTED]
    second = ensemble.last
    assert second is not first and second.name != first.name
    connect = second.received[0]
    assert isinstance(connect, ConnectRequest)
    assert (connect.session_id, connect.passwd) == (session, password)
    assert connect.last_zxid_seen == ensemble.zxid
    assert isinstance(second.received[1], AuthRequest)
    await zk.close()


async def test_no_server_answering_never_expires_the_session_by_the_clients_clock() -> None:
    """Every server gone for ten session timeouts: the session stays suspended (ZooKeeper,
    not the client, says when a session is over; a hub keeps serving meanwhile), attempts
    back off up to about a second apart, requests are refused at once; when a server is
    back the same session is connected again."""
    clock, ensemble = ManualClock(), Ensemble("a:1,b:2")
    zk, phases = client(ensemble, clock)
    await zk.start()
    session = zk.session_id
    ensemble.down = {"a:1", "b:2"}
    ensemble.last.drop()
    await turns()
    assert phases == [Phase.CONNECTED, Phase.SUSPENDED]
    attempts = len(ensemble.servers)
    await advance(clock, 10 * TIMEOUT, step=0.25)
    assert phases == [Phase.CONNECTED, Phase.SUSPENDED]
    with pytest.raises(Exception, match="not connected"):
        await zk.exists("/x")
    ensemble.down.clear()
    await advance(clock, 1.6, step=0.1)
    assert phases == [Phase.CONNECTED, Phase.SUSPENDED, Phase.CONNECTED]
    assert zk.session_id == session and len(ensemble.servers) == attempts + 1
    await zk.close()


async def test_a_handshake_unanswered_is_given_up_on_the_clock() -> None:
    """A server that accepts the connection and never answers the handshake gets its share
    of the timeout (the timeout over the servers), then the next server is tried."""
    clock, ensemble = ManualClock(), Ensemble("a:1,b:2")
    ensemble.greets = False
    zk, phases = client(ensemble, clock)
    starting = asyncio.create_task(zk.start(timeout=60))
    await turns()
    assert len(ensemble.servers) == 1
    await advance(clock, 2.9)
    assert len(ensemble.servers) == 1
    ensemble.greets = True
    await advance(clock, 0.5)
    await starting
    assert len(ensemble.servers) == 2 and phases == [Phase.CONNECTED]
    await zk.close()


async def test_an_expired_session_is_lost_its_watches_fire_and_a_new_one_opens() -> None:
    clock, ensemble = ManualClock(), Ensemble("a:1")
    zk, phases = client(ensemble, clock)
    await zk.start()
    old = zk.session_id
    fired: list[str] = []
    zk.watch("/w", lambda: fired.append("/w"))
    await turns()
    ensemble.expired.add(old)
    ensemble.last.drop()
    await advance(clock, 0.5)
    assert phases == [Phase.CONNECTED, Phase.SUSPENDED, Phase.EXPIRED, Phase.CONNECTED]
    assert fired == ["/w"]  # its holder reads again, on the new session
    assert zk.session_id not in (0, old)
    connect = ensemble.last.received[0]
    assert isinstance(connect, ConnectRequest) and connect.session_id == 0
    assert len(zk.watches.record) == 0
    await zk.close()


async def test_watches_are_set_again_on_the_next_connection_before_any_request() -> None:
    """A reconnection sets every watch again (data, exist and child) in ``SetWatches`` from
    the latest zxid seen, before anything else the client sends on it; one whose znode
    changed meanwhile fires then, the others stay set; a watch set while suspended is kept
    and set with them."""
    clock, ensemble = ManualClock(), Ensemble("a:1")
    zk, phases = client(ensemble, clock)
    await zk.start()
    fired: list[str] = []
    for path in ("/kept", "/changed"):
        zk.watch(path, functools.partial(fired.append, path))
    await turns()
    await zk.exists("/x")
    seen = zk.last_zxid
    ensemble.last.drop()
    await turns()
    assert phases == [Phase.CONNECTED, Phase.SUSPENDED]
    zk.watch("/while-away", lambda: fired.append("/while-away"))
    ensemble.zxid += 5
    ensemble.changed = {"/changed"}
    await advance(clock, 0.5)
    assert phases == [Phase.CONNECTED, Phase.SUSPENDED, Phase.CONNECTED]
    assert fired == ["/changed"]
    sent = [r for r in ensemble.last.received if not isinstance(r, PingRequest)]
    assert isinstance(sent[0], ConnectRequest) and isinstance(sent[1], SetWatchesRequest)
    assert sent[1].relative_zxid == seen
    assert set(sent[1].data_watches) == {"/kept", "/changed", "/while-away"}
    assert zk.watches.record.watching("/kept") and not zk.watches.record.watching("/changed")
    await zk.close()


async def test_the_first_connection_is_retried_until_start_gives_up_and_start_again() -> None:
    """A start that finds no server for its timeout gives up, closed; started again (a hub
    retries its store's start while the store is away) it connects, with a new session;
    started once more while connected, it returns at once."""
    clock, ensemble = ManualClock(), Ensemble("a:1")
    ensemble.down = {"a:1"}
    zk, phases = client(ensemble, clock)
    starting = asyncio.create_task(zk.start(timeout=5.0))
    await advance(clock, 5.1, step=0.1)
    with pytest.raises(Exception, match="cannot reach ZooKeeper"):
        await starting
    assert phases == [Phase.CLOSED]  # never connected
    ensemble.down.clear()
    await zk.start(timeout=5.0)
    assert phases == [Phase.CLOSED, Phase.CONNECTING, Phase.CONNECTED] and zk.session_id
    connections = len(ensemble.servers)
    await zk.start()
    assert len(ensemble.servers) == connections and phases[-1] is Phase.CONNECTED
    await zk.close()
