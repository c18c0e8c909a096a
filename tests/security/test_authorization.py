"""ACLs on secured hubs: what a rule allows, default deny, create, revocation within seconds,
re-authentication, cluster admin for /drain, and the client's errors."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from hedwig.errors import AuthenticationError, ForbiddenError, TlsError
from hedwig.metadata.acls import AclEntry, AclRule, Operation, PatternType, ResourceType
from hedwig.metadata.records import ANY_VERSION, NEW_VERSION
from hedwig.security import ClientSecurity
from tests.security.conftest import SecureRegion

ORDERS = AclRule(
    principal="alice",
    operations=frozenset({Operation.PUBLISH, Operation.SUBSCRIBE, Operation.DESCRIBE}),
    name="orders.",
    pattern=PatternType.PREFIX,
)


async def grant(region: SecureRegion, name: str, *rules: AclRule) -> None:
    store = region.store()
    await store.start()
    await store.acls.write_acl(name, AclEntry(rules, source="test"), ANY_VERSION)


async def revoke(region: SecureRegion, name: str) -> None:
    store = region.store()
    await store.start()
    await store.acls.delete_acl(name, ANY_VERSION)


async def settled(region: SecureRegion) -> None:
    """Let every hub's ACL watch fire and reload (in memory: a few loop turns)."""
    for _ in range(20):
        await asyncio.sleep(0.01)


async def test_a_rule_allows_its_operations_on_its_topics_only(secure: SecureRegion) -> None:
    await grant(
        secure,
        "admin-topics",
        AclRule("admin", frozenset(Operation), name="", pattern=PatternType.PREFIX),
    )
    async with secure.client(security=secure.security(token_for="admin")) as admin:
        await admin.publish("orders.eu", b"first")  # the topic exists now
        await admin.publish("payments", b"first")
    await grant(secure, "alice", ORDERS)
    await settled(secure)
    async with secure.client(security=secure.security(cert="alice")) as alice:
        await alice.publish("orders.eu", b"ok")
        assert (await alice.topic_info("orders.eu")).last_seq == 2
        with pytest.raises(ForbiddenError, match="alice may not publish topic 'payments'"):
            await alice.publish("payments", b"no")
        with pytest.raises(ForbiddenError, match="read"):
            await alice.read("orders.eu", 0)
        # Publishing to a topic that does not exist would create it: that needs create.
        with pytest.raises(ForbiddenError, match="create"):
            await alice.publish("orders.new", b"no")
    await grant(
        secure,
        "alice",
        ORDERS,
        AclRule("alice", frozenset({Operation.CREATE}), name="orders.", pattern=PatternType.PREFIX),
    )
    await settled(secure)
    async with secure.client(security=secure.security(cert="alice")) as alice:
        await alice.publish("orders.new", b"created")


async def test_a_deny_rule_wins_and_patterns_match_principals(secure: SecureRegion) -> None:
    everyone = AclRule(
        "system:serviceaccount:shop:*",
        frozenset({Operation.CREATE, Operation.PUBLISH}),
        name="",
        pattern=PatternType.PREFIX,
    )
    deny = AclRule(
        "system:serviceaccount:shop:intruder",
        frozenset({Operation.PUBLISH}),
        name="secret",
        pattern=PatternType.PREFIX,
        effect=__import__("hedwig.metadata.acls", fromlist=["Effect"]).Effect.DENY,
    )
    await grant(secure, "shop", everyone, deny)
    await settled(secure)
    sa = secure.security(token_for="system:serviceaccount:shop:intruder")
    async with secure.client(security=sa) as c:
        await c.publish("public", b"ok")
        with pytest.raises(ForbiddenError):
            await c.publish("secret.plans", b"no")


async def test_revoking_closes_subscriptions_and_refuses_publishes_within_seconds(
    secure: SecureRegion,
) -> None:
    await grant(
        secure,
        "alice",
        ORDERS,
        AclRule("alice", frozenset({Operation.CREATE}), name="orders.", pattern=PatternType.PREFIX),
    )
    await settled(secure)
    async with secure.client(security=secure.security(token_for="alice")) as alice:
        sub = await alice.subscribe("orders.live", "reader")
        await alice.publish("orders.live", b"before")
        assert (await sub.next(5)).value == b"before"
        started = time.monotonic()
        await revoke(secure, "alice")
        with pytest.raises(ForbiddenError, match="no longer subscribe"):
            await sub.next(5)
        with pytest.raises(ForbiddenError):
            await alice.publish("orders.live", b"after")
        assert time.monotonic() - started < 3


async def test_bad_credentials_fail_at_once_with_a_clear_error(secure: SecureRegion) -> None:
    expired = ClientSecurity.build(
        tls_ca=secure.pki.path("hub-ca.crt"),
        token=secure.issuer.token("alice", expires_in_s=-120),
    )
    async with secure.client(security=expired) as c:
        started = time.monotonic()
        with pytest.raises(AuthenticationError, match="expired"):
            await c.publish("orders.x", b"no")
        assert time.monotonic() - started < 2  # not retried
    foreign = ClientSecurity.build(
        tls_ca=secure.pki.path("hub-ca.crt"),
        cert=secure.pki.path("foreign-alice.crt"),
        key=secure.pki.path("foreign-alice.key"),
    )
    async with secure.client(security=foreign) as c:
        with pytest.raises(TlsError, match="certificate"):
            await c.publish("orders.x", b"no")
    wrong_ca = ClientSecurity.build(tls_ca=secure.pki.path("client-ca.crt"), token="x")
    async with secure.client(security=wrong_ca) as c:
        with pytest.raises(TlsError, match="certificate verify failed"):
            await c.publish("orders.x", b"no")
    async with secure.client() as plaintext:
        with pytest.raises(AuthenticationError, match="TLS connections only"):
            await plaintext.publish("orders.x", b"no")


async def test_drain_needs_loopback_or_a_cluster_admin(secure: SecureRegion) -> None:
    hub = secure.hubs[0]
    assert await hub._drain_allowed("127.0.0.1", None)
    assert not await hub._drain_allowed("10.1.2.3", None)
    assert await hub._drain_allowed("10.1.2.3", secure.issuer.token("admin"))
    assert not await hub._drain_allowed("10.1.2.3", secure.issuer.token("alice"))
    await grant(
        secure, "ops", AclRule("alice", frozenset({Operation.ADMIN}), resource=ResourceType.CLUSTER)
    )
    await settled(secure)
    assert await hub._drain_allowed("10.1.2.3", secure.issuer.token("alice"))


async def test_acl_entries_round_trip_in_the_store(secure: SecureRegion) -> None:
    store = secure.store()
    await store.start()
    entry = AclEntry((ORDERS,), source="HedwigUser shop/alice")
    await store.acls.write_acl("shop/alice", entry, NEW_VERSION)
    got = await store.acls.read_acl("shop/alice")
    assert got is not None and got.value == entry
    assert AclEntry.from_json(entry.to_json()) == entry


async def test_clients_re_authenticate_before_their_token_expires(secure: SecureRegion) -> None:
    class FreshTokens:
        """A projected token: a new one, valid 4 s, each time it is read."""

        def __init__(self) -> None:
            self.reads = 0

        def token(self) -> str:
            self.reads += 1
            return secure.issuer.token("admin", expires_in_s=4)

    fresh = FreshTokens()
    security = ClientSecurity(tls=secure.security().tls, credentials=fresh)
    async with secure.client(security=security) as c:
        await c.publish("renewed", b"first")
        (conn,) = [x for h in secure.hubs for x in h.front.connections if "renewed" in x.topics]
        first = conn.principal.expires_ms
        await asyncio.sleep(4.5)  # re-authenticated at four fifths of the lifetime
        assert fresh.reads >= 2
        assert conn.principal.expires_ms > first
        await c.publish("renewed", b"second")  # the same connection, still welcome
        assert not conn.closed


def test_a_pods_projected_token_is_found_without_being_named(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("header.claims.signature\n")
    found = ClientSecurity.from_env({}, pod_token_file=str(token))
    assert found.credentials is not None and found.credentials.token() == "header.claims.signature"
    assert ClientSecurity.from_env({}, pod_token_file=str(tmp_path / "none")).credentials is None
    named = ClientSecurity.from_env({"HEDWIG_TOKEN": "x.y.z"}, pod_token_file=str(token))
    assert named.credentials is not None and named.credentials.token() == "x.y.z"


async def test_a_batch_is_authorized_as_single_publishes_are(secure: SecureRegion) -> None:
    """``publish_batch`` goes through the same admission: allowed where a rule allows
    publishing, refused (the whole call, nothing stored) where none does."""
    await grant(
        secure,
        "admin-topics",
        AclRule("admin", frozenset(Operation), name="", pattern=PatternType.PREFIX),
    )
    async with secure.client(security=secure.security(token_for="admin")) as admin:
        await admin.publish("orders.batch", b"first")
        await admin.publish("payments", b"first")
    await grant(secure, "alice", ORDERS)
    await settled(secure)
    async with secure.client(security=secure.security(cert="alice")) as alice:
        result = await alice.publish_batch("orders.batch", [b"a", b"b", b"c"])
        assert [r.seq for r in result] == [2, 3, 4]
        with pytest.raises(ForbiddenError, match="alice may not publish topic 'payments'"):
            await alice.publish_batch("payments", [b"no", b"no"])
    async with secure.client(security=secure.security(token_for="admin")) as admin:
        assert (await admin.topic_info("payments")).last_seq == 1
