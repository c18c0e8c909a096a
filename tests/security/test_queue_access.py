"""A queue's consumers on secured hubs: joining one needs ``subscribe`` and, for a queue
another principal made, ``admin`` on the topic (``hedwig.hub.front.owners``); an
acknowledgement or a nack is refused to a principal without ``subscribe`` and to a connection
that does not hold the message, describing the queue needs ``describe``, and revoking one
principal's permission closes its consumers only."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from hedwig.client import SubscriptionType
from hedwig.errors import DeadlineExceededError, ForbiddenError, NotHeldError
from hedwig.metadata.acls import AclRule, Operation, PatternType
from hedwig.protocol import Ack, Nack, SeqRange
from tests.security.conftest import SecureRegion
from tests.security.test_authorization import grant, revoke, settled


def _ack_and_nack(next_id: Callable[[], int], seq: int) -> tuple[Ack, Nack]:
    """An ACK and a NACK (for now) of message ``seq`` of ``jobs.a``'s queue ``pool``."""
    ranges = (SeqRange(seq, seq),)
    return (
        Ack(request_id=next_id(), topic="jobs.a", subscriber="pool", ranges=ranges),
        Nack(request_id=next_id(), topic="jobs.a", subscriber="pool", delay_ms=0, ranges=ranges),
    )


SHARED = SubscriptionType.SHARED


def rule(who: str, *ops: Operation) -> AclRule:
    return AclRule(who, frozenset(ops), name="jobs.", pattern=PatternType.PREFIX)


async def test_joining_and_acknowledging_need_subscribe_and_the_message(
    secure: SecureRegion,
) -> None:
    await grant(
        secure, "admin", AclRule("admin", frozenset(Operation), name="", pattern=PatternType.PREFIX)
    )
    await grant(secure, "alice", rule("alice", Operation.SUBSCRIBE))
    await grant(secure, "carol", rule("carol", Operation.SUBSCRIBE))
    await grant(secure, "mallory", rule("mallory", Operation.DESCRIBE))
    await settled(secure)
    async with (
        secure.client(security=secure.security(token_for="admin")) as admin,
        secure.client(security=secure.security(token_for="alice")) as alice,
        secure.client(security=secure.security(token_for="alice")) as alice2,
        secure.client(security=secure.security(token_for="carol")) as carol,
        secure.client(security=secure.security(token_for="mallory")) as mallory,
    ):
        await admin.publish("jobs.a", b"created")
        worker = await alice.subscribe("jobs.a", "pool", type=SHARED, message_window=10)
        with pytest.raises(ForbiddenError, match="mallory may not subscribe"):
            await mallory.subscribe("jobs.a", "pool", type=SHARED)
        with pytest.raises(ForbiddenError, match="belongs to another principal"):
            await carol.subscribe("jobs.a", "pool", type=SHARED, message_window=10)
        other = await alice2.subscribe("jobs.a", "pool", type=SHARED, message_window=10)
        await admin.publish("jobs.a", b"work")
        try:
            m = await worker.next(3)
            held_by = worker
        except DeadlineExceededError:
            m = await other.next(3)
            held_by = other
        thief = alice2 if held_by is worker else alice
        owner = (
            secure.hubs[0].address
            if secure.hubs[0].topics.topics.get("jobs.a")
            else secure.hubs[1].address
        )
        conn = await thief.connection(owner)
        for frame in _ack_and_nack(conn.next_id, m.seq):
            with pytest.raises(NotHeldError):
                await conn.request(frame)
        # Mallory (describe only) may neither acknowledge nor nack it, at its owner.
        mconn = await mallory.connection(owner)
        for frame in _ack_and_nack(mconn.next_id, m.seq):
            with pytest.raises(ForbiddenError, match="mallory may not subscribe"):
                await mconn.request(frame)
        # Describing the queue is describing: mallory may, alice (subscribe alone) may not;
        # and mallory is shown only the subscriptions it may use, as by DESCRIBE_TOPIC (none:
        # the pool is alice's), an admin every one.
        assert await mallory.describe_queues("jobs.a") == ()
        (pool,) = await admin.describe_queues("jobs.a")
        assert (pool.name, pool.type, pool.consumers, pool.unacked) == ("pool", SHARED, 2, 1)
        with pytest.raises(ForbiddenError, match="alice may not describe"):
            await alice.describe_queues("jobs.a")
        held_by.ack(m)  # the holder's own acknowledgement still counts
        await asyncio.sleep(0.1)
        assert held_by.not_held == 0


async def test_revoking_one_principal_closes_its_consumers_only(secure: SecureRegion) -> None:
    await grant(
        secure, "admin", AclRule("admin", frozenset(Operation), name="", pattern=PatternType.PREFIX)
    )
    await grant(secure, "alice", rule("alice", Operation.SUBSCRIBE))
    # carol may join alice's queue: ``admin`` on its topic overrides its owner.
    await grant(secure, "carol", rule("carol", Operation.SUBSCRIBE, Operation.ADMIN))
    await settled(secure)
    async with (
        secure.client(security=secure.security(token_for="admin")) as admin,
        secure.client(security=secure.security(token_for="alice")) as alice,
        secure.client(security=secure.security(token_for="carol")) as carol,
    ):
        await admin.publish("jobs.b", b"created")
        a = await alice.subscribe("jobs.b", "pool", type=SHARED, message_window=1)
        c = await carol.subscribe("jobs.b", "pool", type=SHARED, message_window=1)
        await revoke(secure, "alice")
        with pytest.raises(ForbiddenError, match="no longer subscribe"):
            await a.next(5)
        for i in range(3):
            await admin.publish("jobs.b", b"%d" % i)
        got = []
        for _ in range(3):
            m = await c.next(5)
            got.append(m.value)
            c.ack(m)
        assert got == [b"0", b"1", b"2"]
