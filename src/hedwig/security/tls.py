"""TLS contexts from the standard library's ``ssl``: TLS 1.2 and later, nothing weaker.

What every context offers, server or client (``_base``): TLS 1.3's suites (all AEAD), and of
TLS 1.2's only the AEAD ones with an ephemeral elliptic-curve key exchange (AES-GCM,
ChaCha20-Poly1305; the default list also offered CBC suites, whose padding checks are what
Lucky Thirteen and its kin time); one key exchange group, P-256 (the default offered X448 and
secp521r1 as well, which cost a handshake several times as much work). One group because the
``ssl`` of Python 3.11 sets one (``SSLContext.set_ecdh_curve``; a list needs OpenSSL's
``SSL_CTX_set1_groups_list``, which it does not reach): P-256 is the group every TLS 1.3
implementation must support (RFC 8446, 9.1), so no client is shut out; one that sends an
X25519 key share first (most do) is asked for P-256 once, a round trip more at connect,
while Hedwig's own clients offer P-256 at once.

Three uses, three builders:

- ``server_context``: a hub's listener. On the client listener a client certificate is optional
  (token users have none) but verified against the client CA when one is presented; on the
  internal listener it is required and must come from the region's hub CA.
- ``client_context``: clients, and hubs reaching other hubs (with their hub certificate).
- ``ReloadingCertificate``: certificates are rotated by rewriting their files (a Kubernetes
  Secret's mounted files change in place); a hub reloads them into the same context, so new
  connections get the new certificate without a restart and open ones are left alone.

``principal_from_certificate`` names the principal of a verified peer certificate.
"""

from __future__ import annotations

import logging
import os
import ssl
from typing import Any

from hedwig.errors import UsageError
from hedwig.security.principal import certificate_may_name

log = logging.getLogger(__name__)


# TLS 1.2 suites: AEAD with an ephemeral ECDH key exchange, nothing else (TLS 1.3's are set
# apart by OpenSSL and are all AEAD).
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"
# The one key exchange group (above).
KEY_EXCHANGE_GROUP = "prime256v1"


def _base(purpose: ssl.Purpose) -> ssl.SSLContext:
    ctx = ssl.create_default_context(purpose)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(TLS12_CIPHERS)
    ctx.set_ecdh_curve(KEY_EXCHANGE_GROUP)
    return ctx


def _load_chain(ctx: ssl.SSLContext, cert: str, key: str | None) -> None:
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise UsageError(f"cannot load certificate {cert} (key {key or cert}): {exc}") from exc


def _load_ca(ctx: ssl.SSLContext, ca: str) -> None:
    try:
        ctx.load_verify_locations(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise UsageError(f"cannot load CA certificates from {ca}: {exc}") from exc


def server_context(
    cert: str, key: str | None, *, client_ca: str | None = None, require_client_cert: bool = False
) -> ssl.SSLContext:
    """A listener's context: serves ``cert``; verifies client certificates against
    ``client_ca`` (required if ``require_client_cert``, else optional)."""
    if require_client_cert and not client_ca:
        raise UsageError("requiring client certificates needs a CA to verify them")
    ctx = _base(ssl.Purpose.CLIENT_AUTH)
    _load_chain(ctx, cert, key)
    if client_ca:
        _load_ca(ctx, client_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    return ctx


def client_context(
    ca: str | None = None,
    *,
    cert: str | None = None,
    key: str | None = None,
    check_hostname: bool = True,
    ca_data: str | None = None,
) -> ssl.SSLContext:
    """A connecting end's context: trusts ``ca`` (a file) and ``ca_data`` (PEM text), or the
    system's store if neither; presents ``cert`` if given; checks that the hub's certificate
    names the address dialled."""
    ctx = _base(ssl.Purpose.SERVER_AUTH)
    if ca:
        _load_ca(ctx, ca)
    if ca_data:
        try:
            ctx.load_verify_locations(cadata=ca_data)
        except ssl.SSLError as exc:
            raise UsageError(f"cannot load CA certificates: {exc}") from exc
    if cert:
        _load_chain(ctx, cert, key)
    ctx.check_hostname = check_hostname
    return ctx


class ReloadingCertificate:
    """Reloads ``cert``/``key`` into ``ctx`` when their files change (rotation in place)."""

    def __init__(self, ctx: ssl.SSLContext, cert: str, key: str | None) -> None:
        self.ctx = ctx
        self.cert = cert
        self.key = key
        self._stamp = self._mtimes()

    def _mtimes(self) -> tuple[float, float]:
        def mtime(path: str | None) -> float:
            try:
                return os.stat(path).st_mtime if path else 0.0
            except OSError:
                return 0.0

        return mtime(self.cert), mtime(self.key)

    def reload_if_changed(self) -> bool:
        """Load the files again if they changed since; True if the new ones are in use."""
        stamp = self._mtimes()
        if stamp == self._stamp:
            return False
        try:
            self.ctx.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as exc:
            # Half-written files (a Secret being updated): keep serving the old certificate
            # and try again next time.
            log.warning("certificate %s changed but cannot be loaded yet: %s", self.cert, exc)
            return False
        self._stamp = stamp
        log.info("reloaded certificate %s", self.cert)
        return True


def principal_from_certificate(peercert: dict[str, Any] | None) -> str | None:
    """The principal a verified certificate names: its subject's common name, else its first
    URI or DNS subject alternative name; ``None`` if it names nothing (or is absent), or a
    name only tokens may have (``principal.certificate_may_name``): such a peer is anonymous."""
    if not peercert:
        return None
    named = None
    for rdn in peercert.get("subject", ()):
        for name, value in rdn:
            if named is None and name == "commonName" and value:
                named = str(value)
    if named is None:
        for kind, value in peercert.get("subjectAltName", ()):
            if kind in ("URI", "DNS") and value:
                named = str(value)
                break
    if named is None or not certificate_may_name(named):
        if named is not None:
            log.warning("a certificate names %r, a token's kind of name: no principal", named)
        return None
    return named
