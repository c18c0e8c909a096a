"""What a publish call gives back: where its messages landed in the topic (or in a lane of it).

One ``PublishResult`` per message published one by one, made in C by whoever tells it
(``waiters``); one ``BatchPublishResult`` per ``publish_batch`` call, which keeps a run per
chunk and makes each message's ``PublishResult`` only when asked for it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple, overload


class PublishResult(NamedTuple):
    """Where a message landed: its sequence id in the topic (0 if a duplicate of unknown place).

    A named tuple rather than a frozen dataclass: one is made per message published, and it
    is the cheaper of the two to make."""

    seq: int
    duplicate: bool = False
    # The lane it went to (``hedwig.metadata.plans``; 0: the topic itself). ``seq`` is its
    # place in that lane.
    lane: int = 0


class BatchPublishResult(Sequence[PublishResult]):
    """Where the messages of one ``publish_batch`` landed, in the order they were given.

    A sequence of ``PublishResult``, made on demand from one run per chunk (first sequence
    id, count, duplicate), so a batch of a million messages is a handful of tuples. Chunks are
    stored in order but need not be adjacent in the topic (other publishers' batches may land
    between them), hence ``runs`` rather than one first sequence id."""

    __slots__ = ("_lanes", "_len", "_runs")

    def __init__(
        self, runs: Sequence[tuple[int, int, bool]], lanes: Sequence[int] | None = None
    ) -> None:
        self._runs = tuple(runs)
        self._lanes = tuple(lanes) if lanes is not None else (0,) * len(self._runs)
        self._len = sum(n for _, n, _ in self._runs)

    @property
    def runs(self) -> tuple[tuple[int, int, bool], ...]:
        """``(first_seq, count, duplicate)`` per chunk (first_seq 0: a duplicate whose place
        is unknown)."""
        return self._runs

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> PublishResult: ...
    @overload
    def __getitem__(self, index: slice) -> list[PublishResult]: ...
    def __getitem__(self, index: int | slice) -> PublishResult | list[PublishResult]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._len))]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError(index)
        for (first, n, dup), lane in zip(self._runs, self._lanes, strict=True):
            if index < n:
                return PublishResult(first + index if first else 0, dup, lane)
            index -= n
        raise IndexError(index)  # pragma: no cover (the lengths add up)

    def __iter__(self) -> Iterator[PublishResult]:
        for (first, n, dup), lane in zip(self._runs, self._lanes, strict=True):
            if first:
                for seq in range(first, first + n):
                    yield PublishResult(seq, dup, lane)
            else:
                for _ in range(n):
                    yield PublishResult(0, dup, lane)

    def __repr__(self) -> str:
        return f"BatchPublishResult(runs={self._runs!r})"
