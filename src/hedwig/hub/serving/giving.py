"""How a queue's delivery task gives messages to its consumers (``QueueSubscription``'s part
that runs as its one task; ``hedwig.hub.serving.queue`` says the rules).

Each round takes what is due again first (oldest first, read run by run), then new messages up
to the room the consumers have and ``QueueSettings.max_unacked``, and hands each message to a
consumer: the first one attached (failover), or the next in turn with room, ``SHARE_TURN``
messages at a time (shared), never back to the consumer that just failed it while another has
room. Consecutive messages for one consumer with one delivery count go as one frame, a slice
of the stored batch: DELIVER the first time, REDELIVER after. A message delivered as often as
the policy allows is dropped, or parked for its dead-letter topic
(``hedwig.hub.serving.dead_letters``).

A subscription's delay (``DeliveryPolicy.delay_ms``, a retry subscription's) holds each new
message back until that long after its publish time. The log is in publish order, so what is
held back is always a suffix of the log: the first batch not yet due stops the round and is
the one wakeup to wait for, and nothing is kept per delayed message (no index, whatever the
backlog). The publish time is the owner's clock when it stored the batch, so a later owner
(a failover, a move) holds the same messages back until the same moment.

A message's own delivery time (``hedwig-deliver-at``) holds back that message alone: a new
one not yet due goes into the subscription's ``DelayIndex`` (``hedwig.hub.serving.delays``)
and the round goes on with the messages behind it. What the index finds due joins the
messages due again, each round first; when the index has spilled, the round first reads a
chunk of the log to find spilled messages again. The delivery task also sleeps until the
index's soonest due time (only while a consumer has room: without room nothing could go).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from hedwig.clock import Clock
from hedwig.errors import HedwigError, LedgerError
from hedwig.flag import Flag
from hedwig.hub.serving.delays import DelayIndex
from hedwig.hub.serving.deliveries import Consumer, Deliveries
from hedwig.hub.serving.keys import HOLD_BACK_MS, slot_of
from hedwig.hub.serving.peer import Peer
from hedwig.hub.serving.subscription import READ_RETRY_S, DeliveryLog
from hedwig.metadata.records import DeliveryPolicy, SubscriptionType
from hedwig.protocol import Batch, CloseReason, Deliver, Redeliver
from hedwig.protocol.messages.delivery_time import deliver_times, may_hold
from hedwig.settings import QueueSettings

MAX_READ_BYTES = 4 * 1024 * 1024
# Messages a shared subscription gives one consumer before the next one's turn: a frame
# carries many (a frame per message would cost more than the message), and consumers still
# share a stored batch.
SHARE_TURN = 32

log = logging.getLogger(__name__)


class Giving:
    """The delivery task of ``QueueSubscription``."""

    topic: str
    name: str
    policy: DeliveryPolicy
    deliveries: Deliveries
    delays: DelayIndex
    consumers: list[Consumer]
    lost: bool
    dropped: int
    _turn: int
    _wake: Flag
    _changes: int
    _log: DeliveryLog
    _clock: Clock
    _settings: QueueSettings
    _batch_messages: int
    _on_delivered: Callable[[int, int], None] | None
    # When the first new message held back by the subscription's delay is due (ms; None:
    # none held back).
    _held_until: int | None

    def _send_closed(self, peer: Peer, code: CloseReason, reason: str) -> None:
        raise NotImplementedError

    def _park(self, batch: Batch, seq: int, slot: int | None) -> None:
        raise NotImplementedError

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
        held = self._held_until
        if self._room() and d.unacked < self._settings.max_unacked and held is None:
            waits.append(asyncio.ensure_future(self._log.wait_beyond(d.next_seq - 1)))
        wakeup = d.next_wakeup(room=self._room() > 0)
        if held is not None:
            wakeup = held if wakeup is None else min(wakeup, held)
        if self._room() and d.unacked < self._settings.max_unacked:
            later = self.delays.next_due(self._clock.wall_ms())
            if later is not None:
                wakeup = later if wakeup is None else min(wakeup, later)
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
        if d.expire(now):  # timed out: taken back, which makes room where windows were full
            self._changes += 1
        room = min(self._room(), self._batch_messages)
        sent: set[Peer] = set()
        self._held_until = None
        if room and self.delays.spilling:
            await self._find_spilled(now)
        due = d.take_due(now, room) if room else []
        ripe = min(room - len(due), self._settings.max_unacked - d.unacked)
        if ripe > 0 and len(self.delays):
            due = sorted({*due, *self.delays.take_due(now, ripe)})
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
                if not again and self._held_back(batch, now):
                    stuck = True
                    break
                seq = self._send_batch(batch, max(seq, batch.first_seq), last, now, sent, again)
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

    async def _find_spilled(self, now: int) -> None:
        """Read the next chunk of a pass over the log for spilled delayed messages
        (``DelayIndex.rescan``) and index again those delivery does not know of."""
        d = self.deliveries
        span = self.delays.rescan(now, d.next_seq)
        if span is None:
            return
        first, last = span
        first = max(first, self._log.first_seq)
        through = last  # nothing left to read there: the pass is over
        again: list[tuple[int, int]] = []
        if first <= last:
            found = await self._log.read(first, last - first + 1, MAX_READ_BYTES)
            if found:
                through = min(last, found[-1].last_seq)
            for batch in found:
                for seq, at in deliver_times(batch.payload, batch.first_seq):
                    if first <= seq <= through and not d.tracked(seq):
                        again.append((seq, at))
        self.delays.scanned(through, again)

    def _held_back(self, batch: Batch, now: int) -> bool:
        """``batch``'s messages are new and the subscription's delay has not passed since
        they were published: they and everything after wait (``_held_until``)."""
        delay = self.policy.delay_ms
        if not delay or batch.publish_time_ms + delay <= now:
            return False
        self._held_until = batch.publish_time_ms + delay
        return True

    def _send_batch(
        self, batch: Batch, start: int, last: int, now: int, sent: set[Peer], again: bool
    ) -> int:
        """Deliver ``start`` to ``last`` of ``batch``; the first sequence id not delivered."""
        d = self.deliveries
        end = min(last, batch.last_seq)
        keys = d.keys
        # Delivery times of the batch's messages, if it may hold any (new messages only:
        # one due again has waited already).
        later = (
            dict(deliver_times(batch.payload, batch.first_seq))
            if not again and may_hold(batch.payload)
            else None
        )
        slots: list[int | None] = []
        if keys is not None:
            part = (
                batch.slice(start, end)
                if (start, end) != (batch.first_seq, batch.last_seq)
                else batch
            )
            slots = [slot_of(m.key) for m in part.iter_delivered()]
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
            slot = slots[seq - start] if keys is not None else None
            if d.exhausted(seq):
                self._flush_run(batch, run_first, seq - 1, run_to, run_count, sent)
                run_to = None
                if self.policy.dead_letter is None:
                    d.settle(seq)
                    self.dropped += 1
                    self._changes += 1
                else:
                    self._park(batch, seq, slot)
                seq += 1
                continue
            if later is not None and later.get(seq, 0) > now:
                self._flush_run(batch, run_first, seq - 1, run_to, run_count, sent)
                run_to = None
                self.delays.add(seq, later[seq])  # delivered when due; the rest go on
                seq += 1
                continue
            if keys is not None and slot is not None:
                to = self._keyed(slot, seq)
                if to is None:  # its consumer is full, or older ones of its key wait
                    self._flush_run(batch, run_first, seq - 1, run_to, run_count, sent)
                    run_to = None
                    d.wait(seq, now + HOLD_BACK_MS, None, slot)
                    seq += 1
                    continue
            else:
                to = run_to
                avoid = d.failed_by.get(seq)
                if (
                    to is None
                    or to.room <= 0
                    or to is avoid
                    or (
                        self.policy.type is not SubscriptionType.FAILOVER
                        and seq - run_first >= SHARE_TURN
                    )
                ):
                    to = self._pick(avoid)
                if to is None:
                    break
            count = d.delivered(to, seq, now, slot)
            self._changes += 1
            if to is not run_to or count != run_count:
                self._flush_run(batch, run_first, seq - 1, run_to, run_count, sent)
                run_first, run_to, run_count = seq, to, count
            seq += 1
        self._flush_run(batch, run_first, seq - 1, run_to, run_count, sent)
        return seq

    def _keyed(self, slot: int, seq: int) -> Consumer | None:
        """Where a message of key ``slot`` goes now (``hedwig.hub.serving.keys``), or
        ``None`` if it must wait: its consumer has no room, or older messages of its key wait to
        be delivered again."""
        keys = self.deliveries.keys
        assert keys is not None
        if keys.blocked(slot, seq):
            return None
        to = keys.pinned(slot) or keys.choose(slot, self.consumers)
        return to if to is not None and to.room > 0 else None

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
