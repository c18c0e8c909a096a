"""ACLs on secured hubs: what a rule allows, default deny, create, revocation within seconds,
re-authentication, cluster admin for /drain, and the client's errors."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from hedwig.errors import AuthenticationError, ForbiddenError, NoSuchTopicError, TlsError
from hedwig.hub import Hub, HubConfig
from hedwig.hub.process.http import DrainCaller
from hedwig.metadata.acls import AclEntry, AclRule, Operation, PatternType, ResourceType
from hedwig.metadata.memory import MemoryBackend, MemoryMetadataStore
from hedwig.metadata.records import ANY_VERSION, NEW_VERSION
from hedwig.security import ClientSecurity
from hedwig.settings import ConnectionSettings, StorageSettings
from tests.cluster_helpers import hedwig
from tests.security.conftest import SecureRegion, consumed_and_closed, secure_config
from tests.security.fixtures import Pki, TokenIssuer
from tests.waiting import until

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


async def alice_may_create_orders(secure: SecureRegion) -> None:
    """Alice granted her orders and, besides, creating any topic under ``orders.``; every
    hub has the rules."""
    await grant(
        secure,
        "alice",
        ORDERS,
        AclRule("alice", frozenset({Operation.CREATE}), name="orders.", pattern=PatternType.PREFIX),
    )
    await settled(secure)


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
    await alice_may_create_orders(secure)
    async with secure.client(security=secure.security(cert="alice")) as alice:
        await alice.publish("orders.new", b"created")


async def test_topic_lifecycle_requests_need_their_operations(secure: SecureRegion) -> None:
    """Deleting a topic destroys its data (admin on the topic), resetting a subscription moves
    its consume mark (subscribe), describing lists its subscriptions (describe); a user allowed
    to publish and subscribe can do none of what it was not given, and nothing is changed by a
    refused request."""
    async with secure.client(security=secure.security(token_for="admin")) as admin:
        await consumed_and_closed(admin, "orders.lifecycle", "reader", 3, 3)
        await admin.publish("orders.doomed", b"x")
    publisher = AclRule(
        "alice",
        frozenset({Operation.PUBLISH, Operation.SUBSCRIBE}),
        name="orders.",
        pattern=PatternType.PREFIX,
    )
    await grant(secure, "alice", publisher)
    await settled(secure)
    async with secure.client(security=secure.security(cert="alice")) as alice:
        with pytest.raises(ForbiddenError, match=r"alice may not admin topic 'orders\.doomed'"):
            await alice.delete_topic("orders.doomed", force=True)
        with pytest.raises(ForbiddenError, match="alice may not describe topic"):
            await alice.describe_topic("orders.lifecycle")
        with pytest.raises(ForbiddenError, match="alice may not admin topic"):
            await alice.move_topic("orders.lifecycle")
        # Resetting needs subscribe, as consuming does, on a subscription of one's own
        # (``hedwig.hub.front.owners``): alice may rewind hers, not the admin's reader.
        with pytest.raises(ForbiddenError, match="belongs to another principal"):
            await alice.reset_subscription("orders.lifecycle", "reader")
        await (await alice.subscribe("orders.lifecycle", "alices")).close()
        assert await alice.reset_subscription("orders.lifecycle", "alices") == 0
    await grant(
        secure,
        "alice",
        publisher,
        AclRule(
            "alice",
            frozenset({Operation.ADMIN, Operation.DESCRIBE}),
            name="orders.doomed",
        ),
    )
    await settled(secure)
    async with secure.client(security=secure.security(cert="alice")) as alice:
        with pytest.raises(ForbiddenError, match="alice may not describe topic"):
            await alice.describe_topic("orders.lifecycle")  # a literal rule: that topic only
        assert (await alice.describe_topic("orders.doomed")).last_seq == 1
        await alice.delete_topic("orders.doomed", force=True)
    async with secure.client(security=secure.security(token_for="admin")) as admin:
        described = await admin.describe_topic("orders.lifecycle")
        assert described.last_seq == 3  # untouched by the refusals
        with pytest.raises(NoSuchTopicError):
            await admin.describe_topic("orders.doomed")
    denied = sum(
        h.metrics.auth_denied.labels("delete_topic", "forbidden")._value.get() for h in secure.hubs
    )
    assert denied >= 1


async def test_every_refusal_is_an_audit_line_and_a_count(
    secure: SecureRegion, caplog: pytest.LogCaptureFixture
) -> None:
    """A refusal is written as one JSON line to ``hedwig.audit`` naming who, what, which topic,
    why, from where and on which listener, and counted in ``hedwig_auth_denied_total``."""
    await grant(secure, "alice", ORDERS)
    await settled(secure)
    caplog.set_level(logging.WARNING, logger="hedwig.audit")
    async with secure.client(security=secure.security(cert="alice")) as alice:
        with pytest.raises(ForbiddenError):
            await alice.publish("payments", b"no")
    async with secure.client(security=secure.security()) as anonymous:
        with pytest.raises(AuthenticationError):
            await anonymous.publish("orders.eu", b"no")
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "hedwig.audit"]
    forbidden = [x for x in lines if x["reason"] == "forbidden"]
    assert forbidden, lines
    assert {k: forbidden[0][k] for k in ("event", "op", "principal", "topic", "listener")} == {
        "event": "denied",
        "op": "publish",
        "principal": "alice",
        "topic": "payments",
        "listener": "client",
    }
    assert forbidden[0]["peer"].startswith("127.0.0.1:")
    assert "alice may not publish topic 'payments'" in forbidden[0]["message"]
    assert any(x["reason"] == "unauthenticated" and x["op"] == "publish" for x in lines), lines
    counted = {
        reason: sum(
            h.metrics.auth_denied.labels("publish", reason)._value.get() for h in secure.hubs
        )
        for reason in ("forbidden", "unauthenticated")
    }
    assert counted["forbidden"] >= 1 and counted["unauthenticated"] >= 1, counted


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
    await alice_may_create_orders(secure)
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


async def test_drain_needs_the_local_socket_or_a_cluster_admin(secure: SecureRegion) -> None:
    """No peer address is enough: a service mesh's sidecar forwards callers from anywhere to
    the hub from 127.0.0.6 (Istio) or 127.0.0.1 (proxies that dial the app on localhost)."""
    hub = secure.hubs[0]
    assert await hub.guard.drain_allowed(DrainCaller(local_socket=True))
    for host in ("127.0.0.6", "127.0.0.1", "::1", "10.1.2.3"):
        assert not await hub.guard.drain_allowed(DrainCaller(False, host)), host
    assert await hub.guard.drain_allowed(
        DrainCaller(False, "10.1.2.3", secure.issuer.token("admin"))
    )
    assert await hub.guard.drain_allowed(
        DrainCaller(False, "127.0.0.6", secure.issuer.token("admin"))
    )
    alice = secure.issuer.token("alice")
    assert not await hub.guard.drain_allowed(DrainCaller(False, "10.1.2.3", alice))
    await grant(
        secure, "ops", AclRule("alice", frozenset({Operation.ADMIN}), resource=ResourceType.CLUSTER)
    )
    await settled(secure)
    assert await hub.guard.drain_allowed(DrainCaller(False, "10.1.2.3", alice))
    # The token's principal is its issuer's name for it: an issuer the hubs trust with its
    # default prefix cannot name the super-user ``admin``.
    prefixed = TokenIssuer()
    try:
        config = secure_config(
            secure.pki, prefixed, token_issuers=prefixed.issuers_json(prefix=None)
        )
        other = Hub(config, store=secure.store())
        assert not await other.guard.drain_allowed(
            DrainCaller(False, "10.1.2.3", prefixed.token("admin"))
        )
    finally:
        prefixed.close()
        shutil.rmtree(config.storage.data_dir, ignore_errors=True)


async def test_a_bare_hub_drains_for_loopback_alone(tmp_path: Path) -> None:
    """Security off, the client port serves RELEASE_TOPIC to anyone: /drain stays open to
    127.0.0.1 and ::1 exactly (``hedwig drain`` by default), not to the rest of 127/8."""
    store = MemoryMetadataStore(MemoryBackend(), "mem")
    hub = Hub(
        HubConfig(
            connection=ConnectionSettings(listen="127.0.0.1:0"),
            storage=StorageSettings(data_dir=str(tmp_path)),
        ),
        store=store,
    )
    assert await hub.guard.drain_allowed(DrainCaller(False, "127.0.0.1"))
    assert await hub.guard.drain_allowed(DrainCaller(False, "::1"))
    assert not await hub.guard.drain_allowed(DrainCaller(False, "127.0.0.6"))
    assert not await hub.guard.drain_allowed(DrainCaller(False, "10.1.2.3"))


def _outward_address() -> str | None:
    """This machine's address on its default route (not loopback), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.254", 9))  # nothing is sent: it only picks a route
        except OSError:
            return None
        host = str(probe.getsockname()[0])
    return None if host.startswith("127.") else host


def _http(url: str, *, post: bool = False, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, method="POST" if post else "GET", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def test_http_drain_from_another_machine_needs_a_cluster_admin_token(
    pki: Pki, issuer: TokenIssuer, tmp_path: Path
) -> None:
    """The HTTP port listening on every interface: from this machine's outward address,
    ``POST /drain`` is 403 without a token and with a token that may not administer the
    cluster, and drains with a cluster admin's; ``/metrics`` and ``/healthz`` stay open;
    from loopback with no token it is 403 too (what a mesh's sidecar forwards comes from
    there), and through the hub's socket (a preStop hook's ``hedwig drain --socket``) draining
    needs nothing."""
    outward = _outward_address()
    if outward is None:
        pytest.skip("no address but loopback")
    region = SecureRegion(pki, issuer, MemoryBackend())
    drain_socket = str(tmp_path / "drain.sock")
    configs = [
        secure_config(
            pki, issuer, metrics_host="0.0.0.0", metrics_port=0, drain_socket=drain_socket
        ),
        None,
    ]
    try:
        for config in configs:
            hub = Hub(config or secure_config(pki, issuer), store=region.store())
            await hub.start()
            region.hubs.append(hub)
        async with region.client(security=region.security(token_for="admin")) as admin:
            await admin.publish("drained", b"x")
        http = region.hubs[0]._http
        assert http is not None
        remote = f"http://{outward}:{http.port}"
        local = f"http://127.0.0.1:{http.port}"

        def calls() -> list[tuple[int, str]]:
            return [
                _http(remote + "/drain", post=True),
                _http(remote + "/drain", post=True, token=issuer.token("alice")),
                _http(remote + "/metrics"),
                _http(remote + "/healthz"),
                _http(local + "/drain", post=True),
                _http(remote + "/drain", post=True, token=issuer.token("admin")),
            ]

        anonymous, alice, metrics, health, loopback, admin_drain = await asyncio.to_thread(calls)
        assert anonymous == (403, "draining needs a local caller or an admin\n")
        assert alice[0] == 403
        assert metrics[0] == 200 and "hedwig_auth_denied_total" in metrics[1]
        assert health == (200, "ok\n")
        assert loopback[0] == 403, loopback
        assert admin_drain[0] == 200 and admin_drain[1].startswith("released"), admin_drain
        # The socket is this user's alone, and drains with nothing more.
        assert os.stat(drain_socket).st_mode & 0o777 == 0o600
        done = await asyncio.to_thread(hedwig, "drain", "--socket", drain_socket)
        assert done.returncode == 0 and done.stdout.startswith("released"), done.stderr
    finally:
        for hub in region.hubs:
            await hub.stop()
            shutil.rmtree(hub.config.storage.data_dir, ignore_errors=True)


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
        (conn,) = [
            x for h in secure.hubs for x in h.front.connections if "renewed" in (x.topics or ())
        ]
        first = conn.principal.expires_ms
        await until(  # re-authenticated at four fifths of the lifetime
            lambda: fresh.reads >= 2 and conn.principal.expires_ms > first,
            10,
            what="a fresh token taken and given",
        )
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
