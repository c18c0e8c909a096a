"""Who holds which message of a subscription whose consumers acknowledge one by one, and
when each unacknowledged message is due again: the sans-IO state of a queue's delivery
(``Deliveries``), driven by ``hedwig.hub.serving.queue`` with the time passed in.

Rules:

- A message is in one of five states: *new* (at or after ``next_seq``, never delivered by
  this owner), *held* by one consumer (delivered, not acknowledged), *waiting* to be delivered
  again (nacked, timed out, or given back by a consumer that left), *parked* (delivered as
  often as allowed, being published to the dead-letter topic:
  ``hedwig.hub.serving.dead_letters``) or *acknowledged* (``acks``). Nothing else: a message
  is never held by two consumers at once. Why each unacknowledged one was last taken back
  (``reason``) is kept for its dead letter.
- Each delivery counts (``count``): on delivery, not on failure, so a consumer killed in the
  middle of a message has used an attempt. Counts persisted by an earlier owner
  (``prior``) carry on.
- A held message is taken back ``ack_timeout_ms`` after its delivery (0: never), nacked ones
  at once; both wait their backoff step (``DeliveryPolicy.backoff_for``) or the nack's own
  delay. A consumer that leaves gives back everything it holds, due at once.
- An acknowledgement counts only from the consumer holding the message, or from the one
  that held it last while it waits (its late acknowledgement of a timed-out message is
  taken, not wasted). Anything else is *not held* and refused.
- What the owner keeps per message is bounded by what is held and waiting, which delivery
  bounds (``QueueSettings.max_unacked``).
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from hedwig.errors import InvalidRequestError, NotHeldError
from hedwig.hub.serving.acks import AckRanges
from hedwig.hub.serving.keys import KeyPins
from hedwig.hub.serving.peer import Peer
from hedwig.metadata.records import DeliveryPolicy, SubscriptionType
from hedwig.metadata.records.subscriptions import MAX_STORED_RANGES
from hedwig.protocol import SeqRange
from hedwig.protocol.queue_frames import MAX_RANGES


class Reason(Enum):
    """Why a message was last taken back from a consumer."""

    NACKED = "nacked"
    ACK_TIMEOUT = "ack-timeout"
    CONSUMER_LEFT = "consumer-left"
    # Delivered by an earlier owner as often as allowed: why, that owner knew.
    EARLIER_OWNER = "earlier-owner"


@dataclass(eq=False, slots=True)
class Consumer:
    """One attached consumer: its connection, its room, and the messages it holds."""

    peer: Peer
    window: int
    held: set[int] = field(default_factory=set)
    # What a key-shared subscription ranks consumers by (``hedwig.hub.serving.keys``).
    token: bytes = b""

    @property
    def room(self) -> int:
        return self.window - len(self.held)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an acknowledgement or nack did: how many messages it took, how many it refused."""

    taken: int
    not_held: int

    def check(self, topic: str, name: str, what: str) -> None:
        """Raise ``NotHeldError`` if the request named messages the consumer did not hold."""
        if self.not_held:
            raise NotHeldError(
                f"{self.not_held} of the messages named are not held by this consumer of "
                f"{name!r} on {topic!r} ({self.taken} {what})",
                count=self.not_held,
            )


def checked_ranges(ranges: Iterable[SeqRange]) -> list[tuple[int, int]]:
    """ACK's and NACK's ranges, checked: a sequence id is 1 or more, a range runs forward,
    and a request names at most ``MAX_RANGES`` (bad input is refused, not guessed at)."""
    out = [(r.first, r.last) for r in ranges]
    if len(out) > MAX_RANGES:
        raise InvalidRequestError(f"at most {MAX_RANGES} ranges to a request, got {len(out)}")
    for first, last in out:
        if first < 1 or last < first:
            raise InvalidRequestError(f"not a range of sequence ids: {first} to {last}")
    return out


class Deliveries:
    def __init__(
        self,
        policy: DeliveryPolicy,
        acks: AckRanges,
        prior: Iterable[tuple[int, int, int]] = (),
    ) -> None:
        self.policy = policy
        self.keys = KeyPins() if policy.type is SubscriptionType.KEY_SHARED else None
        self.acks = acks
        self.next_seq = acks.mark + 1
        self.count: dict[int, int] = {}
        self._prior = [r for r in prior if r[1] > acks.mark]
        self._prior_starts = [r[0] for r in self._prior]
        # seq -> (consumer, serial of the delivery): the one holder of each held message.
        self._holder: dict[int, tuple[Consumer, int]] = {}
        self._serial = 0
        # (deadline ms, seq, serial) in delivery order: the ack timeout is one for all.
        self._deadlines: deque[tuple[int, int, int]] = deque()
        # (due ms, seq) and seq -> the consumer that held it last.
        self._due: list[tuple[int, int]] = []
        self._waiting: dict[int, Consumer | None] = {}
        # Messages taken from waiting to be delivered again, and the consumer that failed
        # them: another one gets them if it has room.
        self.failed_by: dict[int, Consumer] = {}
        self.redelivered = 0
        # Being published to the dead-letter topic, and why each unacknowledged message was
        # last taken back.
        self.parked: set[int] = set()
        self.reason: dict[int, Reason] = {}
        # When each unacknowledged message was first delivered here (ms): the age of the
        # oldest is what the metrics show.
        self.first_delivered: dict[int, int] = {}

    # what is where ---------------------------------------------------------------------------

    @property
    def unacked(self) -> int:
        """Held, waiting and parked messages."""
        return len(self._holder) + len(self._waiting) + len(self.parked)

    def holder(self, seq: int) -> Consumer | None:
        got = self._holder.get(seq)
        return None if got is None else got[0]

    def tracked(self, seq: int) -> bool:
        """``seq`` is acknowledged, held, waiting or parked: delivery knows where it is."""
        return (
            seq in self._holder
            or seq in self._waiting
            or seq in self.parked
            or self.acks.is_acked(seq)
        )

    def prior_count(self, seq: int) -> int:
        """How often ``seq`` was delivered before this owner took it (0: never)."""
        got = self.count.get(seq)
        if got is not None:
            return got
        i = bisect_right(self._prior_starts, seq) - 1
        if i >= 0 and self._prior[i][1] >= seq:
            return self._prior[i][2]
        return 0

    def next_wakeup(self, *, room: bool = True) -> int | None:
        """When the next held message times out or, if a consumer has ``room``, a waiting one
        is due (ms), if ever (without room a due message could not go anyway: waking for it
        would only spin)."""
        times = []
        if self._deadlines:
            times.append(self._deadlines[0][0])
        if room and self._due:
            times.append(self._due[0][0])
        return min(times) if times else None

    # delivering -------------------------------------------------------------------------------

    def delivered(self, consumer: Consumer, seq: int, now_ms: int, slot: int | None = None) -> int:
        """``seq`` (of key ``slot``) goes to ``consumer`` now; its delivery count, this one
        included."""
        if self.keys is not None and slot is not None:
            self.keys.held(seq, slot, consumer)
        n = self.prior_count(seq) + 1
        self.count[seq] = n
        self.failed_by.pop(seq, None)
        self.first_delivered.setdefault(seq, now_ms)
        self._serial += 1
        self._holder[seq] = (consumer, self._serial)
        consumer.held.add(seq)
        if self.policy.ack_timeout_ms:
            self._deadlines.append((now_ms + self.policy.ack_timeout_ms, seq, self._serial))
        if n > 1:
            self.redelivered += 1
        return n

    def take_due(self, now_ms: int, limit: int) -> list[int]:
        """Up to ``limit`` waiting messages due by ``now_ms``, ascending; they are new again
        to the caller, which delivers them (``delivered``) or gives them back (``wait``)."""
        self.expire(now_ms)
        out: list[int] = []
        due = self._due
        while due and due[0][0] <= now_ms and len(out) < limit:
            _, seq = heapq.heappop(due)
            if seq in self._waiting and not self.acks.is_acked(seq):
                last = self._waiting.pop(seq)
                if self.keys is not None:
                    self.keys.stops_waiting(seq)
                if last is not None:
                    self.failed_by[seq] = last
                out.append(seq)
        out.sort()
        return out

    def wait(
        self, seq: int, due_ms: int, last: Consumer | None = None, slot: int | None = None
    ) -> None:
        """``seq`` (of key ``slot``, if new) is delivered again from ``due_ms``."""
        if self.keys is not None and seq not in self._waiting:
            self.keys.waits(seq, slot)
        self._waiting[seq] = last
        heapq.heappush(self._due, (due_ms, seq))

    def exhausted(self, seq: int) -> bool:
        """``seq`` has been delivered as often as the policy allows."""
        most = self.policy.max_deliveries
        return bool(most) and self.prior_count(seq) >= most

    def expire(self, now_ms: int) -> int:
        """Take back held messages whose ack timeout passed; how many."""
        n = 0
        dl = self._deadlines
        while dl and dl[0][0] <= now_ms:
            _, seq, serial = dl.popleft()
            got = self._holder.get(seq)
            if got is None or got[1] != serial:
                continue  # acknowledged, nacked or given back since
            consumer = got[0]
            self._release(seq, consumer)
            self.wait(seq, now_ms + self.policy.backoff_for(self.count.get(seq, 1)), consumer)
            self.reason[seq] = Reason.ACK_TIMEOUT
            n += 1
        return n

    # acknowledging ----------------------------------------------------------------------------

    def ack(self, consumer: Consumer, ranges: Iterable[tuple[int, int]]) -> Outcome:
        taken, refused = self._claim(consumer, ranges)
        for seq in taken:
            self.acks.add(seq, seq)
            self.count.pop(seq, None)
            self.first_delivered.pop(seq, None)
            self.reason.pop(seq, None)
            if self.keys is not None:
                self.keys.settled(seq)
        return Outcome(len(taken), refused)

    def nack(
        self, consumer: Consumer, ranges: Iterable[tuple[int, int]], delay_ms: int, now_ms: int
    ) -> Outcome:
        taken, refused = self._claim(consumer, ranges)
        for seq in taken:
            wait = delay_ms or self.policy.backoff_for(self.count.get(seq, 1))
            self.wait(seq, now_ms + wait, consumer)
            self.reason[seq] = Reason.NACKED
        return Outcome(len(taken), refused)

    def settle(self, seq: int) -> None:
        """``seq`` is done with here without a consumer (dead-lettered, or dropped past its
        last delivery): acknowledged."""
        got = self._holder.get(seq)
        if got is not None:
            self._release(seq, got[0])
        if seq in self._waiting:
            del self._waiting[seq]
            if self.keys is not None:
                self.keys.stops_waiting(seq)
        self.parked.discard(seq)
        if self.keys is not None:
            self.keys.settled(seq)
        self.acks.add(seq, seq)
        self.count.pop(seq, None)
        self.first_delivered.pop(seq, None)
        self.reason.pop(seq, None)

    def park(self, seq: int) -> None:
        """``seq`` (new, or taken from waiting) is being dead-lettered."""
        self.failed_by.pop(seq, None)
        self.parked.add(seq)

    def unpark(self, seq: int, due_ms: int, slot: int | None = None) -> None:
        """``seq``'s dead letter could not be published: it waits until ``due_ms``."""
        if seq in self.parked:
            self.parked.discard(seq)
            self.wait(seq, due_ms, None, slot)

    def give_back(self, consumer: Consumer, now_ms: int) -> int:
        """``consumer`` left: everything it holds is due again at once; how many."""
        held = sorted(consumer.held)
        for seq in held:
            self._release(seq, consumer)
            self.wait(seq, now_ms, None)
            self.reason[seq] = Reason.CONSUMER_LEFT
        return len(held)

    def _claim(
        self, consumer: Consumer, ranges: Iterable[tuple[int, int]]
    ) -> tuple[list[int], int]:
        """The messages of ``ranges`` ``consumer`` may settle (released from it), and how
        many others the ranges name. A range wider than what the consumer holds and what
        waits is walked through those, so a range of a billion costs what is in flight, not
        a billion steps."""
        taken: list[int] = []
        refused = 0
        for first, last in ranges:
            width = last - first + 1
            if width > len(consumer.held) + len(self._waiting):
                inside = sorted(
                    s
                    for s in (*consumer.held, *self._waiting)
                    if first <= s <= last and self._may_settle(consumer, s)
                )
            else:
                inside = [s for s in range(first, last + 1) if self._may_settle(consumer, s)]
            for seq in inside:
                self._take(consumer, seq)
            taken += inside
            refused += width - len(inside)
        return taken, refused

    def _may_settle(self, consumer: Consumer, seq: int) -> bool:
        got = self._holder.get(seq)
        if got is not None:
            return got[0] is consumer
        return seq in self._waiting and self._waiting[seq] is consumer

    def _take(self, consumer: Consumer, seq: int) -> None:
        if seq in self._holder:
            self._release(seq, consumer)
        else:
            self._waiting.pop(seq, None)
            if self.keys is not None:
                self.keys.stops_waiting(seq)

    def _release(self, seq: int, consumer: Consumer) -> None:
        del self._holder[seq]
        consumer.held.discard(seq)
        if self.keys is not None:
            self.keys.released(seq)

    # persisting -------------------------------------------------------------------------------

    def stored_counts(self) -> tuple[tuple[int, int, int], ...]:
        """Delivery counts as a record keeps them: runs of equal counts over unacknowledged
        messages, nearest the mark first, at most ``MAX_STORED_RANGES``."""
        runs: list[tuple[int, int, int]] = []
        acks = self.acks
        for seq in sorted(self.count):
            if acks.is_acked(seq):
                continue
            n = self.count[seq]
            if runs and runs[-1][1] == seq - 1 and runs[-1][2] == n:
                runs[-1] = (runs[-1][0], seq, n)
            elif len(runs) < MAX_STORED_RANGES:
                runs.append((seq, seq, n))
            else:
                break
        for first, last, n in self._prior:  # not delivered again yet by this owner
            if len(runs) >= MAX_STORED_RANGES:
                break
            first = max(first, self.next_seq, acks.mark + 1, runs[-1][1] + 1 if runs else 0)
            if first <= last:
                runs.append((first, last, n))
        return tuple(runs)

    def reset(self, mark: int) -> None:
        """Everything up to ``mark`` acknowledged, nothing above, nothing held or waiting."""
        self.acks.reset(mark)
        self.next_seq = mark + 1
        self.count.clear()
        self._prior.clear()
        self._prior_starts.clear()
        for consumer, _ in self._holder.values():
            consumer.held.clear()
        self._holder.clear()
        self._deadlines.clear()
        self._due.clear()
        self._waiting.clear()
        self.failed_by.clear()
        self.first_delivered.clear()
        self.parked.clear()
        self.reason.clear()
        if self.keys is not None:
            self.keys.clear()
