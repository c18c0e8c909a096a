"""What DESCRIBE_TOPIC and DESCRIBE_QUEUES answer of a topic's subscriptions.

DESCRIBE_TOPIC (``subscription_infos``): every subscription in the store with its mark and
when it was last active, and the ones served here as they stand now (attached or not, their
live mark). DESCRIBE_QUEUES (``queue_infos``): each one's type and, for the ones this owner
serves, what its consumers hold. Rules of the second:

- Every subscription in the metadata store is listed, by name, with the type its record
  keeps (a record without a policy is exclusive).
- A subscription served here (touched since this hub owns the topic) shows its live state:
  a queue's ``QueueSubscription.stats`` (consumers, unacknowledged, redelivered, dropped, the
  oldest unacknowledged message's age); an exclusive one its one consumer, if attached, and
  nothing unacknowledged (it consumes cumulatively: what it has not consumed is backlog).
- One not served here has no consumer and nothing held: its counts are 0, and what it has
  not acknowledged is the backlog past its mark, which TOPIC_DESCRIPTION gives.

The counts of redeliveries and drops are this hub's since it serves the subscription, as the
metrics' are (``hedwig.hub.reporting.queue_stats``): they start again at 0 on a new owner.
"""

from __future__ import annotations

from collections.abc import Mapping

from hedwig.hub.serving.queue import QueueSubscription
from hedwig.hub.serving.subscription import Subscription
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.records import SubscriptionState, SubscriptionType
from hedwig.protocol import QueueInfo, SubscriptionInfo


async def subscription_infos(
    store: MetadataStore, topic: str, served: Mapping[str, Subscription | QueueSubscription]
) -> tuple[SubscriptionInfo, ...]:
    """The subscriptions of ``topic`` in ``store``, those ``served`` here as they are now."""
    stored = await store.subscriptions.read_subscriptions(topic)
    infos: dict[str, SubscriptionInfo] = {}
    for name, got in stored.items():
        state = got.value.state or SubscriptionState()
        active = state.last_active_ms or state.created_ms
        infos[name] = SubscriptionInfo(name, state.consumed_seq, False, active)
    for name, sub in served.items():
        attached = any(not p.closed for p in sub.peers)
        infos[name] = SubscriptionInfo(name, sub.consumed_seq, attached, sub.last_active_ms)
    return tuple(infos[n] for n in sorted(infos))


async def queue_infos(
    store: MetadataStore, topic: str, served: Mapping[str, Subscription | QueueSubscription]
) -> tuple[QueueInfo, ...]:
    """The subscriptions of ``topic`` in ``store`` and those ``served`` here, by name."""
    stored = await store.subscriptions.read_subscriptions(topic)
    infos = {name: QueueInfo(name, got.value.type, 0, 0, 0, 0, 0) for name, got in stored.items()}
    for name, sub in served.items():
        if sub.lost:
            continue
        if isinstance(sub, QueueSubscription):
            s = sub.stats()
            infos[name] = QueueInfo(
                name,
                sub.policy.type,
                s.consumers,
                s.unacked,
                s.redeliveries,
                s.dropped,
                round(s.oldest_unacked_s * 1000),
            )
        else:
            attached = sum(1 for p in sub.peers if not p.closed)
            infos[name] = QueueInfo(name, SubscriptionType.EXCLUSIVE, attached, 0, 0, 0, 0)
    return tuple(infos[n] for n in sorted(infos))
