"""Secured pools and HedwigUsers: Secrets with CAs and certificates, the hubs' settings, ACL
entries written and removed, and the operator's own trust."""

from __future__ import annotations

import base64
import datetime as dt
import json
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID
from hedwig_operator.builders import build_configmap, build_statefulset
from hedwig_operator.security import (
    PoolTrust,
    delete_user,
    ensure_pool_security,
    reconcile_user,
)
from hedwig_operator.specs import SpecError, parse_pool, parse_user

from hedwig.metadata.acls import Operation, PatternType
from hedwig.metadata.memory import MemoryMetadataStore

from .fakes import World, pool_body, ready_condition

SECURE = {"region": "r1", "security": {"enabled": True, "superUsers": ["ops:alice"]}}


def user_body(name: str = "orders-app", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "hedwig.io/v1alpha1",
        "kind": "HedwigUser",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": 1},
        "spec": {"pool": "pool", **spec},
    }


SA_USER = user_body(
    authentication={"type": "serviceAccount", "serviceAccount": "orders"},
    authorization={
        "acls": [
            {
                "resource": {"name": "orders.", "patternType": "prefix"},
                "operations": ["publish", "create"],
            },
            {"resource": {"type": "cluster"}, "operations": ["admin"], "effect": "deny"},
        ]
    },
)


def secret(world: World, name: str) -> dict[str, bytes]:
    body = world.kube.objects[("Secret", "ns", name)]
    return {k: base64.b64decode(v) for k, v in body["data"].items()}


def test_users_name_their_principal_by_how_they_authenticate() -> None:
    sa = parse_user(SA_USER)
    assert sa.principal == "system:serviceaccount:ns:orders"
    assert sa.acl_name == "ns/orders-app"
    assert sa.rules[0].pattern is PatternType.PREFIX
    assert sa.rules[0].operations == {Operation.PUBLISH, Operation.CREATE}
    tls = parse_user(user_body("bob", authentication={"type": "tls"}))
    assert tls.principal == "user:ns:bob" and tls.rules == ()
    with pytest.raises(SpecError, match="serviceAccount"):
        parse_user(user_body(authentication={"type": "serviceAccount"}))
    with pytest.raises(SpecError, match="not a valid Operation"):
        parse_user(
            user_body(
                authentication={"type": "tls"},
                authorization={"acls": [{"operations": ["fly"]}]},
            )
        )


def test_a_secured_pool_runs_hubs_with_tls_tokens_acls_and_an_internal_listener() -> None:
    pool = parse_pool(pool_body(spec=SECURE))
    env = build_configmap(pool, "system:serviceaccount:hedwig:hedwig-operator")["data"]
    assert env["HEDWIG_AUTHENTICATE"] == env["HEDWIG_AUTHORIZE"] == "true"
    assert env["HEDWIG_SUPER_USERS"] == "system:serviceaccount:hedwig:hedwig-operator,ops:alice"
    assert env["HEDWIG_INTERNAL_LISTEN"] == "0.0.0.0:4081"
    (issuer,) = json.loads(env["HEDWIG_TOKEN_ISSUERS"])
    assert issuer["issuer"] == "https://kubernetes.default.svc.cluster.local"
    assert issuer["audience"] == "hedwig"
    # The cluster's ServiceAccounts are principals by their own names (no issuer prefix).
    assert issuer["principal_prefix"] == ""
    pod = build_statefulset(pool)["spec"]["template"]["spec"]
    (hub,) = pod["containers"]
    assert {"name": "internal", "containerPort": 4081, "protocol": "TCP"} in hub["ports"]
    assert any(e["name"] == "HEDWIG_INTERNAL_ADVERTISE" for e in hub["env"])
    assert {v["name"] for v in pod["volumes"]} >= {"hub-tls", "zookeeper-digest"}
    plain = build_configmap(parse_pool(pool_body(spec={"region": "r1"})))["data"]
    assert "HEDWIG_AUTHENTICATE" not in plain


async def test_pool_secrets_are_made_once_and_the_hub_certificate_renewed() -> None:
    w = await World().start()
    pool = parse_pool(pool_body(spec=SECURE))
    trust = w.trust
    await ensure_pool_security(w.kube, pool, trust)
    names = {k[2] for k in w.kube.objects if k[0] == "Secret"}
    assert names == {"pool-ca", "pool-clients-ca", "pool-hub-tls", "pool-zookeeper"}
    hub = secret(w, "pool-hub-tls")
    cert = x509.load_pem_x509_certificate(hub["tls.crt"])
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "*.pool-headless.ns.svc" in sans.get_values_for_type(x509.DNSName)
    ca_cert = w.kube.objects[("ConfigMap", "ns", "pool-ca-cert")]["data"]["ca.crt"]
    assert ca_cert.encode() == secret(w, "pool-ca")["tls.crt"]  # the certificate, no key
    secrets = [m for m in w.kube.applied if m["kind"] == "Secret"]
    await ensure_pool_security(w.kube, pool, trust)
    assert [m for m in w.kube.applied if m["kind"] == "Secret"] == secrets  # nothing new
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=70)  # inside the renewal window
    await ensure_pool_security(w.kube, pool, trust, now=later)
    assert secret(w, "pool-hub-tls")["tls.crt"] != hub["tls.crt"]
    assert secret(w, "pool-ca") == secret(w, "pool-ca")  # the CA is kept
    assert trust.security_for("pool-0.pool-headless.ns.svc:4080") is not None
    assert trust.security_for("other-0.other-headless.ns.svc:4080") is None
    assert trust.digests[("zk:2181", "r1")].startswith("hedwig:")


async def test_a_user_becomes_an_acl_entry_and_goes_with_its_resource() -> None:
    w = await World().start()
    w.kube.put(pool_body(spec=SECURE))
    trust = w.trust
    outcome = await reconcile_user(w.kube, w.connections, trust, SA_USER)
    (cond,) = outcome.status["conditions"]
    assert (cond["status"], cond["reason"]) == ("True", "Ready")
    assert outcome.status["principal"] == "system:serviceaccount:ns:orders"
    got = await w.operator_store.acls.read_acl("ns/orders-app")
    assert got is not None and got.value == parse_user(SA_USER).acl_entry
    await delete_user(w.kube, w.connections, trust, SA_USER)
    assert await w.operator_store.acls.read_acl("ns/orders-app") is None
    await delete_user(w.kube, w.connections, trust, SA_USER)  # gone already: fine


async def test_a_tls_user_gets_a_certificate_from_the_clients_ca() -> None:
    w = await World().start()
    w.kube.put(pool_body(spec=SECURE))
    body = user_body("bob", authentication={"type": "tls"})
    outcome = await reconcile_user(w.kube, w.connections, w.trust, body)
    assert outcome.status["secret"] == "bob-user-tls"
    issued = secret(w, "bob-user-tls")
    cert = x509.load_pem_x509_certificate(issued["tls.crt"])
    cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    assert cn == "user:ns:bob"
    clients_ca = x509.load_pem_x509_certificate(secret(w, "pool-clients-ca")["tls.crt"])
    assert cert.issuer == clients_ca.subject
    assert issued["ca.crt"] == secret(w, "pool-ca")["tls.crt"]
    owner = w.kube.objects[("Secret", "ns", "bob-user-tls")]["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("HedwigUser", "bob")


async def test_users_of_missing_or_unsecured_pools_say_so() -> None:
    w = await World().start()
    outcome = await reconcile_user(w.kube, w.connections, w.trust, SA_USER)
    assert outcome.retry and outcome.status["conditions"][0]["reason"] == "PoolNotFound"
    w.kube.put(pool_body(spec={"region": "r1"}))
    outcome = await reconcile_user(w.kube, w.connections, w.trust, SA_USER)
    assert outcome.status["conditions"][0]["reason"] == "NotEnforced"
    tls = await reconcile_user(
        w.kube, w.connections, w.trust, user_body("bob", authentication={"type": "tls"})
    )
    assert tls.status["conditions"][0]["reason"] == "PoolNotSecured"


async def test_concurrent_reconcilers_make_one_ca() -> None:
    import asyncio

    from hedwig_operator.kube import ObjectRef

    from .fakes import FakeKube

    class SlowKube(FakeKube):
        """An API server that takes its time: reconcilers interleave."""

        async def get(self, ref: ObjectRef) -> dict[str, Any] | None:
            await asyncio.sleep(0.01)
            return await super().get(ref)

    kube = SlowKube()
    pool = parse_pool(pool_body(spec=SECURE))
    trust = PoolTrust()
    await asyncio.gather(*(ensure_pool_security(kube, pool, trust) for _ in range(3)))
    cas = [m for m in kube.applied if m["metadata"]["name"] == "pool-ca"]
    assert len(cas) == 1


CERT_MANAGER = {
    "region": "r1",
    "security": {
        "enabled": True,
        "certificateDays": 60,
        "renewBeforeDays": 20,
        "certManager": {"issuerRef": {"name": "hedwig-ca", "kind": "ClusterIssuer"}},
    },
}


async def test_with_cert_manager_the_hubs_certificate_is_a_certificate_resource() -> None:
    """cert-manager issues and renews the hubs' certificate: the operator keeps a Certificate
    with the names and usages of its own, makes no hub CA, and publishes the CA cert-manager
    wrote once the Secret exists; the pods mount that Secret with the clients' CA beside it."""
    w = await World().start()
    pool = parse_pool(pool_body(spec=CERT_MANAGER))
    trust = w.trust
    await ensure_pool_security(w.kube, pool, trust)
    cert = w.kube.objects[("Certificate", "ns", "pool-hub-tls")]
    assert cert["apiVersion"] == "cert-manager.io/v1"
    spec = cert["spec"]
    assert spec["secretName"] == "pool-hub-tls"
    assert spec["issuerRef"] == {
        "name": "hedwig-ca",
        "kind": "ClusterIssuer",
        "group": "cert-manager.io",
    }
    assert "*.pool-headless.ns.svc" in spec["dnsNames"]
    assert {"server auth", "client auth"} <= set(spec["usages"])
    assert (spec["duration"], spec["renewBefore"]) == ("1440h", "480h")
    assert cert["metadata"]["ownerReferences"][0]["kind"] == "HubPool"
    names = {k[2] for k in w.kube.objects if k[0] == "Secret"}
    assert names == {"pool-clients-ca", "pool-zookeeper"}  # no hub CA, nothing issued yet
    assert ("ConfigMap", "ns", "pool-ca-cert") not in w.kube.objects
    assert trust.security_for("pool-0.pool-headless.ns.svc:4080") is None

    # cert-manager's CA issuer writes the Secret: tls.crt, tls.key and its CA as ca.crt.
    from hedwig.security.ca import CertificateAuthority

    ca = CertificateAuthority.create("cert-manager test CA", days=30)
    issued = ca.issue("hub.pool.ns", dns_names=spec["dnsNames"], server=True, client=True, days=30)
    w.kube.put(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {"name": "pool-hub-tls", "namespace": "ns"},
            "data": {
                k: base64.b64encode(v).decode()
                for k, v in (
                    ("tls.crt", issued.cert_pem),
                    ("tls.key", issued.key_pem),
                    ("ca.crt", ca.cert_pem),
                )
            },
        }
    )
    await ensure_pool_security(w.kube, pool, trust)
    published = w.kube.objects[("ConfigMap", "ns", "pool-ca-cert")]["data"]["ca.crt"]
    assert published.encode() == ca.cert_pem
    assert trust.security_for("pool-0.pool-headless.ns.svc:4080") is not None
    assert secret(w, "pool-hub-tls")["tls.crt"] == issued.cert_pem  # never rewritten by us

    pod = build_statefulset(pool)["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "hub-tls"]
    sources = volume["projected"]["sources"]
    assert sources[0]["secret"]["name"] == "pool-hub-tls"
    assert sources[1]["secret"] == {
        "name": "pool-clients-ca",
        "items": [{"key": "tls.crt", "path": "client-ca.crt"}],
    }


def test_a_cert_manager_issuer_must_be_named() -> None:
    bad = {"security": {"enabled": True, "certManager": {"issuerRef": {"kind": "Issuer"}}}}
    with pytest.raises(SpecError, match=r"issuerRef\.name"):
        parse_pool(pool_body(spec={"region": "r1", **bad}))
    worse = {
        "security": {"enabled": True, "certManager": {"issuerRef": {"name": "x", "kind": "Vault"}}}
    }
    with pytest.raises(SpecError, match="Issuer or ClusterIssuer"):
        parse_pool(pool_body(spec={"region": "r1", **worse}))


# ------------------------------------------------------------------ Secrets the operator owns


def foreign_secret(name: str, data: dict[str, bytes], **meta: Any) -> dict[str, Any]:
    """A Secret someone else made in the pool's namespace."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "ns", **meta},
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


@pytest.mark.parametrize("name", ["pool-ca", "pool-clients-ca", "pool-hub-tls", "pool-zookeeper"])
async def test_a_user_named_like_a_pool_secret_never_writes_it(name: str) -> None:
    """A tls HedwigUser named after one of its pool's Secrets gets a Secret of its own: the
    pool's CAs, the hubs' certificate and the digest stay the pool's, and the hubs'
    certificate is still signed by the pool's hub CA afterwards."""
    from hedwig_operator.builders.security import pool_secret_names, user_secret_name

    w = await World().start()
    w.kube.put(pool_body(spec=SECURE))
    pool = parse_pool(pool_body(spec=SECURE))
    trust = w.trust
    await ensure_pool_security(w.kube, pool, trust)
    before = {n: secret(w, n) for n in pool_secret_names(pool)}
    outcome = await reconcile_user(
        w.kube, w.connections, trust, user_body(name, authentication={"type": "tls"})
    )
    assert outcome.status["conditions"][0]["reason"] == "Ready"
    assert outcome.status["secret"] == user_secret_name(name) == f"{name}-user-tls"
    assert {n: secret(w, n) for n in pool_secret_names(pool)} == before
    for n in pool_secret_names(pool):
        (owner,) = w.kube.objects[("Secret", "ns", n)]["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"]) == ("HubPool", "pool-uid")
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=70)  # the hubs' certificate renewed
    await ensure_pool_security(w.kube, pool, trust, now=later)
    hub = x509.load_pem_x509_certificate(secret(w, "pool-hub-tls")["tls.crt"])
    hub_ca = x509.load_pem_x509_certificate(before["pool-ca"]["tls.crt"])
    assert hub.issuer == hub_ca.subject and secret(w, "pool-ca") == before["pool-ca"]


def test_no_user_secret_name_is_a_pool_secret_name() -> None:
    """The names cannot meet whatever the pool's and the user's names are."""
    from hedwig_operator.builders.security import pool_secret_names, user_secret_name
    from hypothesis import given
    from hypothesis import strategies as st

    label = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?", fullmatch=True)

    @given(pool_name=label, user_name=label)
    def check(pool_name: str, user_name: str) -> None:
        pool = parse_pool(pool_body(pool_name, spec=SECURE))
        assert user_secret_name(user_name) not in pool_secret_names(pool)

    check()


async def test_a_users_secret_held_by_someone_else_is_refused_and_left_alone() -> None:
    w = await World().start()
    w.kube.put(pool_body(spec=SECURE))
    theirs = foreign_secret("bob-user-tls", {"password": b"app secret"})
    w.kube.put(theirs)
    body = user_body("bob", authentication={"type": "tls"})
    outcome = await reconcile_user(w.kube, w.connections, w.trust, body)
    (cond,) = outcome.status["conditions"]
    assert (cond["status"], cond["reason"]) == ("False", "SecretConflict")
    assert "ns/bob-user-tls" in cond["message"] and "not made by the operator" in cond["message"]
    assert not outcome.retry, "nothing changes until someone removes the Secret"
    assert w.kube.objects[("Secret", "ns", "bob-user-tls")] == theirs
    (event,) = w.kube.events_for("HedwigUser", "bob")
    assert (event["type"], event["reason"]) == ("Warning", "SecretConflict")
    # The same refusal again posts no second Event.
    again = {**body, "status": outcome.status}
    await reconcile_user(w.kube, w.connections, w.trust, again)
    assert len(w.kube.events_for("HedwigUser", "bob")) == 1
    # Another user's Secret (a HedwigUser of the same name, deleted and made again) is not
    # this one's either.
    w.kube.put(
        foreign_secret(
            "bob-user-tls",
            {},
            ownerReferences=[
                {
                    "apiVersion": "hedwig.io/v1alpha1",
                    "kind": "HedwigUser",
                    "name": "bob",
                    "uid": "an-older-bob",
                    "controller": True,
                }
            ],
        )
    )
    outcome = await reconcile_user(w.kube, w.connections, w.trust, body)
    assert outcome.status["conditions"][0]["reason"] == "SecretConflict"
    assert "controlled by HedwigUser bob" in outcome.status["conditions"][0]["message"]


async def test_a_pool_secret_the_operator_did_not_make_is_never_used() -> None:
    """A CA planted under the pool's CA name before the pool existed is neither loaded nor
    overwritten: the pool says so in its condition and a Warning Event, applies nothing, and
    its hubs get no certificate from it."""
    from hedwig_operator.ownership import SecretRefusedError
    from hedwig_operator.pools import apply_children
    from hedwig_operator.workers import PoolWorker

    from hedwig.security.ca import CertificateAuthority

    w = await World().start()
    planted = CertificateAuthority.create("someone's CA")
    theirs = foreign_secret("pool-ca", {"tls.crt": planted.cert_pem, "tls.key": planted.key_pem})
    w.kube.put(theirs)
    body = pool_body(spec=SECURE)
    w.kube.put(body)
    pool = parse_pool(body)
    with pytest.raises(SecretRefusedError, match="ns/pool-ca exists"):
        await apply_children(w.kube, pool, w.trust)
    assert not w.kube.applied
    worker = PoolWorker(w.ctx, body, lambda key: [])
    await worker.refresh(pool)
    cond = ready_condition(w.kube.objects[("HubPool", "ns", "pool")])
    assert (cond["status"], cond["reason"]) == ("False", "SecretConflict")
    (event,) = w.kube.events_for("HubPool", "pool")
    assert (event["type"], event["reason"]) == ("Warning", "SecretConflict")
    assert w.kube.objects[("Secret", "ns", "pool-ca")] == theirs
    assert ("Secret", "ns", "pool-hub-tls") not in w.kube.objects
    # A user of the pool is told why it is not served.
    outcome = await reconcile_user(
        w.kube, w.connections, w.trust, user_body("bob", authentication={"type": "tls"})
    )
    assert outcome.status["conditions"][0]["reason"] == "SecretConflict"
    assert ("Secret", "ns", "bob-user-tls") not in w.kube.objects


def test_a_tls_users_name_leaves_room_for_its_secrets_suffix() -> None:
    ok = parse_user(user_body("b" * 244, authentication={"type": "tls"}))
    assert ok.name == "b" * 244
    with pytest.raises(SpecError, match="at most 244 characters"):
        parse_user(user_body("b" * 245, authentication={"type": "tls"}))
    parse_user(
        user_body("b" * 253, authentication={"type": "serviceAccount", "serviceAccount": "x"})
    )


async def test_the_operator_touches_only_the_secrets_of_its_pools_and_users() -> None:
    """What RBAC cannot narrow (get, create, patch on Secrets by name) the operator does: a
    secured pool, a tls and a serviceAccount user, the pool's worker refreshing them, and an
    etcd pool with its bound access Secret read or write these Secrets and no other."""
    from hedwig_operator.builders.security import pool_secret_names, user_secret_name
    from hedwig_operator.kube import ObjectRef
    from hedwig_operator.ownership import read_access
    from hedwig_operator.workers import PoolWorker

    from .fakes import FakeKube

    class Recording(FakeKube):
        def __init__(self) -> None:
            super().__init__()
            self.touched: set[str] = set()

        async def get(self, ref: ObjectRef) -> dict[str, Any] | None:
            if ref.kind == "Secret":
                self.touched.add(ref.name)
            return await super().get(ref)

        async def apply(self, manifest: Any) -> dict[str, Any]:
            if manifest["kind"] == "Secret":
                self.touched.add(manifest["metadata"]["name"])
            return await super().apply(manifest)

    w = await World().start()
    kube = Recording()
    w.kube = kube
    w.ctx.kube = kube
    body = pool_body(spec=SECURE)
    kube.put(body)
    kube.put(foreign_secret("unrelated", {"password": b"x"}))
    trust = w.trust
    w.ctx.trust = trust
    await reconcile_user(kube, w.connections, trust, SA_USER)
    await reconcile_user(
        kube, w.connections, trust, user_body("bob", authentication={"type": "tls"})
    )
    await PoolWorker(w.ctx, body, lambda key: []).refresh(parse_pool(body))
    etcd = pool_body("store", spec={"metadata": {"url": "etcd://e:2379", "secretName": "acc"}})
    kube.put(foreign_secret("acc", {}, labels={"hedwig.io/store-access-for": "store"}))
    store_pool = parse_pool(etcd)
    assert store_pool.store_secret is not None
    await read_access(kube, store_pool.store_secret)
    pool = parse_pool(body)
    assert kube.touched == {*pool_secret_names(pool), user_secret_name("bob"), "acc"}


async def test_a_secured_pools_region_is_never_opened_without_its_digest() -> None:
    """Opened without the digest, the store would make the region's znodes open to anyone,
    and the pool's hubs then refuse the region (``RegionNotProtectedError``): until the
    pool's reconciliation has read its digest, its store is unavailable, not opened."""
    from hedwig_operator.metadata import MetadataConnections

    from hedwig.errors import MetadataUnavailableError

    w = await World().start()
    w.kube.put(pool_body(spec=SECURE))
    pool = parse_pool(pool_body(spec=SECURE))
    opened: list[str] = []

    def opener(url: str, region: str) -> MemoryMetadataStore:
        opened.append(region)
        return w.operator_store

    connections = MetadataConnections(opener, digests=w.trust.digests)
    with pytest.raises(MetadataUnavailableError, match="digest of pool pool is not known"):
        await connections.for_pool(pool)
    assert opened == []
    await ensure_pool_security(w.kube, pool, w.trust)
    assert await connections.for_pool(pool) is w.operator_store
    assert opened == [pool.region]
