"""FENCE_LEDGERS: the fences a recovering hub asks of one replica in a turn, as one request.

A take-over fences its topic's ledger on every replica; after a hub died, its survivors
fenced thousands a second on each other. These tests run real hubs (on the in-memory
network) and check that the fences of a turn travel together, that each one is as durable and
as binding as READ_LAC's fence, that a ledger the replica cannot fence fails alone, that a
replica cut off before it answers fails every fence of the request and is fenced once back,
that a replica from before the frame is still fenced (a ledger at a time), and that an
oversized request is refused without harm.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from hedwig.errors import InvalidRequestError, LedgerFencedError, NotEnoughReplicasError
from hedwig.ledger.storage import LocalStorage
from hedwig.metadata.memory import MemoryMetadataStore
from hedwig.net.connection import HubConnection
from hedwig.protocol import MAX_FENCED_LEDGERS, FenceLedgers, Ok, StorageHello
from tests.memory_region import answered, memory_region


async def test_a_turns_fences_reach_a_replica_as_one_request() -> None:
    async for region in memory_region(2):
        hub = region.hubs[1]
        node = region.storage_client(hub)
        try:
            ledgers = range(100, 160)
            for ledger_id in ledgers:
                await node.add_entry(ledger_id, 0, -1, b"a")
                await node.add_entry(ledger_id, 1, 0, b"b")
            await node.add_entry(99, 0, -1, b"other")  # not fenced: stays writable
            before = answered(hub, "read_lac")

            ends = await asyncio.gather(*(node.fence_soon(i) for i in ledgers))

            assert ends == [(0, 1)] * len(ledgers)  # the LAC each add carried, the last entry
            assert answered(hub, "fence_ledgers") == 1
            assert answered(hub, "read_lac") == before
            assert all(hub.storage.is_fenced(i) for i in ledgers)
            assert not hub.storage.is_fenced(99)
            # Binding as READ_LAC's fence: the old writer's next add is refused.
            with pytest.raises(LedgerFencedError):
                await node.add_entry(130, 2, 1, b"late")
            await node.add_entry(99, 1, 0, b"still writable")
            # A fence asked again answers the same end, and is still one request per turn.
            again = await asyncio.gather(node.fence_soon(100), node.fence_soon(100))
            assert list(again) == [(0, 1), (0, 1)]
            assert answered(hub, "fence_ledgers") == 2
        finally:
            node.close()


async def test_the_fences_are_on_disk_before_the_answer() -> None:
    """A fence answered must survive the replica's restart: the storage reopened from its
    files still refuses the old writer."""
    async for region in memory_region(2):
        hub = region.hubs[1]
        node = region.storage_client(hub)
        try:
            for ledger_id in (7, 8):
                await node.add_entry(ledger_id, 0, -1, b"x")
            await asyncio.gather(node.fence_soon(7), node.fence_soon(8))
        finally:
            node.close()
        # Read from the files, as the hub would at its next start.
        reopened = LocalStorage(hub.storage.dir.parent, hub.storage.address)
        try:
            assert reopened.is_fenced(7) and reopened.is_fenced(8)
        finally:
            await reopened.close()


async def test_a_ledger_the_replica_cannot_fence_fails_alone() -> None:
    async for region in memory_region(2):
        hub = region.hubs[1]
        node = region.storage_client(hub)
        real = hub.storage.fence_soon

        def failing(
            ledger_id: int, real: Callable[[int], asyncio.Future[tuple[int, int]]] = real
        ) -> asyncio.Future[tuple[int, int]]:
            if ledger_id == 2:
                broken: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()
                broken.set_exception(OSError("disk full"))
                return broken
            return real(ledger_id)

        hub.storage.fence_soon = failing  # type: ignore[method-assign]
        try:
            for ledger_id in (1, 2, 3):
                await node.add_entry(ledger_id, 0, -1, b"x")
            one, two, three = await asyncio.gather(
                node.fence_soon(1), node.fence_soon(2), node.fence_soon(3), return_exceptions=True
            )
            assert one == (-1, 0) and three == (-1, 0)
            assert isinstance(two, NotEnoughReplicasError)
            assert "could not fence ledger 2" in str(two)
            assert answered(hub, "fence_ledgers") == 1
        finally:
            node.close()


async def test_a_replica_cut_off_mid_request_fails_its_fences_and_is_fenced_when_back() -> None:
    """A replica whose connection goes while a FENCE_LEDGERS waits for its answer: every fence
    of the request fails (counted against the recovery's quorum, as a replica down), none
    waits for good; once the replica is reachable the same fences are asked again on a new
    connection and bind it."""
    async for region in memory_region(2):
        hub = region.hubs[1]
        node = region.storage_client(hub)
        real = hub.storage.fence_soon
        held: list[asyncio.Future[tuple[int, int]]] = []

        def hanging(
            ledger_id: int, held: list[asyncio.Future[tuple[int, int]]] = held
        ) -> asyncio.Future[tuple[int, int]]:
            fut: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()
            held.append(fut)
            return fut

        try:
            for ledger_id in (1, 2, 3):
                await node.add_entry(ledger_id, 0, -1, b"x")
            hub.storage.fence_soon = hanging  # type: ignore[method-assign]
            fences = [node.fence_soon(i) for i in (1, 2, 3)]
            for _ in range(100):
                if len(held) == 3:
                    break
                await asyncio.sleep(0.01)
            assert len(held) == 3, "the replica got the request"
            region.network.sever(hub.address)  # before it answers
            outcomes = await asyncio.wait_for(
                asyncio.gather(*fences, return_exceptions=True), timeout=5
            )
            assert all(isinstance(o, NotEnoughReplicasError) for o in outcomes), outcomes

            hub.storage.fence_soon = real  # type: ignore[method-assign]
            ends = await asyncio.gather(*(node.fence_soon(i) for i in (1, 2, 3)))
            assert ends == [(-1, 0)] * 3
            assert all(hub.storage.is_fenced(i) for i in (1, 2, 3))
            with pytest.raises(LedgerFencedError):
                await node.add_entry(2, 1, 0, b"from the old writer")
        finally:
            for fut in held:
                fut.cancel()
            node.close()


async def test_a_replica_from_before_the_frame_is_fenced_a_ledger_at_a_time() -> None:
    """A hub that does not say it takes FENCE_LEDGERS (its OK to STORAGE_HELLO lacks the
    bit) would close the connection on one: it is sent READ_LAC with fence instead."""
    async for region in memory_region(2):
        hub = region.hubs[1]
        hello = hub.requests.storage.storage_hello

        async def old_hello(conn: object, req: StorageHello, hello: Any = hello) -> Ok:
            await hello(conn, req)
            return Ok(request_id=req.request_id)

        hub.client_routes._routes[StorageHello] = old_hello
        node = region.storage_client(hub)
        try:
            for ledger_id in (1, 2, 3):
                await node.add_entry(ledger_id, 0, -1, b"x")
            before = answered(hub, "read_lac")
            ends = await asyncio.gather(*(node.fence_soon(i) for i in (1, 2, 3)))
            assert ends == [(-1, 0)] * 3
            assert answered(hub, "fence_ledgers") == 0
            assert answered(hub, "read_lac") == before + 3
            assert all(hub.storage.is_fenced(i) for i in (1, 2, 3))
        finally:
            node.close()


async def test_too_many_ledgers_in_one_request_are_refused_and_the_connection_kept() -> None:
    async for region in memory_region(2):
        hub = region.hubs[1]
        conn = await HubConnection.open(hub.address, network=region.network)
        try:
            await conn.request(StorageHello(request_id=conn.next_id(), replica=hub.storage.address))
            ids = tuple(range(MAX_FENCED_LEDGERS + 1))
            with pytest.raises(InvalidRequestError, match="at most"):
                await conn.request(FenceLedgers(request_id=conn.next_id(), ledger_ids=ids))
            assert not any(hub.storage.is_fenced(i) for i in ids[:10])
            answer = await conn.request(FenceLedgers(request_id=conn.next_id(), ledger_ids=(5,)))
            assert answer.ends[0].ledger_id == 5  # type: ignore[union-attr]
        finally:
            conn.close()


async def test_take_overs_fence_the_old_ledgers_with_fence_ledgers() -> None:
    """Topics whose owner lost its session, taken over together by the other hubs: each
    take-over fences the topic's ledger on its replicas with FENCE_LEDGERS (no READ_LAC);
    every message acknowledged before is still there, and a quorum of the old ledger's
    replicas is fenced."""
    async for region in memory_region(3, replication="3/3/2"):
        names = [f"t/{i}" for i in range(60)]
        async with region.client() as client:
            await asyncio.gather(*(client.publish(n, b"before") for n in names))
            victim = region.hubs[0]
            theirs = [n for n in names if n in victim.topics.topics]
            assert len(theirs) >= 5
            ledgers = {n: victim.topics.topics[n].log.ledger_id for n in theirs}
            before = {h.address: answered(h, "read_lac") for h in region.hubs}
            assert isinstance(victim.store, MemoryMetadataStore)
            victim.store.expire()  # as after a partition longer than its session
            others = region.hubs[1:]
            await asyncio.gather(*(client.publish(n, b"after") for n in theirs))

            took = sum(1 for n in theirs for h in others if n in h.topics.topics)
            assert took == len(theirs)
            # Two remote replicas per take-over (the old owner, alive, and the other hub);
            # how many of them share a request depends on the turns the claims end in.
            fence_requests = sum(answered(h, "fence_ledgers") for h in region.hubs)
            assert 0 < fence_requests <= 2 * took
            assert {h.address: answered(h, "read_lac") for h in region.hubs} == before
            for n in theirs:
                got = await client.read(n, 1)
                values = [m.value for b in got.batches for m in b.delivered()]
                assert values == [b"before", b"after"]
                fenced = [h for h in region.hubs if h.storage.is_fenced(ledgers[n])]
                assert len(fenced) >= 2  # a quorum of the old ledger's replicas
            await victim.store.start()  # a new session, so that it stops cleanly
