"""Where other hubs are: their internal listeners, and the hubs that ledgers name by id.

Owner records and the hub registry know a hub by its client address; ledger ensembles name
its replicas by its stable id (``hedwig.hub.process.identity``), so they stay reachable when
it comes back on another address. Hub-to-hub requests (the storage role, claim requests) go
to the internal listener when the hub has one (``HubDialer``). Each hub publishes its id and
internal listener in its ``alive`` record (``HubLoad``); this directory maps addresses and
ids to where to send requests, reading the registry again when it meets a hub it does not
know (at most once a second), and when a connection to a known one fails.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection

from hedwig.clock import Clock
from hedwig.errors import ConnectionLostError
from hedwig.metadata.managers import MetadataStore
from hedwig.net.connection import HubConnection
from hedwig.net.transport import Network

# The registry is read again for an unknown hub at most this often.
REFRESH_MIN_INTERVAL_S = 1.0


class PeerDirectory:
    def __init__(self, store: MetadataStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._internal: dict[str, str] = {}
        # Ensemble member (a hub id) -> where its storage role listens: the internal
        # listener, or (security off) the client address.
        self._storage: dict[str, str] = {}
        self._refreshed_at = float("-inf")
        # The registry read under way: concurrent lookups wait for it instead of missing.
        self._refreshing: asyncio.Task[None] | None = None

    async def internal_address(self, address: str) -> str:
        """The internal listener of the hub known as ``address``; ``ConnectionLostError`` if
        the registry does not know it (the hub is gone)."""
        got = self._internal.get(address)
        if got is not None:
            return got
        await self._refresh_soon()
        got = self._internal.get(address)
        if got is None:
            raise ConnectionLostError(
                f"hub {address} publishes no internal listener (is it alive?)"
            )
        return got

    async def storage_address(self, member: str) -> str:
        """Where to send storage requests for the replica an ensemble names ``member``.

        A hub id not in the registry is a hub that is not alive (``ConnectionLostError``).
        """
        got = self._storage.get(member)
        if got is not None:
            return got
        await self._refresh_soon()
        got = self._storage.get(member)
        if got is not None:
            return got
        raise ConnectionLostError(f"hub {member} is not alive (not in the hub registry)")

    async def _refresh_soon(self) -> None:
        """Read the registry again, unless that was done less than a second ago; lookups
        that come while a read is under way wait for it."""
        if self._refreshing is not None:
            await asyncio.shield(self._refreshing)
        elif self._clock.monotonic() - self._refreshed_at >= REFRESH_MIN_INTERVAL_S:
            self._refreshing = asyncio.get_running_loop().create_task(self.refresh())
            try:
                await asyncio.shield(self._refreshing)
            finally:
                self._refreshing = None

    async def refresh(self) -> None:
        self._refreshed_at = self._clock.monotonic()
        alive = [h for h in await self._store.hubs.list_hubs() if h.alive]
        # Merged, not replaced: a hub missing from the registry may still be running (its
        # session expired behind a partition) and serve its replicas at its last address;
        # only a failed connection makes this directory forget it.
        self._internal.update(
            (h.address, h.load.internal) for h in alive if h.load is not None and h.load.internal
        )
        for h in alive:
            if h.storage_id:
                self._storage[h.storage_id] = self._internal.get(h.address, h.address)

    def members(self, *, besides: Collection[str]) -> list[str]:
        """The id of each hub the last registry reads found alive, but for those named in
        ``besides`` (by id or by where they listen)."""
        return [m for m, t in self._storage.items() if m not in besides and t not in besides]

    def forget(self, member: str) -> None:
        """A connection to ``member`` (an address or a hub id) failed: look it up again next
        time."""
        self._internal.pop(member, None)
        self._storage.pop(member, None)


class HubDialer:
    """Connections for hub-to-hub requests (claims, tails of a fan-out topic, questions): to
    the other hub's internal listener when the region's hubs have one (``internal``), else to
    its client address. Which of the two is chosen once, here."""

    def __init__(
        self, *, directory: PeerDirectory, internal: bool, network: Network, clock: Clock
    ) -> None:
        self._where = directory.internal_address if internal else _as_it_is
        self._network = network
        self._clock = clock

    async def open(self, address: str, timeout: float) -> HubConnection:
        """A connection to the hub known by its client ``address``."""
        return await HubConnection.open(
            await self._where(address), network=self._network, clock=self._clock, timeout=timeout
        )


async def _as_it_is(address: str) -> str:
    return address
