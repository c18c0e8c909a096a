"""The doorway: what a connection may cost a hub before it has proved who it is (and, after,
what its unfinished frames may hold: ``hedwig.hub.front.unfinished``).

With authentication on, a connection that has not authenticated is anyone's, so what it may
hold is bounded, in all and per peer, each bound a setting (``HubConfig``):

- **size**: its frames are limited to ``unauthenticated_frame_bytes`` (64 KiB) instead of the
  hub's 16 MiB or more. A larger one is skipped as it arrives, never buffered, and answered
  MESSAGE_TOO_LARGE (``hedwig.protocol.connection``). Authenticating lifts the limit.
- **time**: it is closed if it has not authenticated ``unauthenticated_timeout_s`` (10 s) after
  it connected, or once a frame it began has stayed incomplete for
  ``incomplete_frame_timeout_s`` (5 s): idle and slowloris connections alike.
- **number**: the hub holds at most ``unauthenticated_connections`` of them, and at most
  ``unauthenticated_connections_per_ip`` from one peer address (an IPv6 peer by its /64, the
  block one host is given); one more is closed as it connects.
- **refusals**: it is closed once ``unauthenticated_refusals`` (3) of its requests were
  refused, its answers sent first: a client that cannot authenticate gives up at its first
  UNAUTHENTICATED, and a scanner has nothing more to learn.

Time is checked by one sweep a second, on the hub's clock, over the unauthenticated
connections only. Connections closed for time are aborted, not closed gracefully: a peer that
reads nothing would otherwise keep its unsent answers, and itself, forever. A connection that
authenticates (a client certificate in its TLS handshake, or AUTHENTICATE) leaves the doorway:
none of this applies to it. With authentication off every connection is anonymous and nothing
is bounded (``NoDoorway``). The TLS handshake before all this has deadlines of its own (30 s
for the first bytes, 10 s for the handshake) and the same counts, in all and per peer
(``hedwig.net.tls_listener``).

Every connection the hub closes itself, here or for malformed input, is counted in
``hedwig_connections_closed_total{reason}`` and reported by ``ClosureLog``: the first few of
each minute one line each, then one summary line a minute at most with the count by reason
and the peers that caused most, so a flood of connections costs a few log lines, not one each.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from hedwig.clock import Clock
from hedwig.hub.front.memory import MemoryRelease
from hedwig.hub.front.unfinished import UnfinishedFrames, UnfinishedLimits
from hedwig.hub.reporting.disconnects import Disconnect
from hedwig.hub.reporting.events import HubEvents
from hedwig.net.peers import peer_group
from hedwig.settings import HubConfig

log = logging.getLogger(__name__)

# How often the unauthenticated connections' deadlines are checked.
SWEEP_S = 1.0
# The closures of a minute: the first few logged one by one, the rest in one summary line.
SUMMARY_INTERVAL_S = 60.0
DETAILED_PER_INTERVAL = 5
# Peers tallied by name in a summary at most (the rest counted together).
PEERS_TALLIED = 64


class Visitor(Protocol):
    """What the doorway knows of a connection (``hedwig.hub.front.server.ClientConnection``)."""

    name: str
    peer_host: str
    # When the frame it is in the middle of began (the hub's monotonic clock), if any.
    incomplete_since: float | None
    # Why the hub closed it, once it has.
    closed_for: Disconnect | None

    def close(self) -> None:
        """Close once what was written is sent."""
        ...

    def abort(self) -> None:
        """Close now, dropping what is unsent."""
        ...


class ClosureLog:
    """Counts the connections the hub closes and reports them without a line each."""

    def __init__(self, *, clock: Clock, events: HubEvents) -> None:
        self._clock = clock
        self._events = events
        self._since = clock.monotonic()
        self._reasons: dict[Disconnect, int] = {}
        self._peers: dict[str, int] = {}
        self._detailed = 0

    def closed(self, conn: Visitor, reason: Disconnect, detail: str) -> None:
        self._events.disconnected(reason)
        self.tick()
        self._reasons[reason] = self._reasons.get(reason, 0) + 1
        group = peer_group(conn.peer_host)
        if group in self._peers or len(self._peers) < PEERS_TALLIED:
            self._peers[group] = self._peers.get(group, 0) + 1
        else:
            self._peers["others"] = self._peers.get("others", 0) + 1
        if self._detailed < DETAILED_PER_INTERVAL:
            self._detailed += 1
            log.warning("closing connection from %s (%s): %s", conn.name, reason.value, detail)

    def tick(self) -> None:
        """Write the summary of the interval that ended, if it did and anything was closed."""
        now = self._clock.monotonic()
        if now - self._since < SUMMARY_INTERVAL_S:
            return
        total = sum(self._reasons.values())
        if total > self._detailed:
            reasons = ", ".join(
                f"{r.value} {n}" for r, n in sorted(self._reasons.items(), key=lambda x: -x[1])
            )
            peers = ", ".join(
                f"{p} ({n})" for p, n in sorted(self._peers.items(), key=lambda x: -x[1])[:5]
            )
            log.warning(
                "closed %d connections in the last %.0f s (%d logged one by one): %s; most from %s",
                total,
                now - self._since,
                self._detailed,
                reasons,
                peers,
            )
        self._since = now
        self._reasons.clear()
        self._peers.clear()
        self._detailed = 0


@dataclass(frozen=True, slots=True)
class DoorLimits:
    """The bounds on an unauthenticated connection (the settings, above)."""

    frame_bytes: int
    timeout_s: float
    incomplete_s: float
    per_hub: int
    per_peer: int
    refusals: int = 3

    @classmethod
    def of(cls, config: HubConfig) -> DoorLimits:
        return cls(
            frame_bytes=config.security.unauthenticated_frame_bytes,
            timeout_s=config.security.unauthenticated_timeout_s,
            incomplete_s=config.security.incomplete_frame_timeout_s,
            per_hub=config.security.unauthenticated_connections,
            per_peer=config.security.unauthenticated_connections_per_ip,
            refusals=config.security.unauthenticated_refusals,
        )


class Door(Protocol):
    closures: ClosureLog

    @property
    def frame_limit(self) -> int | None:
        """The frame size limit of an unauthenticated connection (None: the hub's own)."""
        ...

    def arrived(self, conn: Visitor) -> bool:
        """``conn`` connected unauthenticated: False if it is closed at once (too many)."""
        ...

    def identified(self, conn: Visitor) -> None:
        """``conn`` authenticated: it leaves the doorway."""
        ...

    def left(self, conn: Visitor) -> None:
        """``conn`` is gone."""
        ...

    def refused(self, conn: Visitor, refusals: int) -> None:
        """``conn``, unauthenticated, had ``refusals`` requests refused so far."""
        ...

    def holding(self, conn: Visitor, principal: str, size: int, fresh: bool) -> None:
        """``conn``, authenticated as ``principal``, holds ``size`` bytes of an unfinished
        frame now, begun in this read if ``fresh`` (``hedwig.hub.front.unfinished``): closed
        if that is too much."""
        ...

    def released(self, conn: Visitor) -> None:
        """``conn``, which held an unfinished frame, is gone."""
        ...

    def sweep(self) -> int:
        """Close the connections past a deadline; how many."""
        ...


class Doorway:
    def __init__(
        self,
        limits: DoorLimits,
        *,
        clock: Clock,
        closures: ClosureLog,
        unfinished: UnfinishedLimits | None = None,
    ) -> None:
        self.limits = limits
        self.closures = closures
        self._clock = clock
        # What authenticated connections hold in unfinished frames (bounded here too: the
        # doorway is what a connection may cost; unbounded by default only in unit tests).
        self.unfinished: UnfinishedFrames[Visitor] = UnfinishedFrames(
            unfinished or UnfinishedLimits(1 << 62, 1 << 62, float("inf")), clock=clock
        )
        # Unauthenticated connections, by when they connected (in that order).
        self._waiting: dict[Visitor, float] = {}
        self._per_peer: dict[str, int] = {}

    @property
    def frame_limit(self) -> int | None:
        return self.limits.frame_bytes

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def arrived(self, conn: Visitor) -> bool:
        group = peer_group(conn.peer_host)
        if len(self._waiting) >= self.limits.per_hub:
            self._refuse(conn, Disconnect.HUB_LIMIT, f"{self.limits.per_hub} are waiting")
            return False
        if self._per_peer.get(group, 0) >= self.limits.per_peer:
            self._refuse(conn, Disconnect.PEER_LIMIT, f"{self.limits.per_peer} from {group}")
            return False
        self._waiting[conn] = self._clock.monotonic()
        self._per_peer[group] = self._per_peer.get(group, 0) + 1
        return True

    def _refuse(self, conn: Visitor, reason: Disconnect, why: str) -> None:
        conn.closed_for = reason
        self.closures.closed(conn, reason, f"too many unauthenticated connections ({why})")
        conn.abort()

    def identified(self, conn: Visitor) -> None:
        self.left(conn)

    def left(self, conn: Visitor) -> None:
        if self._waiting.pop(conn, None) is None:
            return
        group = peer_group(conn.peer_host)
        left = self._per_peer.get(group, 0) - 1
        if left > 0:
            self._per_peer[group] = left
        else:
            self._per_peer.pop(group, None)

    def refused(self, conn: Visitor, refusals: int) -> None:
        if refusals < self.limits.refusals or conn.closed_for is not None:
            return
        conn.closed_for = Disconnect.REFUSALS
        self.closures.closed(
            conn, Disconnect.REFUSALS, f"{refusals} requests refused before authenticating"
        )
        # Gracefully, so that its answers arrive; still counted (and aborted at its deadline
        # if it reads nothing) until it is gone.
        conn.close()

    def holding(self, conn: Visitor, principal: str, size: int, fresh: bool) -> None:
        why = self.unfinished.hold(conn, principal, size, fresh=fresh)
        if why is not None:
            self._close_holder(conn, Disconnect.UNFINISHED_BYTES, why)

    def released(self, conn: Visitor) -> None:
        self.unfinished.release(conn)

    def _close_holder(self, conn: Visitor, reason: Disconnect, why: str) -> None:
        self.unfinished.release(conn)
        if conn.closed_for is None:
            conn.closed_for = reason
            self.closures.closed(conn, reason, why)
        conn.abort()

    def sweep(self) -> int:
        now = self._clock.monotonic()
        limits = self.limits
        closed = 0
        for conn in self.unfinished.overdue():
            timeout = self.unfinished.limits.timeout_s
            self._close_holder(
                conn, Disconnect.UNFINISHED_TIMEOUT, f"a frame left unfinished for {timeout:g} s"
            )
            closed += 1
        for conn, since in list(self._waiting.items()):
            reason = None
            if now - since >= limits.timeout_s:
                reason = Disconnect.UNAUTHENTICATED_TIMEOUT
                detail = f"not authenticated within {limits.timeout_s:g} s"
            elif (
                conn.incomplete_since is not None
                and now - conn.incomplete_since >= limits.incomplete_s
            ):
                reason = Disconnect.INCOMPLETE_FRAME
                detail = f"a frame left incomplete for {limits.incomplete_s:g} s"
            if reason is None:
                continue
            if conn.closed_for is None:
                conn.closed_for = reason
                self.closures.closed(conn, reason, detail)
            closed += 1
            self.left(conn)
            conn.abort()
        return closed


class NoDoorway:
    """Authentication off (or the internal listener, where every peer is a hub): no bounds."""

    def __init__(self, closures: ClosureLog) -> None:
        self.closures = closures

    @property
    def frame_limit(self) -> int | None:
        return None

    def arrived(self, conn: Visitor) -> bool:
        return True

    def identified(self, conn: Visitor) -> None:
        return None

    def left(self, conn: Visitor) -> None:
        return None

    def refused(self, conn: Visitor, refusals: int) -> None:
        return None

    def holding(self, conn: Visitor, principal: str, size: int, fresh: bool) -> None:
        return None

    def released(self, conn: Visitor) -> None:
        return None

    def sweep(self) -> int:
        return 0


def doorway_for(config: HubConfig, *, clock: Clock, events: HubEvents) -> Doorway | NoDoorway:
    """The client listener's doorway: bounds with authentication on, none without."""
    closures = ClosureLog(clock=clock, events=events)
    if not config.security.authenticate:
        return NoDoorway(closures)
    return Doorway(
        DoorLimits.of(config),
        clock=clock,
        closures=closures,
        unfinished=UnfinishedLimits.of(config),
    )


class Sweeper:
    """Runs a door's sweep and its closure log's summary every ``SWEEP_S`` on the clock, and
    gives the memory of a flood of closed connections back (``hedwig.hub.front.memory``)."""

    def __init__(
        self, door: Door, clock: Clock, *, gone: Callable[[], int], release: MemoryRelease
    ) -> None:
        self._door = door
        self._clock = clock
        self._gone = gone
        self._release = release
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        while True:
            await self._clock.sleep(SWEEP_S)
            try:
                self._door.sweep()
                self._door.closures.tick()
                self._release.check(self._gone())
            except Exception:  # a bug: the next sweep tries again
                log.exception("sweeping the unauthenticated connections failed")
