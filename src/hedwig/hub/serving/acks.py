"""Which messages of a subscription are acknowledged: the cumulative mark and the ranges
acknowledged above it (``AckRanges``), as BookKeeper-backed cursors keep them (Pulsar's
mark-delete position and individually deleted ranges).

Rules:

- Everything up to ``mark`` is acknowledged; above it, ``ranges()`` are, as inclusive
  ``(first, last)`` pairs, ascending, with at least one unacknowledged message between two.
- Acknowledging the message after the mark moves the mark over every range it now touches,
  so the ranges held are those of messages acknowledged out of order only: their number is
  bounded by the unacknowledged messages between them, which delivery bounds.
- ``stored()`` is what a record keeps: the ranges nearest the mark, at most
  ``MAX_STORED_RANGES``. The others live in memory only: after a failover their messages are
  delivered again (at least once), and the record does not grow with what is in flight.

Kept in two sorted lists searched with ``bisect`` (the standard library), not a tree or an
interval library: inserts are at or near the end (acknowledgements follow delivery order),
where a list is fastest, and the number of ranges stays in the thousands.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable

from hedwig.metadata.records.subscriptions import MAX_STORED_RANGES


class AckRanges:
    __slots__ = ("_ends", "_starts", "mark")

    def __init__(self, mark: int, ranges: Iterable[tuple[int, int]] = ()) -> None:
        self.mark = mark
        self._starts: list[int] = []
        self._ends: list[int] = []
        for first, last in ranges:
            self.add(first, last)

    def __len__(self) -> int:
        """How many ranges are held above the mark."""
        return len(self._starts)

    def is_acked(self, seq: int) -> bool:
        if seq <= self.mark:
            return True
        i = bisect_right(self._starts, seq) - 1
        return i >= 0 and self._ends[i] >= seq

    def next_unacked(self, seq: int) -> int:
        """The first message at or after ``seq`` that is not acknowledged."""
        if seq <= self.mark:
            seq = self.mark + 1
        i = bisect_right(self._starts, seq) - 1
        if i >= 0 and self._ends[i] >= seq:
            return self._ends[i] + 1
        return seq

    def add(self, first: int, last: int) -> None:
        """Acknowledge ``first`` to ``last`` (inclusive)."""
        first = max(first, self.mark + 1)
        if first > last:
            return
        starts, ends = self._starts, self._ends
        # Ranges that overlap or touch [first, last] are merged into it.
        lo = bisect_right(ends, first - 2)
        hi = bisect_right(starts, last + 1)
        if lo < hi:
            first = min(first, starts[lo])
            last = max(last, ends[hi - 1])
        del starts[lo:hi], ends[lo:hi]
        if first == self.mark + 1:
            self.mark = last
            return
        starts.insert(lo, first)
        ends.insert(lo, last)

    def acked_between(self, first: int, last: int) -> int:
        """How many of ``first`` to ``last`` are acknowledged."""
        total = max(0, min(last, self.mark) - first + 1)
        for s, e in zip(self._starts, self._ends, strict=True):
            if s > last:
                break
            lo, hi = max(s, first), min(e, last)
            if lo <= hi:
                total += hi - lo + 1
        return total

    def ranges(self) -> tuple[tuple[int, int], ...]:
        return tuple(zip(self._starts, self._ends, strict=True))

    def stored(self) -> tuple[tuple[int, int], ...]:
        """The ranges a record keeps: the ``MAX_STORED_RANGES`` nearest the mark."""
        n = min(len(self._starts), MAX_STORED_RANGES)
        return tuple(zip(self._starts[:n], self._ends[:n], strict=True))

    def reset(self, mark: int) -> None:
        """Everything up to ``mark`` acknowledged, nothing above (a reset, or a start)."""
        self.mark = mark
        self._starts.clear()
        self._ends.clear()
