"""What each request does on a hub: publish, subscribe, read, move, and the storage role.

Topic requests first find the topic through ``TopicOwnership.acquire`` (which serves it, claims
it, or raises ``NotResponsibleError`` naming the owner), then hand the request to the
``OwnedTopic``. Storage requests (from other hubs' ledger writers, recovery and auditors) go to
this hub's ``LocalStorage``. Moves hand a topic over gracefully and ask the destination to claim
it at once. Errors are raised as they are; ``hedwig.hub.front.server`` turns them into answers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from hedwig.clock import Clock
from hedwig.errors import (
    HedwigError,
    InvalidRequestError,
    NoSuchSubscriptionError,
    NoSuchTopicError,
    NotResponsibleError,
    ServiceUnavailableError,
    WrongReplicaError,
)
from hedwig.hub.front.access import AccessControl
from hedwig.hub.front.server import ClientConnection
from hedwig.hub.owning.ownership import TopicOwnership
from hedwig.hub.owning.peers import PeerDirectory
from hedwig.hub.owning.topic import OwnedTopic, TopicState
from hedwig.hub.reporting.events import HubEvents
from hedwig.hub.spreading.fanout import FanOut
from hedwig.hub.spreading.lanes import TopicLanes
from hedwig.ledger.storage import LocalStorage
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.plans import PlanMode
from hedwig.net.connection import HubConnection
from hedwig.net.transport import Network
from hedwig.protocol import (
    MAX_FENCED_LEDGERS,
    AddEntry,
    CloseSubscription,
    Consume,
    DeleteLedger,
    DeleteTopic,
    DeliveryStats,
    DescribeLanes,
    DescribeTopic,
    Entry,
    FencedLedgers,
    FenceLedgers,
    HubAlive,
    HubAliveAnswer,
    Lac,
    LedgerEnd,
    Messages,
    MoveKind,
    Ok,
    Ping,
    Publish,
    Read,
    ReadEntry,
    ReadLac,
    ReleaseTopic,
    Reply,
    Request,
    ResetSubscription,
    StorageHello,
    Subscribe,
    TailTopic,
    TopicInfo,
    TopicStats,
    Unsubscribe,
    WriteLacs,
    validate_name,
)

log = logging.getLogger(__name__)

# How long a released topic's destination is given to claim it (a TOPIC_STATS with the
# redirected flag), and to be connected to.
CLAIM_TIMEOUT_S = 10.0
CLAIM_CONNECT_TIMEOUT_S = 2.0
# The longest a TAIL_TOPIC waits for a message.
MAX_TAIL_WAIT_MS = 30_000
# The topics a connection's disconnection detaches it from, by name, up to this many; past
# it, every owned topic (``ClientConnection.topics``).
TOPICS_KEPT = 1_024


class HubRequests:
    """Serves requests for one hub (``hedwig.hub.front.server.RequestHandler``)."""

    def __init__(
        self,
        *,
        ownership: TopicOwnership,
        storage: LocalStorage,
        store: MetadataStore,
        events: HubEvents,
        network: Network,
        clock: Clock,
        access: AccessControl | None = None,
        peers: PeerDirectory | None = None,
        fanout: FanOut | None = None,
    ) -> None:
        self.ownership = ownership
        # Fan-out topics' delivery (None: this hub serves subscribers of the topics it owns
        # only, and ignores plans).
        self.fanout = fanout
        # Lanes follow the same plans (None with fanout None: plans are ignored).
        self.lanes = TopicLanes(fanout=fanout, store=store) if fanout is not None else None
        # Authorization's create check (None: authorization off); other hubs' internal
        # listeners, for claim requests (None: no internal listeners).
        self.access = access
        self.peers = peers
        self.storage = storage
        self.store = store
        self.events = events
        self.network = network
        self.clock = clock
        self._routes: dict[type, Callable[[ClientConnection, Any], Awaitable[Reply | None]]] = {
            Publish: self.publish,
            Subscribe: self.subscribe,
            Unsubscribe: self.unsubscribe,
            CloseSubscription: self.close_subscription,
            Read: self.read,
            TailTopic: self.tail_topic,
            DeliveryStats: self.delivery_stats,
            DescribeLanes: self.describe_lanes,
            TopicStats: self.topic_stats,
            ReleaseTopic: self.release_topic,
            Ping: self.ping,
            DeleteTopic: self.delete_topic,
            ResetSubscription: self.reset_subscription,
            DescribeTopic: self.describe_topic,
            AddEntry: self.add_entry,
            ReadEntry: self.read_entry,
            ReadLac: self.read_lac,
            FenceLedgers: self.fence_ledgers,
            WriteLacs: self.write_lacs,
            DeleteLedger: self.delete_ledger,
            StorageHello: self.storage_hello,
            HubAlive: self.hub_alive,
        }

    @property
    def address(self) -> str:
        return self.ownership.address

    async def handle(self, conn: ClientConnection, frame: Request) -> Reply | None:
        route = self._routes.get(type(frame))
        if route is None:
            raise InvalidRequestError(f"unexpected frame {type(frame).__name__}")
        return await route(conn, frame)

    def disconnected(self, conn: ClientConnection) -> None:
        if self.fanout is not None:
            self.fanout.detach_peer(conn)
        touched = conn.topics
        if touched is None:
            for each in list(self.ownership.topics.values()):
                each.detach_peer(conn)
            return
        for topic in touched:
            owned = self.ownership.topics.get(topic)
            if owned is not None:
                owned.detach_peer(conn)

    # topics -------------------------------------------------------------------------------

    async def _acquire(
        self, conn: ClientConnection, topic: str, redirected: bool, *, create: bool = False
    ) -> OwnedTopic:
        """The owned topic; only publishing and subscribing ``create`` it (and need the
        ``create`` permission for a topic that does not exist yet, with authorization on)."""
        if create and self.access is not None and topic not in self.ownership.topics:
            await self.access.check_create(
                conn, topic, lambda: self.store.topics.topic_exists(topic)
            )
        owned = await self.ownership.acquire(topic, redirected=redirected, create=create)
        _touched(conn, topic)
        return owned

    async def publish(self, conn: ClientConnection, req: Publish) -> Reply:
        start = time.perf_counter()
        check = await self.lanes.publish_check(req.topic) if self.lanes is not None else None
        owned = await self._acquire(conn, req.topic, req.redirected, create=True)
        answer = await owned.publish(conn, req, check)
        self.events.publish_answered(time.perf_counter() - start)
        return answer

    async def describe_lanes(self, conn: ClientConnection, req: DescribeLanes) -> Reply:
        validate_name(req.topic)
        if self.lanes is None:
            raise InvalidRequestError("this hub serves no plans, so no lanes")
        return await self.lanes.describe(req)

    async def subscribe(self, conn: ClientConnection, req: Subscribe) -> Reply:
        validate_name(req.subscriber, what="subscriber")
        if self.lanes is not None:
            await self.lanes.check_name(req.topic)
        if self.fanout is not None:
            target = await self.fanout.assigned(req.topic, req.subscriber)
            if target is not None and target != self.address:
                raise NotResponsibleError(
                    f"subscriber {req.subscriber!r} of fan-out topic {req.topic!r} is served "
                    f"by {target}",
                    owner=target,
                )
            if target is not None and req.topic not in self.ownership.topics:
                _touched(conn, req.topic)
                return await self.fanout.subscribe(conn, req)
        owned = await self._acquire(conn, req.topic, req.redirected, create=True)
        await self._share(owned)
        return await owned.subscribe(conn, req)

    async def _share(self, owned: OwnedTopic) -> None:
        """Tell the owned topic whether other hubs serve some of its subscriptions."""
        if self.fanout is not None:
            plan = await self.fanout.plan(owned.name)
            owned.subs.shared = plan is not None and plan.mode is PlanMode.FAN_OUT

    def consume(self, conn: ClientConnection, req: Consume) -> None:
        if self.fanout is not None and self.fanout.consume(
            conn, req.topic, req.subscriber, req.seq
        ):
            return
        owned = self.ownership.topics.get(req.topic)
        if owned is None or owned.state is not TopicState.OPEN:
            raise NoSuchSubscriptionError(
                f"topic {req.topic!r} is not served here; subscribe again"
            )
        owned.consume(conn, req.subscriber, req.seq)

    async def unsubscribe(self, conn: ClientConnection, req: Unsubscribe) -> None:
        if self.fanout is not None and await self.fanout.unsubscribe(
            conn, req.topic, req.subscriber
        ):
            return
        owned = await self._acquire(conn, req.topic, False)
        await owned.unsubscribe(conn, req.subscriber)

    async def close_subscription(self, conn: ClientConnection, req: CloseSubscription) -> None:
        if self.fanout is not None and await self.fanout.close_subscription(
            conn, req.topic, req.subscriber
        ):
            return
        owned = self.ownership.topics.get(req.topic)
        if owned is None:
            raise NoSuchSubscriptionError(f"topic {req.topic!r} is not served here")
        await owned.close_subscription(conn, req.subscriber)

    async def read(self, conn: ClientConnection, req: Read) -> Reply:
        owned = await self._acquire(conn, req.topic, req.redirected)
        return await owned.read(req)

    async def tail_topic(self, conn: ClientConnection, req: TailTopic) -> Reply:
        """READ with a wait: a delivery hub's long poll of the owner's confirmed log."""
        owned = await self._acquire(conn, req.topic, req.redirected)
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

    async def delivery_stats(self, conn: ClientConnection, req: DeliveryStats) -> Reply:
        """Answered by any hub, from what it delivers (no redirect: the owner asks this hub)."""
        delivery = self.fanout.delivering.get(req.topic) if self.fanout is not None else None
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
        owned = await self._acquire(conn, req.topic, req.redirected)
        return TopicInfo(
            request_id=req.request_id,
            first_available=owned.log.first_seq,
            last_seq=owned.log.last_seq,
            subscribers=len(owned.subscriptions),
        )

    async def describe_topic(self, conn: ClientConnection, req: DescribeTopic) -> Reply:
        owned = await self._acquire(conn, req.topic, req.redirected)
        return await owned.describe(req)

    async def ping(self, conn: ClientConnection, req: Ping) -> None:
        return None

    # lifecycle ----------------------------------------------------------------------------

    async def delete_topic(self, conn: ClientConnection, req: DeleteTopic) -> None:
        await self._acquire(conn, req.topic, req.redirected)
        if not req.force and self.fanout is not None:
            await self.fanout.refuse_if_attached_elsewhere(req.topic)
        await self.ownership.delete(req.topic, force=req.force)

    async def reset_subscription(self, conn: ClientConnection, req: ResetSubscription) -> Reply:
        validate_name(req.subscriber, what="subscriber")
        if self.fanout is not None:
            # A fan-out topic's subscription is reset where it is served, so its subscriber
            # is told (RESET) and its one mark writer stays that hub.
            target = await self.fanout.assigned(req.topic, req.subscriber)
            if target is not None and target != self.address:
                raise NotResponsibleError(
                    f"subscriber {req.subscriber!r} of fan-out topic {req.topic!r} is served "
                    f"by {target}",
                    owner=target,
                )
            if target is not None and req.topic not in self.ownership.topics:
                return await self.fanout.reset(req)
        owned = await self._acquire(conn, req.topic, req.redirected)
        await self._share(owned)
        return await owned.reset_subscription(req)

    # moves --------------------------------------------------------------------------------

    async def release_topic(self, conn: ClientConnection, req: ReleaseTopic) -> None:
        await self.move(req.topic, req.destination, req.kind, req.reason)

    async def move(self, topic: str, destination: str | None, kind: MoveKind, reason: str) -> bool:
        """Hand ``topic`` over gracefully (to ``destination`` if given); False if not ours.

        The destination is asked to claim the topic right away (a redirected request), so the
        hand-off does not wait for the next client request.
        """
        if destination is not None and destination != self.address:
            alive = {h.address for h in await self.store.hubs.list_hubs() if h.alive}
            if destination not in alive:
                raise InvalidRequestError(f"destination {destination} is not an alive hub")
        await self.ownership.settled(topic)
        if topic not in self.ownership.topics:
            got = await self.store.ownership.read_owner_info(topic)
            if got is not None and got.value.address != self.address:
                raise NotResponsibleError(
                    f"topic {topic!r} is owned by {got.value.address}", owner=got.value.address
                )
            if not await self.store.topics.topic_exists(topic):
                raise NoSuchTopicError(f"topic {topic!r} does not exist")
            if destination is not None:
                # Nobody owns it: what the caller wants is the destination owning it.
                asyncio.get_running_loop().create_task(self._ask_to_claim(destination, topic))
            return False
        if destination == self.address:
            return True
        moved = await self.ownership.release(topic, reason, destination)
        if moved:
            self.events.released(topic, kind)
            if destination is not None:
                asyncio.get_running_loop().create_task(self._ask_to_claim(destination, topic))
        return moved

    async def _ask_to_claim(self, destination: str, topic: str) -> None:
        try:
            # Hub to hub: the destination's internal listener when hubs have one.
            target = destination
            if self.peers is not None:
                target = await self.peers.internal_address(destination)
            conn = await HubConnection.open(
                target,
                network=self.network,
                clock=self.clock,
                timeout=CLAIM_CONNECT_TIMEOUT_S,
            )
        except HedwigError:
            return
        try:
            await conn.request(
                TopicStats(request_id=conn.next_id(), topic=topic, redirected=True),
                CLAIM_TIMEOUT_S,
            )
        except HedwigError as exc:
            log.info("destination %s did not claim %r at once: %s", destination, topic, exc)
        finally:
            conn.close()
            # Claimed there, or not at once: either way the hand-off's hold is over (and a
            # topic handed back here soon after is not sent back).
            self.ownership.choices.hand_off_ended(topic)

    # the storage role ---------------------------------------------------------------------

    async def storage_hello(self, conn: ClientConnection, req: StorageHello) -> Reply:
        """The sender means to reach replica ``req.replica``: this hub's id, or (ledgers from
        before ids) its address; anything else is another hub that listened here before."""
        if req.replica not in (self.storage.address, self.address):
            raise WrongReplicaError(
                f"replica {req.replica} is not here: this is hub {self.storage.address} at "
                f"{self.address} (the address was reused)"
            )
        return Ok(request_id=req.request_id, fences_batched=True, answers_hub_alive=True)

    async def hub_alive(self, conn: ClientConnection, req: HubAlive) -> Reply:
        """Read the registry for a hub that cannot (``HubAlive``). Only a read made now is an
        answer: this hub's own view of its session is no better than the asker's."""
        if self.ownership.suspended:
            raise ServiceUnavailableError("this hub cannot reach the metadata store either")
        epoch = await self.store.hubs.alive_epoch(req.address)
        return HubAliveAnswer(request_id=req.request_id, alive=epoch == req.epoch)

    async def add_entry(self, conn: ClientConnection, req: AddEntry) -> None:
        await self.storage.add_entry(
            req.ledger_id, req.entry_id, req.lac, req.payload, recovery=req.recovery
        )

    async def read_entry(self, conn: ClientConnection, req: ReadEntry) -> Reply:
        payload = await self.storage.read_entry(req.ledger_id, req.entry_id)
        return Entry(request_id=req.request_id, payload=payload)

    async def read_lac(self, conn: ClientConnection, req: ReadLac) -> Reply:
        lac, last = await self.storage.read_lac(req.ledger_id, fence=req.fence)
        fenced = self.storage.is_fenced(req.ledger_id)
        return Lac(request_id=req.request_id, lac=lac, last_entry_id=last, fenced=fenced)

    async def fence_ledgers(self, conn: ClientConnection, req: FenceLedgers) -> Reply:
        """Fence every ledger named (each as READ_LAC with fence would), answering once all
        are on disk; one the storage could not fence is left out of the answer."""
        ids = req.ledger_ids
        if len(ids) > MAX_FENCED_LEDGERS:
            raise InvalidRequestError(
                f"{len(ids)} ledgers to fence in one request; at most {MAX_FENCED_LEDGERS}"
            )
        # The storage's futures, awaited together: no task per ledger.
        results = await asyncio.gather(
            *(self.storage.fence_soon(i) for i in ids), return_exceptions=True
        )
        ends = []
        for ledger_id, r in zip(ids, results, strict=True):
            if isinstance(r, BaseException):
                log.info("fencing ledger %d for a peer failed: %s", ledger_id, r)
                continue
            ends.append(LedgerEnd(ledger_id, r[0], r[1]))
        return FencedLedgers(request_id=req.request_id, ends=tuple(ends))

    async def write_lacs(self, conn: ClientConnection, req: WriteLacs) -> None:
        await self.storage.write_lacs([(x.ledger_id, x.lac) for x in req.lacs])

    async def delete_ledger(self, conn: ClientConnection, req: DeleteLedger) -> None:
        await self.storage.delete_ledger(req.ledger_id)


def _touched(conn: ClientConnection, topic: str) -> None:
    """``conn`` published or subscribed to ``topic``."""
    touched = conn.topics
    if touched is None or topic in touched:
        return
    if len(touched) >= TOPICS_KEPT:
        conn.topics = None
    else:
        touched.add(topic)
