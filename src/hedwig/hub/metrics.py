"""The hub's Prometheus metrics, in a registry of its own (several hubs may share a process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from hedwig.hub.reasons import LOSS_REASONS, MOVE_REASONS

LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.003,
    0.005,
    0.0075,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)


class HubMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.messages_in = Counter(
            "hedwig_messages_in", "Messages published and stored", ["topic"], registry=r
        )
        self.bytes_in = Counter("hedwig_bytes_in", "Payload bytes published", ["topic"], registry=r)
        self.messages_out = Counter(
            "hedwig_messages_out", "Messages delivered to subscribers", ["topic"], registry=r
        )
        self.bytes_out = Counter(
            "hedwig_bytes_out", "Payload bytes delivered", ["topic"], registry=r
        )
        self.publish_latency = Histogram(
            "hedwig_publish_latency_seconds",
            "Time from a publish request's arrival to its durable acknowledgement",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.requests = Counter(
            "hedwig_requests",
            "Requests answered, by operation and status",
            ["op", "status"],
            registry=r,
        )
        self.topics_owned = Gauge("hedwig_topics_owned", "Topics this hub owns", registry=r)
        self.connections = Gauge("hedwig_connections", "Open client connections", registry=r)
        self.claims = Counter("hedwig_topic_claims", "Topics claimed", registry=r)
        self.losses = Counter(
            "hedwig_topic_losses", "Topics lost without a hand-off", ["reason"], registry=r
        )
        self.releases = Counter(
            "hedwig_topic_releases", "Topics handed over gracefully", ["reason"], registry=r
        )
        self.ownerless = Histogram(
            "hedwig_topic_ownerless_seconds",
            "Time a topic spent without an owner before this hub claimed it (from the previous "
            "owner's hand-off, or its last message after a crash)",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300),
            registry=r,
        )
        self.session_losses = Counter(
            "hedwig_zk_session_losses",
            "ZooKeeper sessions this hub lost (expired); each drops every topic it owned",
            registry=r,
        )
        self.redirects = Counter("hedwig_redirects", "Requests redirected", registry=r)
        self.zk_session = Gauge(
            "hedwig_zk_session_state",
            "ZooKeeper session state (1 for the current state)",
            ["state"],
            registry=r,
        )
        self.subscriber_backlog = Gauge(
            "hedwig_subscriber_backlog",
            "Messages published but not yet consumed, per subscription",
            ["topic", "subscriber"],
            registry=r,
        )
        self.storage_bytes = Counter(
            "hedwig_storage_bytes_written", "Bytes written to ledger storage", registry=r
        )
        self.topic_rate = Gauge(
            "hedwig_topic_rate",
            "EWMA rate per topic as in the hub's load report (messages or bytes per second)",
            ["topic", "direction", "unit"],
            registry=r,
        )
        self.hub_rate = Gauge(
            "hedwig_hub_rate",
            "EWMA rate of the whole hub as in its load report",
            ["direction", "unit"],
            registry=r,
        )
        self.hub_cpu = Gauge("hedwig_hub_cpu", "CPU seconds per second used by the hub", registry=r)
        self.under_replicated = Gauge(
            "hedwig_ledgers_under_replicated",
            "Ledgers this hub audits that stayed under-replicated after its last audit",
            registry=r,
        )
        self.ledger_repairs = Counter(
            "hedwig_ledger_repairs", "Under-replicated ledgers repaired by this hub", registry=r
        )
        self.storage_syncs = Counter(
            "hedwig_storage_syncs", "fdatasync calls by the group commit", registry=r
        )
        # Every label value exists from the start, so rate() and increase() see first events.
        for reason in MOVE_REASONS:
            self.releases.labels(reason)
        for reason in LOSS_REASONS:
            self.losses.labels(reason)
