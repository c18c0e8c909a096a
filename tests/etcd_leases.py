"""etcd's leases in memory, on a manual clock, for the lease keeper's tests
(``hedwig.metadata.etcd.lease_keeper.LeaseService``).

As etcd keeps them: a lease renewed when a refresh reaches etcd (not when it was sent, nor when
its answer comes back), expired a TTL after the last refresh that reached it (a refresh of an
expired or revoked lease answers TTL 0, as etcd answers a lease it no longer knows), and every
lease of a refresh stream renewed together. Between the keeper and this etcd is a link that
delays each message ``delay_s`` of the clock each way; etcd can be ``down`` (every call
refused at once as unavailable, no connection set up) or ``frozen`` (calls reach it and wait,
unanswered, until it thaws: a SIGSTOP, or a link that drops everything), and the answers of
grants can be held on their way back (``hold_grants``: a grant etcd made, answered late).
With ``authentication`` off (etcd's default), authenticating asks etcd nothing, as
``Connection.authenticate`` without a user does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from hedwig.clock import ManualClock
from hedwig.errors import MetadataUnavailableError
from hedwig.metadata.etcd.connection import CALL_TIMEOUT_S, CONNECT_TIMEOUT_MS


class MemoryLeases:
    def __init__(
        self, clock: ManualClock, *, delay_s: float = 0.0, authentication: bool = False
    ) -> None:
        self.clock = clock
        self.delay_s = delay_s
        self.authentication = authentication
        self.down = False
        self._running = asyncio.Event()
        self._running.set()
        self._grants_answered = asyncio.Event()
        self._grants_answered.set()
        # By lease: its TTL and when it expires by the clock; revoked or expired ones go.
        self._ttl: dict[int, int] = {}
        self._expires: dict[int, float] = {}
        self._next_id = 0x7000
        # What reached etcd, in order: ("grant", id), ("refresh", ids), ("revoke", id),
        # ("authenticate", again), each with the clock's time.
        self.log: list[tuple[float, str, object]] = []
        self.refused = 0  # calls refused while down

    # faults -----------------------------------------------------------------------------

    @property
    def frozen(self) -> bool:
        return not self._running.is_set()

    def freeze(self) -> None:
        self._running.clear()

    def thaw(self) -> None:
        self._running.set()

    def hold_grants(self) -> None:
        self._grants_answered.clear()

    def release_grants(self) -> None:
        self._grants_answered.set()

    # what a test looks at ---------------------------------------------------------------

    def alive(self, lease: int) -> bool:
        expires = self._expires.get(lease)
        return expires is not None and self.clock.monotonic() < expires

    def expires(self, lease: int) -> float:
        """When etcd lets ``lease`` go, by the clock, unless a refresh reaches it first."""
        return self._expires[lease]

    def granted(self) -> list[int]:
        """Every lease granted, in order."""
        return [lease for _, kind, lease in self.log if kind == "grant" and isinstance(lease, int)]

    def reached(self, what: str) -> list[float]:
        """When each call of kind ``what`` reached etcd."""
        return [at for at, kind, _ in self.log if kind == what]

    # the link ---------------------------------------------------------------------------

    async def _there(self, what: str) -> None:
        """The request's way to etcd; refused at once while etcd is down, given up after a
        call's timeout (``CALL_TIMEOUT_S``) while it is frozen."""
        if self.down:
            self.refused += 1
            self.log.append((self.clock.monotonic(), "refused", what))
            raise MetadataUnavailableError(f"etcd unavailable (UNAVAILABLE) at {what}")
        if self.delay_s:
            await self.clock.sleep(self.delay_s)
        if what != "lease keep-alive":  # (its deadline is the keeper's)
            try:
                await self.clock.wait_for(self._running.wait(), CALL_TIMEOUT_S)
            except TimeoutError:
                raise MetadataUnavailableError(
                    f"etcd unavailable (DEADLINE_EXCEEDED) at {what}"
                ) from None
        await self._running.wait()

    async def _back(self) -> None:
        if self.delay_s:
            await self.clock.sleep(self.delay_s)

    def _expire(self) -> None:
        now = self.clock.monotonic()
        for lease in [lease for lease, t in self._expires.items() if t <= now]:
            del self._expires[lease], self._ttl[lease]

    # ``LeaseService`` -------------------------------------------------------------------

    async def connect(self) -> None:
        if self.down or self.frozen:
            await self.clock.sleep(CONNECT_TIMEOUT_MS / 1000)
            raise MetadataUnavailableError("etcd unreachable: no connection for leases")

    async def authenticate(self, *, again: bool = False) -> None:
        if not self.authentication:
            self.log.append((self.clock.monotonic(), "authenticate", again))
            return
        await self._there("authenticate")
        self.log.append((self.clock.monotonic(), "authenticate", again))
        await self._back()

    async def grant(self, ttl: int) -> int:
        await self._there("lease")
        self._next_id += 1
        lease = self._next_id
        self._ttl[lease] = ttl
        self._expires[lease] = self.clock.monotonic() + ttl
        self.log.append((self.clock.monotonic(), "grant", lease))
        await self._back()
        await self._grants_answered.wait()
        return lease

    async def keep_alive(self, leases: Sequence[int], deadline: float) -> int:
        await self._there("lease keep-alive")
        self._expire()
        now = self.clock.monotonic()
        self.log.append((now, "refresh", tuple(leases)))
        lowest: int | None = None
        for lease in leases:
            ttl = self._ttl.get(lease, 0)
            if ttl:
                self._expires[lease] = now + ttl
            lowest = ttl if lowest is None else min(lowest, ttl)
        await self._back()
        return lowest or 0

    async def revoke(self, lease: int) -> None:
        await self._there("revoke")
        self._ttl.pop(lease, None)
        self._expires.pop(lease, None)
        self.log.append((self.clock.monotonic(), "revoke", lease))
        await self._back()


async def settle() -> None:
    """Let every task that can run, run (a few turns of the loop)."""
    for _ in range(30):
        await asyncio.sleep(0)


async def advance(clock: ManualClock, seconds: float, *, step: float = 1 / 128) -> None:
    """Move the clock ``seconds`` on, ``step`` at a time, the tasks settling at each step."""
    steps = round(seconds / step)
    for _ in range(steps):
        clock.advance(step)
        await settle()
