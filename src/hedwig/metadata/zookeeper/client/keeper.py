"""The task that keeps a ZooKeeper session: connects, reconnects, pings, on the injected
clock, following ``hedwig.metadata.zookeeper.client.session``'s table and timing.

One attempt: a connection to the next server of the ring (``Opener``), the handshake with
the session's id and password (none the first time), the credentials presented again
(digest authentication is per connection), then the client primes the connection
(``KeeperHooks.primed``: the session's watches set again, before any request can follow
them), and only then is the session connected. An attempt that fails in any way (refused,
timed out on the clock, the connection dropped mid-way) counts for the backoff and the next
server is tried. A handshake answered with a timeout of 0 means ZooKeeper expired the
session: the phase says so, and the next attempt asks for a new session at once.

Connected, the keeper watches the connection by its ``last_sent`` and ``last_received``:
a ping when nothing was sent for a third of the negotiated timeout, the connection dropped
when nothing was heard for two thirds of it; it sleeps on the clock until the next such
moment or the connection's end, whichever comes first. Every phase change goes to
``KeeperHooks.changed`` at once, on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Sequence
from typing import Protocol

from hedwig.clock import Clock
from hedwig.errors import HedwigError, MetadataError
from hedwig.metadata.zookeeper.client.connection import Connection, Opener
from hedwig.metadata.zookeeper.client.records import CloseRequest, ConnectRequest, WatcherEvent
from hedwig.metadata.zookeeper.client.session import (
    Backoff,
    Credentials,
    Event,
    HostRing,
    Phase,
    Timing,
    next_phase,
)

log = logging.getLogger(__name__)

# How long a closing client waits for ZooKeeper to confirm the session's end (its ephemeral
# znodes gone at once, not a session timeout later), in seconds.
CLOSE_WAIT_S = 2.0
DEFAULT_BACKOFF = Backoff()


class KeeperHooks(Protocol):
    def changed(self, old: Phase, new: Phase) -> None:
        """The session's phase changed (on the loop)."""
        ...

    def primed(self, connection: Connection) -> None:
        """A new connection of the session, before it counts as connected: whatever must
        reach the server before any request does (the watches to set again)."""
        ...

    def event(self, event: WatcherEvent) -> None:
        """A notification from the server."""
        ...


class _Expired(Exception):
    """ZooKeeper answered the handshake: the session is over."""


class SessionKeeper:
    """Keeps one session (see the module docstring)."""

    def __init__(
        self,
        hosts: str,
        *,
        timeout_s: float,
        clock: Clock,
        rng: random.Random,
        opener: Opener,
        hooks: KeeperHooks,
        auth: Sequence[tuple[str, bytes]] = (),
        resume: tuple[int, bytes] | None = None,
        backoff: Backoff = DEFAULT_BACKOFF,
    ) -> None:
        self._ring = HostRing(hosts, rng)
        self._asked_s = timeout_s
        self.timing = Timing(timeout_s, len(self._ring))
        self._clock = clock
        self._rng = rng
        self._opener = opener
        self._hooks = hooks
        self._auth = tuple(auth)
        self._backoff = backoff
        self.credentials = Credentials()
        if resume is not None:
            self.credentials.session_id, self.credentials.password = resume
        self.phase = Phase.CONNECTING
        self.connection: Connection | None = None  # while connected
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Keep the session from now on (again, with a new session, once closed)."""
        if self._task is not None and not self._task.done():
            return
        if self.phase is Phase.CLOSED:
            self.credentials.forget()
            self._change(Event.START)
        self._task = asyncio.get_running_loop().create_task(self._run())

    @property
    def connected(self) -> bool:
        """Whether a request can be sent now."""
        connection = self.connection
        return connection is not None and connection.open

    async def close(self) -> None:
        """End the session (ZooKeeper deletes its ephemeral znodes now) and stop."""
        if self.phase is Phase.CLOSED:
            return
        connection = self.connection
        self._change(Event.CLOSE)
        if connection is not None and connection.open:
            done: asyncio.Future[int] = asyncio.get_running_loop().create_future()

            def answered(err: int, _result: object) -> None:
                if not done.done():
                    done.set_result(err)

            connection.send(CloseRequest(), answered)
            with contextlib.suppress(TimeoutError):
                await self._clock.wait_for(done, CLOSE_WAIT_S)
            connection.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _closed(self) -> bool:
        return self.phase is Phase.CLOSED

    def _change(self, event: Event) -> None:
        old = self.phase
        new = next_phase(old, event)
        if new is old:
            return
        self.phase = new
        if new is not Phase.CONNECTED:
            self.connection = None
        self._hooks.changed(old, new)

    async def _run(self) -> None:
        failures = 0
        while self.phase is not Phase.CLOSED:
            delay = self._backoff.delay(failures, self._rng)
            if delay:
                await self._clock.sleep(delay)
            host, port = self._ring.next()
            try:
                connection = await self._attempt(host, port)
            except _Expired:
                log.warning("ZooKeeper session 0x%x expired", self.credentials.session_id)
                self.credentials.forget()
                self._change(Event.EXPIRED)
                failures = 0
                continue
            except Exception as exc:  # whatever failed, the session is kept trying for
                failures += 1
                expected = isinstance(exc, OSError | TimeoutError | HedwigError)
                log.log(
                    logging.INFO if expected else logging.WARNING,
                    "cannot connect to ZooKeeper at %s:%d: %s",
                    host,
                    port,
                    exc,
                    exc_info=not expected,
                )
                self._change(Event.LOST)
                continue
            self.connection = connection
            self._change(Event.CONNECTED)
            await self._keep(connection)
            if self._closed():
                return
            log.info("ZooKeeper connection to %s:%d lost", host, port)
            self._change(Event.LOST)
            # Not at once: every client of a server that went would be back at the same
            # moment (and a session another client took over, to close it, would be taken
            # back from it).
            failures = 1

    async def _attempt(self, host: str, port: int) -> Connection:
        hooks = self._hooks
        connection = Connection(self._clock, hooks.event)
        budget = self.timing.connect_timeout_s
        started = self._clock.monotonic()

        def left() -> float:
            return max(0.0, budget - (self._clock.monotonic() - started))

        try:
            await self._clock.wait_for(self._opener(host, port, connection), left())
            credentials = self.credentials
            answer = await self._clock.wait_for(
                connection.handshake(
                    ConnectRequest(
                        protocol_version=0,
                        last_zxid_seen=credentials.last_zxid,
                        time_out=int(self._asked_s * 1000),
                        session_id=credentials.session_id,
                        passwd=credentials.password,
                    )
                ),
                left(),
            )
            if answer.time_out <= 0:
                raise _Expired()
            credentials.session_id = answer.session_id
            credentials.password = answer.passwd
            self.timing = Timing(answer.time_out / 1000, len(self._ring))
            for scheme, auth in self._auth:
                err = await self._clock.wait_for(connection.authenticate(scheme, auth), left())
                if err:
                    # ZooKeeper closes the connection after refusing credentials; a digest
                    # is never refused (it only adds an identity to the session).
                    log.error("ZooKeeper refused the %s credentials (error %d)", scheme, err)
                    raise MetadataError(f"ZooKeeper refused the {scheme} credentials")
            hooks.primed(connection)
        except BaseException:
            connection.abort()
            raise
        return connection

    async def _keep(self, connection: Connection) -> None:
        """Pings and the read timeout, until the connection ends."""
        clock = self._clock
        while connection.open and self.phase is Phase.CONNECTED:
            timing = self.timing
            now = clock.monotonic()
            due = timing.due(now, connection.last_sent, connection.last_received)
            if due == "drop":
                log.warning(
                    "nothing heard from ZooKeeper for %.1f s: dropping the connection",
                    now - connection.last_received,
                )
                connection.abort()
                break
            if due == "ping":
                connection.ping()
                continue
            wake = timing.next_check(connection.last_sent, connection.last_received)
            with contextlib.suppress(TimeoutError):
                await clock.wait_for(asyncio.shield(connection.closed), max(0.0, wake - now))
        await connection.closed  # its pending requests answered before the phase changes
        self.credentials.last_zxid = max(self.credentials.last_zxid, connection.last_zxid)

    @property
    def last_zxid(self) -> int:
        """The latest zxid this session has seen."""
        connection = self.connection
        seen = self.credentials.last_zxid
        return max(seen, connection.last_zxid) if connection is not None else seen
