"""Settings of subscriptions whose consumers acknowledge message by message (failover,
shared and key-shared): one group, with units in the names and the reason for each default.

The hub's owned topics and fan-out deliveries pass it to their ``TopicSubscriptions``;
``QueueSettings()`` is what a hub runs with until the command line sets the group.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class QueueSettings:
    # A consumer that asks for no window gets this much room: enough to keep a worker busy
    # over a round trip, small enough that one slow worker does not sit on the queue
    # (Pulsar's receiver queue is 1,000).
    consumer_window: int = 1_000
    # Delivered and unacknowledged messages of one subscription, every consumer together,
    # at most: what the owner keeps per message in memory is bounded by it (Pulsar stops
    # dispatch at 200,000 per subscription).
    max_unacked: int = 200_000
    # Acknowledgements that make the state worth writing now rather than at the next flush
    # interval: a failover redelivers at most what was acknowledged since the last write.
    flush_acks: int = 500

    def __post_init__(self) -> None:
        if self.consumer_window < 1 or self.max_unacked < 1 or self.flush_acks < 1:
            raise ValueError("queue settings must be positive")
