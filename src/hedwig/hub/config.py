"""Hub settings: grouped, with units in the names and the reason for each default.

Every field can be set by a command-line flag (``hedwig hub --help``) or an environment
variable ``HEDWIG_<FIELD>`` (upper case), flags winning. Containers use the variables.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields

from hedwig.errors import MetadataError, UsageError
from hedwig.metadata.records import ReplicationConfig, TopicConfig
from hedwig.placement import PlacementPolicy
from hedwig.placement.rebalance import RebalanceConfig


@dataclass(frozen=True, slots=True)
class HubConfig:
    zk: str = "127.0.0.1:2181"
    region: str = "default"
    # Where clients connect. Port 0 picks a free port (tests); the advertised address is what
    # other hubs redirect clients to, so it must be reachable by them (a pod's DNS name).
    listen: str = "127.0.0.1:4080"
    advertise: str | None = None
    data_dir: str = "./hedwig-data"
    metrics_port: int | None = None  # None: no HTTP endpoint
    metrics_host: str = "127.0.0.1"
    # A hub that loses ZooKeeper for this long loses its session and every topic with it.
    # Failover after a crash takes about this long, so keep it short; too short and a GC
    # pause or a slow disk flaps ownership. (The original Hedwig used 2 s.)
    zk_session_timeout_s: float = 6.0
    placement: PlacementPolicy = PlacementPolicy.RANDOM
    # Region default replication, ENSEMBLE/WRITE_QUORUM/ACK_QUORUM: each ledger lives on
    # ENSEMBLE hubs, each entry is written to WRITE_QUORUM of them and acknowledged once
    # ACK_QUORUM have it on disk. 3/3/2 survives any one hub (and a second one for reads);
    # a single-hub cluster needs 1/1/1. Topics and the region's defaults znode override it.
    replication: str = "3/3/2"
    # Largest message (key + value + headers). The original Hedwig allowed 1.2 MB.
    max_message_size: int = 1024 * 1024
    # Consume marks are written to ZooKeeper at most this often per subscription, or after
    # this many messages, whichever comes first; always on detach and clean shutdown. A crash
    # can therefore redeliver at most this much, never lose anything.
    consume_flush_interval_s: float = 1.0
    consume_flush_messages: int = 50
    # Ledgers roll over past this size, which bounds recovery time and the unit of retention.
    ledger_max_bytes: int = 64 * 1024 * 1024
    cache_bytes: int = 32 * 1024 * 1024
    # Consumed messages stay readable this long for readers by sequence id (batch jobs).
    default_retention_ms: int | None = 24 * 3600 * 1000
    default_retention_bytes: int | None = None
    gc_interval_s: float = 60.0
    # How often each hub audits its share of the closed ledgers for lost or lagging replicas.
    audit_interval_s: float = 30.0
    load_report_interval_s: float = 5.0
    # Load reports older than this are ignored by placement.
    load_report_max_age_s: float = 30.0
    # Self-shedding (docs/architecture.md, "Moving topics"): each hub runs the shared
    # rebalancing policy every balance_interval_s and hands over the topics it moves off this
    # hub. Turn it off when an operator rebalances the pool.
    self_balance: bool = True
    balance_interval_s: float = 60.0
    rebalance: RebalanceConfig = field(default_factory=RebalanceConfig)
    # Messages pushed to a subscriber per DELIVER frame at most (bounded by the window too).
    delivery_batch_messages: int = 1000
    # Security (docs/security.md). Everything is off for a bare hub (tests, `hedwig dev up`):
    # plaintext, anonymous, and the storage role on the client port. The chart, the operator
    # and `hedwig dev up --secure` turn it on.
    # TLS on the client listener: this hub's certificate and key (PEM files, reloaded when
    # they change), and the CA that client certificates must come from (client certificates
    # are then accepted as identities).
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    # The internal listener: hub-to-hub requests (the storage role, claims) are served there
    # only, to peers with a certificate from the region's hub CA (mutual TLS with
    # internal_cert/internal_key, which this hub also presents to its peers). Required when
    # authentication is on.
    internal_listen: str | None = None
    internal_advertise: str | None = None
    internal_ca: str | None = None
    internal_cert: str | None = None
    internal_key: str | None = None
    # Every connection must prove an identity (a client certificate, or a token from one of
    # token_issuers); and with authorize, every request needs an ACL allowing it (default
    # deny). super_users (comma-separated principals: the operator's) may do everything.
    authenticate: bool = False
    authorize: bool = False
    super_users: str = ""
    # Trusted token issuers: a JSON list of objects with hedwig.security.tokens.TokenIssuer's
    # fields (issuer, audience(s), discovery_url or jwks_url, ca_file, bearer_token_file), or
    # @FILE holding one.
    token_issuers: str = ""
    # Certificates and keys are checked for rotation this often.
    cert_reload_interval_s: float = 30.0

    def __post_init__(self) -> None:
        self.replication_config  # noqa: B018 - validates the E/Qw/Qa string
        if self.max_message_size <= 0:
            raise UsageError("max_message_size must be positive")
        if self.zk_session_timeout_s <= 0:
            raise UsageError("zk_session_timeout_s must be positive")
        host, _, port = self.listen.rpartition(":")
        if not host or not port.isdigit():
            raise UsageError(f"listen must be HOST:PORT, got {self.listen!r}")
        self._check_security()

    def _check_security(self) -> None:
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

    @property
    def replication_config(self) -> ReplicationConfig:
        return parse_replication(self.replication)

    def topic_settings(self, config: TopicConfig) -> TopicSettings:
        """What an owned topic needs: the hub's settings, with the topic's own overrides."""
        return TopicSettings(
            max_message_size=config.max_message_size or self.max_message_size,
            delivery_batch_messages=self.delivery_batch_messages,
            consume_flush_messages=self.consume_flush_messages,
        )

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: object) -> HubConfig:
        """Defaults, then ``HEDWIG_*`` variables, then ``overrides`` (non-None only)."""
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for f in fields(cls):
            if f.name == "rebalance":
                continue  # a group of its own; set in code or by the operator
            raw = env.get(f"HEDWIG_{f.name.upper()}")
            if raw is not None:
                values[f.name] = _parse(f.type, raw, f.name)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]


def _parse(type_name: object, raw: str, name: str) -> object:
    t = str(type_name)
    try:
        if raw == "" and "None" in t:
            return None
        if t.startswith("bool"):
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError("expected true or false")
        if t.startswith("int"):
            return int(raw)
        if t.startswith("float"):
            return float(raw)
        if "PlacementPolicy" in t:
            return PlacementPolicy(raw)
        return raw
    except ValueError as exc:
        raise UsageError(f"HEDWIG_{name.upper()}={raw!r}: {exc}") from exc


def parse_replication(text: str) -> ReplicationConfig:
    """``"3/3/2"`` to a ReplicationConfig; ``UsageError`` if malformed or inconsistent."""
    parts = text.replace(" ", "").split("/")
    try:
        e, qw, qa = (int(p) for p in parts)
        return ReplicationConfig(e, qw, qa)
    except (ValueError, MetadataError) as exc:
        raise UsageError(
            f"replication must be ENSEMBLE/WRITE_QUORUM/ACK_QUORUM with "
            f"ensemble >= write quorum >= ack quorum >= 1, got {text!r}"
        ) from exc


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """The settings an owned topic works with (``HubConfig.topic_settings``)."""

    # Largest message accepted, in bytes (key + value + headers).
    max_message_size: int
    # Messages pushed to a subscriber per DELIVER frame at most (bounded by its window too).
    delivery_batch_messages: int
    # A subscription's consume mark is written after this many messages (or on a timer).
    consume_flush_messages: int
