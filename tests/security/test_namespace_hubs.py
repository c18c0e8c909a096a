"""Namespaces on real hubs, secured (TLS, tokens, ACLs), on a real ZooKeeper and a real etcd:
a namespace's policy applies to its new topics (a topic's own configuration over it), a change
applies to topics claimed after it without restarting a hub, the topic count quota stops
creations from two clients on two hubs exactly at the limit, with a clear refusal that is not
retried, and the owner holds a topic's subscriptions to their quota."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest

from hedwig.client import HedwigClient
from hedwig.devcluster.etcd import EtcdServer
from hedwig.devcluster.zookeeper import ZooKeeperServer
from hedwig.errors import MessageTooLargeError, NoSuchTopicError, QuotaExceededError
from hedwig.hub import Hub
from hedwig.metadata import NEW_VERSION, MetadataStore, TopicConfig
from hedwig.metadata.acls import AclEntry, AclRule, Operation, PatternType
from hedwig.metadata.etcd import EtcdMetadataStore
from hedwig.metadata.records.namespaces import NamespacePolicy
from hedwig.metadata.zookeeper import ZkMetadataStore
from hedwig.security import ClientSecurity
from tests.security.conftest import FAST_RETRY, running_hubs, secure_config
from tests.security.fixtures import Pki, TokenIssuer
from tests.waiting import eventually

pytestmark = pytest.mark.integration

ALL = frozenset(Operation)


@dataclass
class Region:
    pki: Pki
    issuer: TokenIssuer
    name: str
    hubs: list[Hub]
    admin: MetadataStore

    def client(self, *hubs: Hub, who: str = "alice") -> HedwigClient:
        security = ClientSecurity.build(
            tls_ca=self.pki.path("hub-ca.crt"), token=self.issuer.token(who)
        )
        return HedwigClient(
            [h.address for h in hubs or self.hubs], security=security, retry=FAST_RETRY
        )


def _store_of(request: pytest.FixtureRequest, region: str) -> Callable[[], MetadataStore]:
    """Stores of ``region`` on the real ZooKeeper or etcd the test is run on."""
    if request.param == "etcd":
        etcd: EtcdServer = request.getfixturevalue("etcd_server")
        return lambda: EtcdMetadataStore(etcd.address, region, session_timeout=2.0)
    zk: ZooKeeperServer = request.getfixturevalue("zk_server")
    return lambda: ZkMetadataStore(zk.address, region, session_timeout=2.0)


@pytest.fixture(params=["zookeeper", "etcd"])
async def region_hubs(
    pki: Pki, issuer: TokenIssuer, region: str, request: pytest.FixtureRequest
) -> AsyncIterator[Region]:
    store = _store_of(request, region)
    async with store() as admin:
        # alice may use the topics of tenant acme, and no other.
        rule = AclRule("alice", ALL, name="acme/", pattern=PatternType.PREFIX)
        await admin.acls.write_acl("alice", AclEntry((rule,), source="test"), NEW_VERSION)
        hubs: list[Hub] = []
        configs = (secure_config(pki, issuer) for _ in range(2))
        async with running_hubs(hubs, configs, store):
            yield Region(pki, issuer, region, hubs, admin)


def owned(region: Region, topic: str) -> TopicConfig:
    for hub in region.hubs:
        got = hub.topics.topics.get(topic)
        if got is not None:
            return got.config
    raise AssertionError(f"no hub serves {topic!r}")


async def test_a_namespace_policy_applies_to_its_new_topics(region_hubs: Region) -> None:
    r = region_hubs
    policy = NamespacePolicy(topics=TopicConfig(retention_ms=90_000, max_message_size=2048))
    version = await r.admin.namespaces.write_namespace("acme/web", policy, NEW_VERSION)
    # The topic's own configuration over the namespace's.
    own = TopicConfig(max_message_size=8192)
    await r.admin.topics.write_topic_config("acme/web/big", own, NEW_VERSION)
    async with r.client() as client:
        await client.publish("acme/web/a", b"x")  # (the hubs read policies as they start)
        assert owned(r, "acme/web/a").max_message_size == 2048
        assert owned(r, "acme/web/a").retention_ms == 90_000
        with pytest.raises(MessageTooLargeError):
            await client.publish("acme/web/a", b"x" * 4000)
        await client.publish("acme/web/big", b"x" * 4000)
        big = owned(r, "acme/web/big")
        assert (big.max_message_size, big.retention_ms) == (8192, 90_000)
        # Other namespaces keep the region's defaults.
        await client.publish("acme/jobs/a", b"x" * 4000)
        assert owned(r, "acme/jobs/a").retention_ms != 90_000
        # A change reaches the hubs without a restart, for topics claimed after it.
        smaller = NamespacePolicy(topics=TopicConfig(max_message_size=1024))
        await r.admin.namespaces.write_namespace("acme/web", smaller, version)
        await eventually(lambda: _all_read(r, "acme/web", smaller))
        await client.publish("acme/web/b", b"x")
        assert owned(r, "acme/web/b").max_message_size == 1024
        with pytest.raises(MessageTooLargeError):
            await client.publish("acme/web/b", b"x" * 1500)


async def _all_read(r: Region, name: str, policy: NamespacePolicy) -> bool:
    return all(hub.topics.namespaces.policies.get(name) == policy for hub in r.hubs)


async def test_the_topic_quota_holds_across_hubs(region_hubs: Region) -> None:
    r = region_hubs
    limit = 5
    policy = NamespacePolicy(max_topics=limit)
    await r.admin.namespaces.write_namespace("acme/q", policy, NEW_VERSION)
    await eventually(lambda: _all_read(r, "acme/q", policy))
    first, second = r.client(r.hubs[0]), r.client(r.hubs[1])
    async with first, second:

        async def create(client: HedwigClient, i: int) -> QuotaExceededError | None:
            try:
                await client.publish(f"acme/q/t{i}", b"m")
            except QuotaExceededError as exc:
                return exc
            return None

        got = await asyncio.gather(*(create((first, second)[i % 2], i) for i in range(16)))
        refused = [e for e in got if e is not None]
        assert len(got) - len(refused) == limit
        assert await r.admin.namespaces.topic_count("acme/q") == limit
        made = [t for t in await r.admin.topics.list_topics() if t.startswith("acme/q/")]
        assert len(made) == limit
        err = refused[0]
        assert (err.namespace, err.quota, err.limit) == ("acme/q", "max_topics", limit)
        assert not err.retriable and "max_topics" in str(err) and "acme/q" in str(err)
        # A refusal harms nothing: publishes and subscriptions past the limit, odd names
        # among them, leave the store's topics and the count as they were.
        before = (
            await r.admin.topics.list_topics(),
            await r.admin.namespaces.topic_count("acme/q"),
        )
        for name in ("acme/q/x", "acme/q/../y", "acme/q/ü z", "acme/q/" + "z" * 240):
            with pytest.raises(QuotaExceededError):
                await first.publish(name, b"m")
            with pytest.raises(QuotaExceededError):
                await second.subscribe(name, "s")
        after = (await r.admin.topics.list_topics(), await r.admin.namespaces.topic_count("acme/q"))
        assert after == before
        # Topics that exist are served at the limit; a deleted one frees its place.
        kept = made[0]
        await first.publish(kept, b"again")
        await first.delete_topic(made[1], force=True)
        assert await r.admin.namespaces.topic_count("acme/q") == limit - 1
        await second.publish("acme/q/late", b"m")
        with pytest.raises(QuotaExceededError):
            await first.publish("acme/q/later", b"m")
        # Other namespaces are not held by it.
        await first.publish("acme/other/t", b"m")


async def test_a_namespace_without_auto_create_refuses_new_topics(region_hubs: Region) -> None:
    r = region_hubs
    policy = NamespacePolicy(auto_create=False)
    await r.admin.namespaces.write_namespace("acme/fixed", policy, NEW_VERSION)
    await r.admin.topics.write_topic_config("acme/fixed/made", TopicConfig(), NEW_VERSION)
    await eventually(lambda: _all_read(r, "acme/fixed", policy))
    async with r.client() as client:
        with pytest.raises(NoSuchTopicError, match="auto_create"):
            await client.publish("acme/fixed/new", b"m")
        await client.publish("acme/fixed/made", b"m")
    assert not await r.admin.topics.topic_exists("acme/fixed/new")


async def test_the_subscription_quota_holds_at_the_owner(region_hubs: Region) -> None:
    r = region_hubs
    limit = 3
    policy = NamespacePolicy(max_subscriptions=limit)
    await r.admin.namespaces.write_namespace("acme/s", policy, NEW_VERSION)
    await eventually(lambda: _all_read(r, "acme/s", policy))
    first, second = r.client(r.hubs[0]), r.client(r.hubs[1])
    async with first, second:
        await first.publish("acme/s/t", b"m")

        async def subscribe(client: HedwigClient, i: int) -> QuotaExceededError | None:
            try:
                await client.subscribe("acme/s/t", f"s{i}")
            except QuotaExceededError as exc:
                return exc
            return None

        got = await asyncio.gather(*(subscribe((first, second)[i % 2], i) for i in range(8)))
        refused = [e for e in got if e is not None]
        assert len(got) - len(refused) == limit
        assert len(await r.admin.subscriptions.read_subscriptions("acme/s/t")) == limit
        err = refused[0]
        assert (err.namespace, err.quota, err.limit) == ("acme/s", "max_subscriptions", limit)
        assert "topic 'acme/s/t' holds 3 subscriptions" in str(err) and not err.retriable
        # Another topic of the namespace has its own three.
        await second.subscribe("acme/s/u", "s0")
