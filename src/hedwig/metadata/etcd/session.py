"""The etcd session as a state table: what a lease's refreshes, failures and the clock make of it.

**The lease is the session.** ZooKeeper ties ephemeral records to a session; etcd ties keys to
a lease, which lives as long as its holder refreshes it within its TTL. The client grants one
lease at start (TTL: the session timeout, whole seconds, at least 2), refreshes it (and the
owner records' leases, ``lease_keeper``) and reports what the hub must know as
``SessionState``. This module decides; it does no I/O and reads no clock of its own: the
keeper (``lease_keeper.LeaseKeeper``) tells it what happened and when, by the injected clock,
and asks it when to refresh next. So its rules run on a manual clock in memory
(``tests/test_etcd_session.py``, and with the keeper ``tests/test_etcd_lease_keeper.py``).

States (``Phase``), each reported to the hub as a ``SessionState``:

- ``STARTING``: no lease yet, the client is starting (reported ``SUSPENDED``);
- ``CONNECTED``: the newest refresh was answered and every lease of the session is alive;
- ``SUSPENDED``: a refresh failed (or went unanswered) and the lease's TTL has not passed yet by
  this process's clock: the records may still be there;
- ``LOST``: the lease is gone: etcd said so, or no refresh was answered for a whole TTL by this
  process's clock (etcd has expired it by then). Every record on the session's leases is gone
  and owner records must be claimed afresh (reported ``LOST``);
- ``CLOSED``: the client closed (or dropped) the session; nothing moves it any more (reported
  as whatever it was before).

Events (``Event``), and the table (``TRANSITIONS``); a pair not in it is an illegal transition
and raises ``SessionTransitionError`` (a refresh answered for a session already lost, a second
grant of a connected one):

=================  ==========  ==========  ==========  ========  ========
event              STARTING    CONNECTED   SUSPENDED   LOST      CLOSED
=================  ==========  ==========  ==========  ========  ========
GRANTED            CONNECTED   .           .           CONNECTED .
GRANT_FAILED       STARTING    .           .           LOST      .
REFRESHED          .           CONNECTED   CONNECTED   .         .
REFRESH_FAILED     .           SUSPENDED   SUSPENDED   .         .
EXPIRED            .           LOST        LOST        .         .
LEASE_GONE         .           LOST        LOST        .         .
CLOSE              CLOSED      CLOSED      CLOSED      CLOSED    CLOSED
=================  ==========  ==========  ==========  ========  ========

Listeners hear each change of the reported state, in order, on the event loop: ``CONNECTED``
once the lease is granted, ``SUSPENDED`` at the first failed refresh, ``CONNECTED`` again when
a refresh is answered in time, ``LOST`` when the lease is gone, ``CONNECTED`` with a new lease
(a new session). A transition to the same reported state tells nobody.

The clock's rules (each fixed after a failure measured on a slow or cut link):

- **A session counts from each refresh's sending.** etcd renewed the leases on receiving a
  refresh, no earlier, so they last at least a TTL from its sending. Counted from the answer
  (as etcd's own client counts), a link that delays each packet by d would keep this hub
  serving for up to d after etcd let its leases go and another hub could claim its topics
  (ledger fencing keeps it from acknowledging anything then, but its clients would wait on it).
  The first lease counts from its grant's sending, so not from the making of the connection
  before it (on a link a second slow each way that took another second or two, and the
  session was lost at its first refresh).
- **A refresh goes a third of a TTL after the newest renewal was sent** (at once, if a slow
  link took that long to answer it: the grant of a new session included).
- **A refresh waits no longer than the lease may last** (nor longer than a call's timeout): one
  that etcd never answers (a partition that drops its packets, a frozen etcd) held the session
  ``CONNECTED`` for the call's whole timeout, long after etcd had expired the lease; the hub
  served on with its records gone, and nobody claimed its topics while the partition lasted.
- **After a failure** the next try comes sooner the nearer the lease's end (half the time
  left, a third of a TTL at most), so that the session is judged ``LOST`` there if none is
  answered; after ``LOST``, a new lease is asked for every third of a TTL.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from enum import Enum

from hedwig.errors import UsageError
from hedwig.metadata.managers import SessionState

log = logging.getLogger(__name__)


class Phase(Enum):
    STARTING = "starting"
    CONNECTED = "connected"
    SUSPENDED = "suspended"
    LOST = "lost"
    CLOSED = "closed"


class Event(Enum):
    GRANTED = "a new lease granted"
    GRANT_FAILED = "a grant failed"
    REFRESHED = "a refresh answered, every lease alive"
    REFRESH_FAILED = "a refresh failed with time left on the lease"
    EXPIRED = "the TTL passed by the clock since the newest answered refresh was sent"
    LEASE_GONE = "etcd answered that a lease of the session is gone"
    CLOSE = "closed"


_S, _E = Phase, Event
TRANSITIONS: dict[tuple[Phase, Event], Phase] = {
    (_S.STARTING, _E.GRANTED): _S.CONNECTED,
    (_S.STARTING, _E.GRANT_FAILED): _S.STARTING,
    (_S.STARTING, _E.CLOSE): _S.CLOSED,
    (_S.CONNECTED, _E.REFRESHED): _S.CONNECTED,
    (_S.CONNECTED, _E.REFRESH_FAILED): _S.SUSPENDED,
    (_S.CONNECTED, _E.EXPIRED): _S.LOST,
    (_S.CONNECTED, _E.LEASE_GONE): _S.LOST,
    (_S.CONNECTED, _E.CLOSE): _S.CLOSED,
    (_S.SUSPENDED, _E.REFRESHED): _S.CONNECTED,
    (_S.SUSPENDED, _E.REFRESH_FAILED): _S.SUSPENDED,
    (_S.SUSPENDED, _E.EXPIRED): _S.LOST,
    (_S.SUSPENDED, _E.LEASE_GONE): _S.LOST,
    (_S.SUSPENDED, _E.CLOSE): _S.CLOSED,
    (_S.LOST, _E.GRANTED): _S.CONNECTED,
    (_S.LOST, _E.GRANT_FAILED): _S.LOST,
    (_S.LOST, _E.CLOSE): _S.CLOSED,
    (_S.CLOSED, _E.CLOSE): _S.CLOSED,
}

# What the hub is told of each phase (``CLOSED``: nothing, it keeps the last).
REPORTED: dict[Phase, SessionState] = {
    _S.STARTING: SessionState.SUSPENDED,
    _S.CONNECTED: SessionState.CONNECTED,
    _S.SUSPENDED: SessionState.SUSPENDED,
    _S.LOST: SessionState.LOST,
}


class SessionTransitionError(UsageError):
    """An event the session's table has no transition for in its phase (a bug of the
    keeper's: it must never happen)."""

    def __init__(self, phase: Phase, event: Event) -> None:
        super().__init__(f"etcd session: {event.value!r} is illegal when {phase.value}")
        self.phase = phase
        self.event = event


class Session:
    """One process's session on etcd: its phase, its lease, and when the newest refresh etcd
    answered was sent; the times it gives are on the keeper's clock. ``call_timeout_s``: the
    longest a refresh may wait however long the lease lasts (a call's timeout)."""

    def __init__(self, ttl_s: float, *, call_timeout_s: float) -> None:
        # Whole seconds (etcd's), rounded up: never shorter than asked.
        self.ttl = max(2, math.ceil(ttl_s))
        self.call_timeout_s = call_timeout_s
        self.phase = Phase.STARTING
        self.state = REPORTED[Phase.STARTING]
        self.lease = 0
        # When the newest grant or refresh etcd answered was sent.
        self.renewed_at = 0.0
        self._listeners: list[Callable[[SessionState], None]] = []

    def add_listener(self, listener: Callable[[SessionState], None]) -> None:
        self._listeners.append(listener)

    def fire(self, event: Event) -> Phase:
        """Move by the table; tell the listeners if the reported state changed. The phase it
        was in."""
        was = self.phase
        now = TRANSITIONS.get((was, event))
        if now is None:
            raise SessionTransitionError(was, event)
        self.phase = now
        reported = REPORTED.get(now)
        if reported is not None and reported is not self.state:
            log.info(
                "etcd session %s -> %s (lease %x)", self.state.value, reported.value, self.lease
            )
            self.state = reported
            for listener in list(self._listeners):
                listener(reported)
        return was

    # what happened ----------------------------------------------------------------------

    def granted(self, lease: int, sent_at: float) -> None:
        """A new lease, its grant sent at ``sent_at``: a new session."""
        self.lease = lease
        self.renewed_at = sent_at
        self.fire(Event.GRANTED)

    def refreshed(self, sent_at: float, lowest_ttl: int) -> None:
        """A refresh sent at ``sent_at`` was answered, the lowest TTL left of its leases
        ``lowest_ttl`` (0: one of them is gone, and with it the session)."""
        if lowest_ttl <= 0:
            self.fire(Event.LEASE_GONE)
            return
        self.fire(Event.REFRESHED)
        self.renewed_at = sent_at

    def failed(self, now: float) -> float:
        """A refresh (or, after ``LOST``, a grant) failed at ``now``: how long to wait before
        the next try. ``EXPIRED`` if the lease's TTL has passed by then."""
        left = self.lease_ends - now
        if self.phase is Phase.LOST:
            self.fire(Event.GRANT_FAILED)
        elif left <= 0:
            self.fire(Event.EXPIRED)
            return self.ttl / 3
        else:
            self.fire(Event.REFRESH_FAILED)
        # Tried again sooner the nearer the lease's end (LOST there, if none answers).
        return self.ttl / 3 if left <= 0 else min(self.ttl / 3, left / 2)

    def close(self) -> Phase:
        """The phase it was in."""
        return self.fire(Event.CLOSE)

    # when -------------------------------------------------------------------------------

    @property
    def lease_ends(self) -> float:
        """When etcd may have expired the lease, by the clock (a TTL after the newest
        renewal's sending)."""
        return self.renewed_at + self.ttl

    @property
    def next_refresh(self) -> float:
        """When the next refresh is due: a third of a TTL after the newest renewal's
        sending."""
        return self.renewed_at + self.ttl / 3

    def refresh_deadline(self, sent_at: float) -> float:
        """How long a refresh sent at ``sent_at`` may wait for its answer: no longer than the
        lease may last, nor than a call's timeout."""
        return min(sent_at + self.call_timeout_s, self.lease_ends)

    @property
    def live(self) -> bool:
        """Whether records may go on the session's leases (not lost, not closed)."""
        return self.phase is Phase.CONNECTED or self.phase is Phase.SUSPENDED
