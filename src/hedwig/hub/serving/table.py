"""What a subscription request acts on: the table of a topic's subscriptions on this hub.

A topic's subscriptions are served on a hub in one of two places, which both offer this
interface: the topic itself when the hub owns it (``hedwig.hub.owning.topic.OwnedTopic``), or
the topic as the hub delivers it for its owner (a fan-out delivery hub,
``hedwig.hub.spreading.fanout.DeliveryTopic``). Which one serves a request is decided once,
in ``hedwig.hub.requests.places``.
"""

from __future__ import annotations

from typing import Protocol

from hedwig.hub.serving.peer import Peer
from hedwig.protocol import (
    Ack,
    CreateSubscription,
    JoinSubscription,
    Nack,
    ResetSubscription,
    Subscribe,
    Subscribed,
)


class SubscriptionTable(Protocol):
    async def subscribe(self, peer: Peer, req: Subscribe) -> Subscribed:
        """Find or create the subscription, and attach ``peer`` to it."""
        ...

    def consume(self, peer: Peer, subscriber: str, seq: int) -> None:
        """``peer``'s subscription has consumed everything up to ``seq``."""
        ...

    async def create_subscription(self, req: CreateSubscription, owner: str | None) -> Subscribed:
        """Create a subscription of a type with its delivery policy, ``owner``'s
        (``hedwig.hub.front.owners``)."""
        ...

    async def join(self, peer: Peer, req: JoinSubscription) -> Subscribed:
        """Find or create a failover or shared subscription, and add ``peer`` as a consumer."""
        ...

    def ack(self, peer: Peer, req: Ack) -> None:
        """``peer`` processed these messages of its subscription (``NotHeldError`` for any it
        does not hold)."""
        ...

    def nack(self, peer: Peer, req: Nack) -> None:
        """``peer`` did not process these messages: deliver them again."""
        ...

    async def close_subscription(self, peer: Peer, subscriber: str) -> None:
        """Detach ``peer`` from its subscription (which stays)."""
        ...

    async def unsubscribe(self, peer: Peer, subscriber: str) -> None:
        """Delete the subscription."""
        ...

    async def reset_subscription(self, req: ResetSubscription) -> Subscribed:
        """Move the subscription's consume mark."""
        ...
