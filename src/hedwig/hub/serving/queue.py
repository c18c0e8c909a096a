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
- First deliveries go as DELIVER, later ones as REDELIVER with their count. A message
  delivered ``max_deliveries`` times (without a dead-letter topic) is acknowledged instead of
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
    HedwigError,
    InvalidRequestError,
    LedgerError,
    MetadataError,
    NoSuchSubscriptionError,
)
from hedwig.flag import Flag
from hedwig.hub.serving.acks import AckRanges
from hedwig.hub.serving.deliveries import Consumer, Deliveries, Outcome
from hedwig.hub.serving.peer import Peer
from hedwig.hub.serving.settings import QueueSettings
from hedwig.hub.serving.subscription import ACTIVITY_WRITE_MS, READ_RETRY_S, DeliveryLog
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.records import (
    DeliveryPolicy,
    SubscriptionData,
    SubscriptionPreferences,
    SubscriptionState,
    SubscriptionType,
    Version,
)
from hedwig.protocol import Batch, CloseReason, Deliver, Redeliver, SubscriptionForcedClosed

MAX_READ_BYTES = 4 * 1024 * 1024
# Messages a shared subscription gives one consumer before the next one's turn: a frame
# carries many (a frame per message would cost more than the message), and consumers still
# share a stored batch.
SHARE_TURN = 32

log = logging.getLogger(__name__)


class QueueSubscription:
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
    ) -> None:
        self.topic = topic
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
        self._task: asyncio.Task[None] | None = None
        self._wake = Flag()
        self._changes = 0  # acknowledgements, nacks and deliveries since the last write
        self._flush_lock = asyncio.Lock()
        self._flush_soon: asyncio.Task[None] | None = None
        self._flush_failing = False
        self.lost = False
        self.dropped = 0

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
            self.consumers.append(Consumer(peer, room))
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
                else SubscriptionData(self.preferences, state, self.policy)
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
        self.deliveries.reset(mark)
        self.last_active_ms = self._clock.wall_ms()
        self._changes += 1
        await self.flush()

    # delivery -----------------------------------------------------------------------------------

    def _pick(self, avoid: Consumer | None = None) -> Consumer | None:
        """The consumer the next message goes to, if one has room: not ``avoid`` (the one
        that failed it) while another has room."""
        consumers = self.consumers
        if not consumers:
            return None
        if self.policy.type is SubscriptionType.FAILOVER:
            first = consumers[0]
            return first if first.room > 0 else None
        n = len(consumers)
        fallback = None
        for i in range(n):
            c = consumers[(self._turn + i) % n]
            if c.room > 0:
                if c is avoid:
                    fallback = c
                    continue
                self._turn = (self._turn + i + 1) % n
                return c
        return fallback

    def _room(self) -> int:
        if not self.consumers:
            return 0
        if self.policy.type is SubscriptionType.FAILOVER:
            return max(0, self.consumers[0].room)
        return sum(max(0, c.room) for c in self.consumers)

    async def _deliver(self) -> None:
        lg = self._log
        failing = False
        try:
            while self.consumers and not self.lost and lg.broken is None:
                self._wake.clear()
                try:
                    sent = await self._give()
                except LedgerError as exc:
                    if not failing:
                        log.warning("delivery of %r to %r waits: %s", self.topic, self.name, exc)
                    failing = True
                    await self._clock.sleep(READ_RETRY_S)
                    continue
                failing = False
                if sent:
                    for peer in sent:
                        await peer.writable()
                    continue
                await self._idle()
        except asyncio.CancelledError:
            raise
        except HedwigError as exc:
            log.warning("delivery of %r to %r stopped: %s", self.topic, self.name, exc)
            for c in list(self.consumers):
                if not c.peer.closed:
                    self._send_closed(
                        c.peer, CloseReason.DELIVERY_FAILED, f"delivery failed: {exc}"
                    )
            self.consumers.clear()

    async def _idle(self) -> None:
        """Wait for room (an acknowledgement, a consumer), a new message, or the next time a
        message is due again or times out."""
        d = self.deliveries
        waits: list[asyncio.Future[object]] = [asyncio.ensure_future(self._wake.wait())]
        if self._room() and d.unacked < self._settings.max_unacked:
            waits.append(asyncio.ensure_future(self._log.wait_beyond(d.next_seq - 1)))
        wakeup = d.next_wakeup()
        if wakeup is not None:
            delay = max(0.0, (wakeup - self._clock.wall_ms()) / 1000)
            waits.append(asyncio.ensure_future(self._clock.sleep(delay)))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    async def _give(self) -> set[Peer]:
        """Deliver what is due and what fits; the connections sent to (empty: nothing to do)."""
        d = self.deliveries
        now = self._clock.wall_ms()
        room = min(self._room(), self._batch_messages)
        sent: set[Peer] = set()
        due = d.take_due(now, room) if room else []
        if due:
            start = 0
            for i in range(1, len(due) + 1):  # contiguous runs, each read on its own
                if i == len(due) or due[i] != due[i - 1] + 1:
                    await self._send_run(due[start], due[i - 1], now, sent, again=True)
                    start = i
            return sent
        room = min(room, self._settings.max_unacked - d.unacked)
        lg = self._log
        first = d.acks.next_unacked(max(d.next_seq, lg.first_seq))
        if room <= 0 or first > lg.last_seq:
            if first > d.next_seq:
                d.next_seq = first
            return sent
        last = min(lg.last_seq, first + room - 1)
        d.next_seq = first
        await self._send_run(first, last, now, sent, again=False)
        return sent

    async def _send_run(
        self, first: int, last: int, now: int, sent: set[Peer], *, again: bool
    ) -> None:
        """Deliver ``first`` to ``last`` (those still unacknowledged), each to a consumer with
        room; what no consumer has room for waits (``again``) or stays new."""
        d = self.deliveries
        seq = first
        while seq <= last:
            found = await self._log.read(seq, last - seq + 1, MAX_READ_BYTES)
            stuck = not found
            for batch in found:
                if batch.last_seq < seq:
                    continue
                seq = self._send_batch(batch, max(seq, batch.first_seq), last, now, sent)
                if seq <= min(last, batch.last_seq):
                    stuck = True  # no consumer has room
                    break
            if stuck:
                break
        if again:
            for rest in range(seq, last + 1):
                if not d.acks.is_acked(rest):
                    d.wait(rest, now)
        else:
            d.next_seq = max(d.next_seq, seq)

    def _send_batch(self, batch: Batch, start: int, last: int, now: int, sent: set[Peer]) -> int:
        """Deliver ``start`` to ``last`` of ``batch``; the first sequence id not delivered."""
        d = self.deliveries
        end = min(last, batch.last_seq)
        seq = start
        run_first = 0
        run_to: Consumer | None = None
        run_count = 0
        while seq <= end:
            if d.acks.is_acked(seq):
                self._flush_run(batch, run_first, seq - 1, run_to, run_count, sent)
                run_to = None
                seq += 1
                continue
            if d.exhausted(seq) and self.policy.dead_letter is None:
                self._flush_run(batch, run_first, seq - 1, run_to, run_count, sent)
                run_to = None
                d.settle(seq)
                self.dropped += 1
                self._changes += 1
                seq += 1
                continue
            to = run_to
            avoid = d.failed_by.get(seq)
            if (
                to is None
                or to.room <= 0
                or to is avoid
                or (self.policy.type is SubscriptionType.SHARED and seq - run_first >= SHARE_TURN)
            ):
                to = self._pick(avoid)
            if to is None:
                break
            count = d.delivered(to, seq, now)
            self._changes += 1
            if to is not run_to or count != run_count:
                self._flush_run(batch, run_first, seq - 1, run_to, run_count, sent)
                run_first, run_to, run_count = seq, to, count
            seq += 1
        self._flush_run(batch, run_first, seq - 1, run_to, run_count, sent)
        return seq

    def _flush_run(
        self,
        batch: Batch,
        first: int,
        last: int,
        to: Consumer | None,
        count: int,
        sent: set[Peer],
    ) -> None:
        if to is None or last < first:
            return
        part = (
            batch
            if (first, last) == (batch.first_seq, batch.last_seq)
            else batch.slice(first, last)
        )
        if count <= 1:
            to.peer.send(Deliver(topic=self.topic, subscriber=self.name, batch=part))
        else:
            to.peer.send(
                Redeliver(topic=self.topic, subscriber=self.name, delivery_count=count, batch=part)
            )
        sent.add(to.peer)
        if self._on_delivered is not None:
            self._on_delivered(part.count, len(part.payload))
