"""The subscriptions of one owned topic: finding or creating, attaching, consuming, resetting,
deleting, describing (``descriptions`` for DESCRIBE_QUEUES) and expiring them.

Rules:

- A subscription lives in the metadata store; the owner keeps the ones it has touched in
  memory (``by_name``) with their consume marks. An exclusive one (``Subscription``) is
  attached to at most one connection; a failover or shared one (``QueueSubscription``) to
  as many consumers as join it, each acknowledging its messages one by one. SUBSCRIBE
  attaches only to the first kind, JOIN_SUBSCRIPTION only to the second, of the type it
  names: a consumer never consumes cumulatively from a queue by mistake.
- Nobody attaches to a topic no longer open: that check is the last step before an attach.
- CREATE fails if the subscription exists, ATTACH if it does not, CREATE_OR_ATTACH does either;
  a concurrent create of the same one makes the loser attach to the winner's.
- A reset moves the mark anywhere between before the first kept message and the end, writes
  it at once, and closes an attached subscriber with RESET so it attaches again there.
- A subscription nobody attached to or consumed from for the topic's ``subscription_expiry_ms``
  is deleted by the owner (off unless configured): an abandoned one would pin its messages.
- On a fan-out topic (``shared``) several hubs serve the topic's subscriptions, each its own
  share. A consume mark written by another hub then means that hub serves the subscription
  now: this one forgets it (the subscriber was closed and attaches again where the plan says)
  instead of stepping the whole topic down. A subscription the plan sends elsewhere is handed
  over make-before-break: its mark written, the subscriber told where to go, and delivery
  here goes on, writing nothing more, until the subscriber says it attached there (it closes
  the subscription here) or ``HAND_OVER_OVERLAP_S`` passes. It reads on while it attaches;
  what both hubs deliver twice it drops by sequence id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from hedwig.clock import Clock
from hedwig.errors import (
    InvalidRequestError,
    MetadataError,
    NoSuchSubscriptionError,
    SubscriptionBusyError,
    SubscriptionExistsError,
)
from hedwig.hub.front.owners import owner_of
from hedwig.hub.serving.dead_letters import DeadLetterSink
from hedwig.hub.serving.deliveries import checked_ranges
from hedwig.hub.serving.descriptions import queue_infos, subscription_infos
from hedwig.hub.serving.peer import Peer
from hedwig.hub.serving.policies import check_served, policy_of
from hedwig.hub.serving.positions import reset_mark
from hedwig.hub.serving.queue import QueueSubscription
from hedwig.hub.serving.retention import keep_from_seq_of as keep_from_seq_of
from hedwig.hub.serving.subscription import DeliveryLog, Subscription
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.records import (
    DeliveryPolicy,
    SubscriptionData,
    SubscriptionPreferences,
    SubscriptionState,
    SubscriptionType,
    Version,
)
from hedwig.protocol import (
    Ack,
    CloseReason,
    CreateSubscription,
    JoinSubscription,
    Nack,
    QueueInfo,
    ResetTo,
    Subscribe,
    Subscribed,
    SubscribeMode,
    SubscriptionInfo,
    SubscriptionMoved,
)
from hedwig.settings import TopicSettings

# How long a subscription handed to another hub keeps delivering here at most.
HAND_OVER_OVERLAP_S = 2.0
# A subscription served here: one exclusive consumer, or a queue's several.
Served = Subscription | QueueSubscription
# Hand-off overlaps under way, of every topic (the event loop keeps only weak references to
# tasks; one set for all rather than an empty one per topic).
_overlaps: set[asyncio.Task[None]] = set()


class TopicSubscriptions:
    def __init__(
        self,
        topic: str,
        *,
        log_: DeliveryLog,
        store: MetadataStore,
        settings: TopicSettings,
        clock: Clock,
        check_open: Callable[[], None],
        on_lost: Callable[[str], None],
        on_delivered: Callable[[int, int], None],
        create: Callable[[str, str, SubscriptionData], Awaitable[Version]],
        dead_letters: DeadLetterSink | None = None,
    ) -> None:
        self.topic = topic
        self._create = create  # a subscription made in the store (within its quota)
        self._dead_letters = dead_letters
        self.by_name: dict[str, Served] = {}
        self._log = log_
        self._store = store
        self._settings = settings
        self._clock = clock
        self._check_open = check_open
        self._on_lost = on_lost
        self._on_delivered = on_delivered
        # Other hubs may serve some of this topic's subscriptions (a fan-out plan).
        self.shared = False
        # Handed to another hub, still delivering here while their subscribers attach there.
        self.leaving: dict[str, Served] = {}

    # attaching --------------------------------------------------------------------------------

    async def subscribe(self, peer: Peer, req: Subscribe) -> Subscribed:
        prefs = SubscriptionPreferences(req.message_window, req.message_bound)
        leaving = self.leaving.get(req.subscriber)
        if leaving is not None:
            self._left(req.subscriber, leaving)  # back here before its hand-off was over
        sub = await self._find_or_create(req, owner_of(peer.principal))
        if isinstance(sub, QueueSubscription):
            raise InvalidRequestError(
                f"subscription {req.subscriber!r} of topic {self.topic!r} is "
                f"{sub.policy.type.label}: join it as one of its consumers (JOIN_SUBSCRIPTION)"
            )
        if (
            sub.peer is not None
            and sub.peer is not peer
            and not sub.peer.closed
            and not req.force_attach
        ):
            raise SubscriptionBusyError(
                f"subscription {req.subscriber!r} is attached to another connection "
                "(subscribe with force-attach to take it over)"
            )
        answer = self._subscribed(req.request_id, sub)
        self._check_open()  # a subscription found in memory: the caller may have waited
        sub.attach(peer, prefs)
        return answer

    async def _find_or_create(
        self,
        req: Subscribe | JoinSubscription,
        owner: str | None,
        policy: DeliveryPolicy | None = None,
    ) -> Served:
        """The subscription ``req`` names, read from the store or created as its mode says
        (``owner``: the principal it is made for; ``policy``: what a new one gets; none, an
        exclusive one)."""
        while True:
            sub = await self._find(req.subscriber)
            if sub is not None:
                if req.mode is SubscribeMode.CREATE:
                    raise SubscriptionExistsError(
                        f"subscription {req.subscriber!r} exists on topic {self.topic!r}"
                    )
                return sub
            if req.mode is SubscribeMode.ATTACH:
                raise self._missing(req.subscriber)
            now = self._clock.wall_ms()
            bound = req.message_bound if isinstance(req, Subscribe) else 0
            data = SubscriptionData(
                SubscriptionPreferences(req.message_window, bound),
                SubscriptionState(self._log.last_seq, now, now),
                policy,
                owner,
            )
            try:
                version = await self._create(self.topic, req.subscriber, data)
            except SubscriptionExistsError:
                if req.mode is SubscribeMode.CREATE:
                    raise
                continue  # created concurrently: attach to that one
            self._check_open()
            return self.by_name.get(req.subscriber) or self._make(req.subscriber, data, version)

    async def create(self, req: CreateSubscription, owner: str | None) -> Subscribed:
        """Create a subscription of a type and delivery policy, after the topic's end,
        ``owner``'s."""
        policy = await policy_of(req, self._store)
        sub = await self._find_or_create(
            JoinSubscription(
                request_id=req.request_id,
                topic=req.topic,
                subscriber=req.subscriber,
                type=req.type,
                mode=SubscribeMode.CREATE,
            ),
            owner,
            policy,
        )
        return self._subscribed(req.request_id, sub)

    async def join(self, peer: Peer, req: JoinSubscription) -> Subscribed:
        """Attach ``peer`` as one more consumer of a failover or shared subscription."""
        if not req.type.many:
            raise InvalidRequestError(
                "an exclusive subscription has one consumer: attach it with SUBSCRIBE"
            )
        check_served(req.type)
        leaving = self.leaving.get(req.subscriber)
        if leaving is not None:
            self._left(req.subscriber, leaving)
        sub = await self._find_or_create(req, owner_of(peer.principal), DeliveryPolicy(req.type))
        if not isinstance(sub, QueueSubscription) or sub.policy.type is not req.type:
            kind = sub.policy.type if isinstance(sub, QueueSubscription) else None
            raise InvalidRequestError(
                f"subscription {req.subscriber!r} of topic {self.topic!r} is "
                f"{(kind or SubscriptionType.EXCLUSIVE).label}, not {req.type.label}"
            )
        answer = self._subscribed(req.request_id, sub)
        self._check_open()
        sub.attach(peer, req.message_window)
        return answer

    async def _find(self, name: str) -> Served | None:
        sub = self.by_name.get(name)
        if sub is not None and not sub.lost:
            return sub
        self.by_name.pop(name, None)  # lost (written or deleted elsewhere): read it again
        got = await self._store.subscriptions.read_subscription_data(self.topic, name)
        self._check_open()
        sub = self.by_name.get(name)  # raced with another request
        if (sub is None or sub.lost) and got is not None:
            sub = self._make(name, got.value, got.version)
        return sub

    def _make(self, name: str, data: SubscriptionData, version: Version) -> Served:
        sub: Served
        if data.type.many:
            sub = QueueSubscription(
                self.topic,
                name,
                data,
                version,
                log_=self._log,
                store=self._store,
                clock=self._clock,
                settings=self._settings.queues,
                batch_messages=self._settings.delivery_batch_messages,
                on_lost=lambda why: self._lost(name, why),
                on_delivered=self._on_delivered,
                dead_letters=self._dead_letters,
            )
            self.by_name[name] = sub
            return sub
        sub = Subscription(
            self.topic,
            name,
            data,
            version,
            log_=self._log,
            store=self._store,
            clock=self._clock,
            batch_messages=self._settings.delivery_batch_messages,
            flush_messages=self._settings.consume_flush_messages,
            on_lost=lambda why: self._lost(name, why),
            on_delivered=self._on_delivered,
        )
        self.by_name[name] = sub
        return sub

    def _lost(self, name: str, why: str) -> None:
        if self.shared:
            self._forget(name)
            return
        # The plan may have become fan-out a moment ago (not watched yet here): look first.
        asyncio.get_running_loop().create_task(self._lost_unless_shared(name, why))

    async def _lost_unless_shared(self, name: str, why: str) -> None:
        try:
            shared = await self._store.plans.read_plan(self.topic) is not None
        except MetadataError:
            shared = False
        if shared:
            self.shared = True
            self._forget(name)
        else:
            self._on_lost(why)

    def _forget(self, name: str) -> None:
        sub = self.by_name.get(name)
        if sub is not None and sub.lost:
            del self.by_name[name]

    async def hand_over(self, name: str, hub: str | None, reason: str) -> bool:
        """Stop serving ``name`` here: write its mark, tell its subscriber to attach at ``hub``
        (None: the owner), and keep delivering, writing nothing more, until it has (it closes
        the subscription here) or ``HAND_OVER_OVERLAP_S`` passes. True if it was attached."""
        sub = self.by_name.pop(name, None)
        if sub is None:
            return False
        if isinstance(sub, QueueSubscription):
            return await sub.hand_over(hub, reason)
        peer = sub.peer
        if peer is None or peer.closed:
            sub.detach_quietly()
            await sub.flush()
            return False
        await sub.flush()  # the mark the next hub starts from
        # Out of ``by_name`` (consumes no longer reach it), writing nothing: the next hub writes.
        sub.lost = True
        if sub.peer is not peer or peer.closed:
            sub.detach_quietly()
            return False
        peer.send(SubscriptionMoved(topic=self.topic, subscriber=name, hub=hub, reason=reason))
        self.leaving[name] = sub
        task = asyncio.get_running_loop().create_task(self._overlap(name, sub))
        _overlaps.add(task)
        task.add_done_callback(_overlaps.discard)
        return True

    async def _overlap(self, name: str, sub: Served) -> None:
        await self._clock.sleep(HAND_OVER_OVERLAP_S)
        self._left(name, sub)

    def _left(self, name: str, sub: Served) -> None:
        """The overlap of a hand-off is over: stop delivering here."""
        if self.leaving.get(name) is sub:
            del self.leaving[name]
        sub.detach_quietly()

    def _subscribed(self, request_id: int, sub: Served) -> Subscribed:
        return Subscribed(
            request_id=request_id, consumed_seq=sub.consumed_seq, last_seq=self._log.last_seq
        )

    def _missing(self, name: str) -> NoSuchSubscriptionError:
        return NoSuchSubscriptionError(f"no subscription {name!r} on topic {self.topic!r}")

    def _attached(self, peer: Peer, name: str) -> Served:
        sub = self.by_name.get(name)
        if sub is None or peer not in sub.peers:
            raise NoSuchSubscriptionError(
                f"subscription {name!r} on topic {self.topic!r} is not attached here"
            )
        return sub

    def serves(self, peer: Peer, name: str) -> bool:
        """``name`` is attached here on ``peer`` (or still delivering there, handed over)."""
        sub = self.by_name.get(name)
        if sub is not None and peer in sub.peers:
            return True
        leaving = self.leaving.get(name)
        return leaving is not None and leaving.peer is peer

    def any_attached(self) -> bool:
        return any(not p.closed for s in self.by_name.values() for p in s.peers)

    def attached_count(self) -> int:
        """Attached consumers (a queue counts each of its consumers)."""
        return sum(1 for s in self.by_name.values() for p in s.peers if not p.closed)

    # consuming --------------------------------------------------------------------------------

    def consume(self, peer: Peer, name: str, seq: int) -> None:
        leaving = self.leaving.get(name)
        if leaving is not None and leaving.peer is peer and name not in self.by_name:
            leaving.consume(seq)  # its window moves on; it writes nothing (``lost``)
            return
        sub = self._attached(peer, name)
        if sub.consume(seq):
            sub.flush_soon()

    async def close(self, peer: Peer, name: str) -> None:
        leaving = self.leaving.get(name)
        if leaving is not None and leaving.peer is peer and name not in self.by_name:
            self._left(name, leaving)  # its subscriber attached at the next hub
            return
        sub = self._attached(peer, name)
        if isinstance(sub, QueueSubscription):
            sub.detach_peer(peer)  # the others go on; what it held goes to them
        else:
            sub.detach_quietly()
        await sub.flush()

    def ack(self, peer: Peer, req: Ack) -> None:
        """``peer`` processed the messages ``req`` names (``NotHeldError`` for those it did
        not hold: the others are acknowledged all the same)."""
        sub = self._queue(peer, req.subscriber)
        sub.ack(peer, checked_ranges(req.ranges)).check(self.topic, req.subscriber, "acknowledged")

    def nack(self, peer: Peer, req: Nack) -> None:
        """``peer`` did not process the messages ``req`` names: deliver them again."""
        sub = self._queue(peer, req.subscriber)
        outcome = sub.nack(peer, checked_ranges(req.ranges), req.delay_ms)
        outcome.check(self.topic, req.subscriber, "nacked")

    def _queue(self, peer: Peer, name: str) -> QueueSubscription:
        sub = self._attached(peer, name)
        if not isinstance(sub, QueueSubscription):
            raise InvalidRequestError(
                f"subscription {name!r} of topic {self.topic!r} is exclusive: it consumes "
                "cumulatively (CONSUME), not message by message"
            )
        return sub

    def detach_peer(self, peer: Peer) -> None:
        for sub in self.by_name.values():
            if isinstance(sub, QueueSubscription):
                if sub.detach_peer(peer):
                    asyncio.get_running_loop().create_task(sub.flush())
            elif sub.peer is peer:
                sub.detach_quietly()
                asyncio.get_running_loop().create_task(sub.flush())
        for name, sub in list(self.leaving.items()):
            if sub.peer is peer:
                self._left(name, sub)

    def detach_all(self) -> None:
        for sub in self.by_name.values():
            sub.detach_quietly()
        self._stop_leaving()

    def stop_all(self) -> None:
        """The topic was lost (not handed off): no subscription writes its mark again."""
        for sub in self.by_name.values():
            sub.stop()
        self._stop_leaving()

    def _stop_leaving(self) -> None:
        for name, sub in list(self.leaving.items()):
            self._left(name, sub)

    def close_all(self, code: CloseReason, reason: str) -> None:
        for sub in self.by_name.values():
            sub.force_close(code, reason)
        self._stop_leaving()  # their subscribers are told where they attach now

    async def flush_marks(self) -> None:
        for sub in list(self.by_name.values()):
            if sub.dirty:
                await sub.flush()

    # changing -----------------------------------------------------------------------------------

    async def unsubscribe(self, peer: Peer | None, name: str) -> None:
        """Delete the subscription (``peer``: the connection asking, which is not closed)."""
        sub = self.by_name.pop(name, None)
        if sub is not None:
            for other in sub.peers:
                if other is not peer:
                    sub.close_peer(
                        other, CloseReason.UNSUBSCRIBED, "unsubscribed by another connection"
                    )
            sub.detach_quietly()
            version = sub.version
        else:
            got = await self._store.subscriptions.read_subscription_data(self.topic, name)
            if got is None:
                raise self._missing(name)
            version = got.version
        await self._store.subscriptions.delete_subscription_data(self.topic, name, version)

    async def reset(self, req_id: int, name: str, to: ResetTo, seq: int) -> Subscribed:
        """Move the subscription's consume mark and write it at once."""
        mark = await reset_mark(self._log, to, seq)
        sub = await self._find(name)
        if sub is None:
            raise self._missing(name)
        await sub.reset(mark)
        # (not sub.consumed_seq: an attached subscriber may already be consuming again)
        return Subscribed(request_id=req_id, consumed_seq=mark, last_seq=self._log.last_seq)

    # describing and expiring --------------------------------------------------------------------

    async def describe(self) -> tuple[SubscriptionInfo, ...]:
        return await subscription_infos(self._store, self.topic, self.by_name)

    async def describe_queues(self) -> tuple[QueueInfo, ...]:
        return await queue_infos(self._store, self.topic, self.by_name)

    async def expire(self, expiry_ms: int) -> list[str]:
        """Delete subscriptions idle for ``expiry_ms`` and not attached; their names."""
        now = self._clock.wall_ms()
        gone = []
        for info in await self.describe():
            if not info.attached and info.last_active_ms and now - info.last_active_ms >= expiry_ms:
                try:
                    await self.unsubscribe(None, info.name)
                except NoSuchSubscriptionError:
                    continue
                gone.append(info.name)
        return gone

    async def keep_from_seq(self) -> int:
        """The first sequence id some subscriber (attached or not) still needs."""
        return await keep_from_seq_of(
            self._store,
            self.topic,
            self._log.last_seq,
            (s.consumed_seq for s in self.by_name.values()),
        )
