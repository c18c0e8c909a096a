"""Subscriptions are their creators' property (``hedwig.hub.front.owners``).

A second principal with ``subscribe`` on a topic once force-attached a first principal's
subscription, consumed it to the end (six messages lost to their owner), reset it and deleted
it, with its name from DESCRIBE_TOPIC. Here, on secured hubs over the in-memory store and over
a real ZooKeeper (which stores a subscription whole: its owner must survive every consume mark
written), the second principal is refused each of those, the owner loses nothing, and a
principal with ``admin`` on the topic may do them all.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest

from hedwig.client import HedwigClient
from hedwig.devcluster.zookeeper import ZooKeeperServer
from hedwig.errors import ForbiddenError, NoSuchSubscriptionError
from hedwig.hub import Hub
from hedwig.metadata.acls import AclEntry, AclRule, Operation, PatternType
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.memory import MemoryBackend, MemoryMetadataStore
from hedwig.metadata.records import ANY_VERSION, SubscriptionData, SubscriptionState
from hedwig.metadata.zookeeper import ZkMetadataStore
from hedwig.protocol import Consume, ResetTo
from hedwig.security import ClientSecurity
from tests.security.conftest import FAST_RETRY, running_hubs, secure_config
from tests.security.fixtures import Pki, TokenIssuer
from tests.security.test_probes import connect

TOPIC = "shared.orders"
USERS = AclRule(
    principal="user-*",
    operations=frozenset(
        {Operation.CREATE, Operation.PUBLISH, Operation.SUBSCRIBE, Operation.DESCRIBE}
    ),
    name="shared.",
    pattern=PatternType.PREFIX,
)
OPERATOR = AclRule(
    principal="ops",
    operations=frozenset({Operation.SUBSCRIBE, Operation.DESCRIBE, Operation.ADMIN}),
    name="shared.",
    pattern=PatternType.PREFIX,
)


@dataclass
class Region:
    pki: Pki
    issuer: TokenIssuer
    store: Callable[[], MetadataStore]
    hubs: list[Hub] = field(default_factory=list)

    def client(self, principal: str) -> HedwigClient:
        security = ClientSecurity.build(
            tls_ca=self.pki.path("hub-ca.crt"), token=self.issuer.token(principal)
        )
        return HedwigClient([h.address for h in self.hubs], security=security, retry=FAST_RETRY)

    def owner_hub(self, topic: str) -> Hub:
        return next(h for h in self.hubs if topic in h.topics.topics)


@pytest.fixture(params=["memory", "zookeeper"])
async def region(
    request: pytest.FixtureRequest, pki: Pki, issuer: TokenIssuer
) -> AsyncIterator[Region]:
    if request.param == "memory":
        backend = MemoryBackend()

        def store() -> MetadataStore:
            return MemoryMetadataStore(backend, "mem")
    else:
        zk: ZooKeeperServer = request.getfixturevalue("zk_server")
        name = f"owners-{id(request)}"

        def store() -> MetadataStore:
            return ZkMetadataStore(zk.address, name, session_timeout=4.0)

    cluster = Region(pki, issuer, store)
    admin = store()
    await admin.start()
    await admin.acls.write_acl("test", AclEntry((USERS, OPERATOR), source="test"), ANY_VERSION)
    await admin.close()
    async with running_hubs(cluster.hubs, (secure_config(pki, issuer) for _ in range(2)), store):
        yield cluster


async def test_another_principal_cannot_take_use_reset_delete_or_see_a_subscription(
    region: Region,
) -> None:
    async with region.client("user-a") as a, region.client("user-b") as b:
        mine = await a.subscribe(TOPIC, "a-orders")
        for i in range(6):
            await a.publish(TOPIC, b"order-%d" % i)
        first = await mine.next(10)
        mine.consume(first.seq)  # a mark written with the owner: the record stays a's
        theirs = await b.subscribe(TOPIC, "b-orders")

        with pytest.raises(ForbiddenError, match="belongs to another principal"):
            await b.subscribe(TOPIC, "a-orders", force_attach=True)
        with pytest.raises(ForbiddenError, match="belongs to another principal"):
            await b.subscribe(TOPIC, "a-orders")
        with pytest.raises(ForbiddenError, match="belongs to another principal"):
            await b.reset_subscription(TOPIC, "a-orders", ResetTo.LATEST)
        with pytest.raises(ForbiddenError, match="belongs to another principal"):
            await b.unsubscribe(TOPIC, "a-orders")
        # Consuming needs the subscription attached to the connection, which b cannot have.
        hub = region.owner_hub(TOPIC)
        raw = await connect(hub.address, b.security)
        try:
            with pytest.raises(NoSuchSubscriptionError):
                await raw.request(
                    Consume(request_id=raw.next_id(), topic=TOPIC, subscriber="a-orders", seq=6),
                    timeout=5,
                )
        finally:
            raw.close()
        assert [s.name for s in (await b.describe_topic(TOPIC)).subscriptions] == ["b-orders"]
        assert [s.name for s in (await a.describe_topic(TOPIC)).subscriptions] == ["a-orders"]

        # The owner lost nothing: the rest arrive, from where it was.
        got = [first.value]
        for _ in range(5):
            msg = await mine.next(10)
            mine.consume(msg.seq)
            got.append(msg.value)
        assert got == [b"order-%d" % i for i in range(6)]
        await theirs.close()

    store = region.store()
    await store.start()
    try:
        stored = await store.subscriptions.read_subscriptions(TOPIC)
    finally:
        await store.close()
    assert {n: v.value.owner for n, v in stored.items()} == {
        "a-orders": "user-a",
        "b-orders": "user-b",
    }


async def test_admin_on_the_topic_overrides_the_owner(region: Region) -> None:
    async with region.client("user-a") as a, region.client("ops") as ops:
        sub = await a.subscribe(TOPIC, "a-orders")
        await a.publish(TOPIC, b"x")
        await sub.close()
        names = [s.name for s in (await ops.describe_topic(TOPIC)).subscriptions]
        assert names == ["a-orders"]
        assert await ops.reset_subscription(TOPIC, "a-orders", ResetTo.EARLIEST) == 0
        taken = await ops.subscribe(TOPIC, "a-orders", force_attach=True)
        assert (await taken.next(10)).value == b"x"
        await taken.close()
        await ops.unsubscribe(TOPIC, "a-orders")
        assert (await ops.describe_topic(TOPIC)).subscriptions == ()


async def test_a_subscription_made_meanwhile_by_another_is_refused_after_the_attach(
    region: Region,
) -> None:
    """An attach that found nothing at its check, then met a subscription someone else made
    before it read again, is detached and refused."""
    async with region.client("user-a") as a, region.client("user-b") as b:
        await a.publish(TOPIC, b"x")
        hub = region.owner_hub(TOPIC)
        owners = hub.requests.subscriptions._owners
        check = owners.check

        async def late(conn: object, op: str, topic: str, subscriber: str) -> bool:
            existed = await check(conn, op, topic, subscriber)  # type: ignore[arg-type]
            store = region.store()
            await store.start()
            try:
                await store.subscriptions.create_subscription_data(
                    topic, subscriber, SubscriptionData(None, SubscriptionState(1), owner="user-a")
                )
            finally:
                await store.close()
            return existed

        owners.check = late  # type: ignore[method-assign]
        with pytest.raises(ForbiddenError, match="belongs to another principal"):
            await b.subscribe(TOPIC, "race")
        owners.check = check  # type: ignore[method-assign]
        await asyncio.sleep(0.1)
        attached = hub.topics.topics[TOPIC].subscriptions.get("race")
        assert attached is None or attached.peer is None


def test_the_owner_is_kept_by_the_record_and_a_partial_update() -> None:
    data = SubscriptionData(None, SubscriptionState(3, 1, 2), owner="user-a")
    assert SubscriptionData.from_json(data.to_json()) == data
    assert SubscriptionData(None, SubscriptionState(4)).merged_into(data).owner == "user-a"
    # A record from before owners were recorded has none: anyone's with subscribe.
    assert SubscriptionData.from_json(b'{"state": {"consumed_seq": 1}}').owner is None
