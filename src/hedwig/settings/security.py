"""The hub's security settings (``docs/security.md``): TLS, the internal listener, identities.

Everything is off for a bare hub (tests, ``hedwig dev up``): plaintext, anonymous, and the
storage role on the client port. The chart, the operator and ``hedwig dev up --secure`` turn
it on. Certificates and keys are PEM files, reloaded when they change (rotation without a
restart). The group refuses combinations that cannot work (a certificate without its key,
authorization without authentication, authentication with no way to prove an identity, or
with hub-to-hub requests left on the client port).
"""

from __future__ import annotations

from dataclasses import dataclass

from hedwig.errors import UsageError
from hedwig.settings.declaration import setting


@dataclass(frozen=True, slots=True)
class SecuritySettings:
    tls_cert: str | None = setting(
        None, "this hub's certificate for the client listener (TLS on when set)"
    )
    tls_key: str | None = setting(None, "the client listener certificate's private key")
    tls_client_ca: str | None = setting(
        None, "CA of client certificates, which are then accepted as identities"
    )
    # Hub-to-hub requests (the storage role, claims) are served there only, to peers with a
    # certificate from the region's hub CA; required when authentication is on.
    internal_listen: str | None = setting(
        None, "HOST:PORT of the hub-to-hub listener (storage role, claims)"
    )
    internal_advertise: str | None = setting(
        None, "the address other hubs reach the internal listener at"
    )
    internal_ca: str | None = setting(
        None, "the region's hub CA: internal peers must present a certificate from it"
    )
    internal_cert: str | None = setting(
        None, "this hub's certificate from the hub CA (served, and presented to peers)"
    )
    internal_key: str | None = setting(None, "the internal certificate's private key")
    authenticate: bool = setting(
        False, "every connection must prove an identity (a certificate or a token)"
    )
    authorize: bool = setting(False, "every request needs an ACL allowing it (default deny)")
    super_users: str = setting("", "comma-separated principals allowed everything")
    # A JSON list of objects with hedwig.security.tokens.TokenIssuer's fields (issuer,
    # audience(s), discovery_url or jwks_url, ca_file, bearer_token_file), or @FILE.
    token_issuers: str = setting("", "trusted token issuers: a JSON list, or @FILE holding one")
    # cert-manager renews well before expiry; half a minute of an old certificate is harmless.
    cert_reload_interval_s: float = setting(
        30.0, "seconds between checks of the certificate files for rotation"
    )

    def __post_init__(self) -> None:
        if bool(self.tls_cert) != bool(self.tls_key):
            raise UsageError("TLS needs both tls_cert and tls_key")
        internal_tls = (self.internal_ca, self.internal_cert, self.internal_key)
        if any(internal_tls) and not all(internal_tls):
            raise UsageError("the internal listener's TLS needs internal_ca, _cert and _key")
        if any(internal_tls) and not self.internal_listen:
            raise UsageError("internal_ca/_cert/_key are for the internal listener: set it")
        if self.authorize and not self.authenticate:
            raise UsageError("authorization needs authentication (authenticate = true)")
        if self.authenticate and not self.internal_listen:
            raise UsageError(
                "with authentication on, hub-to-hub requests need the internal listener "
                "(internal_listen, with internal_ca/_cert/_key)"
            )
        if self.authenticate and not (self.tls_client_ca or self.token_issuers.strip()):
            raise UsageError(
                "authentication needs a way to authenticate: tls_client_ca, token_issuers, or both"
            )

    @property
    def super_user_set(self) -> frozenset[str]:
        return frozenset(u.strip() for u in self.super_users.split(",") if u.strip())
