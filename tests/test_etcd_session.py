"""The etcd session's state table (``hedwig.metadata.etcd.session``): its transitions, what
listeners hear, the clock's rules, and the table in the module's prose being the one the code
runs."""

from __future__ import annotations

import itertools

import pytest

from hedwig.metadata.etcd import session as session_module
from hedwig.metadata.etcd.connection import CALL_TIMEOUT_S
from hedwig.metadata.etcd.session import (
    REPORTED,
    TRANSITIONS,
    Event,
    Phase,
    Session,
    SessionTransitionError,
)
from hedwig.metadata.managers import SessionState


def reported(s: Session) -> SessionState:
    return s.state


def phase(s: Session) -> Phase:
    return s.phase


def in_phase(phase: Phase) -> Session:
    """A session of TTL 3 s moved to ``phase`` by legal events."""
    s = Session(3.0, call_timeout_s=CALL_TIMEOUT_S)
    path = {
        Phase.STARTING: [],
        Phase.CONNECTED: [Event.GRANTED],
        Phase.SUSPENDED: [Event.GRANTED, Event.REFRESH_FAILED],
        Phase.LOST: [Event.GRANTED, Event.LEASE_GONE],
        Phase.CLOSED: [Event.CLOSE],
    }[phase]
    for event in path:
        s.fire(event)
    assert s.phase is phase
    return s


@pytest.mark.parametrize(("phase", "event"), list(itertools.product(Phase, Event)))
def test_every_transition_is_the_tables_and_any_other_is_refused(
    phase: Phase, event: Event
) -> None:
    s = in_phase(phase)
    heard: list[SessionState] = []
    s.add_listener(heard.append)
    before = s.state
    if (phase, event) not in TRANSITIONS:
        with pytest.raises(SessionTransitionError) as refused:
            s.fire(event)
        assert (refused.value.phase, refused.value.event) == (phase, event)
        assert s.phase is phase and s.state is before and heard == []
        return
    assert s.fire(event) is phase
    now = TRANSITIONS[(phase, event)]
    assert s.phase is now
    reported = REPORTED.get(now, before)
    assert s.state is reported
    assert heard == ([] if reported is before else [reported])


def test_the_table_in_the_modules_prose_is_the_one_it_runs() -> None:
    doc = session_module.__doc__
    assert doc is not None
    rows = [
        line.split() for line in doc.splitlines() if line.split()[:1] in ([e.name] for e in Event)
    ]
    header = next(line.split() for line in doc.splitlines() if line.startswith("event "))
    phases = [Phase[name] for name in header[1:]]
    written = {
        (phase, Event[row[0]]): Phase[cell]
        for row in rows
        for phase, cell in zip(phases, row[1:], strict=True)
        if cell != "."
    }
    assert len(rows) == len(Event)
    assert written == TRANSITIONS


def test_listeners_hear_each_change_of_the_reported_state_in_order() -> None:
    s = Session(3.0, call_timeout_s=CALL_TIMEOUT_S)
    heard: list[SessionState] = []
    s.add_listener(heard.append)
    assert s.state is SessionState.SUSPENDED  # not started yet
    s.granted(0x10, sent_at=100.0)
    s.refreshed(101.0, 3)
    assert s.failed(102.5) == 0.75  # suspended: half the 1.5 s left of the lease
    assert s.failed(103.0) == 0.5
    s.refreshed(103.2, 3)
    s.refreshed(104.2, 0)  # a lease of the session gone
    # No new lease yet: still lost, tried again after half what was left of the old one.
    assert s.failed(105.0) == pytest.approx(0.6)
    s.granted(0x11, sent_at=105.5)
    s.close()
    assert heard == [
        SessionState.CONNECTED,
        SessionState.SUSPENDED,
        SessionState.CONNECTED,
        SessionState.LOST,
        SessionState.CONNECTED,
    ]
    assert reported(s) is SessionState.CONNECTED, "closing tells nobody"
    assert s.lease == 0x11 and not s.live


def test_the_clocks_rules() -> None:
    s = Session(2.5, call_timeout_s=CALL_TIMEOUT_S)
    assert s.ttl == 3, "whole seconds, rounded up"
    assert Session(0.5, call_timeout_s=CALL_TIMEOUT_S).ttl == 2, "two at least"
    s.granted(7, sent_at=50.0)
    # Counted from the sending of the newest renewal answered.
    assert s.lease_ends == 53.0 and s.next_refresh == 51.0
    s.refreshed(51.0, 3)
    assert s.lease_ends == 54.0 and s.next_refresh == 52.0
    # A refresh waits no longer than the lease may last, nor than a call's timeout.
    assert s.refresh_deadline(52.0) == 54.0
    long = Session(60.0, call_timeout_s=CALL_TIMEOUT_S)
    long.granted(8, sent_at=0.0)
    assert long.refresh_deadline(20.0) == 20.0 + CALL_TIMEOUT_S
    # A failure with time left suspends; at the lease's end by the clock, the session is lost.
    assert s.failed(52.0) == 1.0 and s.phase is Phase.SUSPENDED
    assert s.failed(54.0) == 1.0 and phase(s) is Phase.LOST
    # A refresh answered after the session was lost is a bug of the caller's.
    with pytest.raises(SessionTransitionError, match="illegal when lost"):
        s.refreshed(54.5, 3)
