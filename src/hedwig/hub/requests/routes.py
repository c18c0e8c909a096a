"""Which handler serves each request, per listener: one path per request.

Each listener's front end (``hedwig.hub.front.server``) calls one ``RequestRoutes``: a table
from request type to the handler that serves it, made once when the hub is wired, each entry
typed (``route`` pairs a frame class with a handler of that frame). The tables:

- the **client listener**: topic requests (``topics``), subscription requests
  (``subscriptions``), moves (``moves``); and, when the region's hubs have no internal
  listener, the storage role (``storage``) too, since hubs then reach each other there;
- the **internal listener**: the storage role, and the hub-to-hub requests of the topic side
  (claims as TOPIC_STATS with the redirected flag, fan-out tails as TAIL_TOPIC, a delivery
  hub's count as DELIVERY_STATS, PING).

A request a table does not hold is INVALID_REQUEST (the front end's access control refuses
most before they get here). Consumes are served inline, with no task: they are frequent and
need no I/O before their answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from hedwig.errors import InvalidRequestError
from hedwig.hub.front.server import ClientConnection
from hedwig.hub.requests.moves import TopicMoves
from hedwig.hub.requests.owned import OwnedTopics
from hedwig.hub.requests.storage import StorageRequests
from hedwig.hub.requests.subscriptions import SubscriptionRequests
from hedwig.hub.requests.topics import TopicRequests
from hedwig.protocol import (
    Ack,
    AddEntry,
    CloseSubscription,
    Consume,
    CreateSubscription,
    DeleteLedger,
    DeleteTopic,
    DeliveryStats,
    DescribeLanes,
    DescribeLinks,
    DescribeQueues,
    DescribeRegion,
    DescribeTopic,
    FenceLedgers,
    HubAlive,
    JoinSubscription,
    Nack,
    Ping,
    Publish,
    Read,
    ReadEntry,
    ReadLac,
    ReleaseBundle,
    ReleaseTopic,
    Reply,
    Request,
    ResetSubscription,
    StorageHello,
    Subscribe,
    TailTopic,
    TopicStats,
    Unsubscribe,
    WriteLacs,
)

R = TypeVar("R", bound=Request)
Route = Callable[[ClientConnection, Any], Awaitable[Reply | None]]


def route(
    kind: type[R], serve: Callable[[ClientConnection, R], Awaitable[Reply | None]]
) -> tuple[type[Request], Route]:
    """A table entry: ``serve`` takes the frames of ``kind`` (checked by the type checker)."""
    return cast(type[Request], kind), cast(Route, serve)


class RequestRoutes:
    """The ``hedwig.hub.front.server.RequestHandler`` of one listener."""

    def __init__(
        self,
        routes: Mapping[type[Request], Route],
        *,
        subscriptions: SubscriptionRequests,
        owned: OwnedTopics,
    ) -> None:
        self._routes = dict(routes)
        self._subscriptions = subscriptions
        self._owned = owned

    async def handle(self, conn: ClientConnection, frame: Request) -> Reply | None:
        serve = self._routes.get(type(frame))
        if serve is None:
            raise InvalidRequestError(f"unexpected frame {type(frame).__name__}")
        return await serve(conn, frame)

    def consume(self, conn: ClientConnection, frame: Consume) -> None:
        self._subscriptions.consume(conn, frame)

    def disconnected(self, conn: ClientConnection) -> None:
        self._owned.disconnected(conn)


@dataclass(frozen=True)
class HubRequests:
    """A hub's request handlers, made once, and the tables of its listeners."""

    owned: OwnedTopics
    topics: TopicRequests
    subscriptions: SubscriptionRequests
    moves: TopicMoves
    storage: StorageRequests

    def client_routes(self, *, with_storage: bool) -> RequestRoutes:
        """The client listener's table (``with_storage``: the hubs have no internal one)."""
        t, s, m = self.topics, self.subscriptions, self.moves
        table = dict(
            (
                route(Publish, t.publish),
                route(Read, t.read),
                route(TailTopic, t.tail_topic),
                route(DeliveryStats, t.delivery_stats),
                route(DescribeLanes, t.describe_lanes),
                route(DescribeRegion, t.describe_region),
                route(DescribeLinks, t.describe_links),
                route(TopicStats, t.topic_stats),
                route(DescribeTopic, t.describe_topic),
                route(DescribeQueues, t.describe_queues),
                route(DeleteTopic, t.delete_topic),
                route(Ping, t.ping),
                route(Subscribe, s.subscribe),
                route(Unsubscribe, s.unsubscribe),
                route(CloseSubscription, s.close_subscription),
                route(ResetSubscription, s.reset_subscription),
                route(JoinSubscription, s.join),
                route(CreateSubscription, s.create_subscription),
                route(Ack, s.ack),
                route(Nack, s.nack),
                route(ReleaseTopic, m.release_topic),
                route(ReleaseBundle, m.release_bundle),
            )
        )
        if with_storage:
            table.update(self._storage_routes())
        return RequestRoutes(table, subscriptions=s, owned=self.owned)

    def internal_routes(self) -> RequestRoutes:
        """The internal listener's table: hub-to-hub requests only."""
        t = self.topics
        table = dict(
            (
                route(TopicStats, t.topic_stats),
                route(TailTopic, t.tail_topic),
                route(DeliveryStats, t.delivery_stats),
                route(Ping, t.ping),
                # A queue owner's dead letters (``hedwig.hub.spreading.dead_letters``).
                route(Publish, t.publish),
            )
        )
        table.update(self._storage_routes())
        return RequestRoutes(table, subscriptions=self.subscriptions, owned=self.owned)

    def _storage_routes(self) -> dict[type[Request], Route]:
        st = self.storage
        return dict(
            (
                route(StorageHello, st.storage_hello),
                route(HubAlive, st.hub_alive),
                route(AddEntry, st.add_entry),
                route(ReadEntry, st.read_entry),
                route(ReadLac, st.read_lac),
                route(FenceLedgers, st.fence_ledgers),
                route(WriteLacs, st.write_lacs),
                route(DeleteLedger, st.delete_ledger),
            )
        )
