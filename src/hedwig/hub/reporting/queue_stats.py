"""What the metrics show of a queue (a subscription acknowledged message by message): one
record per queue, made by its owner's ``QueueSubscription.stats`` and exported by
``Metrics.export_queues`` for the queues with most unacknowledged messages."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class QueueStats:
    topic: str
    subscriber: str
    consumers: int
    # Held by consumers, or waiting to be delivered again.
    unacked: int
    # Since this hub serves the queue: deliveries of messages delivered before, and messages
    # acknowledged unprocessed past their last delivery.
    redeliveries: int
    dropped: int
    # Published to the dead-letter topic and acknowledged here, since this hub serves it.
    dead_lettered: int
    # Since the oldest unacknowledged message (the one after the mark) was first delivered
    # here (0: it has not been).
    oldest_unacked_s: float
    # Delayed messages in the owner's index (``hedwig.hub.serving.delays``), and how often
    # one was spilled to be found again in the log (the index's bound reached).
    delayed: int = 0
    delays_spilled: int = 0
