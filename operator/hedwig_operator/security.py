"""Secured pools and their users: CAs and certificates in Secrets, ACL entries in ZooKeeper.

For a HubPool with ``spec.security.enabled`` the operator keeps (``builders.security``):

- the pool's hub CA and clients CA, made once and kept (their keys never leave their Secrets);
- the hubs' certificate, issued by the hub CA for every name a hub is dialled by, and issued
  again when less than ``renewBeforeDays`` of it is left: the hubs reload the mounted files,
  so renewal restarts nothing. A renewal keeps the key: the hubs pin it on their internal
  listener (``HEDWIG_INTERNAL_PEER_KEYS=own``: a peer must hold the key they all share), and
  hubs whose Secret files are updated a minute apart must still know each other;
- a ZooKeeper digest the hubs and the operator create znodes with, and, on ZooKeeper with the
  operator's admin digest, the pool's region made with it before the hubs start (``regions``).

It also remembers, for its own requests to the pool, the hub CA (``PoolTrust``): the operator
reaches secured hubs with TLS and its projected ServiceAccount token, and opens their region
with the digest.

A HedwigUser becomes one ACL entry (``<namespace>/<name>``) in its pool's region, written on
every reconciliation and deleted with the resource; a ``tls`` user also gets a client
certificate from the clients CA in the Secret ``<user>-user-tls`` (``ca.crt``, ``tls.crt``,
``tls.key``), owned by the HedwigUser so it goes with it, and renewed like the hubs'.

Every Secret is read and written only if it is absent or the operator's own for that pool or
user (``ownership``): one held by anyone else is refused with the reason ``SecretConflict``
(the pool's or the user's Ready condition, and a Warning Event on the user) and left alone.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import secrets
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from hedwig.errors import HedwigError, MetadataError
from hedwig.metadata import ANY_VERSION
from hedwig.security.ca import CertificateAuthority
from hedwig.security.credentials import POD_TOKEN_FILE, ClientSecurity, Credentials, TokenFile
from hedwig.security.tls import client_context
from hedwig_operator.builders.labels import headless_service_name
from hedwig_operator.builders.security import (
    ca_cert_configmap,
    ca_secret_name,
    clients_ca_secret_name,
    hub_certificate,
    hub_dns_names,
    hub_ip_addresses,
    hub_tls_secret_name,
    secret_data,
    secret_manifest,
    user_secret_name,
    zk_secret_name,
)
from hedwig_operator.conditions import condition, find
from hedwig_operator.kube import KubeApi, ObjectRef
from hedwig_operator.ownership import Owner, SecretRefusedError, read_owned
from hedwig_operator.recorder import record_event
from hedwig_operator.regions import PoolRegions
from hedwig_operator.resources import API_VERSION, POOL_KIND, USER_KIND
from hedwig_operator.specs import PoolSpec, SpecError, UserSpec, parse_pool, parse_user
from hedwig_operator.specs.user import AuthenticationType

log = logging.getLogger(__name__)

# Set in the operator's Deployment: the principal its ServiceAccount token names, made a
# super-user of every secured pool.
OPERATOR_PRINCIPAL_ENV = "HEDWIG_OPERATOR_PRINCIPAL"
CA_DAYS = 5 * 365


def operator_principal(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return env.get(OPERATOR_PRINCIPAL_ENV, "")


@dataclass
class PoolTrust:
    """How the operator reaches secured pools: their hub CAs (by the DNS domain of their
    hubs), its own credentials, and their ZooKeeper digests (by connection and region)."""

    credentials: Credentials | None = None
    domains: dict[str, str] = field(default_factory=dict)  # ".<headless>.<ns>.svc" -> CA PEM
    digests: dict[tuple[str, str], str] = field(default_factory=dict)
    # The admin digest that makes secured pools' regions under a closed /hedwig (``regions``).
    regions: PoolRegions = field(default_factory=PoolRegions)
    _contexts: dict[str, ssl.SSLContext] = field(default_factory=dict)
    _by_address: dict[str, str] = field(default_factory=dict)
    # One reconciler at a time makes a pool's CAs and certificates: the pool's handler, its
    # worker and its users' handlers run concurrently, and two of them finding no CA must not
    # both make one (the second would replace the first, and what it signed).
    _locks: dict[tuple[str, str], asyncio.Lock] = field(default_factory=dict)

    def lock(self, pool: PoolSpec) -> asyncio.Lock:
        return self._locks.setdefault((pool.namespace, pool.name), asyncio.Lock())

    @classmethod
    def from_pod(cls, environ: Mapping[str, str] | None = None) -> PoolTrust:
        """The operator's token: ``HEDWIG_TOKEN_FILE``, else its pod's projected token (the
        chart mounts one with the audience ``hedwig``); its ZooKeeper admin digest
        (``regions``)."""
        env = os.environ if environ is None else environ
        path = env.get("HEDWIG_TOKEN_FILE") or POD_TOKEN_FILE
        return cls(
            credentials=TokenFile(path) if os.path.isfile(path) else None,
            regions=PoolRegions.from_env(env),
        )

    @staticmethod
    def _domain(pool: PoolSpec) -> str:
        return f".{headless_service_name(pool)}.{pool.namespace}.svc"

    def note_hubs(self, pool: PoolSpec, addresses: Iterable[str]) -> None:
        """The addresses a secured pool's hubs registered (pods advertise names in the pool's
        domain; hubs elsewhere, as in tests, advertise what they like)."""
        if pool.security.enabled:
            for address in addresses:
                self._by_address[address] = self._domain(pool)

    def register(self, pool: PoolSpec, ca_pem: str, digest: str) -> None:
        domain = self._domain(pool)
        if self.domains.get(domain) != ca_pem:
            self.domains[domain] = ca_pem
            self._contexts.pop(domain, None)
        self.digests[(pool.metadata_url, pool.region)] = digest

    def security_for(self, address: str) -> ClientSecurity | None:
        """TLS and credentials for a hub address of a secured pool; None for other pools."""
        host = address.rpartition(":")[0]
        noted = self._by_address.get(address)
        for domain, ca_pem in self.domains.items():
            if domain == noted or host.endswith(domain) or host.endswith(domain + ".cluster.local"):
                ctx = self._contexts.get(domain)
                if ctx is None:
                    ctx = self._contexts[domain] = client_context(ca_data=ca_pem)
                return ClientSecurity(tls=ctx, credentials=self.credentials)
        return None


# ------------------------------------------------------------------------------ pools


def _not_after(cert_pem: bytes) -> dt.datetime | None:
    try:
        return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc
    except ValueError:
        return None


def names_changed(cert_pem: bytes | None, dns_names: list[str], ip_addresses: list[str]) -> bool:
    """Whether the certificate names other hosts than these (an external address came, went
    or changed: ``spec.external``)."""
    if not cert_pem:
        return True
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return True
    named = {str(n) for n in sans.get_values_for_type(x509.DNSName)}
    at = {str(a) for a in sans.get_values_for_type(x509.IPAddress)}
    return named != set(dns_names) or at != set(ip_addresses)


def needs_renewal(cert_pem: bytes | None, renew_before_days: int, now: dt.datetime) -> bool:
    if not cert_pem:
        return True
    end = _not_after(cert_pem)
    return end is None or end - now < dt.timedelta(days=renew_before_days)


async def _ca(kube: KubeApi, pool: PoolSpec, name: str, title: str) -> CertificateAuthority:
    data = await read_owned(kube, pool.namespace, name, Owner.of_pool(pool))
    if data.get("tls.crt") and data.get("tls.key"):
        return CertificateAuthority.load(data["tls.crt"], data["tls.key"])
    ca = CertificateAuthority.create(f"{title} {pool.namespace}/{pool.name}", days=CA_DAYS)
    await kube.apply(secret_manifest(pool, name, {"tls.crt": ca.cert_pem, "tls.key": ca.key_pem}))
    log.info("created %s for pool %s/%s", name, pool.namespace, pool.name)
    return ca


async def ensure_pool_security(
    kube: KubeApi, pool: PoolSpec, trust: PoolTrust, now: dt.datetime | None = None
) -> None:
    """The pool's CAs, hub certificate and ZooKeeper digest exist and are current, and its
    region is made with that digest if the operator has ZooKeeper's admin digest
    (``regions``)."""
    if not pool.security.enabled:
        return
    async with trust.lock(pool):
        await _ensure_pool_security(kube, pool, trust, now or dt.datetime.now(dt.UTC))


async def _ensure_pool_security(
    kube: KubeApi, pool: PoolSpec, trust: PoolTrust, now: dt.datetime
) -> None:
    if pool.security.cert_manager is not None:
        await _ensure_cert_manager(kube, pool, trust)
        return
    hub_ca = await _ca(kube, pool, ca_secret_name(pool), "hedwig hubs")
    clients_ca = await _ca(kube, pool, clients_ca_secret_name(pool), "hedwig clients")
    await kube.apply(ca_cert_configmap(pool, hub_ca.cert_pem))
    ref = ObjectRef("v1", "Secret", pool.namespace, hub_tls_secret_name(pool))
    current = await read_owned(kube, ref.namespace, ref.name, Owner.of_pool(pool))
    if (
        needs_renewal(current.get("tls.crt"), pool.security.renew_before_days, now)
        or current.get("ca.crt") != hub_ca.cert_pem
        or current.get("client-ca.crt") != clients_ca.cert_pem
        or names_changed(current.get("tls.crt"), hub_dns_names(pool), hub_ip_addresses(pool))
    ):
        issued = hub_ca.issue(
            f"hub.{pool.name}.{pool.namespace}",
            dns_names=hub_dns_names(pool),
            ip_addresses=hub_ip_addresses(pool),
            server=True,
            client=True,
            days=pool.security.certificate_days,
            key_pem=_reusable_key(current.get("tls.key")),
        )
        await kube.apply(
            secret_manifest(
                pool,
                ref.name,
                {
                    "tls.crt": issued.cert_pem,
                    "tls.key": issued.key_pem,
                    "ca.crt": hub_ca.cert_pem,
                    "client-ca.crt": clients_ca.cert_pem,
                },
            )
        )
        log.info("issued the hubs' certificate of pool %s/%s", pool.namespace, pool.name)
    digest = await _zk_digest(kube, pool)
    await _register(pool, trust, hub_ca.cert_pem.decode(), digest)


async def _register(pool: PoolSpec, trust: PoolTrust, ca_pem: str, digest: str) -> None:
    """The pool's region made (``regions``) before its digest is known to the operator's
    stores: one opened first, on an ensemble without ``/hedwig``, would make it the pool's."""
    await trust.regions.ensure(pool, digest)
    trust.register(pool, ca_pem, digest)


def _reusable_key(key_pem: bytes | None) -> bytes | None:
    """The hubs' key, kept through renewals (they pin it), unless there is none or it is not
    one the CA can certify (then a new one is made, and the hubs' pins follow it)."""
    if not key_pem:
        return None
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return None
    return key_pem if isinstance(key, ec.EllipticCurvePrivateKey) else None


async def _zk_digest(kube: KubeApi, pool: PoolSpec) -> str:
    name = zk_secret_name(pool)
    digest = (await read_owned(kube, pool.namespace, name, Owner.of_pool(pool))).get("digest", b"")
    if not digest:
        made = f"hedwig:{secrets.token_urlsafe(24)}"
        await kube.apply(secret_manifest(pool, name, {"digest": made.encode()}))
        return made
    return digest.decode()


async def _ensure_cert_manager(kube: KubeApi, pool: PoolSpec, trust: PoolTrust) -> None:
    """cert-manager issues and renews the hubs' certificate: keep its Certificate, the
    clients' CA (HedwigUser certificates stay the operator's) and the digest; publish the hub
    CA (the ``ca.crt`` cert-manager writes) for clients once the Secret is issued. Until then
    the hub pods wait for their Secret, as any pod with a cert-manager Secret does."""
    await _ca(kube, pool, clients_ca_secret_name(pool), "hedwig clients")
    await kube.apply(hub_certificate(pool))
    digest = await _zk_digest(kube, pool)
    issued = secret_data(
        await kube.get(ObjectRef("v1", "Secret", pool.namespace, hub_tls_secret_name(pool)))
    )
    ca_pem = issued.get("ca.crt")
    if not ca_pem:
        log.info(
            "pool %s/%s: waiting for cert-manager to issue %s",
            pool.namespace,
            pool.name,
            hub_tls_secret_name(pool),
        )
        return
    await kube.apply(ca_cert_configmap(pool, ca_pem))
    await _register(pool, trust, ca_pem.decode(), digest)


# ------------------------------------------------------------------------------ users


def _user_owner(user: UserSpec) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": USER_KIND,
        "name": user.name,
        "uid": user.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


@dataclass(frozen=True, slots=True)
class UserOutcome:
    status: dict[str, Any]
    retry: bool = False


async def _user_pool(kube: KubeApi, user: UserSpec) -> PoolSpec | None:
    body = await kube.get(ObjectRef(API_VERSION, POOL_KIND, user.namespace, user.pool))
    return parse_pool(body) if body is not None else None


async def reconcile_user(
    kube: KubeApi,
    metadata: Any,
    trust: PoolTrust,
    body: Mapping[str, Any],
    now: dt.datetime | None = None,
) -> UserOutcome:
    """Write the user's ACL entry (and its certificate); the status to patch."""
    now = now or dt.datetime.now(dt.UTC)
    previous = (body.get("status") or {}).get("conditions")

    def ready(ok: bool, reason: str, message: str, **extra: Any) -> dict[str, Any]:
        return {"conditions": [condition("Ready", ok, reason, message, previous)], **extra}

    try:
        user = parse_user(body)
    except SpecError as exc:
        return UserOutcome(ready(False, "InvalidSpec", str(exc)))
    try:
        pool = await _user_pool(kube, user)
    except SpecError as exc:
        return UserOutcome(ready(False, "PoolInvalid", str(exc)), retry=True)
    if pool is None:
        return UserOutcome(
            ready(False, "PoolNotFound", f"no HubPool {user.pool} in {user.namespace}"),
            retry=True,
        )
    extra: dict[str, Any] = {"principal": user.principal, "observedGeneration": user.generation}
    try:
        await ensure_pool_security(kube, pool, trust, now)
        store = await metadata.for_pool(pool)
        await store.acls.write_acl(user.acl_name, user.acl_entry, ANY_VERSION)
    except SecretRefusedError as exc:
        # One of the pool's Secrets is someone else's: the pool's condition says which.
        return UserOutcome(
            ready(False, exc.reason, f"pool {pool.name}: {exc.message}", **extra), retry=True
        )
    except (HedwigError, MetadataError) as exc:
        return UserOutcome(
            ready(False, "MetadataUnavailable", f"writing the ACLs failed: {exc}", **extra),
            retry=True,
        )
    if user.authentication is AuthenticationType.TLS:
        if not pool.security.enabled:
            return UserOutcome(
                ready(
                    False,
                    "PoolNotSecured",
                    "a tls user needs a pool with spec.security.enabled (its clients CA)",
                    **extra,
                ),
                retry=True,
            )
        try:
            async with trust.lock(pool):
                extra.update(await _user_certificate(kube, pool, user, now))
        except SecretRefusedError as exc:
            # Not retried: nothing changes until someone removes or renames that Secret (the
            # hourly reconciliation looks again).
            if (find(previous, "Ready") or {}).get("reason") != exc.reason:
                await record_event(kube, body, exc.reason, exc.message, warning=True)
            return UserOutcome(ready(False, exc.reason, exc.message, **extra))
    if not pool.security.enabled:
        return UserOutcome(
            ready(
                True,
                "NotEnforced",
                f"ACLs written for {user.principal}, but pool {pool.name} does not enforce "
                "them (spec.security.enabled is false)",
                **extra,
            )
        )
    return UserOutcome(
        ready(True, "Ready", f"{len(user.rules)} ACL rules for {user.principal}", **extra)
    )


async def _user_certificate(
    kube: KubeApi, pool: PoolSpec, user: UserSpec, now: dt.datetime
) -> dict[str, Any]:
    clients_ca = await _ca(kube, pool, clients_ca_secret_name(pool), "hedwig clients")
    hub_ca = await _ca(kube, pool, ca_secret_name(pool), "hedwig hubs")
    name = user_secret_name(user.name)
    current = await read_owned(kube, user.namespace, name, Owner.of_user(user))
    cert = current.get("tls.crt")
    if (
        needs_renewal(cert, pool.security.renew_before_days, now)
        or current.get("ca.crt") != hub_ca.cert_pem
    ):
        issued = clients_ca.issue(user.principal, client=True, days=pool.security.certificate_days)
        cert = issued.cert_pem
        manifest = secret_manifest(
            pool, name, {"tls.crt": cert, "tls.key": issued.key_pem, "ca.crt": hub_ca.cert_pem}
        )
        manifest["metadata"]["ownerReferences"] = [_user_owner(user)]
        await kube.apply(manifest)
        log.info("issued the certificate of HedwigUser %s/%s", user.namespace, user.name)
    end = _not_after(cert) if cert else None
    return {"secret": name, "certificateNotAfter": end.isoformat() if end else ""}


async def delete_user(
    kube: KubeApi, metadata: Any, trust: PoolTrust, body: Mapping[str, Any]
) -> None:
    """Remove the user's ACL entry (its Secret goes with it by owner reference)."""
    try:
        user = parse_user(body)
    except SpecError:
        return
    pool = await _user_pool(kube, user)
    if pool is None:
        return  # the pool (and with it, the region's ACLs) is gone
    await ensure_pool_security(kube, pool, trust)
    store = await metadata.for_pool(pool)
    try:
        await store.acls.delete_acl(user.acl_name, ANY_VERSION)
    except MetadataError as exc:
        if (await store.acls.read_acl(user.acl_name)) is not None:
            raise
        log.debug("ACL entry %s already gone: %s", user.acl_name, exc)
