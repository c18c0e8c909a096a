"""A ZooKeeper session's states and rules, without I/O: the table the keeper follows.

Rules:

- A session is ZooKeeper's, not the connection's: it lives on across connections, to any
  server of the ensemble, as long as one of them hears from the client within the session
  timeout. A lost connection *suspends* the session; the keeper connects again (to the next
  server of the connection string, presenting the session's id and password) and the
  session is connected again, with its ephemeral znodes and its watches.
- Only ZooKeeper says a session has expired: it answers a reconnection with a timeout of 0.
  The client never concludes it from its own clock. A hub cut off from every server keeps
  serving on its open ledgers (a ZooKeeper outage must stop no publishing, and ZooKeeper
  restarted gives its sessions a fresh timeout); whether only this hub was cut off is the
  witnesses' question (``hedwig.hub.witnesses``). Once expired, a new session is sought at
  once: the ephemeral znodes of the old one are gone.
- Everything timed is timed on the injected clock: a connection that heard nothing for
  two thirds of the negotiated timeout is dropped (the server may be gone without a word),
  a ping goes out when nothing was sent for a third of it, a connection attempt (TCP and
  handshake) gets the timeout divided by the number of servers (``MAX_CONNECT_S`` at most),
  and attempts after a lost connection or a failed attempt back off exponentially, with
  jitter from the injected randomness, up to a second (``Backoff``), as ZooKeeper's and
  kazoo's clients do. (The first attempt of a client, and the one for a new session after
  an expiry, go at once.)
- Closing ends the session. A closed client started again (a start that timed out is
  retried so) seeks a new one.

``TRANSITIONS`` is the table: a phase and an event give the next phase; an event the table
has no row for in that phase is a bug (``UsageError``). ``REPORTED`` is what the session's
listeners are told (``SessionState`` of ``hedwig.metadata.managers``, named here by value
so the client stays apart from the metadata layer): a change of phase that changes what is
reported, reported once.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import Enum

from hedwig.errors import UsageError


class Phase(Enum):
    CONNECTING = "connecting"  # no session yet: the first, or a new one after expiry
    CONNECTED = "connected"
    SUSPENDED = "suspended"  # the connection is lost; the session may still be alive
    EXPIRED = "expired"  # ZooKeeper ended the session; a new one is being sought
    CLOSED = "closed"


class Event(Enum):
    CONNECTED = "connected"  # a handshake (and authentication) succeeded
    LOST = "lost"  # the connection (or an attempt) failed
    EXPIRED = "expired"  # ZooKeeper answered a reconnection: the session is over
    CLOSE = "close"  # the client is closed
    START = "start"  # a closed client is started again


TRANSITIONS: dict[tuple[Phase, Event], Phase] = {
    (Phase.CONNECTING, Event.CONNECTED): Phase.CONNECTED,
    (Phase.CONNECTING, Event.LOST): Phase.CONNECTING,
    # Only a session the client was given to resume (``SessionKeeper``'s ``resume``).
    (Phase.CONNECTING, Event.EXPIRED): Phase.EXPIRED,
    (Phase.CONNECTED, Event.LOST): Phase.SUSPENDED,
    # The server closes a connection whose session it expired; told so by a notification.
    (Phase.CONNECTED, Event.EXPIRED): Phase.EXPIRED,
    (Phase.SUSPENDED, Event.CONNECTED): Phase.CONNECTED,
    (Phase.SUSPENDED, Event.LOST): Phase.SUSPENDED,
    (Phase.SUSPENDED, Event.EXPIRED): Phase.EXPIRED,
    (Phase.EXPIRED, Event.CONNECTED): Phase.CONNECTED,  # a new session
    (Phase.EXPIRED, Event.LOST): Phase.EXPIRED,
    **{(phase, Event.CLOSE): Phase.CLOSED for phase in Phase},
    (Phase.CLOSED, Event.START): Phase.CONNECTING,
}

# What listeners are told of each phase (``None``: nothing).
REPORTED: dict[Phase, str | None] = {
    Phase.CONNECTING: None,
    Phase.CONNECTED: "connected",
    Phase.SUSPENDED: "suspended",
    Phase.EXPIRED: "lost",
    Phase.CLOSED: None,
}


def next_phase(phase: Phase, event: Event) -> Phase:
    try:
        return TRANSITIONS[(phase, event)]
    except KeyError:
        raise UsageError(
            f"ZooKeeper session: {event.value} is not possible when {phase.value}"
        ) from None


# The longest a connection attempt waits for the handshake's answer, in seconds. A server
# answers one in milliseconds; one that holds it (ZooKeeper just started answers some of
# the first connections never) is given up and tried again after the backoff, rather than
# holding a client with a long session timeout (30 s: its share would be all of it) that long.
MAX_CONNECT_S = 10.0


@dataclass(frozen=True, slots=True)
class Timing:
    """What a session timeout means for a connection (``ClientCnxn``'s rules)."""

    timeout_s: float  # negotiated, or asked for before the first handshake
    servers: int = 1

    @property
    def ping_after_s(self) -> float:
        """Idle (nothing sent) this long: a ping."""
        return self.timeout_s / 3

    @property
    def read_timeout_s(self) -> float:
        """Silent (nothing heard) this long: the connection is taken for dead."""
        return self.timeout_s * 2 / 3

    @property
    def connect_timeout_s(self) -> float:
        """For one attempt, TCP and handshake: each server of the ring gets its share, at
        most ``MAX_CONNECT_S``."""
        return min(MAX_CONNECT_S, self.timeout_s / max(1, self.servers))

    def next_check(self, last_sent: float, last_received: float) -> float:
        """When the keeper looks at a connection next."""
        return min(last_sent + self.ping_after_s, last_received + self.read_timeout_s)

    def due(self, now: float, last_sent: float, last_received: float) -> str | None:
        """What a connection needs now: ``"drop"`` (silent too long), ``"ping"``, or
        nothing."""
        if now - last_received >= self.read_timeout_s:
            return "drop"
        if now - last_sent >= self.ping_after_s:
            return "ping"
        return None


@dataclass(frozen=True, slots=True)
class Backoff:
    """The wait before a connection attempt: none for the first after a success, then
    ``first_s`` doubling up to ``max_s``, each stretched by up to ``jitter`` of itself."""

    first_s: float = 0.1
    max_s: float = 1.0
    jitter: float = 0.5

    def delay(self, failures: int, rng: random.Random) -> float:
        if failures <= 0:
            return 0.0
        base = min(self.max_s, self.first_s * 2.0 ** (failures - 1))
        return base * (1 + self.jitter * rng.random())


class HostRing:
    """The servers of a connection string, in an order shuffled once (so clients spread
    over the ensemble), taken in turn from wherever the last attempt was."""

    def __init__(self, hosts: str, rng: random.Random) -> None:
        servers: list[tuple[str, int]] = []
        for entry in hosts.split(","):
            host, sep, port = entry.strip().rpartition(":")
            if not sep or not host or not port.isdigit():
                raise UsageError(f"ZooKeeper address {entry!r} must be HOST:PORT")
            servers.append((host.strip("[]"), int(port)))
        rng.shuffle(servers)
        self.servers = tuple(servers)
        self._next = 0

    def __len__(self) -> int:
        return len(self.servers)

    def next(self) -> tuple[str, int]:
        server = self.servers[self._next]
        self._next = (self._next + 1) % len(self.servers)
        return server


@dataclass(slots=True)
class Credentials:
    """What identifies a session to ZooKeeper: its id and password (0 and empty: none yet),
    and the latest zxid this client has seen (a server behind it refuses the client)."""

    session_id: int = 0
    password: bytes = b"\0" * 16
    last_zxid: int = 0

    def forget(self) -> None:
        """The session is over: the next handshake asks for a new one (zxids stay)."""
        self.session_id = 0
        self.password = b"\0" * 16
