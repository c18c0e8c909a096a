"""Signed tokens, verified offline: Kubernetes ServiceAccount tokens and JWTs from trusted issuers.

A token names its issuer (``iss``). Each trusted issuer is configured with the audiences it must
be for (``hedwig`` by default), and where its signing keys are: the issuer's OpenID Connect
discovery document (``<issuer>/.well-known/openid-configuration``, or a ``discovery_url`` such
as the in-cluster API server when the issuer's name is not reachable from the hub) names its
JWKS. A Kubernetes API server publishes both (``--service-account-issuer``,
``/openid/v1/jwks``), so a pod's projected token is checked with no call per connection: the
way Pulsar's OpenID Connect provider trusts the API server's issuer.

Keys come through PyJWT's ``PyJWKClient``: it caches the key set (refreshed every
``jwks_lifespan_s``), fetches again once when a token names a key it does not know (a rotation),
and rate-limits those fetches (``cooldown_duration``), so a flood of tokens with made-up key ids
cannot turn into a flood of requests to the API server. Its fetches block, so they run in a
thread. A token is refused with a reason (expired, audience, issuer, unknown key, signature,
malformed) that becomes a metric label and an audit line; an issuer whose keys cannot be
fetched makes the hub answer SERVICE_UNAVAILABLE (retried), not UNAUTHENTICATED.

A token's principal is its subject behind the issuer's prefix, ``<issuer>#`` unless configured
(``hedwig.security.principal``): an issuer's ``sub: admin`` is ``https://idp.example#admin``,
never the ``admin`` a client certificate names. The cluster's ServiceAccount issuer is the one
given an empty prefix (``TokenIssuer.kubernetes``, and the operator's pools): its subjects are
``system:serviceaccount:...``, which no certificate may name.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt

from hedwig.errors import AuthenticationError, ServiceUnavailableError, UsageError
from hedwig.security.principal import ISSUER_SEPARATOR, Principal, PrincipalKind

log = logging.getLogger(__name__)

# Where a pod's projected ServiceAccount token is read from when a fetch needs a bearer token
# (the API server's discovery endpoints are open to service accounts by default).
POD_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
POD_CA = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
# The signature algorithms a token may use: what Kubernetes and common issuers sign with. Never
# "none", never HMAC (a shared secret is what this design avoids).
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "ES256", "ES384")
# Seconds of clock skew allowed when checking exp/nbf/iat.
LEEWAY_S = 30


@dataclass(frozen=True, slots=True)
class TokenIssuer:
    """One issuer whose tokens a hub accepts."""

    issuer: str
    audiences: tuple[str, ...] = ("hedwig",)
    # Where the discovery document is (default: the issuer's well-known path); ignored when
    # ``jwks_url`` is given.
    discovery_url: str | None = None
    jwks_url: str | None = None
    # CA bundle for the discovery and JWKS requests (default: the system's store).
    ca_file: str | None = None
    # A file whose contents are sent as a bearer token with those requests (re-read each time).
    bearer_token_file: str | None = None
    # The claim that names the principal, and a prefix put before it, to keep the principals of
    # two issuers, and of tokens and certificates, apart. None: ``<issuer>#`` (the Kubernetes
    # API server's default for OpenID Connect users); one of one's own holds a "#" too, as no
    # certificate's name may; "" only for an issuer whose subjects are a namespace of their
    # own, as the cluster's ServiceAccount issuer's ``system:serviceaccount:...`` are.
    principal_claim: str = "sub"
    principal_prefix: str | None = None
    # Seconds a fetched key set is trusted before it is fetched again.
    jwks_lifespan_s: float = 300.0
    # Fetches caused by unknown key ids are at least this far apart.
    refetch_cooldown_s: float = 10.0

    def __post_init__(self) -> None:
        if not self.issuer:
            raise UsageError("a token issuer needs its name (the tokens' iss claim)")
        if not self.audiences:
            raise UsageError(f"issuer {self.issuer}: at least one audience is needed")
        if self.principal_prefix and ISSUER_SEPARATOR not in self.principal_prefix:
            raise UsageError(
                f"issuer {self.issuer}: principal_prefix {self.principal_prefix!r} must hold a "
                f"{ISSUER_SEPARATOR!r} (as no certificate's name may), or tokens and client "
                "certificates could name the same principal"
            )

    @property
    def prefix(self) -> str:
        """What the principal of each of this issuer's tokens begins with."""
        if self.principal_prefix is None:
            return self.issuer + ISSUER_SEPARATOR
        return self.principal_prefix

    @classmethod
    def kubernetes(
        cls,
        issuer: str = "https://kubernetes.default.svc.cluster.local",
        *,
        audience: str = "hedwig",
        api_server: str = "https://kubernetes.default.svc",
    ) -> TokenIssuer:
        """The cluster's ServiceAccount issuer, its discovery document read from the API server
        with the pod's own token and CA (Pulsar's Kubernetes discovery mode); its principals
        are the ServiceAccounts' own names (``system:serviceaccount:<namespace>:<name>``)."""
        return cls(
            issuer=issuer,
            audiences=(audience,),
            discovery_url=f"{api_server}/.well-known/openid-configuration",
            ca_file=POD_CA,
            bearer_token_file=POD_TOKEN,
            principal_prefix="",
        )

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TokenIssuer:
        known = set(cls.__dataclass_fields__)
        unknown = set(raw) - known - {"audience"}
        if unknown:
            raise UsageError(f"unknown token issuer settings: {', '.join(sorted(unknown))}")
        values = dict(raw)
        if "audience" in values:
            values["audiences"] = (values.pop("audience"),)
        if "audiences" in values:
            values["audiences"] = tuple(values["audiences"])
        return cls(**values)


def parse_issuers(text: str) -> tuple[TokenIssuer, ...]:
    """Issuers from JSON (a list of objects with ``TokenIssuer``'s fields), inline or ``@FILE``."""
    if not text.strip():
        return ()
    if text.startswith("@"):
        text = Path(text[1:]).read_text()
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"token issuers must be a JSON list: {exc}") from exc
    if isinstance(raw, dict):
        raw = [raw]
    if not isinstance(raw, list) or not all(isinstance(i, dict) for i in raw):
        raise UsageError("token issuers must be a JSON list of objects")
    return tuple(TokenIssuer.from_dict(i) for i in raw)


def _ssl_context(ca_file: str | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    if ca_file:
        ctx.load_verify_locations(cafile=ca_file)
    return ctx


def _headers(issuer: TokenIssuer) -> dict[str, str]:
    if not issuer.bearer_token_file:
        return {}
    try:
        token = Path(issuer.bearer_token_file).read_text().strip()
    except OSError:
        return {}
    return {"Authorization": f"Bearer {token}"}


@dataclass
class _IssuerKeys:
    """The key source of one issuer: discovery once, then PyJWKClient's cached key set."""

    issuer: TokenIssuer
    client: jwt.PyJWKClient | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def _discover(self) -> str:
        if self.issuer.jwks_url:
            return self.issuer.jwks_url
        url = self.issuer.discovery_url or (
            self.issuer.issuer.rstrip("/") + "/.well-known/openid-configuration"
        )
        request = urllib.request.Request(url, headers=_headers(self.issuer))
        with urllib.request.urlopen(
            request, timeout=10, context=_ssl_context(self.issuer.ca_file)
        ) as answer:
            doc = json.loads(answer.read())
        if doc.get("issuer") != self.issuer.issuer:
            raise ValueError(
                f"discovery document at {url} is for issuer {doc.get('issuer')!r}, "
                f"not {self.issuer.issuer!r}"
            )
        return str(doc["jwks_uri"])

    def _signing_key(self, token: str) -> jwt.PyJWK:
        if self.client is None:
            self.client = jwt.PyJWKClient(
                self._discover(),
                cache_keys=False,
                lifespan=self.issuer.jwks_lifespan_s,
                ssl_context=_ssl_context(self.issuer.ca_file),
                cooldown_duration=self.issuer.refetch_cooldown_s,
                timeout=10,
            )
        self.client.headers = _headers(self.issuer)
        return self.client.get_signing_key_from_jwt(token)

    async def signing_key(self, token: str) -> jwt.PyJWK:
        # One fetch at a time per issuer; cached lookups are quick either way.
        async with self.lock:
            return await asyncio.to_thread(self._signing_key, token)


class TokenVerifier:
    """Checks tokens against the configured issuers; ``verify`` names the principal."""

    def __init__(self, issuers: Iterable[TokenIssuer]) -> None:
        self.issuers = {i.issuer: i for i in issuers}
        self._keys = {name: _IssuerKeys(i) for name, i in self.issuers.items()}

    def __bool__(self) -> bool:
        return bool(self.issuers)

    async def verify(self, token: str) -> Principal:
        """The principal ``token`` proves; ``AuthenticationError`` (with a reason) if it proves
        nothing, ``ServiceUnavailableError`` if its issuer's keys cannot be fetched now."""
        try:
            claims = jwt.decode(token, options={"verify_signature": False})
        except jwt.DecodeError as exc:
            raise AuthenticationError(f"malformed token: {exc}", reason="malformed") from exc
        name = claims.get("iss")
        issuer = self.issuers.get(name) if isinstance(name, str) else None
        if issuer is None:
            raise AuthenticationError(f"tokens of issuer {name!r} are not trusted", reason="issuer")
        try:
            key = await self._keys[issuer.issuer].signing_key(token)
        except jwt.PyJWKClientConnectionError as exc:
            raise ServiceUnavailableError(
                f"cannot fetch the signing keys of issuer {issuer.issuer}: {exc}"
            ) from exc
        except (jwt.PyJWKClientError, jwt.DecodeError) as exc:
            # No key with the token's id, even after fetching the key set again.
            raise AuthenticationError(
                f"token signed by a key issuer {issuer.issuer} does not publish: {exc}",
                reason="unknown_key",
            ) from exc
        except (OSError, ValueError, KeyError) as exc:
            raise ServiceUnavailableError(
                f"cannot discover the keys of issuer {issuer.issuer}: {exc}"
            ) from exc
        try:
            verified = jwt.decode(
                token,
                key,
                algorithms=list(ALGORITHMS),
                audience=list(issuer.audiences),
                issuer=issuer.issuer,
                leeway=LEEWAY_S,
                options={"require": ["exp", "iss", "aud", issuer.principal_claim]},
            )
        except jwt.ExpiredSignatureError as exc:
            raise AuthenticationError("token has expired", reason="expired") from exc
        except jwt.InvalidAudienceError as exc:
            raise AuthenticationError(
                f"token is not for audience {', '.join(issuer.audiences)}", reason="audience"
            ) from exc
        except jwt.InvalidIssuerError as exc:
            raise AuthenticationError(f"token issuer: {exc}", reason="issuer") from exc
        except jwt.InvalidSignatureError as exc:
            raise AuthenticationError(
                "token signature does not verify", reason="signature"
            ) from exc
        except jwt.InvalidTokenError as exc:
            raise AuthenticationError(f"invalid token: {exc}", reason="malformed") from exc
        subject = verified.get(issuer.principal_claim)
        if not isinstance(subject, str) or not subject:
            raise AuthenticationError(
                f"token has no {issuer.principal_claim} claim", reason="malformed"
            )
        return Principal(
            issuer.prefix + subject,
            PrincipalKind.TOKEN,
            expires_ms=int(verified["exp"]) * 1000,
        )
