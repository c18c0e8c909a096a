"""The session's leases kept alive: the keeper that drives ``session.Session`` with etcd's answers
and the clock, and the leases owner records go on.

The keeper grants the session's lease at start, then loops on the injected clock: it sleeps
until the session says a refresh is due, refreshes every lease of the session in one stream
(answered by the deadline the session gives, or given up), and tells the session what came of
it (``session`` holds the rules and the state table). After ``LOST`` it revokes what is left of
the old session's owner leases (etcd may not have expired them all: their records must go,
not wait for their TTL), authenticates again and asks for a new lease every third of a TTL.

**Owner records go on leases of their own**, up to ``OWNER_LEASES`` of them per session, a
record's by a hash of its key, granted when first needed and refreshed with the session's
lease in one stream. A lease that expires takes its keys in one raft entry, and etcd applies
nothing else meanwhile: in a million-topic region a hub lost its lease with 334,426 owner
records on it and etcd stood still for 11.8 s (a loaded etcd of 3.5 GB), every other hub's
requests and lease refreshes waiting. On a quiet etcd (``bench/lease_expiry.py``, 300,000
records) one lease's expiry held every write up for 1.5-1.7 s, 32 leases' for 0.8-0.9 s at
the longest: etcd revokes the leases that expired together one after the other, so the
region's writes wait as long in all, but in shorter pieces. The session is one: if any of
its leases is gone, the session is ``LOST`` and the others are revoked first (as a ZooKeeper
session's ephemerals go together). An owner lease whose grant was under way when the session
was lost is revoked at once, and the claim that asked for it refused as retriable: a record
put on it would outlive the session.

The keeper reaches etcd through a ``LeaseService``: ``connection.Connection`` over gRPC, or in
the tests one that keeps leases in memory as etcd does, on a manual clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from collections.abc import Sequence
from typing import Protocol

from hedwig.clock import Clock
from hedwig.errors import MetadataError, MetadataUnavailableError
from hedwig.metadata.etcd.session import Event, Phase, Session

log = logging.getLogger(__name__)

# Leases a session spreads its owner records over (see the module's docstring).
OWNER_LEASES = 32
# Between attempts to grant the first lease while the client starts.
START_RETRY_S = 0.2


class LeaseService(Protocol):
    """What the keeper asks of etcd."""

    async def connect(self) -> None:
        """Wait for a connection to carry the leases' calls (a few seconds at most);
        ``MetadataUnavailableError`` if none is set up by then."""
        ...

    async def authenticate(self, *, again: bool = False) -> None:
        """Get a token (``again``: after a lost session, the credentials read again)."""
        ...

    async def grant(self, ttl: int) -> int:
        """A new lease of ``ttl`` seconds."""
        ...

    async def keep_alive(self, leases: Sequence[int], deadline: float) -> int:
        """Refresh ``leases`` together, answered by ``deadline`` (on the clock); the lowest
        TTL left (0: one of them is gone)."""
        ...

    async def revoke(self, lease: int) -> None: ...


class LeaseKeeper:
    """The session's lease and its owner records' leases, kept alive on ``clock``."""

    def __init__(
        self, service: LeaseService, *, ttl_s: float, clock: Clock, call_timeout_s: float
    ) -> None:
        self.session = Session(ttl_s, call_timeout_s=call_timeout_s)
        self._service = service
        self._clock = clock
        # Owner records' leases by slot, and their grants under way (``owner_lease``).
        self._owner_leases: dict[int, int] = {}
        self._granting: dict[int, asyncio.Task[int]] = {}
        self._task: asyncio.Task[None] | None = None

    @property
    def leases(self) -> list[int]:
        """Every lease of the session: its own, then its owner records'."""
        return [self.session.lease, *self._owner_leases.values()]

    async def start(self, timeout: float) -> None:
        """The session's first lease, tried again until ``timeout`` while etcd cannot be
        reached (a refusal, wrong credentials, is raised at once); then kept alive."""
        deadline = self._clock.monotonic() + timeout
        while True:
            try:
                await self._service.authenticate()
                await self._grant()
                break
            except MetadataUnavailableError:
                self.session.fire(Event.GRANT_FAILED)
                if self._clock.monotonic() > deadline:
                    raise
                await self._clock.sleep(START_RETRY_S)
        self._task = asyncio.get_running_loop().create_task(self._keep_alive())

    async def _grant(self) -> None:
        # The session counts from the grant's sending (``session``), so not from the making
        # of the connection before it.
        await self._service.connect()
        sent = self._clock.monotonic()
        lease = await self._service.grant(self.session.ttl)
        self.session.granted(lease, sent)

    async def grant(self) -> int:
        """A new lease with the session's TTL (refreshed only if the session owns it)."""
        return await self._service.grant(self.session.ttl)

    # owner leases -----------------------------------------------------------------------

    async def owner_lease(self, key: bytes) -> int:
        """The lease the owner record ``key`` goes on: one of ``OWNER_LEASES``, by a hash of
        the key, granted the first time it is needed in this session."""
        slot = zlib.crc32(key) % OWNER_LEASES
        lease = self._owner_leases.get(slot)
        if lease is not None:
            return lease
        task = self._granting.get(slot)
        if task is None:
            task = self._granting[slot] = asyncio.get_running_loop().create_task(
                self._grant_owner_lease(slot, self.session.lease)
            )
        return await asyncio.shield(task)

    async def _grant_owner_lease(self, slot: int, session: int) -> int:
        try:
            lease = await self.grant()
        finally:
            self._granting.pop(slot, None)
        if session != self.session.lease or not self.session.live:
            # The session was lost meanwhile: a record put on this lease would outlive it.
            await self._revoke([lease])
            raise MetadataUnavailableError("the etcd session was lost while granting a lease")
        self._owner_leases[slot] = lease
        return lease

    def _forget_owner_leases(self) -> list[int]:
        leases = list(self._owner_leases.values())
        self._owner_leases.clear()
        return leases

    async def _revoke(self, leases: Sequence[int]) -> None:
        """Revoke ``leases`` (their keys go now), as far as etcd can be reached: all asked at
        once (etcd applies them one after the other; a stop need not wait 33 round trips)."""

        async def one(lease: int) -> None:
            with contextlib.suppress(MetadataError):
                await self._service.revoke(lease)

        await asyncio.gather(*(one(lease) for lease in leases))

    async def revoke_elsewhere(self, lease: int) -> None:
        """Revoke ``lease`` as another process would (tests: a session expires at once)."""
        await self._service.revoke(lease)

    # refreshes --------------------------------------------------------------------------

    async def _keep_alive(self) -> None:
        try:
            await self._refreshing()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("etcd session keeper stopped")
            raise

    async def _refreshing(self) -> None:
        session, clock = self.session, self._clock
        # ``pause``: the wait after a failure or a lost lease, instead of the session's next
        # refresh time.
        pause: float | None = None
        while True:
            wait = session.next_refresh - clock.monotonic() if pause is None else pause
            await clock.sleep(max(0.0, wait))
            pause = None
            try:
                if session.phase is Phase.LOST:
                    await self._revoke(self._forget_owner_leases())
                    await self._service.authenticate(again=True)
                    await self._grant()
                    continue
                sent = clock.monotonic()
                lowest = await self._refresh(session.refresh_deadline(sent))
            except MetadataError as exc:
                was = session.phase
                pause = session.failed(clock.monotonic())
                if was is Phase.CONNECTED and session.phase is Phase.SUSPENDED:
                    log.warning("etcd lease refresh failed: %s", exc)
                continue
            took = clock.monotonic() - sent
            if took > session.ttl / 3:
                # Past the next refresh's time: etcd (or this process) is slow enough that the
                # session is at risk; worth knowing which, when one is lost.
                log.warning("etcd lease refresh took %.1f s (TTL %d s)", took, session.ttl)
            if lowest <= 0:
                # One of the session's leases expired (or was revoked): its keys are gone, and
                # the session with it. The others' records go now too, before anyone hears
                # that the session is lost.
                await self._revoke([*self._forget_owner_leases(), session.lease])
                pause = session.ttl / 3
            session.refreshed(sent, lowest)

    async def _refresh(self, deadline: float) -> int:
        """Every lease of the session refreshed, answered by ``deadline``; the lowest TTL
        left."""
        timeout = deadline - self._clock.monotonic()
        if timeout > 0:
            try:
                return await self._clock.wait_for(
                    self._service.keep_alive(self.leases, deadline), timeout
                )
            except TimeoutError:
                pass
        raise MetadataUnavailableError("etcd answered no lease refresh for a whole TTL")

    # stopping ---------------------------------------------------------------------------

    async def stop(self) -> None:
        """No more refreshes (the leases are left to expire, unless ``close`` revokes them)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def close(self, *, revoke: bool) -> None:
        """Stop; with ``revoke``, the session's records go now, not after a TTL (as closing a
        ZooKeeper session's do), if it still has them."""
        await self.stop()
        was = self.session.close()
        if revoke and self.session.lease and was in (Phase.CONNECTED, Phase.SUSPENDED):
            await self._revoke([*self._forget_owner_leases(), self.session.lease])
