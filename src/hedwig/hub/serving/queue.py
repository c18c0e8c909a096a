"""Delivery to the consumers of a subscription that acknowledges message by message
(failover or shared: ``SubscriptionType``), and the writing of its acknowledgement state.

Rules:

- Several consumers attach, each with its window (``Consumer.window``: messages delivered to
  it and not yet acknowledged). *Shared*: each message goes to the next consumer in turn that
  has room. *Failover*: every message goes to the first consumer attached; the others wait,
  and the next one takes over at once when it leaves, beginning with what it held.
- One delivery task per subscription does the giving, in this order: messages due again
  (nacked, timed out, given back), oldest first, then new ones, skipping those acknowledged
  already. It stops at ``QueueSettings.max_unacked`` held and waiting messages, so what the
  owner keeps per message is bounded whatever the backlog.
- A new message whose delivery time (``hedwig-deliver-at``) is ahead is not given but
  indexed (``hedwig.hub.serving.delays``), and the messages behind it go on; when it is due
  it is given as the messages due again are, as a first delivery.
- First deliveries go as DELIVER, later ones as REDELIVER with their count. A message
  delivered ``max_deliveries`` times is published to the dead-letter topic and then
  acknowledged (``hedwig.hub.serving.dead_letters``), or without one acknowledged instead of
  being delivered again, and counted as dropped.
- The state (mark, acknowledged ranges, delivery counts: ``hedwig.hub.serving.acks``,
  ``deliveries``) is written as an exclusive subscription's mark is: by compare-and-set,
  after ``QueueSettings.flush_acks`` acknowledgements or the flush interval, and on detach
  and release. A failover redelivers what was acknowledged since the last write, and counts
  at most one delivery too few per message.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from hedwig.clock import Clock
from hedwig.errors import (
    BadVersionError,
    InvalidRequestError,
    MetadataError,
    NoSuchSubscriptionError,
)
from hedwig.flag import Flag
from hedwig.hub.reporting.queue_stats import QueueStats
from hedwig.hub.serving.acks import AckRanges
from hedwig.hub.serving.dead_letters import DeadLetter, DeadLettering, DeadLetterSink
from hedwig.hub.serving.delays import DelayIndex
from hedwig.hub.serving.deliveries import Consumer, Deliveries, Outcome
from hedwig.hub.serving.giving import Giving
from hedwig.hub.serving.peer import Peer
from hedwig.hub.serving.subscription import ACTIVITY_WRITE_MS, DeliveryLog
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.records import (
    DeliveryPolicy,
    SubscriptionData,
    SubscriptionPreferences,
    SubscriptionState,
    SubscriptionType,
    Version,
)
from hedwig.protocol import CloseReason, SubscriptionForcedClosed, SubscriptionMoved
from hedwig.settings import QueueSettings

log = logging.getLogger(__name__)


class QueueSubscription(DeadLettering, Giving):
    def __init__(
        self,
        topic: str,
        name: str,
        data: SubscriptionData,
        version: Version,
        *,
        log_: DeliveryLog,
        store: MetadataStore,
        clock: Clock,
        settings: QueueSettings,
        batch_messages: int,
        on_lost: Callable[[str], None],
        on_delivered: Callable[[int, int], None] | None = None,
        dead_letters: DeadLetterSink | None = None,
    ) -> None:
        self.topic = topic
        self.owner = data.owner
        self.name = name
        self.policy = data.policy or DeliveryPolicy(SubscriptionType.SHARED)
        self.preferences = data.preferences or SubscriptionPreferences()
        state = data.state or SubscriptionState()
        self._created_ms = state.created_ms
        self.last_active_ms = state.last_active_ms or state.created_ms
        self._persisted_active_ms = self.last_active_ms
        self.deliveries = Deliveries(
            self.policy, AckRanges(state.consumed_seq, state.acked), state.deliveries
        )
        self.persisted_seq = state.consumed_seq  # the mark as last written
        self.version = version
        self._log = log_
        self._store = store
        self._clock = clock
        self._settings = settings
        self._batch_messages = batch_messages
        self._on_lost = on_lost
        self._on_delivered = on_delivered
        self.consumers: list[Consumer] = []
        self._turn = 0
        self._held_until: int | None = None
        self.delays = DelayIndex(capacity=settings.max_delayed)
        self._joined = 0  # consumers attached so far: each gets a token of its own
        self._task: asyncio.Task[None] | None = None
        self._wake = Flag()
        self._changes = 0  # acknowledgements, nacks and deliveries since the last write
        self._flush_lock = asyncio.Lock()
        self._flush_soon: asyncio.Task[None] | None = None
        self._flush_failing = False
        self.lost = False
        self.dropped = 0
        self.dead_lettered = 0
        self._sink = dead_letters
        self._letters: list[tuple[DeadLetter, int | None]] = []
        self._letters_task: asyncio.Task[None] | None = None
        self._letters_epoch = 0
        self._letters_failing = False

    # what the topic's table reads --------------------------------------------------------------

    @property
    def consumed_seq(self) -> int:
        """The cumulative mark: everything up to it is acknowledged."""
        return self.deliveries.acks.mark

    @property
    def peers(self) -> tuple[Peer, ...]:
        return tuple(c.peer for c in self.consumers)

    @property
    def peer(self) -> Peer | None:
        """The first consumer's connection (the one a failover subscription delivers to)."""
        return self.consumers[0].peer if self.consumers else None

    @property
    def dirty(self) -> bool:
        return bool(self._changes) or (
            self.last_active_ms - self._persisted_active_ms >= ACTIVITY_WRITE_MS
        )

    @property
    def backlog(self) -> int:
        return max(0, self._log.last_seq - self.consumed_seq)

    def stats(self) -> QueueStats:
        d = self.deliveries
        first = d.first_delivered.get(d.acks.mark + 1)
        age = 0.0 if first is None else max(0.0, (self._clock.wall_ms() - first) / 1000)
        return QueueStats(
            self.topic,
            self.name,
            consumers=len(self.consumers),
            unacked=d.unacked,
            redeliveries=d.redelivered,
            dropped=self.dropped,
            dead_lettered=self.dead_lettered,
            oldest_unacked_s=age,
            delayed=len(self.delays),
            delays_spilled=self.delays.spilled,
        )

    def consumer_of(self, peer: Peer) -> Consumer | None:
        for c in self.consumers:
            if c.peer is peer:
                return c
        return None

    # attachment --------------------------------------------------------------------------------

    def attach(self, peer: Peer, window: int) -> None:
        """Add ``peer`` as a consumer (again: its window changes)."""
        room = window or self._settings.consumer_window
        got = self.consumer_of(peer)
        if got is not None:
            got.window = room
        else:
            self._joined += 1
            token = f"{peer.name}#{self._joined}".encode()
            self.consumers.append(Consumer(peer, room, token=token))
        self.last_active_ms = self._clock.wall_ms()
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._deliver())

    def detach_peer(self, peer: Peer) -> bool:
        """``peer`` leaves; what it held is delivered to the others. True if it was here."""
        got = self.consumer_of(peer)
        if got is None:
            return False
        self.consumers.remove(got)
        if self.deliveries.give_back(got, self._clock.wall_ms()):
            self._changes += 1
        self._wake.set()
        if not self.consumers:
            self._cancel()
        return True

    def detach_quietly(self) -> None:
        for c in list(self.consumers):
            self.detach_peer(c.peer)
        self._cancel()

    def close_peer(self, peer: Peer, code: CloseReason, reason: str) -> None:
        if self.consumer_of(peer) is not None:
            self._send_closed(peer, code, reason)
            self.detach_peer(peer)

    def force_close(self, code: CloseReason, reason: str) -> None:
        for c in list(self.consumers):
            self._send_closed(c.peer, code, reason)
        self.detach_quietly()

    def stop(self) -> None:
        """The topic is no longer served here: write nothing more (as ``Subscription.stop``)."""
        self.lost = True
        self.consumers.clear()
        self._cancel()
        self._stop_letters()

    def _cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def _send_closed(self, peer: Peer, code: CloseReason, reason: str) -> None:
        peer.send(
            SubscriptionForcedClosed(
                topic=self.topic, subscriber=self.name, code=code, reason=reason
            )
        )

    # acknowledging ------------------------------------------------------------------------------

    def consume(self, seq: int) -> bool:
        raise InvalidRequestError(
            f"subscription {self.name!r} of topic {self.topic!r} is "
            f"{self.policy.type.label}: acknowledge each message (ACK), not cumulatively"
        )

    def ack(self, peer: Peer, ranges: Iterable[tuple[int, int]]) -> Outcome:
        out = self.deliveries.ack(self._consumer(peer), ranges)
        return self._settled(out)

    def nack(self, peer: Peer, ranges: Iterable[tuple[int, int]], delay_ms: int) -> Outcome:
        out = self.deliveries.nack(self._consumer(peer), ranges, delay_ms, self._clock.wall_ms())
        return self._settled(out)

    def _consumer(self, peer: Peer) -> Consumer:
        got = self.consumer_of(peer)
        if got is None:
            raise NoSuchSubscriptionError(
                f"subscription {self.name!r} on topic {self.topic!r} is not attached here"
            )
        return got

    def _settled(self, out: Outcome) -> Outcome:
        if out.taken:
            self._changes += out.taken
            self.last_active_ms = self._clock.wall_ms()
            self._wake.set()
            if self._changes >= self._settings.flush_acks:
                self.flush_soon()
        return out

    # writing ------------------------------------------------------------------------------------

    def flush_soon(self) -> None:
        if self.lost or (self._flush_soon is not None and not self._flush_soon.done()):
            return
        self._flush_soon = asyncio.get_running_loop().create_task(self.flush())

    async def flush(self) -> None:
        """Write the acknowledgement state if it changed (compare-and-set)."""
        if self.lost:
            return
        async with self._flush_lock:
            if self.lost or not self.dirty:
                return
            changes, active = self._changes, self.last_active_ms
            d = self.deliveries
            state = SubscriptionState(
                consumed_seq=d.acks.mark,
                created_ms=self._created_ms,
                last_active_ms=active,
                acked=d.acks.stored(),
                deliveries=d.stored_counts(),
            )
            subs = self._store.subscriptions
            data = (
                SubscriptionData(None, state)
                if subs.is_partial_update_supported()
                else SubscriptionData(self.preferences, state, self.policy, self.owner)
            )
            try:
                self.version = await subs.update_subscription_data(
                    self.topic, self.name, data, self.version
                )
            except BadVersionError:
                self.lost = True
                log.warning(
                    "subscription %r/%r was written by another hub; stepping down",
                    self.topic,
                    self.name,
                )
                self.force_close(CloseReason.OWNER_CHANGED, "topic moved")
                self._on_lost("acknowledgement state written by another hub")
                return
            except NoSuchSubscriptionError:
                self.lost = True
                self.force_close(CloseReason.UNSUBSCRIBED, "subscription deleted")
                return
            except MetadataError as exc:
                log.log(
                    logging.DEBUG if self._flush_failing else logging.WARNING,
                    "could not persist acknowledgements of %r/%r (later flushes catch up): %s",
                    self.topic,
                    self.name,
                    exc,
                )
                self._flush_failing = True
                return
            self._flush_failing = False
            self.persisted_seq = state.consumed_seq
            self._changes -= changes
            self._persisted_active_ms = active

    async def reset(self, mark: int) -> None:
        """Everything up to ``mark`` acknowledged and nothing above; consumers are closed with
        RESET (they attach again and delivery restarts after ``mark``)."""
        self.force_close(CloseReason.RESET, f"subscription reset to after {mark}")
        self._drop_letters()
        self.deliveries.reset(mark)
        self.delays.clear()
        self.last_active_ms = self._clock.wall_ms()
        self._changes += 1
        await self.flush()

    async def hand_over(self, hub: str | None, reason: str) -> bool:
        """Served elsewhere from now (a fan-out plan changed): break-before-make. Consumers
        are told where to go and detached; what they held is unacknowledged in the state
        written here, so the next hub delivers it again. True if any was attached."""
        peers = [p for p in self.peers if not p.closed]
        self.consumers.clear()
        self._cancel()
        await self.flush()
        self.lost = True  # writes nothing more: the next hub is the one writer
        for peer in peers:
            peer.send(
                SubscriptionMoved(topic=self.topic, subscriber=self.name, hub=hub, reason=reason)
            )
        return bool(peers)
