"""The hub's Prometheus metrics, in a registry of its own (several hubs may share a process).

``HubMetrics`` is the hub's ``HubEvents``: its parts report what happens, and the counters
follow. Gauges that describe the present (connections, backlogs, load rates) are set when
Prometheus scrapes and when a load report is made (``export_load``).

Series per topic are bounded whatever the number of topics a hub owns: the traffic counters
(``hedwig_messages_in_total{topic}`` and friends) and ``hedwig_topic_rate`` have a series for
each topic the last load report listed (its hottest), and the traffic of every other topic is
counted in the series without a topic label, so ``sum by (pod)`` is still the hub's total. A
topic that leaves the list loses its series (a new one starts if it comes back: ``rate()``
sees a fresh counter). Backlogs are exported for the subscriptions with the largest ones.

The same events feed the load reports: ``take_traffic`` hands over what each topic carried
since the last call, for the topics that carried anything only, so a report costs nothing for
idle topics (``hedwig.hub.reporting.load``).
"""

from __future__ import annotations

import contextlib
import heapq
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from hedwig.hub.reporting.denials import DENIAL_SERIES, DenialReason
from hedwig.hub.reporting.disconnects import Disconnect
from hedwig.hub.reporting.events import LossKind
from hedwig.hub.reporting.queue_metrics import QueueGauges
from hedwig.hub.reporting.queue_stats import QueueStats
from hedwig.hub.reporting.rates import TopicRates
from hedwig.hub.reporting.series import NamespaceSeries
from hedwig.metadata.managers import SessionState
from hedwig.metadata.records import HubLoad
from hedwig.protocol.kinds import MoveKind

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
    def __init__(self, *, series_limit: int = 100) -> None:
        # Topics with traffic series of their own at most (``HubConfig.load_report_topics``).
        self.series_limit = series_limit
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
        self.insecure = Gauge(
            "hedwig_hub_insecure",
            "1 while a listener off loopback serves anyone, without TLS and authentication",
            registry=r,
        )
        self.claims = Counter("hedwig_topic_claims", "Topics claimed", registry=r)
        self.recovered = Counter(
            "hedwig_bundle_topics_recovered", "Topics taken over as bundles were won", registry=r
        )
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
        self.auth_denied = Counter(
            "hedwig_auth_denied",
            "Requests refused by authentication or authorization, by operation and reason",
            ["op", "reason"],
            registry=r,
        )
        self.connections_closed = Counter(
            "hedwig_connections_closed",
            "Connections the hub closed itself, by reason (not authenticated in time, a frame "
            "left incomplete, too many unauthenticated, malformed input, expired credentials)",
            ["reason"],
            registry=r,
        )
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
        # Queues (subscriptions acknowledged message by message), as their owner sees them.
        self.queues = QueueGauges(r)
        self.topic_mode = Gauge(
            "hedwig_topic_mode",
            "How each topic this hub owns is served (1 for its current mode: single, fan-out)",
            ["topic", "mode"],
            registry=r,
        )
        self.topic_serving_hubs = Gauge(
            "hedwig_topic_serving_hubs",
            "Hubs delivering each topic this hub owns to subscribers (1 for a single-hub topic; "
            "a fan-out topic's alive delivery hubs)",
            ["topic"],
            registry=r,
        )
        self.topics_delivering = Gauge(
            "hedwig_topics_delivering",
            "Fan-out topics this hub delivers for another owner (tailing its log)",
            registry=r,
        )
        self.namespace_throttled = NamespaceSeries(
            Counter(
                "hedwig_namespace_throttled_seconds",
                "Time publishes waited for their namespace's publish rate quota, for the "
                "namespaces throttled first (series_limit of them); the rest unlabelled",
                ["namespace"],
                registry=r,
            ),
            series_limit,
        )
        self.storage_bytes = Counter(
            "hedwig_storage_bytes_written", "Bytes written to ledger storage", registry=r
        )
        self.topic_rate = TopicRates()
        r.register(self.topic_rate)
        self.topic_rate_floor = Gauge(
            "hedwig_topic_rate_floor",
            "Messages per second (in plus out) of the least busy topic in hedwig_topic_rate when "
            "the hub owns more topics than its load report lists, else 0",
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
            "Ledgers this hub audits that stayed under-replicated after its last audit "
            "(repairs that failed, and ledgers waiting for a hub gone less than the "
            "re-replication delay)",
            registry=r,
        )
        self.ledger_repairs = Counter(
            "hedwig_ledger_repairs", "Under-replicated ledgers repaired by this hub", registry=r
        )
        self.left_over_ledgers = Counter(
            "hedwig_left_over_ledgers_deleted",
            "Ledgers no topic's log could name any more (left by a claim or a collection that "
            "died half-way), deleted by this hub's auditor",
            registry=r,
        )
        self.ledgers_waiting = Gauge(
            "hedwig_ledgers_waiting_for_replica",
            "Ledgers this hub audits with a replica on a hub gone for less than the "
            "re-replication delay (not copied yet: it may come back)",
            registry=r,
        )
        self.hubs_waiting = Gauge(
            "hedwig_hubs_waiting_for_rereplication",
            "Hubs that left the region less than the re-replication delay ago, as this hub's "
            "auditor saw them go (their ledgers are counted as waiting from the audit at the "
            "delay's end)",
            registry=r,
        )
        self.rereplicated_bytes = Counter(
            "hedwig_rereplicated_bytes",
            "Bytes this hub's audits copied to replicas, by kind (replace: a lost replica "
            "re-created elsewhere; catch-up: a replica that missed entries; grow: a ledger "
            "written with too few replicas)",
            ["kind"],
            registry=r,
        )
        self.storage_syncs = Counter(
            "hedwig_storage_syncs", "fdatasync calls by the group commit", registry=r
        )
        self.storage_logs = Gauge(
            "hedwig_storage_entry_logs",
            "Entry logs on this hub's disk (64 MiB each at most; the current one included)",
            registry=r,
        )
        self.storage_compactions = Counter(
            "hedwig_storage_compactions",
            "Entry logs compacted (their live records copied forward, the log removed)",
            registry=r,
        )
        self.deletions = Counter(
            "hedwig_topic_deletions",
            "Topics this hub deleted, by reason (requested, expired)",
            ["reason"],
            registry=r,
        )
        self.subscription_expiries = Counter(
            "hedwig_subscription_expiries",
            "Subscriptions this hub deleted because nobody used them for their expiry time",
            registry=r,
        )
        self.loop_stall_seconds = Histogram(
            "hedwig_loop_stall_seconds",
            "Stalls of the hub's event loop over 2 s (nothing served, no session kept alive "
            "meanwhile), by length; gc: pauses of the cycle collector over 2 s",
            ["cause"],
            buckets=(2.5, 5.0, 10.0, 20.0, 60.0),
            registry=r,
        )
        self.gc_pause_seconds = Histogram(
            "hedwig_gc_pause_seconds",
            "Pauses of the hub's cycle collector, by generation (each one stops the event "
            "loop; generation 2 walks the whole heap)",
            ["generation"],
            buckets=(0.005, 0.02, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0),
            registry=r,
        )
        self.metadata_write_failures = Counter(
            "hedwig_metadata_write_failures",
            "Writes to the metadata store that failed and were not retried at once, by record "
            "(load: the hub's load report, which placement and rebalancing read)",
            ["record"],
            registry=r,
        )
        # Every label value exists from the start, so rate() and increase() see first events.
        for reason in ("requested", "expired"):
            self.deletions.labels(reason)
        for move in MoveKind:
            self.releases.labels(move.label)
        for loss in LossKind:
            self.losses.labels(loss.value)
        for op, reason in DENIAL_SERIES:
            self.auth_denied.labels(op, reason.value)
        for closed in Disconnect:
            self.connections_closed.labels(closed.value)
        # The labelled series of the per-request counters, looked up once each: ``labels()``
        # takes a lock and builds a key every time, a measurable share of a one-message
        # publish. Keyed by series (a topic's own, or "" for the unlisted rest).
        self._in: dict[str, tuple[Counter, Counter]] = {}
        self._out: dict[str, tuple[Counter, Counter]] = {}
        self._answers: dict[tuple[str, str], Counter] = {}
        self.metadata_write_failures.labels("load")
        # Topics with traffic series of their own (the last report's list), and the traffic of
        # every topic since the load tracker last took it.
        self._listed: set[str] = set()
        self._traffic: dict[str, list[int]] = {}
        for counter in (self.messages_in, self.bytes_in, self.messages_out, self.bytes_out):
            counter.labels("")

    def export_backlogs(self, backlogs: Iterable[tuple[str, str, int]], top: int) -> None:
        """``hedwig_subscriber_backlog`` for the ``top`` largest (topic, subscriber, backlog)."""
        self.subscriber_backlog.clear()
        for topic, subscriber, backlog in heapq.nlargest(top, backlogs, key=lambda b: b[2]):
            self.subscriber_backlog.labels(topic, subscriber).set(backlog)

    def export_queues(self, queues: Iterable[QueueStats], top: int) -> None:
        """The queue gauges for the ``top`` queues with most unacknowledged messages."""
        self.queues.export(queues, top)

    # HubEvents ------------------------------------------------------------------------------

    def _series(self, topic: str) -> str:
        """The label value ``topic``'s traffic is counted under: its own while it is listed,
        or while fewer than ``series_limit`` topics are (a new topic gets its own series at
        once on a hub with few topics), else the unlabelled rest."""
        if topic in self._listed:
            return topic
        if len(self._listed) < self.series_limit:
            self._listed.add(topic)
            return topic
        return ""

    def _count(
        self,
        topic: str,
        messages: int,
        size: int,
        children_of: dict[str, tuple[Counter, Counter]],
        counters: tuple[Counter, Counter],
        at: int,
    ) -> None:
        """Count traffic in (``at`` 0) or out (2): the topic's series (its labelled children
        cached in ``children_of``) and the per-topic totals ``take_traffic`` hands over."""
        series = self._series(topic)
        children = children_of.get(series)
        if children is None:
            children = children_of[series] = (
                counters[0].labels(series),
                counters[1].labels(series),
            )
        children[0].inc(messages)
        children[1].inc(size)
        t = self._traffic.get(topic)
        if t is None:
            t = self._traffic[topic] = [0, 0, 0, 0]
        t[at] += messages
        t[at + 1] += size

    def published(self, topic: str, messages: int, size: int) -> None:
        self._count(topic, messages, size, self._in, (self.messages_in, self.bytes_in), 0)

    def publish_answered(self, seconds: float) -> None:
        self.publish_latency.observe(seconds)

    def export_plans(self, plans: dict[str, tuple[str, int]], delivering: int) -> None:
        """Each owned topic's mode and serving hubs; the topics delivered for others."""
        self.topic_mode.clear()
        self.topic_serving_hubs.clear()
        for topic, (mode, serving) in plans.items():
            self.topic_mode.labels(topic, mode).set(1)
            self.topic_serving_hubs.labels(topic).set(serving)
        self.topics_delivering.set(delivering)

    def delivered(self, topic: str, messages: int, size: int) -> None:
        self._count(topic, messages, size, self._out, (self.messages_out, self.bytes_out), 2)

    def take_traffic(self) -> dict[str, tuple[int, int, int, int]]:
        """Messages and bytes in and out per topic since the last call (topics with any)."""
        traffic, self._traffic = self._traffic, {}
        return {topic: (t[0], t[1], t[2], t[3]) for topic, t in traffic.items()}

    def claimed(self, topic: str, ownerless_s: float | None) -> None:
        self.claims.inc()
        if ownerless_s is not None:
            self.ownerless.observe(ownerless_s)

    def released(self, topic: str, kind: MoveKind) -> None:
        self.releases.labels(kind.label).inc()

    def recovered_in_bulk(self, topics: int) -> None:
        self.recovered.inc(topics)

    def lost(self, topic: str, kind: LossKind) -> None:
        self.losses.labels(kind.value).inc()

    def owned_changed(self, count: int) -> None:
        self.topics_owned.set(count)

    def deleted(self, topic: str, *, expired: bool) -> None:
        self.deletions.labels("expired" if expired else "requested").inc()

    def subscription_expired(self, topic: str, subscriber: str) -> None:
        self.subscription_expiries.inc()

    def redirected(self, topic: str) -> None:
        self.redirects.inc()

    def denied(self, op: str, reason: DenialReason) -> None:
        self.auth_denied.labels(op, reason.value).inc()

    def disconnected(self, reason: Disconnect) -> None:
        self.connections_closed.labels(reason.value).inc()

    def metadata_write_failed(self, record: str) -> None:
        self.metadata_write_failures.labels(record).inc()

    def answered(self, op: str, status: str) -> None:
        child = self._answers.get((op, status))
        if child is None:
            child = self._answers[op, status] = self.requests.labels(op, status)
        child.inc()

    def session_changed(self, state: SessionState) -> None:
        for s in SessionState:
            self.zk_session.labels(s.value).set(1 if s is state else 0)
        if state is SessionState.LOST:
            self.session_losses.inc()

    # present-state gauges ------------------------------------------------------------------

    def export_load(self, report: HubLoad) -> None:
        """The load report, as gauges too (the same numbers the policy sees): per topic for the
        topics it lists (the hottest), so the series stay bounded whatever the topic count."""
        # Fan-out topics this hub delivers for their owners keep their series too.
        listed = set(report.topic_loads) | set(report.delivering)
        traffic = (self.messages_in, self.bytes_in, self.messages_out, self.bytes_out)
        for gone in self._listed - listed:
            for counter in traffic:
                with contextlib.suppress(KeyError):
                    counter.remove(gone)
            self._in.pop(gone, None)  # the cached children of a removed series
            self._out.pop(gone, None)
        for new in listed - self._listed:
            for counter in traffic:
                counter.labels(new)  # from zero, so rate() sees its first messages
        self._listed = listed
        self.topic_rate.loads = report.topic_loads
        truncated = report.topics > len(report.topic_loads)
        rates = (t.msg_in + t.msg_out for t in report.topic_loads.values())
        floor = min(rates, default=0.0) if truncated else 0.0
        self.topic_rate_floor.set(floor)
        self.hub_rate.labels("in", "messages").set(report.msg_in)
        self.hub_rate.labels("out", "messages").set(report.msg_out)
        self.hub_rate.labels("in", "bytes").set(report.bytes_in)
        self.hub_rate.labels("out", "bytes").set(report.bytes_out)
        self.hub_cpu.set(report.cpu)
