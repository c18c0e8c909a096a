"""Delayed messages on secured hubs (TLS, authentication, authorization): a ``SyncClient``
publishes (and sends) with ``deliver_after`` and ``deliver_at`` from a plain thread, an
authenticated shared consumer gets each no earlier than its time and the plain message behind
them first; a principal without ``publish`` is refused whether its message is delayed or not,
and a delivery time further ahead than the hub allows is refused without a retry."""

from __future__ import annotations

import asyncio
import time

import pytest

from hedwig.client import SubscriptionType, SyncClient
from hedwig.errors import ForbiddenError, InvalidRequestError
from hedwig.metadata.acls import AclRule, Operation, PatternType
from hedwig.protocol.messages import deliver_at_of
from tests.security.conftest import FAST_RETRY, SecureRegion
from tests.security.test_authorization import grant, settled


def rule(who: str, *ops: Operation) -> AclRule:
    return AclRule(who, frozenset(ops), name="later.", pattern=PatternType.PREFIX)


async def test_delayed_messages_from_a_sync_client_on_secured_hubs(secure: SecureRegion) -> None:
    await grant(
        secure,
        "alice",
        rule("alice", Operation.PUBLISH, Operation.CREATE, Operation.SUBSCRIBE, Operation.READ),
    )
    await grant(secure, "mallory", rule("mallory", Operation.SUBSCRIBE))
    await settled(secure)
    sync = await asyncio.to_thread(
        SyncClient, secure.addresses, security=secure.security(cert="alice"), retry=FAST_RETRY
    )
    try:
        async with (
            secure.client(security=secure.security(token_for="alice")) as worker,
            secure.client(security=secure.security(token_for="mallory")) as mallory,
        ):
            sub = await worker.subscribe("later.jobs", "pool", type=SubscriptionType.SHARED)

            def publish() -> None:
                sync.publish("later.jobs", b"after", deliver_after=0.5)
                sync.publish("later.jobs", b"at", deliver_at=time.time() + 0.7)
                sync.send("later.jobs", b"sent", deliver_after=0.9)
                sync.publish("later.jobs", b"now")

            await asyncio.to_thread(publish)
            got = []
            for _ in range(4):
                m = await sub.next(5)
                at = deliver_at_of(m.headers)
                assert at is None or time.time() * 1000 >= at
                sub.ack(m)
                got.append(m.value)
            assert got == [b"now", b"after", b"at", b"sent"]
            with pytest.raises(ForbiddenError):
                await mallory.publish("later.jobs", b"x", deliver_after=1)

            def too_far() -> None:
                sync.publish("later.jobs", b"x", deliver_after=30 * 24 * 3600)

            with pytest.raises(InvalidRequestError, match="ahead is allowed"):
                await asyncio.to_thread(too_far)
    finally:
        await asyncio.to_thread(sync.close)
