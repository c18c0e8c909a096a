"""Where other hubs' internal listeners are.

A hub is known by its client address everywhere (owner records, ledger ensembles, the hub
registry), which keeps those records unchanged whether or not the hubs have an internal
listener. Hub-to-hub requests (the storage role, claim requests) go to the internal listener,
whose address each hub publishes in its ``alive`` record (``HubLoad.internal``). This directory
maps one to the other from the registry, reading it again when it meets a hub it does not know
(at most once a second), and when a connection to a known address fails.
"""

from __future__ import annotations

import asyncio

from hedwig.clock import Clock
from hedwig.errors import ConnectionLostError
from hedwig.metadata.managers import MetadataStore

# The registry is read again for an unknown hub at most this often.
REFRESH_MIN_INTERVAL_S = 1.0


class PeerDirectory:
    def __init__(self, store: MetadataStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._internal: dict[str, str] = {}
        self._refreshed_at = float("-inf")
        # The registry read under way: concurrent lookups wait for it instead of missing.
        self._refreshing: asyncio.Task[None] | None = None

    async def internal_address(self, address: str) -> str:
        """The internal listener of the hub known as ``address``; ``ConnectionLostError`` if
        the registry does not know it (the hub is gone)."""
        got = self._internal.get(address)
        if got is not None:
            return got
        if self._refreshing is not None:
            await asyncio.shield(self._refreshing)
        elif self._clock.monotonic() - self._refreshed_at >= REFRESH_MIN_INTERVAL_S:
            self._refreshing = asyncio.get_running_loop().create_task(self.refresh())
            try:
                await asyncio.shield(self._refreshing)
            finally:
                self._refreshing = None
        got = self._internal.get(address)
        if got is None:
            raise ConnectionLostError(
                f"hub {address} publishes no internal listener (is it alive?)"
            )
        return got

    async def refresh(self) -> None:
        self._refreshed_at = self._clock.monotonic()
        self._internal = {
            h.address: h.load.internal
            for h in await self._store.hubs.list_hubs()
            if h.alive and h.load is not None and h.load.internal
        }

    def forget(self, address: str) -> None:
        """A connection to ``address``'s internal listener failed: look it up again next time."""
        self._internal.pop(address, None)
