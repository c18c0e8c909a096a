"""Fan-out: serving one topic's subscribers from several hubs (``hedwig.metadata.plans``).

Rules:

- The owner stays the topic's only writer and sequencer. A *delivery hub* serves the
  subscribers the plan sends it from a ``TailLog`` of the owner's confirmed log, with the same
  ``Subscription`` code the owner uses: log order, at least once, nothing skipped, consume
  marks in the metadata store by compare-and-set.
- Which hub serves a subscriber is the plan's rendezvous hash over the plan's hubs that are
  alive (a dead delivery hub's subscribers go to the others; none alive: the owner). Every
  hub computes the same answer from the same plan and registry, so SUBSCRIBE at a hub that is
  not the subscriber's is answered NOT_RESPONSIBLE naming the right one.
- Every hub that serves the topic (owner or delivery hub) watches the plan and rechecks its
  subscriptions when the plan or the set of alive hubs changes: a subscription that belongs
  elsewhere now is handed over (``TopicSubscriptions.hand_over``: mark written, then
  SUBSCRIPTION_MOVED). A delivery hub left with no subscriber and no place in the plan stops
  tailing.
- Which topics have a plan is one set, read with a watch (``planned_topics``): a topic not in
  it is single-hub with no read, watch or cache entry of its own (most topics: a claim used
  to pay a store read for its plan, and a hub ~500 bytes per topic for the watch and cache
  entry). The plans of the topics in the set are cached with a watch each; when the set
  changes, the topics that joined or left it are rechecked as a plan's own watch would.
  The same cache serves lanes (``hedwig.hub.spreading.lanes``): when the lanes of a topic
  change, its owner tells the subscribers attached there (LANES_CHANGED), and they subscribe to the
  lanes they do not read yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable

from hedwig.clock import Clock
from hedwig.errors import HedwigError, MetadataError, TopicInUseError
from hedwig.hub.config import HubConfig
from hedwig.hub.owning.ownership import TopicOwnership
from hedwig.hub.owning.peers import PeerDirectory
from hedwig.hub.reporting.events import HubEvents
from hedwig.hub.serving.peer import Peer
from hedwig.hub.serving.topic_subscriptions import HAND_OVER_OVERLAP_S, TopicSubscriptions
from hedwig.hub.spreading.tail import TailLog
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.plans import PlanMode, TopicPlan
from hedwig.metadata.records import TopicConfig
from hedwig.net.connection import HubConnection
from hedwig.net.transport import Network
from hedwig.protocol import (
    CloseReason,
    DeliveryStats,
    LanesChanged,
    ResetSubscription,
    Subscribe,
    Subscribed,
    TopicInfo,
)

log = logging.getLogger(__name__)

# How long a delete without force waits for a delivery hub to say what is attached there.
ASK_TIMEOUT_S = 5.0
# The alive hubs are read at most this often (a dead delivery hub's subscribers move to the
# others within about this plus the metadata session timeout).
ALIVE_REFRESH_S = 1.0
# A read of the planned topics after their watch fired is retried this often, doubling up to
# the second figure, until it succeeds (the store unreachable meanwhile).
PLANNED_RETRY_S = 0.5
PLANNED_RETRY_MAX_S = 8.0
_UNKNOWN = object()


class DeliveryTopic:
    """A topic this hub delivers but does not own."""

    def __init__(
        self, topic: str, tail: TailLog, subs: TopicSubscriptions, events: HubEvents
    ) -> None:
        self.name = topic
        self.tail = tail
        self.subs = subs
        self._events = events
        self.msg_out = 0
        self.bytes_out = 0

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
        network: Network,
        clock: Clock,
        events: HubEvents,
        peers: PeerDirectory | None = None,
    ) -> None:
        self.address = address
        self._config = config
        self._store = store
        self._ownership = ownership
        self._network = network
        self._clock = clock
        self._events = events
        self._peers = peers
        self._plans: dict[str, TopicPlan | None] = {}
        # The topics that have a plan (None: not read yet), the read of it under way, and
        # whether the set's watch fired since that read began (it is read again).
        self._planned: frozenset[str] | None = None
        self._planned_reading: asyncio.Future[frozenset[str]] | None = None
        self._planned_fired = False
        self._loading: dict[str, asyncio.Future[TopicPlan | None]] = {}
        # Topics whose plan changed while a read of it was under way (see ``plan``).
        self._changed_while_loading: set[str] = set()
        self.delivering: dict[str, DeliveryTopic] = {}
        self._starting: dict[str, asyncio.Future[DeliveryTopic]] = {}
        self._alive: frozenset[str] = frozenset()
        self._alive_at = float("-inf")
        # The registry read under way, which every caller that finds the list stale awaits.
        self._alive_reading: asyncio.Task[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._applying: dict[str, asyncio.Task[None]] = {}
        self._later: set[asyncio.Task[None]] = set()
        # Subscriptions handed to another hub by a plan change (for tests and metrics).
        self.handed_over = 0
        # Per topic, the lanes its subscribers here were last told of.
        self._lanes_told: dict[str, tuple[tuple[int, bool], ...]] = {}

    # plans ------------------------------------------------------------------------------------

    async def plan(self, topic: str) -> TopicPlan | None:
        """The topic's plan, from the cache (a watch keeps it current)."""
        if topic in self._plans:
            return self._plans[topic]
        planned = self._planned
        if planned is None:
            planned = await self._planned_topics()
        if topic not in planned:
            return None
        pending = self._loading.get(topic)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[TopicPlan | None] = asyncio.get_running_loop().create_future()
        self._loading[topic] = fut
        try:
            # The watch a read sets can fire before the read's answer is handled here (both
            # come back through the loop, the answer first, and the waiting coroutine resumes
            # a step later): an answer read before a change must not be cached after it, or
            # the old plan stays for good, with no watch left to replace it. Read again.
            while True:
                self._changed_while_loading.discard(topic)
                plan = await self._read(topic)
                if topic not in self._changed_while_loading:
                    break
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()
            raise
        finally:
            self._loading.pop(topic, None)
            self._changed_while_loading.discard(topic)
        self._plans[topic] = plan
        fut.set_result(plan)
        return plan

    def peek(self, topic: str) -> tuple[bool, TopicPlan | None]:
        """``(True, plan)`` if the topic's plan is known without a read (``None``: single,
        no lanes)."""
        plan = self._plans.get(topic, _UNKNOWN)
        if plan is not _UNKNOWN:
            return True, plan  # type: ignore[return-value]
        if self._planned is not None and topic not in self._planned:
            return True, None
        return False, None

    async def _planned_topics(self) -> frozenset[str]:
        """The set of planned topics, read now if it is not known (callers share a read)."""
        reading = self._planned_reading
        if reading is None:
            reading = self._planned_reading = asyncio.get_running_loop().create_future()
            task = asyncio.get_running_loop().create_task(self._read_planned(reading))
            self._later.add(task)
            task.add_done_callback(self._later.discard)
        return await asyncio.shield(reading)

    async def _read_planned(self, reading: asyncio.Future[frozenset[str]]) -> None:
        """Read the set (again if its watch fired during the read: the answer may be older
        than the change), then recheck every topic that joined or left it.

        The first read's failure goes to the callers waiting for it (the next caller reads
        again). A read after the watch fired is retried until it succeeds: the set changed,
        and nothing else would correct the one kept meanwhile."""
        delay = PLANNED_RETRY_S
        try:
            while True:
                try:
                    self._planned_fired = False
                    planned = await self._store.plans.planned_topics(watch=self._planned_changed)
                except HedwigError as exc:
                    if self._planned is None:
                        raise
                    log.info("reading the planned topics failed (retrying): %s", exc)
                    await self._clock.sleep(delay)
                    delay = min(delay * 2, PLANNED_RETRY_MAX_S)
                    continue
                if not self._planned_fired:
                    break
        except asyncio.CancelledError:
            self._planned_reading = None
            reading.cancel()
            raise
        except Exception as exc:
            self._planned_reading = None
            if not reading.done():
                reading.set_exception(exc)
                reading.exception()
            return
        before, self._planned = self._planned, planned
        self._planned_reading = None
        reading.set_result(planned)
        if before is not None:
            for topic in before ^ planned:
                self._changed(topic)

    def _planned_changed(self) -> None:
        self._planned_fired = True
        if self._planned_reading is None:
            self._planned_reading = asyncio.get_running_loop().create_future()
            task = asyncio.get_running_loop().create_task(self._read_planned(self._planned_reading))
            self._later.add(task)
            task.add_done_callback(self._later.discard)

    async def _read(self, topic: str) -> TopicPlan | None:
        got = await self._store.plans.read_plan(topic, watch=lambda: self._changed(topic))
        if got is None or (got.value.mode is PlanMode.SINGLE and not got.value.lanes):
            return None
        return got.value

    def plans_to_export(self, candidates: Iterable[str]) -> dict[str, tuple[str, int]]:
        """Mode and serving hubs of the ``candidates`` known to be spread, for the gauges.

        The caller passes the owned topics its load report lists (the hottest, a bounded
        number: a topic is spread because it is hot), so neither the reads here nor the series
        grow with the topics a hub owns. A plan not read yet is read in the background for
        the next time; single-hub topics get no series.
        """
        out: dict[str, tuple[str, int]] = {}
        for topic in candidates:
            if topic not in self._plans:
                if self._planned is not None and topic not in self._planned:
                    continue
                if topic not in self._loading:
                    task = asyncio.get_running_loop().create_task(self._load_for_gauges(topic))
                    task.add_done_callback(lambda t: t.cancelled() or t.exception())
                continue
            plan = self._plans[topic]
            if plan is not None:
                out[topic] = (plan.mode.value, self._serving(plan))
        if out and self._clock.monotonic() - self._alive_at >= ALIVE_REFRESH_S:
            refresh = asyncio.get_running_loop().create_task(self._alive_hubs())
            refresh.add_done_callback(lambda t: t.cancelled() or t.exception())
        return out

    def known_plan(self, topic: str) -> tuple[str, int]:
        """The topic's mode and serving hubs as far as known without waiting (for gauges);
        a plan not read yet is read in the background for the next time."""
        known, plan = self.peek(topic)
        stale = self._clock.monotonic() - self._alive_at >= ALIVE_REFRESH_S
        if (not known and topic not in self._loading) or (plan and stale):
            task = asyncio.get_running_loop().create_task(self._load_for_gauges(topic))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
        if plan is None:
            return (PlanMode.SINGLE.value, 1)
        return (plan.mode.value, self._serving(plan))

    def _serving(self, plan: TopicPlan) -> int:
        if plan.mode is PlanMode.FAN_OUT:
            return len([h for h in plan.hubs if h in self._alive]) or 1
        return plan.serving

    async def _load_for_gauges(self, topic: str) -> None:
        if await self.plan(topic) is not None:
            await self._alive_hubs()

    def _changed(self, topic: str) -> None:
        self._plans.pop(topic, None)
        if topic in self._loading:
            self._changed_while_loading.add(topic)
        self._schedule(topic)

    def _schedule(self, topic: str) -> None:
        running = self._applying.get(topic)
        if running is not None and not running.done():
            # Apply again once this round is over: the change may have come after its read.
            running.add_done_callback(lambda _: self._schedule(topic))
            return
        self._applying[topic] = asyncio.get_running_loop().create_task(self._apply(topic))

    async def assigned(self, topic: str, subscriber: str) -> str | None:
        """The hub that serves ``subscriber`` of ``topic``; None: the owner (no plan)."""
        plan = await self.plan(topic)
        if plan is None:
            return None
        return plan.delivery_hub(subscriber, await self._alive_hubs())

    async def _alive_hubs(self, *, fresh: bool = False) -> frozenset[str]:
        """The hubs alive, read at most every ``ALIVE_REFRESH_S`` (``fresh``: read now).

        Callers that find the list stale share one read and all wait for it. (Each used to
        mark the list fresh before reading, so a second caller during the first one's read got
        the old list, empty at first: a topic's owner that checked its subscribers then found
        no delivery hub alive, kept them all, and nothing checked again.)"""
        if fresh or self._clock.monotonic() - self._alive_at >= ALIVE_REFRESH_S:
            reading = self._alive_reading
            if reading is None:
                reading = asyncio.get_running_loop().create_task(self._read_alive())
                self._alive_reading = reading
            await asyncio.shield(reading)
        return self._alive

    async def _read_alive(self) -> None:
        started = self._clock.monotonic()
        try:
            hubs = await self._store.hubs.list_hubs()
        finally:
            self._alive_reading = None
        self._alive = frozenset(h.address for h in hubs if h.alive)
        self._alive_at = started

    # delivering -------------------------------------------------------------------------------

    async def subscribe(self, peer: Peer, req: Subscribe) -> Subscribed:
        delivery = await self._delivery(req.topic)
        return await delivery.subs.subscribe(peer, req)

    async def _delivery(self, topic: str) -> DeliveryTopic:
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
            topic,
            address=self.address,
            store=self._store,
            network=self._network,
            clock=self._clock,
            peers=self._peers,
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
        )
        subs.shared = True
        delivery = DeliveryTopic(topic, tail, subs, self._events)
        tail.on_deleted = lambda: self._deleted(topic)
        log.info("delivering %r from %s", topic, tail.upstream)
        return delivery

    def _deleted(self, topic: str) -> None:
        """The topic is gone: its subscribers here stop, as the owner's do."""
        delivery = self.delivering.pop(topic, None)
        if delivery is not None:
            delivery.subs.close_all(CloseReason.TOPIC_DELETED, "topic deleted")
            delivery.stop()

    def consume(self, peer: Peer, topic: str, subscriber: str, seq: int) -> bool:
        """Take a consume if the subscription is attached here; False if not ours."""
        delivery = self.delivering.get(topic)
        if delivery is None:
            return False
        subs = delivery.subs
        if not subs.serves(peer, subscriber):
            return False
        subs.consume(peer, subscriber, seq)
        return True

    async def close_subscription(self, peer: Peer, topic: str, subscriber: str) -> bool:
        delivery = self.delivering.get(topic)
        if delivery is None:
            return False
        subs = delivery.subs
        if not subs.serves(peer, subscriber):
            return False
        await subs.close(peer, subscriber)
        return True

    async def unsubscribe(self, peer: Peer, topic: str, subscriber: str) -> bool:
        """Delete a subscription served here; False if it is not served here."""
        delivery = self.delivering.get(topic)
        if delivery is None or subscriber not in delivery.subs.by_name:
            return False
        await delivery.subs.unsubscribe(peer, subscriber)
        return True

    async def reset(self, req: ResetSubscription) -> Subscribed:
        delivery = await self._delivery(req.topic)
        return await delivery.subs.reset(req.request_id, req.subscriber, req.to, req.seq)

    def detach_peer(self, peer: Peer) -> None:
        for delivery in self.delivering.values():
            delivery.subs.detach_peer(peer)

    async def flush_marks(self) -> None:
        for delivery in list(self.delivering.values()):
            await delivery.subs.flush_marks()

    # following the plan -------------------------------------------------------------------------

    async def _apply(self, topic: str) -> None:
        """Hand over every subscription of ``topic`` served here that the plan now sends
        elsewhere; stop delivering the topic if nothing is left for this hub."""
        try:
            plan = await self.plan(topic)
        except MetadataError as exc:
            log.warning("plan of %r unreadable (checked again at its next change): %s", topic, exc)
            return
        owned = self._ownership.topics.get(topic)
        if owned is not None:
            owned.subs.shared = plan is not None and plan.mode is PlanMode.FAN_OUT
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
            if sub.peer is not None and not sub.peer.closed:
                sub.peer.send(event)

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
                    target = await self.assigned(topic, name)
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
            await self._alive_hubs(fresh=True)
        self._alive = self._alive - {self.address}
        for topic in list(self.delivering):
            await self._apply(topic)

    # deleting -------------------------------------------------------------------------------

    async def refuse_if_attached_elsewhere(self, topic: str) -> None:
        """Before a delete without force at the owner: ``TopicInUseError`` if a live delivery
        hub of the topic's plan has a subscriber attached, or cannot be asked (it may have).

        A subscriber attaching at a delivery hub after it answered is closed with
        TOPIC_DELETED when that hub sees the topic gone, as a forced delete would."""
        plan = await self.plan(topic)
        if plan is None:
            return
        alive = await self._alive_hubs()
        for hub in plan.hubs:
            if hub == self.address or hub not in alive:
                continue  # the owner checks its own; a dead hub serves nobody
            try:
                address = await self._peers.internal_address(hub) if self._peers else hub
                conn = await HubConnection.open(
                    address, network=self._network, clock=self._clock, timeout=ASK_TIMEOUT_S
                )
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
        for delivery in self.delivering.values():
            delivery.stop()
        self.delivering.clear()

    async def _watch_hubs(self) -> None:
        """Recheck fan-out topics when a hub comes or goes (its subscribers move)."""
        while True:
            await self._clock.sleep(ALIVE_REFRESH_S)
            if not self.delivering and not any(p is not None for p in self._plans.values()):
                continue  # no fan-out topic here: nothing to recheck, no registry read
            before = self._alive
            with contextlib.suppress(HedwigError):
                await self._alive_hubs(fresh=True)
            if self._alive != before:
                topics = set(self.delivering)
                topics |= {t for t, p in self._plans.items() if p is not None}
                for topic in topics:
                    self._schedule(topic)
