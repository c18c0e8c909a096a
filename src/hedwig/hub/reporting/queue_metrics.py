"""The queue gauges: each queue's state as the owner serving it sees it since it took it
(``QueueStats``), for the queues with most unacknowledged messages (bounded series)."""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Gauge

from hedwig.hub.reporting.queue_stats import QueueStats

# (metric name, help, the ``QueueStats`` field it shows), in one place.
GAUGES: tuple[tuple[str, str, str], ...] = (
    ("hedwig_queue_consumers", "Consumers attached, per queue", "consumers"),
    (
        "hedwig_queue_unacked",
        "Messages delivered and not acknowledged, or waiting to be delivered again",
        "unacked",
    ),
    (
        "hedwig_queue_redeliveries",
        "Deliveries of a message delivered before (nacked, timed out, given back), "
        "since this hub serves the queue",
        "redeliveries",
    ),
    (
        "hedwig_queue_dropped",
        "Messages acknowledged unprocessed past their last delivery, since this hub "
        "serves the queue",
        "dropped",
    ),
    (
        "hedwig_queue_dead_lettered",
        "Messages published to the queue's dead-letter topic past their last delivery, "
        "and acknowledged, since this hub serves the queue",
        "dead_lettered",
    ),
    (
        "hedwig_queue_oldest_unacked_seconds",
        "How long ago the oldest unacknowledged message was first delivered",
        "oldest_unacked_s",
    ),
    ("hedwig_queue_delayed", "Delayed messages in the owner's index", "delayed"),
    (
        "hedwig_queue_delays_spilled",
        "Delayed messages left to the log past the index's bound, since this hub serves it",
        "delays_spilled",
    ),
)


class QueueGauges:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.gauges = tuple(
            (Gauge(name, doc, ["topic", "subscriber"], registry=registry), field)
            for name, doc, field in GAUGES
        )

    def export(self, queues: Iterable[QueueStats], top: int) -> None:
        """Every gauge for the ``top`` queues with most unacknowledged messages."""
        for gauge, _ in self.gauges:
            gauge.clear()
        for q in heapq.nlargest(top, queues, key=lambda q: q.unacked):
            for gauge, field in self.gauges:
                gauge.labels(q.topic, q.subscriber).set(getattr(q, field))
