"""The hub's security settings (``docs/security.md``): TLS, the internal listener, identities.

Everything is off for a bare hub (tests, ``hedwig dev up``): plaintext, anonymous, and the
storage role on the client port; such a hub listens on loopback, or starts only when told
``insecure`` (``hedwig.settings.exposure``). The chart, the operator and ``hedwig dev up
--secure`` turn it on. Certificates and keys are PEM files, reloaded when they change
(rotation without a restart). The group refuses combinations that cannot work (a certificate
without its key, authorization without authentication, authentication with no way to prove an
identity, or with hub-to-hub requests left on the client port).
"""

from __future__ import annotations

from dataclasses import dataclass

from hedwig.errors import UsageError
from hedwig.security.pins import parse_pins
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

    # A certificate of the hub CA is a hub's only where that CA signs for hubs alone. A
    # shared CA (a cert-manager ClusterIssuer) signs for whoever may create a Certificate:
    # pin the hubs' key then (hedwig.security.pins). The operator's pools pin `own`.
    internal_peer_keys: str = setting(
        "",
        "keys internal peers must hold besides a certificate of the hub CA, comma-separated: "
        "own (this hub's own internal key, which every hub shares) and sha256/BASE64 pins "
        "(default: any certificate of the hub CA)",
    )
    # Off: a hub open to the network (a listener off loopback without TLS and authentication,
    # hedwig.settings.exposure) refuses to start. Anonymous clients could then delete ledgers.
    insecure: bool = setting(
        False,
        "start even with a listener off loopback open to anyone who reaches it (no TLS or no "
        "authentication): they can publish, read and delete topics and ledgers",
        flag="--insecure",
        env="HEDWIG_INSECURE",
    )
    # Before a connection has authenticated (authentication on) it is anyone's: what it may
    # cost is bounded in size, time and number (hedwig.hub.front.doorway). Thirty anonymous
    # connections each holding all but the last byte of a 16 MiB frame took a hub from 214 to
    # 832 MB; 2,000 idle ones stayed open for good. A token is a few KiB (a Kubernetes one
    # about 1), and a client sends nothing else before its AUTHENTICATE is answered.
    unauthenticated_frame_bytes: int = setting(
        64 * 1024,
        "bytes; the largest frame a connection may send before it has authenticated (larger "
        "ones are skipped unread and answered MESSAGE_TOO_LARGE)",
    )
    # A client authenticates in its first round trip (a certificate in the handshake itself).
    unauthenticated_timeout_s: float = setting(
        10.0, "seconds a connection may stay open without authenticating"
    )
    incomplete_frame_timeout_s: float = setting(
        5.0, "seconds a frame begun before authenticating may stay incomplete"
    )
    # Each holds at most a frame of unauthenticated_frame_bytes, for at most the timeout.
    # Clients behind one NAT address share the per-address count, but each is unauthenticated
    # for a round trip only; an IPv6 peer is counted by its /64.
    unauthenticated_connections: int = setting(
        1024, "unauthenticated connections a hub holds at most (more are closed at once)"
    )
    unauthenticated_connections_per_ip: int = setting(
        128, "unauthenticated connections from one peer address at most (more are closed at once)"
    )
    # A client that cannot authenticate stops at its first UNAUTHENTICATED (never retried).
    unauthenticated_refusals: int = setting(
        3, "refused requests after which an unauthenticated connection is closed"
    )

    # Once authenticated a connection's frames may be the hub's largest: what its unfinished
    # frames may hold is bounded by principal, in all and in time instead
    # (hedwig.hub.front.unfinished). Twenty connections of one tenant, each all but the last
    # byte of a 16 MiB frame, took a hub from 85 to 416 MB.
    unfinished_frame_bytes_per_principal: int = setting(
        128 * 1024 * 1024,
        "bytes; what one principal's connections may hold in frames they have not finished "
        "(the connection whose frame goes past it is closed)",
    )
    unfinished_frame_bytes: int = setting(
        512 * 1024 * 1024,
        "bytes; what all authenticated connections may hold in frames they have not finished",
    )
    unfinished_frame_timeout_s: float = setting(
        60.0, "seconds a frame begun after authenticating may stay unfinished"
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
        if self.internal_peer_keys.strip():
            if not all(internal_tls):
                raise UsageError(
                    "internal_peer_keys pins the keys of the internal listener's TLS peers: "
                    "set internal_ca, internal_cert and internal_key"
                )
            parse_pins(self.internal_peer_keys)  # UsageError if malformed
        if self.authenticate and not (self.internal_listen and all(internal_tls)):
            # A plaintext internal listener takes whoever connects for a hub: it would serve
            # READ_ENTRY and DELETE_LEDGER to an anonymous client past every ACL.
            raise UsageError(
                "with authentication on, hub-to-hub requests need the internal listener with "
                "its TLS: set internal_listen, internal_ca, internal_cert and internal_key "
                "(the region's hub CA, and this hub's certificate from it)"
            )
        for name in (
            "unauthenticated_frame_bytes",
            "unauthenticated_timeout_s",
            "incomplete_frame_timeout_s",
            "unauthenticated_connections",
            "unauthenticated_connections_per_ip",
            "unauthenticated_refusals",
            "unfinished_frame_bytes_per_principal",
            "unfinished_frame_bytes",
            "unfinished_frame_timeout_s",
        ):
            if getattr(self, name) <= 0:
                raise UsageError(f"{name} must be positive")
        if self.unauthenticated_frame_bytes < 4096:
            raise UsageError("unauthenticated_frame_bytes must be at least 4096 (a token's frame)")
        if self.authenticate and not (self.tls_client_ca or self.token_issuers.strip()):
            raise UsageError(
                "authentication needs a way to authenticate: tls_client_ca, token_issuers, or both"
            )

    @property
    def super_user_set(self) -> frozenset[str]:
        return frozenset(u.strip() for u in self.super_users.split(",") if u.strip())
