"""The operator's requests to a secured pool's hubs (``hedwig_operator.hubs``): activating a
topic, a graceful hand-off (rebalancing, and the drain before a scale-down) and deleting a
Topic's data go with TLS (the pool's hub CA) and the operator's token, as a super-user. With
a token that is not allowed the same requests are refused, and what the operator reports
says why (it then falls back as ``hedwig_operator.topics`` and ``rebalancing`` describe)."""

from __future__ import annotations

import asyncio

from hedwig_operator.hubs import ClientHubRequests
from hedwig_operator.security import PoolTrust
from hedwig_operator.specs import parse_pool

from hedwig.hub import Hub
from hedwig.security import StaticToken
from tests.operator.fakes import pool_body
from tests.security.conftest import SecureRegion

TOPIC = "ops.moved"


def requests_as(secure: SecureRegion, principal: str) -> ClientHubRequests:
    """What the operator's ``PoolTrust`` gives it for a secured pool whose hubs are
    ``secure``'s, with a token for ``principal``."""
    pool = parse_pool(pool_body(spec={"region": "r1", "security": {"enabled": True}}))
    trust = PoolTrust(credentials=StaticToken(secure.issuer.token(principal)))
    with open(secure.pki.path("hub-ca.crt")) as f:
        trust.register(pool, f.read(), "hedwig:digest")
    trust.note_hubs(pool, secure.addresses)
    return ClientHubRequests(trust)


def owner(secure: SecureRegion, topic: str) -> Hub | None:
    owners = [h for h in secure.hubs if topic in h.topics.topics]
    return owners[0] if len(owners) == 1 else None


async def eventually_owned_by(secure: SecureRegion, topic: str, hub: Hub) -> None:
    for _ in range(100):
        if owner(secure, topic) is hub:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{topic} not handed over to {hub.address}")


async def test_the_operator_reaches_secured_hubs_as_a_super_user(secure: SecureRegion) -> None:
    async with secure.client(security=secure.security(token_for="admin")) as admin:
        await admin.publish(TOPIC, b"kept until deleted")
    operator = requests_as(secure, "admin")  # the hubs' super-user, as the operator is
    await operator.activate(secure.addresses, TOPIC, 10)
    first = owner(secure, TOPIC)
    assert first is not None
    second = next(h for h in secure.hubs if h is not first)

    # Without admin on the topic, a hand-off and a deletion are refused, and say why.
    alice = requests_as(secure, "alice")
    why = await alice.release(first.address, TOPIC, second.address, "rebalancing", 10)
    assert why is not None and "alice may not admin topic 'ops.moved'" in why, why
    why = await alice.delete(secure.addresses, TOPIC, 10)
    assert why is not None and "alice may not admin topic 'ops.moved'" in why, why
    assert owner(secure, TOPIC) is first

    # As the operator: the graceful hand-off a rebalance or a scale-down's drain makes, then
    # a deleted Topic's data deleted through its owner.
    assert await operator.release(first.address, TOPIC, second.address, "drain", 10) is None
    await eventually_owned_by(secure, TOPIC, second)
    assert await operator.delete(secure.addresses, TOPIC, 10) is None
    store = secure.store()
    await store.start()
    assert not await store.topics.topic_exists(TOPIC)
