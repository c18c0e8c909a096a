"""Tokens and certificates name principals in namespaces that cannot meet: a trusted issuer's
``sub: admin`` is not the super-user ``admin`` a client certificate names, and no certificate
names a token's principal (``hedwig.security.principal``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from hedwig.errors import AuthenticationError, ForbiddenError, UsageError
from hedwig.metadata.memory import MemoryBackend
from hedwig.security import ClientSecurity
from hedwig.security.principal import certificate_may_name
from hedwig.security.tls import principal_from_certificate
from hedwig.security.tokens import TokenIssuer as Issuer
from hedwig.security.tokens import TokenVerifier, parse_issuers
from tests.security.conftest import SecureRegion, running_hubs, secure_config
from tests.security.fixtures import Pki, TokenIssuer

OPERATOR = "system:serviceaccount:hedwig:hedwig-operator"


@pytest.fixture
async def by_default(pki: Pki, issuer: TokenIssuer) -> AsyncIterator[SecureRegion]:
    """A hub trusting the issuer as configured by default (no principal_prefix), with the
    certificate ``admin``, the issuer's ``admin`` and the operator's ServiceAccount as its
    super-users."""
    region = SecureRegion(pki, issuer, MemoryBackend())
    config = secure_config(
        pki,
        issuer,
        replication="1/1/1",
        token_issuers=issuer.issuers_json(prefix=None),
        super_users=f"admin,{issuer.url}#admin,{OPERATOR}",
    )
    async with running_hubs(region.hubs, [config], region.store):
        yield region


async def test_a_tokens_subject_is_not_a_certificates_principal(by_default: SecureRegion) -> None:
    """``sub: alice`` from a trusted issuer is ``<issuer>#alice``: not the certificate user
    ``alice``, whatever the issuer writes in ``sub``."""
    url = by_default.issuer.url
    # The certificate user "admin" is a super-user; the issuer's "admin" subject is not it.
    # (The issuer's own admin, named as its principal, is.)
    super_user = f"{url}#admin"
    async with by_default.client(security=by_default.security(token_for="admin")) as admin:
        await admin.publish("orders.eu", b"as the issuer's admin")
    async with by_default.client(security=by_default.security(token_for="alice")) as alice:
        with pytest.raises(ForbiddenError, match=f"principal {url}#alice may not"):
            await alice.publish("orders.eu", b"no")
    assert super_user in by_default.hubs[0].config.security.super_user_set
    async with by_default.client(security=by_default.security(token_for=OPERATOR)) as other:
        # A subject shaped like a ServiceAccount's, from an issuer that is not the cluster's.
        with pytest.raises(ForbiddenError, match=f"principal {url}#{OPERATOR} may not"):
            await other.publish("orders.eu", b"no")


async def test_the_super_user_admin_is_no_tokens(pki: Pki, issuer: TokenIssuer) -> None:
    """The issue's case: ``super_users=admin`` (the certificate user), and a trusted issuer's
    token with ``sub: admin``: refused, not the super-user."""
    region = SecureRegion(pki, issuer, MemoryBackend())
    config = secure_config(
        pki, issuer, replication="1/1/1", token_issuers=issuer.issuers_json(prefix=None)
    )
    assert config.security.super_user_set == {"admin"}
    async with (
        running_hubs(region.hubs, [config], region.store),
        region.client(security=region.security(token_for="admin")) as admin,
    ):
        with pytest.raises(ForbiddenError, match=f"principal {issuer.url}#admin may not"):
            await admin.publish("payments", b"no")


@pytest.mark.parametrize("named", ["issuer#admin", OPERATOR])
async def test_a_certificate_naming_a_tokens_principal_names_nobody(
    by_default: SecureRegion, named: str
) -> None:
    """A certificate of the client CA whose common name is a token's kind of name (the
    issuer's super-user, the operator's ServiceAccount) proves no identity."""
    pki = by_default.pki
    name = f"{by_default.issuer.url}#admin" if named == "issuer#admin" else named
    pki.client_ca.issue(name, client=True).write(pki.root, "token-like")
    security = ClientSecurity.build(
        tls_ca=pki.path("hub-ca.crt"),
        cert=pki.path("token-like.crt"),
        key=pki.path("token-like.key"),
    )
    async with by_default.client(security=security) as c:
        with pytest.raises(AuthenticationError, match="needs an identity"):
            await c.publish("orders.eu", b"no")


def test_certificates_may_not_name_what_tokens_name() -> None:
    assert certificate_may_name("alice") and certificate_may_name("user:ns:bob")
    assert not certificate_may_name("https://idp.example#alice")
    assert not certificate_may_name("system:serviceaccount:ns:sa")
    cert = {"subject": ((("commonName", "https://idp.example#admin"),),)}
    assert principal_from_certificate(cert) is None
    uri = {"subject": (), "subjectAltName": (("URI", "spiffe://x/ns/a#b"),)}
    assert principal_from_certificate(uri) is None
    plain = {"subject": ((("commonName", "alice"),),)}
    assert principal_from_certificate(plain) == "alice"


def test_issuer_prefixes() -> None:
    assert Issuer("https://idp.example").prefix == "https://idp.example#"
    assert Issuer("https://idp.example", principal_prefix="corp#").prefix == "corp#"
    assert Issuer("https://idp.example", principal_prefix="").prefix == ""
    with pytest.raises(UsageError, match="must hold a '#'"):
        Issuer("https://idp.example", principal_prefix="oidc:")
    # The cluster's ServiceAccount issuer: its principals are the ServiceAccounts' names.
    assert Issuer.kubernetes().prefix == ""
    (parsed,) = parse_issuers(json.dumps([{"issuer": "https://idp.example"}]))
    assert parsed.prefix == "https://idp.example#"
    assert TokenVerifier([parsed])
