"""The replicator's metrics, one series per linked region (never per topic: a hub may own a
million topics, and a region has a handful of links).

- ``hedwig_replication_lag_messages{region}``: messages in the linked region's logs of the
  topics this hub replicates from it, not yet applied here (summed over those topics, as last
  measured: each topic's lag is measured every ``LAG_INTERVAL_S``).
- ``hedwig_replication_lag_seconds{region}``: how old the oldest message delivered from the
  region and not yet applied here is (0 when nothing is pending).
- ``hedwig_replicated_messages_total{region}``: messages appended here from the region.
- ``hedwig_replicated_topics{region}``: topics replicated from it now.
- ``hedwig_replication_errors_total{region}``: times a topic's replication from the region
  failed and was started again (the region out of reach, the topic moving on either side).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class ReplicationMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        # Messages appended from each region since the hub started (``Links.replicated``).
        self.totals: dict[str, int] = {}
        r = registry
        self.lag_messages = Gauge(
            "hedwig_replication_lag_messages",
            "Messages of a linked region not yet applied here (topics this hub replicates)",
            ["region"],
            registry=r,
        )
        self.lag_seconds = Gauge(
            "hedwig_replication_lag_seconds",
            "Age of the oldest message delivered from a linked region and not yet applied",
            ["region"],
            registry=r,
        )
        self.replicated = Counter(
            "hedwig_replicated_messages",
            "Messages appended here from a linked region",
            ["region"],
            registry=r,
        )
        self.topics = Gauge(
            "hedwig_replicated_topics",
            "Topics this hub replicates from a linked region now",
            ["region"],
            registry=r,
        )
        self.errors = Counter(
            "hedwig_replication_errors",
            "Times a topic's replication from a linked region failed and started again",
            ["region"],
            registry=r,
        )

    def appended(self, region: str, messages: int) -> None:
        self.replicated.labels(region).inc(messages)
        self.totals[region] = self.totals.get(region, 0) + messages
