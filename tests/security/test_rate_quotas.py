"""Publish rate quotas on two secured hubs (TLS, tokens, ACLs) on a real ZooKeeper: a
namespace's quota holds over both hubs together. Its topics, one on each hub, published to flat
out from two clients, get the namespace's rate acknowledged (within 10 %, past the first load
reports), and every acknowledged message reads back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from hedwig.client import HedwigClient
from hedwig.devcluster.zookeeper import ZooKeeperServer
from hedwig.hub import Hub
from hedwig.metadata import NEW_VERSION
from hedwig.metadata.acls import AclEntry, AclRule, Operation, PatternType
from hedwig.metadata.records.namespaces import NamespacePolicy
from hedwig.metadata.zookeeper import ZkMetadataStore
from hedwig.protocol import MoveKind
from hedwig.security import ClientSecurity
from tests.memory_region import stored
from tests.security.conftest import FAST_RETRY, running_hubs, secure_config
from tests.security.fixtures import Pki, TokenIssuer
from tests.security.test_namespace_hubs import Region, _all_read
from tests.test_quotas_memory import flat_out
from tests.waiting import eventually

pytestmark = pytest.mark.integration

RATE = 300


@pytest.fixture
async def region_hubs(
    pki: Pki, issuer: TokenIssuer, region: str, zk_server: ZooKeeperServer
) -> AsyncIterator[Region]:
    def store() -> ZkMetadataStore:
        return ZkMetadataStore(zk_server.address, region, session_timeout=2.0)

    async with store() as admin:
        rule = AclRule("alice", frozenset(Operation), name="acme/", pattern=PatternType.PREFIX)
        await admin.acls.write_acl("alice", AclEntry((rule,), source="test"), NEW_VERSION)
        hubs: list[Hub] = []
        # Load reports every second: the hubs learn soon who shares a namespace (and a report
        # counts for three intervals: on a loaded machine, half a second's went stale).
        configs = (secure_config(pki, issuer, load_report_interval_s=1.0) for _ in range(2))
        async with running_hubs(hubs, configs, store):
            yield Region(pki, issuer, region, hubs, admin)


def client(r: Region) -> HedwigClient:
    """alice's client, in batches of ten (a batch is held what it is worth: small ones let
    five seconds measure the rate to a few per cent)."""
    security = ClientSecurity.build(tls_ca=r.pki.path("hub-ca.crt"), token=r.issuer.token("alice"))
    return HedwigClient(
        [h.address for h in r.hubs], security=security, retry=FAST_RETRY, max_batch_messages=10
    )


async def test_a_namespace_quota_holds_across_two_secured_hubs(region_hubs: Region) -> None:
    r = region_hubs
    policy = NamespacePolicy(max_publish_msgs_per_s=RATE)
    await r.admin.namespaces.write_namespace("acme/rate", policy, NEW_VERSION)
    await eventually(lambda: _all_read(r, "acme/rate", policy))
    topics = ("acme/rate/a", "acme/rate/b")
    async with client(r) as one, client(r) as two:
        clients = [one, two]
        for c, topic in zip(clients, topics, strict=True):
            await c.publish(topic, b"first")
        # One topic on each hub: the namespace's publishes served by both.
        a_owner = next(h for h in r.hubs if topics[0] in h.topics.topics)
        b_owner = next(h for h in r.hubs if topics[1] in h.topics.topics)
        if a_owner is b_owner:
            other = next(h for h in r.hubs if h is not a_owner)
            await a_owner.requests.moves.move(topics[1], other.address, MoveKind.REQUESTED, "test")
            await clients[1].publish(topics[1], b"moved")
        sent: dict[str, list[bytes]] = {t: [b"first"] for t in topics}
        if a_owner is b_owner:
            sent[topics[1]].append(b"moved")
        # Published to until each hub sees the other serving the namespace (from their load
        # reports), and holds it to half the quota; then five seconds measured.
        learned = asyncio.Event()
        runs = [
            asyncio.create_task(flat_out(c, t, 5.0, sent[t], warm_s=1.0, started=learned))
            for c, t in zip(clients, topics, strict=True)
        ]

        async def both_share() -> bool:
            return [h.quotas.sharing.get("acme/rate") for h in r.hubs] == [1, 1]

        await eventually(both_share, timeout=30)
        learned.set()
        await asyncio.gather(*runs)
        acked = sum(run.result()[0] for run in runs)
        assert 0.9 * RATE * 5 <= acked <= 1.1 * RATE * 5, acked
        for run in runs:
            await asyncio.gather(*run.result()[1])
        for topic in topics:
            assert [m.value for m in await stored(clients[0], topic)] == sent[topic]
        assert {h.address for h in r.hubs for t in topics if t in h.topics.topics} == {
            h.address for h in r.hubs
        }
