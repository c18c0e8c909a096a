"""The topic requests: publish, read, tail, describe, count and delete a topic, and describe
its subscriptions as queues.

Each finds its owned topic through ``OwnedTopics.acquire`` (served here, claimed, or a redirect)
and hands the request to it. Publishing to a topic served by lanes passes the lane's check
(``TopicLanes.publish_check``) once it is known not to be a duplicate. A publish to a namespace
over its publish rate quota waits its turn first (``hedwig.hub.front.quotas``). DELIVERY_STATS is
answered by any hub from what it delivers (the owner asks its delivery hubs), and
DESCRIBE_REGION by any hub from its registry of the region's hubs, and DESCRIBE_LINKS by any
hub from its replicator (``hedwig.hub.replicating``). Errors are raised as they
are; ``hedwig.hub.front.server`` turns them into answers.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from hedwig.hub.front.owners import SubscriptionOwners
from hedwig.hub.front.quotas import PublishQuotas
from hedwig.hub.front.server import ClientConnection
from hedwig.hub.reporting.events import HubEvents
from hedwig.hub.requests.owned import OwnedTopics
from hedwig.hub.spreading.fanout import FanOut
from hedwig.hub.spreading.lanes import TopicLanes
from hedwig.protocol import (
    DeleteTopic,
    DeliveryStats,
    DescribeLanes,
    DescribeLinks,
    DescribeQueues,
    DescribeRegion,
    DescribeTopic,
    Links,
    Messages,
    Ping,
    Publish,
    QueueDescription,
    Read,
    Region,
    Reply,
    TailTopic,
    TopicInfo,
    TopicStats,
    validate_name,
)
from hedwig.protocol.names import check_client_publisher_id

# The longest a TAIL_TOPIC waits for a message.
MAX_TAIL_WAIT_MS = 30_000


class TopicRequests:
    def __init__(
        self,
        *,
        owned: OwnedTopics,
        fanout: FanOut,
        lanes: TopicLanes,
        events: HubEvents,
        owners: SubscriptionOwners,
        links: Callable[[int], Links],
        quotas: PublishQuotas,
    ) -> None:
        self._quotas = quotas
        self._owned = owned
        self._links = links
        self._owners = owners
        self._ownership = owned.ownership
        self._fanout = fanout
        self._lanes = lanes
        self._events = events

    async def publish(self, conn: ClientConnection, req: Publish) -> Reply:
        start = time.perf_counter()
        check_client_publisher_id(req.publisher_id)
        check = await self._lanes.publish_check(req.topic)
        owned = await self._owned.acquire(conn, req.topic, req.redirected, create=True)
        # Held while its namespace is over its publish rate quota (back-pressure, never a
        # refusal); counted against it once it passes.
        await self._quotas.admit(req.topic, req.count, len(req.payload))
        answer = await owned.publish(conn, req, check)
        self._events.publish_answered(time.perf_counter() - start)
        return answer

    async def describe_region(self, conn: ClientConnection, req: DescribeRegion) -> Reply:
        """The region's alive hubs, this one first (a client learns where else to go)."""
        hubs = await self._ownership.choices.alive_hubs()
        boundaries, owners = await self._ownership.claims.region_map()
        return Region(
            request_id=req.request_id,
            region=self._ownership.config.connection.region,
            hubs=tuple(hubs),
            boundaries=boundaries,
            owners=owners,
        )

    async def describe_links(self, conn: ClientConnection, req: DescribeLinks) -> Reply:
        """This hub's links to other regions and its replication from each (its replicator)."""
        return self._links(req.request_id)

    async def read(self, conn: ClientConnection, req: Read) -> Reply:
        owned = await self._owned.acquire(conn, req.topic, req.redirected)
        return await owned.read(req)

    async def tail_topic(self, conn: ClientConnection, req: TailTopic) -> Reply:
        """READ with a wait: a delivery hub's long poll of the owner's confirmed log."""
        owned = await self._owned.acquire(conn, req.topic, req.redirected)
        if req.max_messages == 0:
            return Messages(
                request_id=req.request_id,
                first_available=owned.log.first_seq,
                last_seq=owned.log.last_seq,
            )
        if req.wait_ms and owned.log.last_seq <= req.after_seq:
            await owned.log.wait_beyond(req.after_seq, min(req.wait_ms, MAX_TAIL_WAIT_MS) / 1000)
        return await owned.read(
            Read(
                request_id=req.request_id,
                topic=req.topic,
                start_seq=req.after_seq + 1,
                max_messages=req.max_messages,
                max_bytes=req.max_bytes,
            )
        )

    async def describe_lanes(self, conn: ClientConnection, req: DescribeLanes) -> Reply:
        validate_name(req.topic)
        return await self._lanes.describe(req)

    async def delivery_stats(self, conn: ClientConnection, req: DeliveryStats) -> Reply:
        """Answered by any hub, from what it delivers (no redirect: the owner asks this hub)."""
        delivery = self._fanout.delivering.get(req.topic)
        if delivery is None:
            return TopicInfo(
                request_id=req.request_id, first_available=0, last_seq=0, subscribers=0
            )
        return TopicInfo(
            request_id=req.request_id,
            first_available=delivery.tail.first_seq,
            last_seq=delivery.tail.last_seq,
            subscribers=delivery.subs.attached_count(),
        )

    async def topic_stats(self, conn: ClientConnection, req: TopicStats) -> Reply:
        owned = await self._owned.acquire(conn, req.topic, req.redirected)
        return TopicInfo(
            request_id=req.request_id,
            first_available=owned.log.first_seq,
            last_seq=owned.log.last_seq,
            subscribers=len(owned.subscriptions),
        )

    async def describe_topic(self, conn: ClientConnection, req: DescribeTopic) -> Reply:
        owned = await self._owned.acquire(conn, req.topic, req.redirected)
        return await self._owners.visible(conn, req.topic, await owned.describe(req))

    async def describe_queues(self, conn: ClientConnection, req: DescribeQueues) -> Reply:
        owned = await self._owned.acquire(conn, req.topic, req.redirected)
        queues = await owned.subs.describe_queues()
        queues = await self._owners.visible_queues(conn, req.topic, queues)
        return QueueDescription(request_id=req.request_id, queues=queues)

    async def ping(self, conn: ClientConnection, req: Ping) -> None:
        return None

    async def delete_topic(self, conn: ClientConnection, req: DeleteTopic) -> None:
        await self._owned.acquire(conn, req.topic, req.redirected)
        if not req.force:
            await self._fanout.refuse_if_attached_elsewhere(req.topic)
        await self._ownership.delete(req.topic, force=req.force)
