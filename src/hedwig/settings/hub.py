"""The hub's settings, in groups, with units in the names and the reason for each default.

``HubConfig`` holds one frozen group per concern: where the hub is and what it talks to
(``connection``), its HTTP endpoint (``http``), its ledgers on disk (``storage``), how long
consumed messages and idle topics stay (``retention``), what a subscriber gets
(``delivery``), the search for lost replicas (``audit``), how topics are placed
(``placement``) and balanced (``balance``), TLS, authentication and authorization
(``security``), and the linked regions (``replication``). Each group checks its own values
when built (``UsageError``).

Every field made with ``setting`` is a flag (``hedwig hub --help``) and a variable
``HEDWIG_<NAME>`` (``hedwig.settings.sources``), flags winning; containers use the variables,
which the operator writes from these same declarations. The rebalancer's and the scaler's
tuning (``balance.rebalance``, ``balance.scaling``) are set in code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hedwig.errors import MetadataError, UsageError
from hedwig.metadata.bundles import DEFAULT_BUNDLES, MAX_BUNDLES
from hedwig.metadata.records import ReplicationConfig, TopicConfig
from hedwig.placement import PlacementPolicy
from hedwig.placement.rebalance import RebalanceConfig
from hedwig.placement.scaling import ScalingConfig
from hedwig.settings.declaration import setting
from hedwig.settings.replication import ReplicationSettings
from hedwig.settings.security import SecuritySettings
from hedwig.settings.sources import load


@dataclass(frozen=True, slots=True)
class ConnectionSettings:
    # The same URL for hubs, commands, the Spark source and the operator (docs/operations.md).
    metadata_url: str = setting(
        "127.0.0.1:2181",
        "the metadata store's URL: ZooKeeper HOST:PORT[,...], zk://... or "
        "etcd://HOST:PORT[/PREFIX]",
        flag="--metadata",
        env="HEDWIG_METADATA",
        flag_aliases=("--zk",),
        env_aliases=("HEDWIG_ZK",),
    )
    region: str = setting("default", "the region: hubs of one region share its topics")
    # The advertised address is what other hubs redirect clients to, so it must be reachable
    # by them (a pod's DNS name); port 0 picks a free port (tests).
    listen: str = setting("127.0.0.1:4080", "HOST:PORT clients connect to (port 0: any)")
    advertise: str | None = setting(
        None, "the address other hubs send clients to (default: the listen address)"
    )
    # Clients outside the network the hubs share (another VPC, a laptop, off-cluster
    # services) reach a hub at another address than its neighbours do, through a NodePort or a
    # load balancer. They connect to a second client listener, and every address the hub
    # names on it (redirects, moves, DESCRIBE_REGION) is the named hub's external one
    # (hedwig.hub.front.outward): the port a connection came to says where its client is.
    external_listen: str | None = setting(
        None,
        "HOST:PORT of the external client listener, for clients outside the hubs' network "
        "(default: none)",
    )
    # A pool's hubs share their settings, so one value can list every hub by its id.
    external_advertise: str | None = setting(
        None,
        "the address external clients reach this hub at, HOST:PORT, or ID=HOST:PORT,... by "
        "hub id (storage.hub_id); needed with external_listen",
    )
    # Failover after a crash takes about this long, so keep it short; too short and a GC
    # pause or a slow disk flaps ownership. (The original Hedwig used 2 s.)
    metadata_session_timeout_s: float = setting(
        6.0,
        "seconds; a hub that loses the metadata store this long loses its topics, and a "
        "crashed hub's topics move after about this long",
        flag_aliases=("--zk-session-timeout",),
        env_aliases=("HEDWIG_ZK_SESSION_TIMEOUT_S",),
    )

    def __post_init__(self) -> None:
        if self.metadata_session_timeout_s <= 0:
            raise UsageError("metadata_session_timeout_s must be positive")
        _check_address("listen", self.listen)
        if self.external_listen is not None:
            _check_address("external_listen", self.external_listen)
            if not self.external_advertise:
                raise UsageError(
                    "external_listen needs external_advertise: the address external clients "
                    "reach this hub at (a NodePort on its node, a load balancer)"
                )
        elif self.external_advertise:
            raise UsageError("external_advertise is for the external listener: set external_listen")
        for entry in external_entries(self.external_advertise or ""):
            _check_address("external_advertise", entry[1])

    def external_address(self, hub_id: str) -> str:
        """The address this hub advertises to external clients, by its id (``""``: none)."""
        entries = external_entries(self.external_advertise or "")
        if len(entries) == 1 and entries[0][0] is None:
            return entries[0][1]
        return next((address for name, address in entries if name == hub_id), "")


def external_entries(text: str) -> list[tuple[str | None, str]]:
    """``HOST:PORT`` as ``[(None, HOST:PORT)]``; ``ID=HOST:PORT,...`` as ``(ID, HOST:PORT)``s."""
    entries: list[tuple[str | None, str]] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, address = part.rpartition("=")
        if sep and not name:
            raise UsageError(f"external_advertise: {part!r} names no hub id before '='")
        entries.append((name if sep else None, address))
    if len(entries) > 1 and any(name is None for name, _ in entries):
        raise UsageError(
            "external_advertise lists several addresses: give each as ID=HOST:PORT (by hub id)"
        )
    return entries


def _check_address(name: str, address: str) -> None:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"{name} must be HOST:PORT, got {address!r}")


@dataclass(frozen=True, slots=True)
class HttpSettings:
    # Off unless asked for: a bare hub (tests, several on one machine) needs no port of its own.
    metrics_port: int | None = setting(
        None, "HTTP port of /metrics, /healthz, /readyz and /drain (default: none)"
    )
    # Loopback by default: /drain hands topics over; in a pod the kubelet needs the pod's IP.
    metrics_host: str = setting("127.0.0.1", "the HTTP endpoint's listen host")
    # A peer address proves nothing about who is local: a service mesh's sidecar forwards
    # callers from anywhere from 127.0.0.6 or 127.0.0.1. A file in the hub's own container
    # does (hedwig.hub.process.http).
    drain_socket: str | None = setting(
        None,
        "a Unix socket (mode 0600) serving the HTTP endpoint too, where POST /drain needs no "
        "token: for a preStop hook (`hedwig drain --socket`)",
    )


@dataclass(frozen=True, slots=True)
class StorageSettings:
    data_dir: str = setting("./hedwig-data", "where this hub's ledger replicas are stored")
    # Kept in data_dir/hub-id; ledgers name the hub's replicas by it (hedwig.hub.process.identity).
    hub_id: str | None = setting(
        None, "this hub's stable id (default: the one in data_dir, made on first start)"
    )
    # Each ledger lives on ENSEMBLE hubs, each entry is written to WRITE_QUORUM of them and
    # acknowledged once ACK_QUORUM have it on disk. Topics and the region's defaults override.
    replication: str = setting(
        "3/3/2",
        "region default ENSEMBLE/WRITE_QUORUM/ACK_QUORUM; 3/3/2 survives any one hub, a "
        "single hub needs 1/1/1",
    )
    # Large enough that a busy topic rolls over every few minutes, small enough that a
    # recovery (which reads the last ledger) stays short.
    ledger_max_bytes: int = setting(
        64 * 1024 * 1024, "bytes; ledgers roll over past this (the unit of recovery and GC)"
    )
    # Compaction rewrites a log at a time: this bounds the space it needs beside the data.
    entry_log_bytes: int = setting(
        64 * 1024 * 1024,
        "bytes; the entry log every ledger stored here shares is closed and the next begun "
        "past this (the unit of compaction)",
    )
    # Readers that keep up (the common case) never touch the disk.
    cache_bytes: int = setting(
        32 * 1024 * 1024,
        "bytes of newest messages per topic served from memory to its readers (kept once it "
        "is read or subscribed to, let go once it is idle a minute)",
    )

    def __post_init__(self) -> None:
        self.replication_config  # noqa: B018 - validates the E/Qw/Qa string
        # Places in a log are 32-bit: a log plus the largest entry must stay under 4 GiB.
        if not 4096 <= self.entry_log_bytes <= 1 << 31:
            raise UsageError("entry_log_bytes must be between 4096 and 2 GiB")

    @property
    def replication_config(self) -> ReplicationConfig:
        return parse_replication(self.replication)


@dataclass(frozen=True, slots=True)
class RetentionSettings:
    # A day: batch readers that run nightly find yesterday's messages.
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
    # Space comes back within a minute of its messages being consumed, at one listing of
    # the region's ledgers a minute.
    gc_interval_s: float = setting(
        60.0, "seconds between garbage collections of consumed ledgers and expiry checks"
    )


@dataclass(frozen=True, slots=True)
class DeliverySettings:
    # A frame holds a message whole; a megabyte keeps a hub's buffers small.
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
    # Large enough to amortize a frame, small enough not to starve other subscribers.
    delivery_batch_messages: int = setting(
        1000, "messages pushed to a subscriber per DELIVER frame at most"
    )

    def __post_init__(self) -> None:
        if self.max_message_size <= 0:
            raise UsageError("max_message_size must be positive")


@dataclass(frozen=True, slots=True)
class BundleSettings:
    """Whether the hub owns topics by bundle, and how a region's map starts
    (``hedwig.hub.owning.bundles``). Off: a hub owns topics one by one, each with its own
    owner record. Every hub of a region must run with the same choice (a region of both kinds
    would have two owners of one topic, one on its topic's record and one on its bundle's)."""

    # Off until bundles are the default: a region switches by stopping every hub first.
    enabled: bool = setting(
        False,
        "own topics by bundle (hash ranges of topic names), one owner record per bundle; "
        "every hub of a region alike",
        flag="--bundles",
        env="HEDWIG_BUNDLES",
    )
    # A power of two: the map's equal ranges stay equal when split in halves. 32, Pulsar's
    # 5.0 default: enough for three hubs to share evenly, few enough that each holds many.
    initial_bundles: int = setting(
        DEFAULT_BUNDLES, "bundles a region's map starts with, a power of two"
    )
    # A topic used less often pays a take-over (a few milliseconds, and a new ledger) per
    # use; one used more often stays loaded, so an idle topic costs memory only while in use.
    unload_idle_s: float = setting(
        300.0,
        "seconds a topic of an owned bundle stays loaded with nobody publishing or attached",
    )

    def __post_init__(self) -> None:
        if self.unload_idle_s <= 0:
            raise UsageError(f"unload idle: seconds above 0, got {self.unload_idle_s}")
        n = self.initial_bundles
        if n < 1 or n > MAX_BUNDLES or n & (n - 1):
            raise UsageError(f"initial bundles: a power of two from 1 to {MAX_BUNDLES}, got {n}")


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """Subscriptions whose consumers acknowledge message by message (failover, shared and
    key-shared; ``hedwig.hub.serving.queue``)."""

    # Enough to keep a worker busy over a round trip, small enough that one slow worker does
    # not sit on the queue (Pulsar's receiver queue is 1,000).
    consumer_window: int = setting(
        1_000, "messages a queue consumer that asks for no window may hold unacknowledged"
    )
    # What the owner keeps per message in memory is bounded by it (Pulsar stops dispatch at
    # 200,000 per subscription).
    max_unacked: int = setting(
        200_000,
        "delivered and unacknowledged messages of one queue subscription, all its consumers "
        "together, at most",
    )
    # A failover redelivers at most what was acknowledged since the last write.
    flush_acks: int = setting(
        500, "acknowledgements after which a queue's state is written before the interval"
    )

    # A due time is 16 bytes and a few dozen of Python's; 50,000 of them are a few megabytes
    # a subscription (Pulsar's bucketed tracker seals a bucket at 50,000 indexes). The rest
    # are found again by reading the log (``hedwig.hub.serving.delays``).
    max_delayed: int = setting(
        50_000,
        "delayed messages of one queue subscription whose due times the owner keeps in "
        "memory; beyond it they are found again by reading the log",
    )
    # A week, as a subscription's delay (``DeliveryPolicy``): further than that is a
    # scheduler's job, and the log keeps every message until it is delivered.
    max_deliver_delay_s: float = setting(
        7 * 24 * 3600.0,
        "seconds; a message whose hedwig-deliver-at is further ahead than this is refused",
    )

    def __post_init__(self) -> None:
        if self.consumer_window < 1 or self.max_unacked < 1 or self.flush_acks < 1:
            raise UsageError("queue settings must be positive")
        if self.max_delayed < 1 or not self.max_deliver_delay_s > 0:
            raise UsageError("queue settings must be positive")


@dataclass(frozen=True, slots=True)
class AuditSettings:
    # Lost replicas are found within half a minute of the hub that held them going.
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


@dataclass(frozen=True, slots=True)
class PlacementSettings:
    # Random spreads topics evenly enough without any load report.
    policy: PlacementPolicy = setting(  # noqa: RUF009 - an enum member, immutable
        PlacementPolicy.RANDOM,
        "how a hub is chosen for a new topic: random, load-weighted, least-loaded, consistent-hash "
        "(under the first two, the hub a client asked keeps it while its load is within 5 "
        "percent of the region's mean)",
        flag="--placement",
        env="HEDWIG_PLACEMENT",
    )
    # Load moves in seconds; a report every 5 s is one small write per hub.
    load_report_interval_s: float = setting(
        5.0, "seconds between load reports in the hub's alive record"
    )
    # The report is one record rewritten every interval: it must not grow with the topics a
    # hub owns (ZooKeeper refuses records over 1 MB and drops the session of whoever tries).
    # The rebalancer moves hot topics, so the hottest ones are what it needs to see.
    load_report_topics: int = setting(
        100, "topics listed in a load report: the hottest ones (totals cover all of them)"
    )
    # Six missed reports: the hub is gone or stuck.
    load_report_max_age_s: float = setting(
        30.0, "seconds after which placement ignores a load report"
    )

    def __post_init__(self) -> None:
        if self.load_report_topics < 0:
            raise UsageError("load_report_topics must not be negative")


@dataclass(frozen=True, slots=True)
class BalanceSettings:
    # Turn it off when an operator rebalances the pool.
    self_balance: bool = setting(True, "shed load to other hubs by the shared rebalancing policy")
    # A minute: a move pauses a topic briefly, so moves stay rare.
    balance_interval_s: float = setting(60.0, "seconds between self-balancing cycles")
    # The topic-management design's periodic abandonment: topics drift between hubs even
    # without load differences.
    release_on_rollover: bool = setting(False, "give a topic up whenever its ledger rolls over")
    # Off by default: spreading a topic is a bigger change than moving one, and an operator
    # may pin modes instead (Topic.spec.scaling).
    auto_fan_out: bool = setting(
        False,
        "spread a topic's subscribers over delivery hubs when they alone overload its hub, "
        "and go back when they no longer do (the shared scaling policy)",
    )
    rebalance: RebalanceConfig = field(default_factory=RebalanceConfig)
    scaling: ScalingConfig = field(default_factory=ScalingConfig)


@dataclass(frozen=True, slots=True)
class HubConfig:
    connection: ConnectionSettings = field(default_factory=ConnectionSettings)
    http: HttpSettings = field(default_factory=HttpSettings)
    storage: StorageSettings = field(default_factory=StorageSettings)
    retention: RetentionSettings = field(default_factory=RetentionSettings)
    delivery: DeliverySettings = field(default_factory=DeliverySettings)
    queues: QueueSettings = field(default_factory=QueueSettings)
    bundles: BundleSettings = field(default_factory=BundleSettings)
    audit: AuditSettings = field(default_factory=AuditSettings)
    placement: PlacementSettings = field(default_factory=PlacementSettings)
    balance: BalanceSettings = field(default_factory=BalanceSettings)
    security: SecuritySettings = field(default_factory=SecuritySettings)
    replication: ReplicationSettings = field(default_factory=ReplicationSettings)

    def __post_init__(self) -> None:
        self.replication.links(self.connection.region)  # none to this hub's own region

    def topic_settings(self, config: TopicConfig) -> TopicSettings:
        """What an owned topic needs: the hub's settings, with the topic's own overrides."""
        return TopicSettings(
            max_message_size=config.max_message_size or self.delivery.max_message_size,
            delivery_batch_messages=self.delivery.delivery_batch_messages,
            consume_flush_messages=self.delivery.consume_flush_messages,
            queues=self.queues,
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, /, **given: object) -> HubConfig:
        """Defaults, then ``HEDWIG_*`` variables, then ``given`` (settings by name, non-None)."""
        return load(cls, environ, **given)


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
    # Failover, shared and key-shared subscriptions' bounds.
    queues: QueueSettings = field(default_factory=QueueSettings)
