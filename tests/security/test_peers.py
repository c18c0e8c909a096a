"""Finding other hubs' internal listeners in the registry."""

from __future__ import annotations

import asyncio

import pytest

from hedwig.clock import ManualClock
from hedwig.errors import ConnectionLostError
from hedwig.hub.owning.peers import PeerDirectory
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


async def test_members_are_named_by_id_though_an_address_was_read_again_after_it() -> None:
    backend = MemoryBackend()
    store = MemoryMetadataStore(backend, "r")
    await store.start()
    for i in range(3):
        await store.hubs.register_hub(f"h:{i}", HubLoad(internal=f"h:{i + 100}", hub_id=f"id{i}"))
    clock = ManualClock()
    peers = PeerDirectory(store, clock)
    await peers.refresh()
    assert peers.members(besides=("h:0", "id0")) == ["id1", "id2"]
    peers.forget("h:1")  # a failed connection, then the registry read again
    clock.advance(2)
    await peers.refresh()
    assert sorted(peers.members(besides=("h:0", "id0"))) == ["id1", "id2"]


def test_connections_whose_credentials_expired_are_closed() -> None:
    from dataclasses import dataclass, field

    from hedwig.hub.front.access import AccessControl, ListenerRole
    from hedwig.hub.front.audit import AuditBudget
    from hedwig.hub.reporting.events import NoEvents
    from hedwig.metadata.acls import Operation
    from hedwig.security.principal import Principal, PrincipalKind
    from hedwig.security.tokens import TokenVerifier

    clock = ManualClock(wall_ms=1_000_000)

    @dataclass
    class Conn:
        name: str
        principal: Principal
        role: ListenerRole = ListenerRole.CLIENT
        decisions: dict[tuple[Operation, str], bool] = field(default_factory=dict)
        acl_generation: int = 0
        audit: AuditBudget = field(default_factory=lambda: AuditBudget(clock))

    access = AccessControl(
        authenticate=True,
        authorize=True,
        internal_plane=True,
        verifier=TokenVerifier(()),
        super_users=frozenset(),
        events=NoEvents(),
        clock=clock,
    )
    soon = Conn("a", Principal("alice", PrincipalKind.TOKEN, expires_ms=1_010_000))
    never = Conn("b", Principal("bob", PrincipalKind.CERTIFICATE))
    closed: list[str] = []
    assert access.close_expired([soon, never], lambda c: closed.append(c.name)) == 0
    clock.advance(45)  # past expiry and the 30 s leeway
    assert access.close_expired([soon, never], lambda c: closed.append(c.name)) == 1
    assert closed == ["a"]
