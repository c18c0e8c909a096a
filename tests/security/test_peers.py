"""Finding other hubs' internal listeners in the registry."""

from __future__ import annotations

import asyncio

import pytest

from hedwig.clock import ManualClock
from hedwig.errors import ConnectionLostError
from hedwig.hub.peers import PeerDirectory
from hedwig.metadata.memory import MemoryBackend, MemoryMetadataStore
from hedwig.metadata.records import HubLoad


async def test_concurrent_lookups_share_one_registry_read() -> None:
    backend = MemoryBackend()
    store = MemoryMetadataStore(backend, "r")
    await store.start()
    for i in range(3):
        await store.hubs.register_hub(f"h:{i}", HubLoad(internal=f"h:{i + 100}"))
    peers = PeerDirectory(store, ManualClock())
    got = await asyncio.gather(*(peers.internal_address(f"h:{i}") for i in range(3)))
    assert got == ["h:100", "h:101", "h:102"]
    with pytest.raises(ConnectionLostError, match="no internal listener"):
        await peers.internal_address("gone:1")
