"""Delivery to one subscriber, and its consume mark.

Rules:

- A subscription is attached to at most one connection. Delivery starts after the consume
  mark (``consumed_seq``), in sequence order, at least once: after a reconnect everything past
  the persisted mark is delivered again.
- ``message_window`` bounds delivered-but-unconsumed messages: delivery pauses when the
  subscriber is that far ahead of its consumes (flow control, as in Hedwig).
- ``message_bound`` bounds what is kept for the subscriber: when more than that many messages
  are unconsumed, the mark jumps forward and the oldest are skipped (Hedwig's messageBound).
- Consumes are cumulative. The mark is written to the metadata store with a compare-and-set,
  batched (after ``flush_messages`` messages or ``flush_interval`` seconds), and always on
  detach and release, so a clean shutdown loses no mark and a crash only causes redelivery.
- A failed compare-and-set means another hub wrote the mark: this hub no longer owns the
  topic. The subscription stops and the topic is told to step down.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from hedwig.clock import Clock
from hedwig.errors import (
    BadVersionError,
    HedwigError,
    LedgerError,
    MetadataError,
    NoSuchSubscriptionError,
)
from hedwig.flag import Flag
from hedwig.hub.serving.peer import Peer
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.records import (
    SubscriptionData,
    SubscriptionPreferences,
    SubscriptionState,
    Version,
)
from hedwig.protocol import Batch, CloseReason, Deliver, SubscriptionForcedClosed

# How long delivery waits before reading again when a storage replica does not answer.
READ_RETRY_S = 1.0
# Activity alone (an attach, a consume that moved nothing) is written at most this often.
ACTIVITY_WRITE_MS = 60_000

log = logging.getLogger(__name__)


class DeliveryLog(Protocol):
    """What delivery reads: the owner's ``TopicLog``, or a delivery hub's ``TailLog``."""

    @property
    def first_seq(self) -> int: ...

    @property
    def last_seq(self) -> int: ...

    @property
    def broken(self) -> Exception | None: ...

    async def wait_beyond(self, seq: int, timeout: float | None = None) -> bool: ...

    async def read(self, start: int, limit: int, max_bytes: int) -> list[Batch]: ...


class Subscription:
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
        batch_messages: int,
        flush_messages: int,
        on_lost: Callable[[str], None],
        on_delivered: Callable[[int, int], None] | None = None,
    ) -> None:
        self.topic = topic
        self.name = name
        self.preferences = data.preferences or SubscriptionPreferences()
        # Written back whole where the store cannot update a part (the policy is never changed
        # here, only carried).
        self._policy = data.policy
        self.owner = data.owner  # written with the mark: ZooKeeper and etcd store it whole
        state = data.state or SubscriptionState()
        self.consumed_seq = state.consumed_seq
        self._created_ms = state.created_ms
        self.persisted_seq = state.consumed_seq
        # When a subscriber last attached or consumed (written with the mark, for expiry).
        self.last_active_ms = state.last_active_ms or state.created_ms
        self._persisted_active_ms = self.last_active_ms
        self.version = version
        self._log = log_
        self._store = store
        self._clock = clock
        self._batch_messages = batch_messages
        self._flush_messages = flush_messages
        self._on_lost = on_lost
        self._on_delivered = on_delivered
        self.peer: Peer | None = None
        self.delivered_seq = self.consumed_seq
        self._task: asyncio.Task[None] | None = None
        self._consumed_changed = Flag()
        self._flush_lock = asyncio.Lock()
        self._flush_failing = False
        # A flush started by consume() and not finished: later consumes ride on it rather
        # than queue one write each (while the store is out of reach they would pile up by
        # the thousand, then run one after another and starve every other metadata request).
        self._flush_soon: asyncio.Task[None] | None = None
        self.lost = False

    @property
    def dirty(self) -> bool:
        """The mark moved, or activity since the last write is worth recording."""
        return (
            self.consumed_seq != self.persisted_seq
            or self.last_active_ms - self._persisted_active_ms >= ACTIVITY_WRITE_MS
        )

    @property
    def peers(self) -> tuple[Peer, ...]:
        """The connection attached, if any (as a queue's several consumers are listed)."""
        return () if self.peer is None else (self.peer,)

    @property
    def backlog(self) -> int:
        return max(0, self._log.last_seq - self.consumed_seq)

    # attachment ---------------------------------------------------------------------------

    def attach(self, peer: Peer, preferences: SubscriptionPreferences) -> None:
        if self.peer is not None and self.peer is not peer:
            self._send_closed(self.peer, CloseReason.TAKEN_OVER, "attached by another connection")
        self.detach_quietly()
        self.preferences = preferences
        self.peer = peer
        self.last_active_ms = self._clock.wall_ms()
        self.delivered_seq = self.consumed_seq
        self._task = asyncio.get_running_loop().create_task(self._deliver(peer))

    def detach_quietly(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self.peer = None

    def close_peer(self, peer: Peer, code: CloseReason, reason: str) -> None:
        """Close the subscription on ``peer`` if it is the one attached."""
        if self.peer is peer:
            self.force_close(code, reason)

    def force_close(self, code: CloseReason, reason: str) -> None:
        if self.peer is not None:
            self._send_closed(self.peer, code, reason)
        self.detach_quietly()

    def _send_closed(self, peer: Peer, code: CloseReason, reason: str) -> None:
        peer.send(
            SubscriptionForcedClosed(
                topic=self.topic, subscriber=self.name, code=code, reason=reason
            )
        )

    # consuming ----------------------------------------------------------------------------

    def consume(self, seq: int) -> bool:
        """Record a cumulative consume; True if the mark should be flushed now.

        Capped at what exists: the log's end, or what was delivered if that is further (a
        delivery hub's view of the log may lag what it delivered from the owner; a consume
        dropped there would never come again and the window would stay full)."""
        seq = min(seq, max(self._log.last_seq, self.delivered_seq))
        if seq <= self.consumed_seq:
            return False
        self.consumed_seq = seq
        self.last_active_ms = self._clock.wall_ms()
        self._consumed_changed.set()
        return self.consumed_seq - self.persisted_seq >= self._flush_messages

    def flush_soon(self) -> None:
        """Write the mark in the background, unless a background write is already pending
        (it writes the newest mark when its turn comes)."""
        if self.lost or (self._flush_soon is not None and not self._flush_soon.done()):
            return
        self._flush_soon = asyncio.get_running_loop().create_task(self.flush())

    def stop(self) -> None:
        """The topic is no longer served here (lost, not handed off): write nothing more.
        The next owner has the record now; a late write would only fail its compare-and-set,
        or worse, succeed after the new owner read the record and make the new owner's writes
        fail."""
        self.lost = True
        self.detach_quietly()

    async def flush(self) -> None:
        """Write the consume mark if it moved (compare-and-set on the subscription record)."""
        if self.lost:
            return
        async with self._flush_lock:
            if self.lost or not self.dirty:  # lost while this flush waited its turn
                return
            target, active = self.consumed_seq, self.last_active_ms
            state = SubscriptionState(
                consumed_seq=target, created_ms=self._created_ms, last_active_ms=active
            )
            subs = self._store.subscriptions
            data = (
                SubscriptionData(None, state)
                if subs.is_partial_update_supported()
                else SubscriptionData(self.preferences, state, self._policy, self.owner)
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
                self._on_lost("consume mark written by another hub")
                return
            except NoSuchSubscriptionError:
                # Deleted where this hub did not see it (a fan-out topic's owner was asked):
                # the subscriber stops, as if it had been unsubscribed here.
                self.lost = True
                self.force_close(CloseReason.UNSUBSCRIBED, "subscription deleted")
                return
            except MetadataError as exc:
                # Said once per outage: the mark stays dirty and the next flush catches up.
                log.log(
                    logging.DEBUG if self._flush_failing else logging.WARNING,
                    "could not persist consume mark of %r/%r (later flushes catch up): %s",
                    self.topic,
                    self.name,
                    exc,
                )
                self._flush_failing = True
                return
            if self._flush_failing:
                log.info("consume mark of %r/%r persisted again", self.topic, self.name)
                self._flush_failing = False
            self.persisted_seq = target
            self._persisted_active_ms = active

    async def reset(self, mark: int) -> None:
        """Move the consume mark to ``mark`` (back or forth) and write it at once. An attached
        subscriber is closed with RESET: it attaches again and delivery restarts there."""
        if self.peer is not None:
            self.force_close(CloseReason.RESET, f"subscription reset to after {mark}")
        self.consumed_seq = mark
        self.delivered_seq = mark
        self.last_active_ms = self._clock.wall_ms()
        self._consumed_changed.set()
        await self.flush()

    # delivery -----------------------------------------------------------------------------

    async def _deliver(self, peer: Peer) -> None:
        lg = self._log
        next_seq = self.consumed_seq + 1
        failing = False
        try:
            while not peer.closed and lg.broken is None:
                bound = self.preferences.message_bound
                if bound and lg.last_seq - self.consumed_seq > bound:
                    self.consumed_seq = lg.last_seq - bound
                    next_seq = max(next_seq, self.consumed_seq + 1)
                window = self.preferences.message_window
                while window and self.delivered_seq - self.consumed_seq >= window:
                    self._consumed_changed.clear()
                    await self._consumed_changed.wait()
                if next_seq > lg.last_seq:
                    await lg.wait_beyond(next_seq - 1)
                    continue
                next_seq = max(next_seq, lg.first_seq)
                limit = self._batch_messages
                if window:
                    limit = min(limit, window - (self.delivered_seq - self.consumed_seq))
                try:
                    found = await lg.read(next_seq, limit, 4 * 1024 * 1024)
                except LedgerError as exc:
                    # A replica is unreachable (a hub restarting): keep the subscriber attached
                    # and try again; its messages are not lost, only late.
                    if not failing:
                        log.warning("delivery of %r to %r waits: %s", self.topic, self.name, exc)
                    failing = True
                    await self._clock.sleep(READ_RETRY_S)
                    continue
                failing = False
                for batch in found:
                    last = batch.last_seq
                    if window:
                        last = min(last, self.consumed_seq + window)
                    if batch.first_seq < next_seq or last != batch.last_seq:
                        batch = batch.slice(next_seq, last)
                        if batch.count == 0:
                            break
                    peer.send(Deliver(topic=self.topic, subscriber=self.name, batch=batch))
                    self.delivered_seq = batch.last_seq
                    next_seq = batch.last_seq + 1
                    if self._on_delivered is not None:
                        self._on_delivered(batch.count, len(batch.payload))
                    if window and self.delivered_seq - self.consumed_seq >= window:
                        break
                await peer.writable()
        except asyncio.CancelledError:
            raise
        except HedwigError as exc:
            log.warning("delivery of %r to %r stopped: %s", self.topic, self.name, exc)
            if not peer.closed:
                self._send_closed(peer, CloseReason.DELIVERY_FAILED, f"delivery failed: {exc}")
            if self.peer is peer:
                self.peer = None
