"""The subscription requests: attach, consume, close, delete and reset a subscription; join
one as one of its consumers and acknowledge or nack its messages one by one.

Each finds the table it acts on through ``SubscriptionPlaces`` (the one seam that says where a
subscription is served) and hands the request to it. A lane's name is served only as a lane
its topic's plan lists (``TopicLanes.check_name``). Attaching, resetting and deleting a
subscription that exists need its owner (``SubscriptionOwners``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from hedwig.hub.front.owners import SubscriptionOwners, owner_of
from hedwig.hub.front.server import ClientConnection
from hedwig.hub.requests.places import SubscriptionPlaces
from hedwig.hub.serving.policies import check_dead_letter
from hedwig.hub.serving.table import SubscriptionTable
from hedwig.hub.spreading.lanes import TopicLanes
from hedwig.protocol import (
    Ack,
    CloseSubscription,
    Consume,
    CreateSubscription,
    JoinSubscription,
    Nack,
    Reply,
    ResetSubscription,
    Subscribe,
    Unsubscribe,
    validate_name,
)


class SubscriptionRequests:
    def __init__(
        self, *, places: SubscriptionPlaces, lanes: TopicLanes, owners: SubscriptionOwners
    ) -> None:
        self._places = places
        self._lanes = lanes
        self._owners = owners

    async def subscribe(self, conn: ClientConnection, req: Subscribe) -> Reply:
        table = await self._placed(conn, req)
        return await self._owned_attach(conn, "subscribe", req, table, table.subscribe)

    async def join(self, conn: ClientConnection, req: JoinSubscription) -> Reply:
        table = await self._placed(conn, req)
        return await self._owned_attach(conn, "join", req, table, table.join)

    async def _placed(
        self, conn: ClientConnection, req: Subscribe | JoinSubscription | CreateSubscription
    ) -> SubscriptionTable:
        """The table that serves ``req``'s subscription here, its names checked first."""
        validate_name(req.subscriber, what="subscriber")
        await self._lanes.check_name(req.topic)
        return await self._places.placed(
            conn, req.topic, req.subscriber, redirected=req.redirected, create=True
        )

    async def _owned_attach(
        self,
        conn: ClientConnection,
        op: str,
        req: Subscribe | JoinSubscription,
        table: SubscriptionTable,
        attach: Callable[[ClientConnection, Any], Awaitable[Reply]],
    ) -> Reply:
        """Attach ``conn`` as ``op`` does if the subscription is its principal's (or new);
        one found made a moment ago by someone else is detached again and refused."""
        existed = await self._owners.check(conn, op, req.topic, req.subscriber)
        answer = await attach(conn, req)
        if not existed:  # made now, or a moment ago by someone else: which, the record says
            await self._owners.check_attached(
                conn,
                req.topic,
                req.subscriber,
                lambda: table.close_subscription(conn, req.subscriber),
            )
        return answer

    async def create_subscription(self, conn: ClientConnection, req: CreateSubscription) -> Reply:
        if req.dead_letter is not None:  # named well, then its creator's to publish to
            check_dead_letter(req.topic, req.dead_letter)
            self._owners.check_dead_letter(conn, req.topic, req.dead_letter)
        table = await self._placed(conn, req)
        return await table.create_subscription(req, owner_of(conn.principal))

    async def ack(self, conn: ClientConnection, req: Ack) -> None:
        self._places.attached(conn, req.topic, req.subscriber).ack(conn, req)

    async def nack(self, conn: ClientConnection, req: Nack) -> None:
        self._places.attached(conn, req.topic, req.subscriber).nack(conn, req)

    def consume(self, conn: ClientConnection, req: Consume) -> None:
        self._places.attached(conn, req.topic, req.subscriber).consume(
            conn, req.subscriber, req.seq
        )

    async def close_subscription(self, conn: ClientConnection, req: CloseSubscription) -> None:
        table = self._places.attached(conn, req.topic, req.subscriber)
        await table.close_subscription(conn, req.subscriber)

    async def unsubscribe(self, conn: ClientConnection, req: Unsubscribe) -> None:
        table = await self._places.holding(conn, req.topic, req.subscriber)
        await self._owners.check(conn, "unsubscribe", req.topic, req.subscriber)
        await table.unsubscribe(conn, req.subscriber)

    async def reset_subscription(self, conn: ClientConnection, req: ResetSubscription) -> Reply:
        validate_name(req.subscriber, what="subscriber")
        table = await self._places.placed(
            conn, req.topic, req.subscriber, redirected=req.redirected
        )
        await self._owners.check(conn, "reset_subscription", req.topic, req.subscriber)
        return await table.reset_subscription(req)
