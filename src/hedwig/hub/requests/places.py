"""Where a subscription is served: the one seam every subscription request goes through.

A subscription of topic T is served on this hub from one of two tables
(``hedwig.hub.serving.table.SubscriptionTable``), or elsewhere:

- T's own table, when this hub owns T and T's plan sends the subscription to no delivery hub
  (or to this one);
- T's delivery table, when T's fan-out plan sends the subscription to this hub and another hub
  owns T (``hedwig.hub.spreading.fanout``; the table is made, and the owner's log tailed, on
  first use);
- elsewhere: the plan sends it to another hub (NOT_RESPONSIBLE naming it), or another hub owns
  T (the owner's redirect, from ``TopicOwnership.acquire``).

Three questions, one per kind of request:

- ``placed``: attaching and resetting follow the plan (a reset is made where the subscription
  is served, so its subscriber is told and its one mark writer stays that hub).
- ``attached``: consuming and closing act where the connection's subscription is attached,
  which for a moment after a plan change is not where the plan now sends it (a hand-off is
  make-before-break: ``TopicSubscriptions.hand_over``).
- ``holding``: deleting acts where the subscription is held in memory, else at the owner.

New ways of serving a subscription plug in here, not in the request handlers.
"""

from __future__ import annotations

from hedwig.errors import NoSuchSubscriptionError, NotResponsibleError
from hedwig.hub.front.server import ClientConnection
from hedwig.hub.requests.owned import OwnedTopics, touched
from hedwig.hub.serving.peer import Peer
from hedwig.hub.serving.table import SubscriptionTable
from hedwig.hub.spreading.fanout import FanOut, fanned_out
from hedwig.hub.spreading.plans import TopicPlans


class SubscriptionPlaces:
    def __init__(self, *, owned: OwnedTopics, fanout: FanOut, plans: TopicPlans) -> None:
        self._owned = owned
        self._ownership = owned.ownership
        self._fanout = fanout
        self._plans = plans

    async def placed(
        self,
        conn: ClientConnection,
        topic: str,
        subscriber: str,
        *,
        redirected: bool,
        create: bool = False,
    ) -> SubscriptionTable:
        """Where the plan serves ``subscriber`` of ``topic``, if here (``create``: the topic
        is created if it does not exist)."""
        target = await self._plans.assigned(topic, subscriber)
        if target is not None:
            if target != self._ownership.address:
                raise NotResponsibleError(
                    f"subscriber {subscriber!r} of fan-out topic {topic!r} is served by {target}",
                    owner=target,
                )
            if topic not in self._ownership.topics:
                touched(conn, topic)
                return await self._fanout.delivery(topic)
        owned = await self._owned.acquire(conn, topic, redirected, create=create)
        # Whether other hubs serve some of its subscriptions (a consume mark written there
        # then means this hub no longer serves that subscription).
        owned.subs.shared = fanned_out(await self._plans.plan(topic))
        return owned

    def attached(self, peer: Peer, topic: str, subscriber: str) -> SubscriptionTable:
        """Where ``peer``'s subscription ``subscriber`` of ``topic`` is attached here."""
        delivery = self._fanout.delivering.get(topic)
        if delivery is not None and delivery.subs.serves(peer, subscriber):
            return delivery
        owned = self._ownership.topics.get(topic)
        if owned is None:
            raise NoSuchSubscriptionError(f"topic {topic!r} is not served here")
        return owned

    async def holding(
        self, conn: ClientConnection, topic: str, subscriber: str
    ) -> SubscriptionTable:
        """Where ``subscriber`` of ``topic`` is held: a delivery here, else the owner."""
        delivery = self._fanout.delivering.get(topic)
        if delivery is not None and subscriber in delivery.subs.by_name:
            return delivery
        return await self._owned.acquire(conn, topic, False)
