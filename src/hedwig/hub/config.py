"""Hub settings: grouped, with units in the names and the reason for each default.

Every field can be set by a command-line flag (``hedwig hub --help``) or an environment
variable ``HEDWIG_<FIELD>`` (upper case), flags winning. Containers use the variables.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any

from hedwig.errors import MetadataError, UsageError
from hedwig.metadata.records import ReplicationConfig, TopicConfig
from hedwig.placement import PlacementPolicy
from hedwig.placement.rebalance import RebalanceConfig
from hedwig.placement.scaling import ScalingConfig
from hedwig.security.pins import parse_pins


def setting(default: Any, doc: str) -> Any:
    """A field with the sentence ``hedwig hub --help`` and ``docs/operations.md`` show."""
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True, slots=True)
class HubConfig:
    zk: str = setting(
        "127.0.0.1:2181",
        "the metadata store: ZooKeeper HOST:PORT[,...], zk://... or etcd://HOST:PORT[/PREFIX]",
    )
    region: str = setting("default", "the region: hubs of one region share its topics")
    # The advertised address is what other hubs redirect clients to, so it must be reachable
    # by them (a pod's DNS name); port 0 picks a free port (tests).
    listen: str = setting("127.0.0.1:4080", "HOST:PORT clients connect to (port 0: any)")
    advertise: str | None = setting(
        None, "the address other hubs send clients to (default: the listen address)"
    )
    data_dir: str = setting("./hedwig-data", "where this hub's ledger replicas are stored")
    # Kept in data_dir/hub-id; ledgers name the hub's replicas by it (hedwig.hub.process.identity).
    hub_id: str | None = setting(
        None, "this hub's stable id (default: the one in data_dir, made on first start)"
    )
    metrics_port: int | None = setting(
        None, "HTTP port of /metrics, /healthz, /readyz and /drain (default: none)"
    )
    metrics_host: str = setting("127.0.0.1", "the HTTP endpoint's listen host")
    # A peer address proves nothing about who is local: a service mesh's sidecar forwards
    # callers from anywhere from 127.0.0.6 or 127.0.0.1. A file in the hub's own container
    # does (hedwig.hub.process.http).
    drain_socket: str | None = setting(
        None,
        "a Unix socket (mode 0600) serving the HTTP endpoint too, where POST /drain needs no "
        "token: for a preStop hook (`hedwig drain --socket`)",
    )
    # Failover after a crash takes about this long, so keep it short; too short and a GC
    # pause or a slow disk flaps ownership. (The original Hedwig used 2 s.)
    zk_session_timeout_s: float = setting(
        6.0,
        "seconds; a hub that loses the metadata store this long loses its topics, and a "
        "crashed hub's topics move after about this long",
    )
    placement: PlacementPolicy = setting(  # noqa: RUF009 - an enum member, immutable
        PlacementPolicy.RANDOM,
        "how a hub is chosen for a new topic: random, load-weighted, least-loaded, consistent-hash "
        "(under the first two, the hub a client asked keeps it while its load is within 5 "
        "percent of the region's mean)",
    )
    # Each ledger lives on ENSEMBLE hubs, each entry is written to WRITE_QUORUM of them and
    # acknowledged once ACK_QUORUM have it on disk. Topics and the region's defaults override.
    replication: str = setting(
        "3/3/2",
        "region default ENSEMBLE/WRITE_QUORUM/ACK_QUORUM; 3/3/2 survives any one hub, a "
        "single hub needs 1/1/1",
    )
    max_message_size: int = setting(
        1024 * 1024, "bytes; larger messages (key + value + headers) are refused"
    )
    # A crash can redeliver at most this much, never lose anything.
    consume_flush_interval_s: float = setting(
        1.0, "seconds between writes of a subscription's consume mark (at most)"
    )
    consume_flush_messages: int = setting(
        50, "a consume mark is written after this many messages (or the interval)"
    )
    ledger_max_bytes: int = setting(
        64 * 1024 * 1024, "bytes; ledgers roll over past this (the unit of recovery and GC)"
    )
    entry_log_bytes: int = setting(
        64 * 1024 * 1024,
        "bytes; the entry log every ledger stored here shares is closed and the next begun "
        "past this (the unit of compaction)",
    )
    cache_bytes: int = setting(
        32 * 1024 * 1024,
        "bytes of newest messages per topic served from memory to its readers (kept once it "
        "is read or subscribed to, let go once it is idle a minute)",
    )
    default_retention_ms: int | None = setting(
        24 * 3600 * 1000,
        "milliseconds consumed messages stay readable by sequence id (batch readers)",
    )
    default_retention_bytes: int | None = setting(
        None, "bytes of consumed messages kept for readers by sequence id (default: no limit)"
    )
    # Pulsar's inactive-topic deletion and subscription expiration, off unless set here, in
    # the region's defaults, or per topic.
    default_inactive_topic_expiry_ms: int | None = setting(
        None,
        "milliseconds; a topic nobody published to or attached to this long, with no "
        "subscription left, is deleted (default: never)",
    )
    default_subscription_expiry_ms: int | None = setting(
        None,
        "milliseconds; a subscription nobody attached to or consumed from this long is "
        "deleted, so it stops pinning its messages (default: never)",
    )
    gc_interval_s: float = setting(
        60.0, "seconds between garbage collections of consumed ledgers and expiry checks"
    )
    # The topic-management design's periodic abandonment: topics drift between hubs even
    # without load differences.
    release_on_rollover: bool = setting(False, "give a topic up whenever its ledger rolls over")
    audit_interval_s: float = setting(
        30.0, "seconds between audits of this hub's share of ledgers for lost replicas"
    )
    # Between full audits only the ledgers this hub suspects are read, unless the region's
    # membership changed (``hedwig.ledger.auditor``). Left-over ledgers are looked for at
    # most this often, among ledgers at least this old.
    audit_full_interval_s: float = setting(
        3600.0,
        "seconds between audits of every ledger of the share when no hub came or went (and "
        "between looks for left-over ledgers)",
    )
    # BookKeeper's lost-bookie recovery delay: a hub that restarts (a rolling upgrade, a
    # rescheduled pod) comes back with its disk, so copying its ledgers at once is wasted work.
    rereplication_delay_s: float = setting(
        120.0,
        "seconds a hub may be gone before its ledger replicas are re-created on other hubs",
    )
    load_report_interval_s: float = setting(
        5.0, "seconds between load reports in the hub's alive record"
    )
    # The report is one record rewritten every interval: it must not grow with the topics a
    # hub owns (ZooKeeper refuses records over 1 MB and drops the session of whoever tries).
    # The rebalancer moves hot topics, so the hottest ones are what it needs to see.
    load_report_topics: int = setting(
        100, "topics listed in a load report: the hottest ones (totals cover all of them)"
    )
    load_report_max_age_s: float = setting(
        30.0, "seconds after which placement ignores a load report"
    )
    # Turn it off when an operator rebalances the pool.
    self_balance: bool = setting(True, "shed load to other hubs by the shared rebalancing policy")
    balance_interval_s: float = setting(60.0, "seconds between self-balancing cycles")
    rebalance: RebalanceConfig = field(default_factory=RebalanceConfig)
    # Off by default: spreading a topic is a bigger change than moving one, and an operator
    # may pin modes instead (Topic.spec.scaling).
    auto_fan_out: bool = setting(
        False,
        "spread a topic's subscribers over delivery hubs when they alone overload its hub, "
        "and go back when they no longer do (the shared scaling policy)",
    )
    scaling: ScalingConfig = field(default_factory=ScalingConfig)
    delivery_batch_messages: int = setting(
        1000, "messages pushed to a subscriber per DELIVER frame at most"
    )
    # Security (docs/security.md). Everything is off for a bare hub (tests, `hedwig dev up`):
    # plaintext, anonymous, every request allowed, and the storage role served on the client
    # port. The operator (the chart's pools are secured by default) and `hedwig dev up
    # --secure` turn it on. Certificates and keys are PEM files; each listener's certificate
    # and key are reloaded when their files change (rotation without a restart); the CAs are
    # read at start.
    tls_cert: str | None = setting(
        None, "this hub's certificate for the client listener (TLS on when set)"
    )
    tls_key: str | None = setting(None, "the client listener certificate's private key")
    tls_client_ca: str | None = setting(
        None, "CA of client certificates, which are then accepted as identities"
    )
    # Hub-to-hub traffic goes here when it is set: the storage role is served here only
    # (INTERNAL_ONLY on the client port, as with authentication on), beside a handing-off
    # hub's claim request (TOPIC_STATS), fan-out tails, DELIVERY_STATS and PING; a client's
    # redirected request still claims on the client port. With internal_ca/_cert/_key it
    # requires a certificate from the region's hub CA; without them it is plaintext and takes
    # whoever connects for a hub. Required when authentication is on (its TLS too).
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
    # A certificate of the hub CA is a hub's only where that CA signs for hubs alone. A
    # shared CA (a cert-manager ClusterIssuer) signs for whoever may create a Certificate:
    # pin the hubs' key then (hedwig.security.pins). The operator's pools pin `own`.
    internal_peer_keys: str = setting(
        "",
        "keys internal peers must hold besides a certificate of the hub CA, comma-separated: "
        "own (this hub's own internal key, which every hub shares) and sha256/BASE64 pins "
        "(default: any certificate of the hub CA)",
    )
    authenticate: bool = setting(
        False, "every connection must prove an identity (a certificate or a token)"
    )
    authorize: bool = setting(False, "every request needs an ACL allowing it (default deny)")
    super_users: str = setting("", "comma-separated principals allowed everything")
    # A JSON list of objects with hedwig.security.tokens.TokenIssuer's fields (issuer,
    # audience(s), discovery_url or jwks_url, ca_file, bearer_token_file), or @FILE.
    token_issuers: str = setting("", "trusted token issuers: a JSON list, or @FILE holding one")
    cert_reload_interval_s: float = setting(
        30.0, "seconds between checks of the certificate files for rotation"
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

    def __post_init__(self) -> None:
        self.replication_config  # noqa: B018 - validates the E/Qw/Qa string
        if self.max_message_size <= 0:
            raise UsageError("max_message_size must be positive")
        if self.zk_session_timeout_s <= 0:
            raise UsageError("zk_session_timeout_s must be positive")
        if self.load_report_topics < 0:
            raise UsageError("load_report_topics must not be negative")
        # Places in a log are 32-bit: a log plus the largest entry must stay under 4 GiB.
        if not 4096 <= self.entry_log_bytes <= 1 << 31:
            raise UsageError("entry_log_bytes must be between 4096 and 2 GiB")
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
        if self.internal_peer_keys.strip():
            if not all(internal_tls):
                raise UsageError(
                    "internal_peer_keys pins the keys of the internal listener's TLS peers: "
                    "set internal_ca, internal_cert and internal_key"
                )
            parse_pins(self.internal_peer_keys)  # UsageError if malformed
        if self.authorize and not self.authenticate:
            raise UsageError("authorization needs authentication (authenticate = true)")
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
