"""The lease keeper (``hedwig.metadata.etcd.lease_keeper``) on a manual clock, against etcd's
leases in memory (``tests/etcd_leases.py``): refreshes, failures, slow answers and expiry, with
no etcd and no real waiting. The same rules against a real etcd: ``test_metadata_etcd.py`` and
``test_metadata_etcd_secured.py`` (a frozen etcd, a slow link)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

import pytest

from hedwig.clock import ManualClock
from hedwig.errors import MetadataError, MetadataUnavailableError
from hedwig.metadata.etcd import lease_keeper
from hedwig.metadata.etcd.connection import CALL_TIMEOUT_S, CONNECT_TIMEOUT_MS
from hedwig.metadata.etcd.lease_keeper import LeaseKeeper
from hedwig.metadata.etcd.session import Phase
from hedwig.metadata.managers import SessionState
from tests.etcd_leases import MemoryLeases, advance, settle

STEP = 1 / 128  # the clock's steps in these tests (``advance``): exact in binary


class Told:
    """What the keeper's listeners heard, with the clock's time of each."""

    def __init__(self, keeper: LeaseKeeper, clock: ManualClock) -> None:
        self.heard: list[tuple[SessionState, float]] = []
        keeper.session.add_listener(lambda s: self.heard.append((s, clock.monotonic())))

    @property
    def states(self) -> list[SessionState]:
        return [s for s, _ in self.heard]

    def first(self, state: SessionState) -> float:
        return next(at for s, at in self.heard if s is state)


def keeper_on(etcd: MemoryLeases, ttl_s: float, clock: ManualClock) -> LeaseKeeper:
    return LeaseKeeper(etcd, ttl_s=ttl_s, clock=clock, call_timeout_s=CALL_TIMEOUT_S)


def phase(keeper: LeaseKeeper) -> Phase:
    return keeper.session.phase


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def etcd(clock: ManualClock) -> MemoryLeases:
    return MemoryLeases(clock)


async def started(keeper: LeaseKeeper, clock: ManualClock) -> LeaseKeeper:
    start = asyncio.ensure_future(keeper.start(timeout=15.0))
    while not start.done():
        await advance(clock, STEP)
    await start
    return keeper


@pytest.fixture
async def keeper(etcd: MemoryLeases, clock: ManualClock) -> AsyncIterator[LeaseKeeper]:
    k = await started(keeper_on(etcd, 3.0, clock), clock)
    yield k
    await k.stop()


async def test_refreshes_go_every_third_of_the_ttl_and_keep_every_lease(
    keeper: LeaseKeeper, etcd: MemoryLeases, clock: ManualClock
) -> None:
    told = Told(keeper, clock)
    granted = clock.monotonic()
    owner = await keeper.owner_lease(b"/hedwig/r/owners/t")
    assert keeper.leases == [keeper.session.lease, owner]
    await advance(clock, 30.0)
    refreshes = etcd.reached("refresh")
    assert len(refreshes) == 30
    assert [b - a for a, b in itertools.pairwise([granted, *refreshes])] == [1.0] * 30
    # Every lease of the session in each refresh, and all alive.
    assert {leases for _, kind, leases in etcd.log if kind == "refresh"} == {tuple(keeper.leases)}
    assert etcd.alive(keeper.session.lease) and etcd.alive(owner)
    assert keeper.session.state is SessionState.CONNECTED and told.heard == []


async def test_a_failed_refresh_suspends_and_the_next_answer_reconnects(
    keeper: LeaseKeeper, etcd: MemoryLeases, clock: ManualClock
) -> None:
    told = Told(keeper, clock)
    lease = keeper.session.lease
    await advance(clock, 0.5)
    etcd.down = True
    await advance(clock, 1.0)  # the refresh due at 1 s fails
    assert keeper.session.state is SessionState.SUSPENDED
    etcd.down = False
    await advance(clock, 1.5)  # tried again within half the time left: answered
    assert told.states == [SessionState.SUSPENDED, SessionState.CONNECTED]
    assert keeper.session.lease == lease and etcd.alive(lease), "the same session goes on"


async def test_retries_come_sooner_nearer_the_lease_end_and_it_is_lost_there(
    keeper: LeaseKeeper, etcd: MemoryLeases, clock: ManualClock
) -> None:
    """Down for good: tried again after half the time left each time (a third of a TTL at
    most), and ``LOST`` at the lease's end by the clock, which is etcd's end of it too."""
    told = Told(keeper, clock)
    lease = keeper.session.lease
    renewed = etcd.reached("grant")[0]
    ends = etcd.expires(lease)
    assert ends == renewed + 3.0
    etcd.down = True
    while keeper.session.phase is not Phase.LOST:
        await advance(clock, STEP)
    assert told.states == [SessionState.SUSPENDED, SessionState.LOST]
    assert told.first(SessionState.LOST) == ends
    # Due a third of a TTL after the grant; then half of what was left each time.
    tries = [at - renewed for at in etcd.reached("refused")]
    assert tries[:5] == [1.0, 2.0, 2.5, 2.75, 2.875]
    assert not etcd.alive(lease)


async def test_unanswered_refreshes_lose_the_session_when_the_lease_ends_then_a_new_one_comes(
    keeper: LeaseKeeper, etcd: MemoryLeases, clock: ManualClock
) -> None:
    """A frozen etcd (or a link that drops everything) answers nothing: the refresh under way
    is given up at the lease's end, not at the call's 10 s timeout, and the session is lost
    then. Thawed, etcd grants a new lease: ``CONNECTED`` again, a new session."""
    told = Told(keeper, clock)
    await advance(clock, 1.5)
    old = keeper.session.lease
    ends = etcd.expires(old)
    etcd.freeze()
    await advance(clock, 3.0)
    assert told.states == [SessionState.LOST]
    assert told.first(SessionState.LOST) <= ends + 2 * STEP
    etcd.thaw()
    await advance(clock, 3.0)
    assert told.states == [SessionState.LOST, SessionState.CONNECTED]
    assert keeper.session.lease != old and etcd.alive(keeper.session.lease)
    # The new session authenticated afresh (its credentials read again).
    assert [again for _, kind, again in etcd.log if kind == "authenticate"] == [False, True]


async def test_on_a_slow_link_the_session_ends_no_later_than_etcd_lets_the_lease_go(
    etcd: MemoryLeases, clock: ManualClock
) -> None:
    """Each message takes 1 s each way (TTL 5 s): etcd renews a lease a second after the
    refresh left. The session lasts on such a link, its first lease counted from the grant's
    sending; cut off, it ends by the clock no later than etcd expires the lease (counted from
    each answer, it ended a second after)."""
    etcd.delay_s = 1.0
    keeper = await started(keeper_on(etcd, 5.0, clock), clock)
    told = Told(keeper, clock)
    try:
        await advance(clock, 20.0)
        assert keeper.session.state is SessionState.CONNECTED and told.heard == []
        etcd.freeze()  # the refresh under way reaches etcd; its answer does not come back
        lease = keeper.session.lease
        await advance(clock, 8.0)
        lost = told.first(SessionState.LOST)
        assert lost <= etcd.expires(lease), "the session outlived etcd's lease"
    finally:
        etcd.thaw()
        await keeper.stop()


async def test_a_lease_gone_loses_the_session_after_the_others_are_revoked(
    keeper: LeaseKeeper, etcd: MemoryLeases, clock: ManualClock
) -> None:
    """One of the session's leases gone (revoked, expired): the session is lost, and every
    other lease of it revoked before anyone hears so; the new session has owner leases of
    its own."""
    owners = {await keeper.owner_lease(b"/o/%d" % i) for i in range(200)}
    assert len(owners) == lease_keeper.OWNER_LEASES
    own = keeper.session.lease
    seen_alive: list[bool] = []
    keeper.session.add_listener(
        lambda s: (
            seen_alive.extend(etcd.alive(x) for x in [own, *owners])
            if s is SessionState.LOST
            else None
        )
    )
    await keeper.revoke_elsewhere(sorted(owners)[0])
    await advance(clock, 1.2)
    assert keeper.session.phase is Phase.LOST
    assert seen_alive and not any(seen_alive), "a lease of the lost session was still alive"
    await advance(clock, 1.2)
    assert phase(keeper) is Phase.CONNECTED
    assert keeper.leases == [keeper.session.lease]
    fresh = await keeper.owner_lease(b"/o/0")
    assert fresh not in owners and etcd.alive(fresh)


async def test_an_owner_lease_granted_as_the_session_is_lost_is_revoked(
    keeper: LeaseKeeper, etcd: MemoryLeases, clock: ManualClock
) -> None:
    """etcd grants an owner record's lease, and while the answer is on its way the session's
    lease goes and the keeper moves on to a new session: a record put on the granted lease
    would outlive the session it was asked for. It is revoked, the claim refused as
    retriable."""
    etcd.hold_grants()
    claim = asyncio.ensure_future(keeper.owner_lease(b"/o/raced"))
    await settle()
    first = keeper.session.lease
    await keeper.revoke_elsewhere(first)
    while keeper.session.phase is not Phase.LOST:
        await advance(clock, STEP)
    etcd.release_grants()  # the new session's grant, and the owner lease's, answered
    while keeper.session.lease == first or not claim.done():
        await advance(clock, STEP)
    with pytest.raises(MetadataUnavailableError, match="lost while granting"):
        await claim
    granted = etcd.granted()[1]
    assert not etcd.alive(granted) and granted not in keeper.leases
    assert etcd.alive(keeper.session.lease)


async def test_a_start_against_an_etcd_out_of_reach_gives_up_at_its_deadline(
    clock: ManualClock,
) -> None:
    """Refused at once (etcd down, its authentication on): asked again every 0.2 s until the
    deadline. No connection set up (a frozen etcd, or a down one reached without
    authentication): each try waits ``CONNECT_TIMEOUT_MS`` for its connection, then says
    so."""
    etcd = MemoryLeases(clock, authentication=True)
    etcd.down = True
    keeper = keeper_on(etcd, 3.0, clock)
    began = clock.monotonic()
    start = asyncio.ensure_future(keeper.start(timeout=2.0))
    while not start.done():
        await advance(clock, STEP)
    with pytest.raises(MetadataUnavailableError):
        await start
    assert 2.0 <= clock.monotonic() - began <= 2.0 + 0.2 + 2 * STEP
    assert etcd.refused == 11  # at 0, 0.2, ... 2.0 s
    assert keeper.session.phase is Phase.STARTING

    etcd = MemoryLeases(clock)
    etcd.freeze()
    keeper = keeper_on(etcd, 3.0, clock)
    began = clock.monotonic()
    start = asyncio.ensure_future(keeper.start(timeout=1.0))
    while not start.done():
        await advance(clock, STEP)
    with pytest.raises(MetadataUnavailableError, match="no connection for leases"):
        await start
    assert clock.monotonic() - began == pytest.approx(CONNECT_TIMEOUT_MS / 1000, abs=0.05)
    etcd.thaw()


async def test_a_refusal_at_start_is_raised_at_once(clock: ManualClock) -> None:
    class Refusing(MemoryLeases):
        async def authenticate(self, *, again: bool = False) -> None:
            raise MetadataError("etcd refused user 'hedwig'")

    keeper = keeper_on(Refusing(clock), 3.0, clock)
    with pytest.raises(MetadataError, match="refused"):
        await keeper.start(timeout=15.0)


async def test_close_revokes_a_live_session_only(etcd: MemoryLeases, clock: ManualClock) -> None:
    live = await started(keeper_on(etcd, 3.0, clock), clock)
    owner = await live.owner_lease(b"/o/x")
    own = live.session.lease
    await live.close(revoke=True)
    assert not etcd.alive(own) and not etcd.alive(owner)
    assert live.session.phase is Phase.CLOSED
    assert live.session.state is SessionState.CONNECTED, "closing tells nobody"

    dropped = await started(keeper_on(etcd, 3.0, clock), clock)
    await dropped.close(revoke=False)  # as kill -9 leaves it: expires after its TTL
    assert etcd.alive(dropped.session.lease)
    await advance(clock, 3.0 + STEP)
    assert not etcd.alive(dropped.session.lease)
    assert etcd.reached("refresh") == [], "nothing refreshed after the close"
