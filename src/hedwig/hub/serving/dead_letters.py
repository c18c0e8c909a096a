"""Dead letters: what a queue's owner does with a message delivered ``max_deliveries`` times
when its subscription names a dead-letter topic (``DeliveryPolicy.dead_letter``). The part of
``QueueSubscription`` that parks such messages and publishes them (``DeadLettering``), and
the seam it publishes through (``DeadLetterSink``; in a hub,
``hedwig.hub.spreading.dead_letters`` sends them to the dead-letter topic's owner).

Rules:

- Publish first, acknowledge after. A message to be dead-lettered is *parked*
  (``Deliveries.park``): neither held by a consumer nor waiting, still unacknowledged, so the
  topic keeps it (``keep_from_seq``) and it counts against ``QueueSettings.max_unacked``. Once
  the dead-letter topic's owner has stored it, it is settled (acknowledged) here and counted
  (``dead_lettered``); if the publish fails it waits ``RETRY_MS`` and, still exhausted, is
  parked and published again. So it is always in the subscription, in the dead-letter topic,
  or (between the two steps) in both, never in neither.
- The publish is idempotent. Each letter goes under a publisher id of its own that names its
  origin (``publisher_of``: topic, subscription, sequence id) at publisher sequence 1, so a
  second publish of one letter (the first one's answer lost, or this owner crashed after
  publishing and before its acknowledgement was written) is answered by the dead-letter
  topic's duplicate detection (``hedwig.hub.owning.dedup``) with where the first landed, and
  not stored again. One id per letter rather than one per subscription numbered by origin
  sequence: dead-lettered sequence ids have gaps, which duplicate detection refuses from a
  publisher it knows (``OutOfOrderError``). The dead-letter topic remembers its last
  ``MAX_PUBLISHERS`` (10,000) publishers, far more than one flush interval dead-letters.
- A letter keeps the message's value, key and headers and adds ``HEADERS``: the origin topic,
  sequence id, subscription, delivery count, the reason of its last failure (``Reason``) and
  its publish time.
- Publishing is checked against the subscription's creator (``owner``), whose permission to
  publish to the dead-letter topic was checked when it was created and is checked again by
  the sink for each publish (rules revoked since stop it: the letters wait, never dropped).
- After a reset the letters in flight are not settled (``_letters_epoch``): the reset said
  what is acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from hedwig.clock import Clock
from hedwig.errors import HedwigError
from hedwig.flag import Flag
from hedwig.hub.serving.deliveries import Deliveries, Reason
from hedwig.metadata.records import DeliveryPolicy
from hedwig.protocol import Batch, Message

log = logging.getLogger(__name__)

# A letter that could not be published is tried again this much later (ms).
RETRY_MS = 1_000
# Letters published by one request at most (each is its own publisher, so its own frame).
LETTERS_AT_ONCE = 64

HEADER_TOPIC = "hedwig-dlq-topic"
HEADER_SEQ = "hedwig-dlq-seq"
HEADER_SUBSCRIPTION = "hedwig-dlq-subscription"
HEADER_DELIVERIES = "hedwig-dlq-deliveries"
HEADER_REASON = "hedwig-dlq-reason"
HEADER_PUBLISH_TIME = "hedwig-dlq-publish-time-ms"
HEADERS = (
    HEADER_TOPIC,
    HEADER_SEQ,
    HEADER_SUBSCRIPTION,
    HEADER_DELIVERIES,
    HEADER_REASON,
    HEADER_PUBLISH_TIME,
)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One message on its way to the dead-letter topic."""

    topic: str
    subscription: str
    seq: int
    deliveries: int
    reason: Reason
    publish_time_ms: int
    message: Message

    @property
    def publisher_id(self) -> str:
        return publisher_of(self.topic, self.subscription, self.seq)

    def published(self) -> Message:
        """The message as the dead-letter topic stores it: its own, and ``HEADERS``."""
        m = self.message
        ours = (
            (HEADER_TOPIC, self.topic.encode()),
            (HEADER_SEQ, b"%d" % self.seq),
            (HEADER_SUBSCRIPTION, self.subscription.encode()),
            (HEADER_DELIVERIES, b"%d" % self.deliveries),
            (HEADER_REASON, self.reason.value.encode()),
            (HEADER_PUBLISH_TIME, b"%d" % self.publish_time_ms),
        )
        kept = tuple(h for h in m.headers if h[0] not in HEADERS)
        return Message(value=m.value, key=m.key, headers=kept + ours)


def publisher_of(topic: str, subscription: str, seq: int) -> str:
    """The publisher id a letter is published under: one per origin message."""
    return f"dlq:{topic}:{subscription}:{seq}"


class DeadLetterSink(Protocol):
    """Where a hub's dead letters go."""

    async def publish(self, topic: str, owner: str | None, letters: Sequence[DeadLetter]) -> None:
        """Store ``letters`` in ``topic`` on behalf of ``owner`` (the subscription's creator),
        each once however often it is asked; ``HedwigError`` if not all were stored."""


class DeadLettering:
    """The dead-letter part of ``QueueSubscription``."""

    topic: str
    name: str
    policy: DeliveryPolicy
    deliveries: Deliveries
    lost: bool
    owner: str | None
    dead_lettered: int
    _changes: int
    _wake: Flag
    _clock: Clock
    _sink: DeadLetterSink | None
    _letters: list[tuple[DeadLetter, int | None]]
    _letters_task: asyncio.Task[None] | None
    _letters_epoch: int
    _letters_failing: bool

    def flush_soon(self) -> None:
        raise NotImplementedError

    def _park(self, batch: Batch, seq: int, slot: int | None) -> None:
        """``seq`` (of ``batch``; of key ``slot``) was delivered as often as allowed: park it
        and publish it to the dead-letter topic."""
        d = self.deliveries
        m = next(batch.slice(seq, seq).iter_delivered())
        reason = d.reason.get(seq, Reason.EARLIER_OWNER)
        d.park(seq)
        letter = DeadLetter(
            self.topic,
            self.name,
            seq,
            d.prior_count(seq),
            reason,
            m.publish_time_ms,
            m.message,
        )
        self._letters.append((letter, slot))
        if self._letters_task is None or self._letters_task.done():
            self._letters_task = asyncio.get_running_loop().create_task(self._send_letters())

    async def _send_letters(self) -> None:
        target = self.policy.dead_letter
        while self._letters and not self.lost:
            batch, self._letters = (
                self._letters[:LETTERS_AT_ONCE],
                self._letters[LETTERS_AT_ONCE:],
            )
            epoch = self._letters_epoch
            try:
                if self._sink is None or target is None:
                    raise HedwigError("this hub publishes no dead letters")
                await self._sink.publish(target, self.owner, [b[0] for b in batch])
            except HedwigError as exc:
                log.log(
                    logging.DEBUG if self._letters_failing else logging.WARNING,
                    "dead letters of %r/%r to %r wait: %s",
                    self.topic,
                    self.name,
                    target,
                    exc,
                )
                self._letters_failing = True
                if epoch == self._letters_epoch:
                    due = self._clock.wall_ms() + RETRY_MS
                    for letter, slot in batch:
                        self.deliveries.unpark(letter.seq, due, slot)
                self._wake.set()
                continue
            self._letters_failing = False
            if epoch != self._letters_epoch:
                continue  # reset meanwhile: the reset says what is acknowledged
            for letter, _ in batch:
                self.deliveries.settle(letter.seq)
            self.dead_lettered += len(batch)
            self._changes += len(batch)
            self._wake.set()
            self.flush_soon()

    def _drop_letters(self) -> None:
        """A reset or the end of serving here: what is parked is no longer this owner's."""
        self._letters_epoch += 1
        self._letters.clear()

    def _stop_letters(self) -> None:
        self._drop_letters()
        if self._letters_task is not None:
            self._letters_task.cancel()
            self._letters_task = None
