"""Fan-out: serving one topic's subscribers from several hubs (``hedwig.metadata.plans``).

Rules:

- The owner stays the topic's only writer and sequencer. A *delivery hub* serves the
  subscribers the plan sends it from a ``TailLog`` of the owner's confirmed log, with the same
  ``TopicSubscriptions`` the owner uses: log order, at least once, nothing skipped, consume
  marks in the metadata store by compare-and-set.
- Which hub serves a subscriber is the plan's rendezvous hash over the plan's hubs that are
  alive (``TopicPlans.assigned``; a dead delivery hub's subscribers go to the others; none
  alive: the owner). Every hub computes the same answer from the same plan and registry, so
  SUBSCRIBE at a hub that is not the subscriber's is answered NOT_RESPONSIBLE naming the right
  one (``hedwig.hub.requests.places`` decides where a subscription is served).
- Every hub that serves the topic (owner or delivery hub) follows the plan: it rechecks its
  subscriptions when the plan or the set of alive hubs changes, and a subscription that
  belongs elsewhere now is handed over (``TopicSubscriptions.hand_over``: mark written, then
  SUBSCRIPTION_MOVED). A delivery hub left with no subscriber and no place in the plan stops
  tailing.
- When the lanes of a topic change, its owner tells the subscribers attached there
  (LANES_CHANGED), and they subscribe to the lanes they do not read yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from hedwig.clock import Clock
from hedwig.errors import HedwigError, MetadataError, TopicInUseError
from hedwig.hub.owning.ownership import TopicOwnership
from hedwig.hub.owning.peers import HubDialer
from hedwig.hub.reporting.events import HubEvents
from hedwig.hub.serving.dead_letters import DeadLetterSink
from hedwig.hub.serving.peer import Peer
from hedwig.hub.serving.topic_subscriptions import HAND_OVER_OVERLAP_S, TopicSubscriptions
from hedwig.hub.spreading.plans import ALIVE_REFRESH_S, TopicPlans
from hedwig.hub.spreading.tail import TailLog
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.plans import PlanMode, TopicPlan
from hedwig.metadata.records import TopicConfig
from hedwig.protocol import (
    Ack,
    CloseReason,
    CreateSubscription,
    DeliveryStats,
    JoinSubscription,
    LanesChanged,
    Nack,
    ResetSubscription,
    Subscribe,
    Subscribed,
    TopicInfo,
)
from hedwig.settings import HubConfig

log = logging.getLogger(__name__)

# How long a delete without force waits for a delivery hub to say what is attached there.
ASK_TIMEOUT_S = 5.0


def fanned_out(plan: TopicPlan | None) -> bool:
    """Whether other hubs may serve some of the topic's subscriptions."""
    return plan is not None and plan.mode is PlanMode.FAN_OUT


class DeliveryTopic:
    """A topic this hub delivers but does not own."""

    def __init__(self, topic: str, tail: TailLog, subs: TopicSubscriptions) -> None:
        self.name = topic
        self.tail = tail
        self.subs = subs
        self.msg_out = 0
        self.bytes_out = 0

    # the subscription table (``hedwig.hub.serving.table``)

    async def subscribe(self, peer: Peer, req: Subscribe) -> Subscribed:
        return await self.subs.subscribe(peer, req)

    def consume(self, peer: Peer, subscriber: str, seq: int) -> None:
        self.subs.consume(peer, subscriber, seq)

    async def create_subscription(self, req: CreateSubscription, owner: str | None) -> Subscribed:
        return await self.subs.create(req, owner)

    async def join(self, peer: Peer, req: JoinSubscription) -> Subscribed:
        return await self.subs.join(peer, req)

    def ack(self, peer: Peer, req: Ack) -> None:
        self.subs.ack(peer, req)

    def nack(self, peer: Peer, req: Nack) -> None:
        self.subs.nack(peer, req)

    async def close_subscription(self, peer: Peer, subscriber: str) -> None:
        await self.subs.close(peer, subscriber)

    async def unsubscribe(self, peer: Peer, subscriber: str) -> None:
        await self.subs.unsubscribe(peer, subscriber)

    async def reset_subscription(self, req: ResetSubscription) -> Subscribed:
        return await self.subs.reset(req.request_id, req.subscriber, req.to, req.seq)

    def stop(self) -> None:
        self.subs.detach_all()
        self.tail.stop()


class FanOut:
    def __init__(
        self,
        *,
        address: str,
        config: HubConfig,
        store: MetadataStore,
        ownership: TopicOwnership,
        plans: TopicPlans,
        dialer: HubDialer,
        clock: Clock,
        events: HubEvents,
        dead_letters: DeadLetterSink | None = None,
    ) -> None:
        self.address = address
        self._dead_letters = dead_letters
        self._config = config
        self._store = store
        self._ownership = ownership
        self.plans = plans
        self._dialer = dialer
        self._clock = clock
        self._events = events
        self.delivering: dict[str, DeliveryTopic] = {}
        self._starting: dict[str, asyncio.Future[DeliveryTopic]] = {}
        self._task: asyncio.Task[None] | None = None
        self._applying: dict[str, asyncio.Task[None]] = {}
        self._later: set[asyncio.Task[None]] = set()
        # Subscriptions handed to another hub by a plan change (for tests and metrics).
        self.handed_over = 0
        # Per topic, the lanes its subscribers here were last told of.
        self._lanes_told: dict[str, tuple[tuple[int, bool], ...]] = {}
        plans.on_change = self._schedule

    # delivering -------------------------------------------------------------------------------

    async def delivery(self, topic: str) -> DeliveryTopic:
        """The topic as this hub delivers it, tailing the owner's log from now if it did not."""
        got = self.delivering.get(topic)
        if got is not None:
            return got
        pending = self._starting.get(topic)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[DeliveryTopic] = asyncio.get_running_loop().create_future()
        self._starting[topic] = fut
        try:
            delivery = await self._start(topic)
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()
            raise
        finally:
            self._starting.pop(topic, None)
        self.delivering[topic] = delivery
        fut.set_result(delivery)
        return delivery

    async def _start(self, topic: str) -> DeliveryTopic:
        tail = TailLog(
            topic, address=self.address, store=self._store, dialer=self._dialer, clock=self._clock
        )
        await tail.start()
        config = await self._store.topics.read_topic_config(topic)
        delivery: DeliveryTopic | None = None

        def delivered(count: int, size: int) -> None:
            if delivery is not None:
                delivery.msg_out += count
                delivery.bytes_out += size
            self._events.delivered(topic, count, size)

        subs = TopicSubscriptions(
            topic,
            log_=tail,
            store=self._store,
            settings=self._config.topic_settings(config.value if config else TopicConfig()),
            clock=self._clock,
            check_open=lambda: None,
            on_lost=lambda why: None,
            on_delivered=delivered,
            # Within the namespace's max_subscriptions, as the owner makes them.
            create=self._ownership.namespaces.create_subscription,
            dead_letters=self._dead_letters,
        )
        subs.shared = True
        delivery = DeliveryTopic(topic, tail, subs)
        tail.on_deleted = lambda: self._deleted(topic)
        log.info("delivering %r from %s", topic, tail.upstream)
        return delivery

    def _deleted(self, topic: str) -> None:
        """The topic is gone: its subscribers here stop, as the owner's do."""
        delivery = self.delivering.pop(topic, None)
        if delivery is not None:
            delivery.subs.close_all(CloseReason.TOPIC_DELETED, "topic deleted")
            delivery.stop()

    def detach_peer(self, peer: Peer) -> None:
        for delivery in self.delivering.values():
            delivery.subs.detach_peer(peer)

    async def flush_marks(self) -> None:
        for delivery in list(self.delivering.values()):
            await delivery.subs.flush_marks()

    def _schedule(self, topic: str) -> None:
        running = self._applying.get(topic)
        if running is not None and not running.done():
            # Apply again once this round is over: the change may have come after its read.
            running.add_done_callback(lambda _: self._schedule(topic))
            return
        self._applying[topic] = asyncio.get_running_loop().create_task(self._apply(topic))

    # following the plan -------------------------------------------------------------------------

    async def _apply(self, topic: str) -> None:
        """Hand over every subscription of ``topic`` served here that the plan now sends
        elsewhere; stop delivering the topic if nothing is left for this hub."""
        try:
            plan = await self.plans.plan(topic)
        except MetadataError as exc:
            log.warning("plan of %r unreadable (checked again at its next change): %s", topic, exc)
            return
        owned = self._ownership.topics.get(topic)
        if owned is not None:
            owned.subs.shared = fanned_out(plan)
            self._tell_lanes(owned.subs, topic, plan)
            await self._hand_over(owned.subs, topic, plan, owner=True)
        delivery = self.delivering.get(topic)
        if delivery is not None and plan is None:
            # The plan goes with a deleted topic: tell the subscribers that, not "move".
            with contextlib.suppress(HedwigError):
                if not await self._store.topics.topic_exists(topic):
                    self._deleted(topic)
                    return
        if delivery is not None:
            await self._hand_over(delivery.subs, topic, plan, owner=False)
            if not delivery.subs.by_name and (plan is None or self.address not in plan.hubs):
                if delivery.subs.leaving:
                    # Subscribers handed over read here until they have attached elsewhere:
                    # stop tailing once that overlap is over.
                    self._apply_later(topic, HAND_OVER_OVERLAP_S + 0.1)
                    return
                self.delivering.pop(topic, None)
                delivery.stop()
                log.info("stopped delivering %r", topic)

    def _tell_lanes(self, subs: TopicSubscriptions, topic: str, plan: TopicPlan | None) -> None:
        """The lanes changed: say so to the subscribers attached here (they ask which)."""
        lanes = tuple((lane.index, lane.sealed) for lane in plan.lanes) if plan else ()
        if self._lanes_told.get(topic, ()) == lanes:
            return
        if lanes:
            self._lanes_told[topic] = lanes
        else:
            self._lanes_told.pop(topic, None)
        event = LanesChanged(topic=topic, generation=plan.generation if plan else 0)
        for sub in subs.by_name.values():
            for peer in sub.peers:
                if not peer.closed:
                    peer.send(event)

    def _apply_later(self, topic: str, delay_s: float) -> None:
        async def later() -> None:
            await self._clock.sleep(delay_s)
            self._schedule(topic)

        task = asyncio.get_running_loop().create_task(later())
        self._later.add(task)
        task.add_done_callback(self._later.discard)

    async def _hand_over(
        self, subs: TopicSubscriptions, topic: str, plan: TopicPlan | None, *, owner: bool
    ) -> None:
        """``owner``: these are the owner's subscriptions (which stay when no hub of the plan
        serves them); else a delivery hub's (which go back to the owner then)."""
        reason = "single hub" if plan is None else f"plan generation {plan.generation}"
        moved: dict[str, int] = {}
        try:
            for name in list(subs.by_name):
                try:
                    target = await self.plans.assigned(topic, name)
                except HedwigError as exc:
                    log.warning("subscribers of %r stay here for now: %s", topic, exc)
                    return
                if target == self.address or (target is None and owner):
                    continue
                if await subs.hand_over(name, target, reason):
                    self.handed_over += 1
                    moved[target or "its owner"] = moved.get(target or "its owner", 0) + 1
        finally:
            if moved:
                log.info("%r: subscribers handed over (%s): %s", topic, reason, moved)

    async def release_all(self) -> None:
        """This hub is stopping (its alive record is gone): hand every subscription it
        delivers to the hub the plan now names."""
        with contextlib.suppress(HedwigError):
            await self.plans.alive_hubs(fresh=True)
        self.plans.without(self.address)
        for topic in list(self.delivering):
            await self._apply(topic)

    # deleting -------------------------------------------------------------------------------

    async def refuse_if_attached_elsewhere(self, topic: str) -> None:
        """Before a delete without force at the owner: ``TopicInUseError`` if a live delivery
        hub of the topic's plan has a subscriber attached, or cannot be asked (it may have).

        A subscriber attaching at a delivery hub after it answered is closed with
        TOPIC_DELETED when that hub sees the topic gone, as a forced delete would."""
        plan = await self.plans.plan(topic)
        if plan is None:
            return
        alive = await self.plans.alive_hubs()
        for hub in plan.hubs:
            if hub == self.address or hub not in alive:
                continue  # the owner checks its own; a dead hub serves nobody
            try:
                conn = await self._dialer.open(hub, ASK_TIMEOUT_S)
                try:
                    answer = await conn.request(
                        DeliveryStats(request_id=conn.next_id(), topic=topic), ASK_TIMEOUT_S
                    )
                finally:
                    conn.close()
            except HedwigError as exc:
                raise TopicInUseError(
                    f"topic {topic!r}: cannot ask its delivery hub {hub} whether subscribers "
                    f"are attached there ({exc}); delete with force to close them anyway"
                ) from exc
            if isinstance(answer, TopicInfo) and answer.subscribers:
                raise TopicInUseError(
                    f"topic {topic!r} has {answer.subscribers} subscriber(s) attached at its "
                    f"delivery hub {hub} (delete with force to close them)"
                )

    # the periodic check -----------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._watch_hubs())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        for task in [*self._applying.values(), *self._later]:
            task.cancel()
        self.plans.stop()
        for delivery in self.delivering.values():
            delivery.stop()
        self.delivering.clear()

    async def _watch_hubs(self) -> None:
        """Recheck fan-out topics when a hub comes or goes (its subscribers move)."""
        while True:
            await self._clock.sleep(ALIVE_REFRESH_S)
            spread = self.plans.spread()
            if not self.delivering and not spread:
                continue  # no fan-out topic here: nothing to recheck, no registry read
            before = self.plans.alive
            with contextlib.suppress(HedwigError):
                await self.plans.alive_hubs(fresh=True)
            if self.plans.alive != before:
                topics = set(self.delivering) | set(spread)
                for topic in topics:
                    self._schedule(topic)
