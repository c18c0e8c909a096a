"""Messages delivered later: the owner's index of a queue subscription's delayed messages
(``DelayIndex``, sans-IO, the time passed in), and the check of a publish that asks for it.

A message whose ``hedwig-deliver-at`` header (``hedwig.protocol.messages.delivery_time``) is
still ahead when a failover, shared or key-shared subscription's delivery reaches it is not
given: its sequence id and due time go into the index, and delivery goes on with the messages
behind it, which are not held. When the time comes, the index gives it back to delivery, which
gives it as a first delivery (DELIVER, count 1) to whichever consumer has room, as it gives a
message due again. Exclusive subscriptions and readers of the log ignore the header: their
consumers acknowledge cumulatively, so one message cannot wait while the ones behind it go
(Pulsar, likewise, delays only for its shared subscriptions); they see the header among the
message's headers.

Rules:

- The index holds a sequence id and a due time per delayed message, never its payload, and
  at most ``QueueSettings.max_delayed`` of them: the ones due soonest. When it is full, the
  message due last (the newcomer or the latest in the index) is *spilled*: forgotten here,
  and the lowest sequence id spilled and the soonest due time spilled are remembered.
- The log is the spill. It keeps every unacknowledged message (the subscription's mark holds
  retention back), so a spilled message is found again by reading the log from the lowest
  sequence id spilled up to where delivery has reached (a *pass*), taking again every message
  with a delivery time that delivery neither acknowledged, holds, nor has waiting. A pass
  starts when the index has drained to half its bound, or when a spilled message falls due
  and the index holds one due later (so the pass can take it in); one pass reads the log once
  from the lowest spill, a chunk a round, and a message spilled again during the pass beyond
  where it has read is left for the pass to meet.
- What is due comes out soonest first (``take_due``); the delivery task sleeps until the
  index's soonest due time (``next_due``), on the subscription's injected clock.
- Nothing of the index is written to the metadata store: after a failover or a move the next
  owner's delivery meets the unacknowledged delayed messages again as it reads the log from
  the mark, and indexes them anew. A due time is a wall-clock time chosen by the publisher,
  so every owner holds a message back until the same moment.

The standard library's ``heapq`` is enough for both ends the index needs (the soonest, to
deliver; the latest, to spill): two heaps over one dictionary that says which entries live,
each entry in both, dead ones dropped as they surface and both rebuilt when dead ones
outnumber the living.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from hedwig.errors import InvalidRequestError
from hedwig.protocol.messages.delivery_time import DeliveryTimeError, check_payload
from hedwig.settings import QueueSettings


def check_published(payload: bytes, now_ms: int, settings: QueueSettings) -> None:
    """``INVALID_REQUEST`` (not retried) for a publish whose payload holds a malformed
    delivery time or one further ahead than ``QueueSettings.max_deliver_delay_s``."""
    try:
        check_payload(payload, now_ms, int(settings.max_deliver_delay_s * 1000))
    except DeliveryTimeError as exc:
        raise InvalidRequestError(str(exc)) from exc


class DelayIndex:
    """A queue subscription's delayed messages: sequence id to due time, bounded."""

    def __init__(self, *, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("a delay index holds at least one message")
        self.capacity = capacity
        self._due: dict[int, int] = {}  # seq -> due ms: the living entries
        self._soonest: list[tuple[int, int]] = []  # (due, seq), a min-heap
        self._latest: list[tuple[int, int]] = []  # (-due, -seq), a min-heap: the latest first
        # The lowest sequence id and the soonest due time spilled since the last pass began
        # (None: nothing spilled).
        self._spilled_from: int | None = None
        self._spilled_due: int | None = None
        # The pass in progress: (next sequence id to read, last one to read).
        self._pass: tuple[int, int] | None = None
        self.spilled = 0  # messages spilled, ever (again when spilled again)
        self.passes = 0  # passes begun, ever

    def __len__(self) -> int:
        return len(self._due)

    def __contains__(self, seq: object) -> bool:
        return seq in self._due

    @property
    def spilling(self) -> bool:
        """Messages are spilled and not found again yet (or a pass is finding them)."""
        return self._spilled_from is not None or self._pass is not None

    # adding and taking ----------------------------------------------------------------------

    def add(self, seq: int, due_ms: int) -> None:
        """``seq`` is not to be delivered before ``due_ms``: kept, or spilled."""
        if seq in self._due:
            return
        if len(self._due) >= self.capacity:
            latest = self._peek_latest()
            if latest is None or (due_ms, seq) >= latest:
                self._spill(seq, due_ms)
                return
            last_due, last_seq = latest
            del self._due[last_seq]
            self._spill(last_seq, last_due)
        self._due[seq] = due_ms
        heapq.heappush(self._soonest, (due_ms, seq))
        heapq.heappush(self._latest, (-due_ms, -seq))
        self._compact()

    def take_due(self, now_ms: int, limit: int) -> list[int]:
        """Up to ``limit`` messages due by ``now_ms``, soonest first, taken out of the index;
        ascending."""
        out: list[int] = []
        heap = self._soonest
        while heap and len(out) < limit:
            due, seq = heap[0]
            if self._due.get(seq) != due:
                heapq.heappop(heap)  # spilled or taken since
                continue
            if due > now_ms:
                break
            heapq.heappop(heap)
            del self._due[seq]
            out.append(seq)
        out.sort()
        return out

    def next_due(self, now_ms: int) -> int | None:
        """When delivery should look again (ms): the soonest due time in the index, or a
        spilled message's if a pass would then take it in; None: nothing to wait for."""
        times = []
        soonest = self._peek_soonest()
        if soonest is not None:
            times.append(soonest)
        if self._pass is not None:
            times.append(now_ms)
        elif self._spilled_due is not None and self._useful():
            times.append(self._spilled_due)
        return min(times) if times else None

    def clear(self) -> None:
        """Forget everything (the subscription was reset)."""
        self._due.clear()
        self._soonest.clear()
        self._latest.clear()
        self._spilled_from = self._spilled_due = None
        self._pass = None

    # finding spilled messages again -----------------------------------------------------------

    def rescan(self, now_ms: int, next_seq: int) -> tuple[int, int] | None:
        """The part of the log to read now for spilled messages, ``(first, last)`` sequence
        ids (the caller reads what it can from ``first`` and says how far: ``scanned``), or
        None. ``next_seq`` is where delivery has reached: nothing was spilled beyond it."""
        if self._pass is None:
            since = self._spilled_from
            if since is None or not self._wanted(now_ms):
                return None
            self._pass = (since, next_seq - 1)
            self._spilled_from = self._spilled_due = None
            self.passes += 1
        first, last = self._pass
        if first > last:
            self._pass = None
            return None
        return self._pass

    def scanned(self, through: int, found: Iterable[tuple[int, int]]) -> None:
        """The pass has read the log through ``through`` and ``found`` these ``(seq, due)``
        there that delivery does not know of: they are added (and what they spill is behind
        the pass now, so left for the next one)."""
        if self._pass is not None:
            _, last = self._pass
            self._pass = None if through >= last else (through + 1, last)
        for seq, due in found:
            self.add(seq, due)

    # inside -------------------------------------------------------------------------------------

    def _spill(self, seq: int, due_ms: int) -> None:
        self.spilled += 1
        p = self._pass
        if p is not None and p[0] <= seq <= p[1]:
            return  # the pass in progress has yet to read it: it meets it again
        if self._spilled_from is None or seq < self._spilled_from:
            self._spilled_from = seq
        if self._spilled_due is None or due_ms < self._spilled_due:
            self._spilled_due = due_ms

    def _useful(self) -> bool:
        """A pass now could take a spilled message in."""
        if len(self._due) < self.capacity:
            return True
        latest = self._peek_latest()
        return (
            latest is not None and self._spilled_due is not None and latest[0] > self._spilled_due
        )

    def _wanted(self, now_ms: int) -> bool:
        if not self._useful():
            return False
        drained = len(self._due) <= self.capacity // 2
        return drained or (self._spilled_due is not None and now_ms >= self._spilled_due)

    def _peek_soonest(self) -> int | None:
        heap = self._soonest
        while heap and self._due.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def _peek_latest(self) -> tuple[int, int] | None:
        """The entry due last, ``(due, seq)``."""
        heap = self._latest
        while heap and self._due.get(-heap[0][1]) != -heap[0][0]:
            heapq.heappop(heap)
        return (-heap[0][0], -heap[0][1]) if heap else None

    def _compact(self) -> None:
        live = len(self._due)
        if len(self._soonest) > 2 * live + 64 or len(self._latest) > 2 * live + 64:
            self._soonest = [(d, s) for s, d in self._due.items()]
            self._latest = [(-d, -s) for s, d in self._due.items()]
            heapq.heapify(self._soonest)
            heapq.heapify(self._latest)
