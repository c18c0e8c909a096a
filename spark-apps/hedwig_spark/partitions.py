"""Input partitions: which messages one Spark task reads.

A partition is a half-open range ``[start, end)`` of one topic's sequence ids plus what the
task needs to reach the cluster (the hub addresses the driver resolved, so executors never
ask ZooKeeper). Planning is pure: given ranges it splits them so that

- no partition holds more than ``max_rows`` messages (bounds a task's memory and time), and
- there are at least ``min_partitions`` partitions when the rows allow it (Kafka's
  ``minPartitions``: large ranges are split evenly, the largest first).

Splitting never changes which rows are read, only which task reads them, so a replayed
micro-batch reads the same rows whatever its partitioning.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from pyspark.sql.datasource import InputPartition

from hedwig_spark.offsets import Offsets
from hedwig_spark.options import ReadOptions, SecurityOptions


@dataclass(frozen=True)
class TopicRange(InputPartition):
    topic: str
    start: int
    end: int
    hubs: tuple[str, ...]
    retry_deadline_s: float
    fail_on_data_loss: bool
    fetch_messages: int
    security: SecurityOptions = field(default_factory=SecurityOptions)

    @property
    def rows(self) -> int:
        return max(0, self.end - self.start)


def ranges_between(start: Offsets, end: Offsets) -> list[tuple[str, int, int]]:
    """Non-empty ``(topic, start, end)`` ranges; topics new in ``end`` start at seq 1."""
    out = []
    for topic in sorted(end):
        lo = start.get(topic, 1)
        hi = end[topic]
        if hi > lo:
            out.append((topic, lo, hi))
    return out


def split_ranges(
    ranges: list[tuple[str, int, int]], *, min_partitions: int, max_rows: int
) -> list[tuple[str, int, int]]:
    """Split ranges as the module docstring says; the result is sorted by topic and start."""
    pieces: list[tuple[str, int, int]] = []
    for topic, lo, hi in ranges:
        n = -(-(hi - lo) // max_rows)
        pieces.extend(_even(topic, lo, hi, n))
    # Split the largest piece in two until there are enough (or nothing is left to split).
    heap = [(-(hi - lo), topic, lo, hi) for topic, lo, hi in pieces]
    heapq.heapify(heap)
    while 0 < len(heap) < min_partitions and -heap[0][0] > 1:
        _, topic, lo, hi = heapq.heappop(heap)
        mid = lo + (hi - lo) // 2
        heapq.heappush(heap, (-(mid - lo), topic, lo, mid))
        heapq.heappush(heap, (-(hi - mid), topic, mid, hi))
    return sorted((topic, lo, hi) for _, topic, lo, hi in heap)


def _even(topic: str, lo: int, hi: int, n: int) -> list[tuple[str, int, int]]:
    size, extra = divmod(hi - lo, n)
    out = []
    for i in range(n):
        step = size + (1 if i < extra else 0)
        out.append((topic, lo, lo + step))
        lo += step
    return out


def plan_partitions(
    ranges: list[tuple[str, int, int]], options: ReadOptions, hubs: tuple[str, ...]
) -> list[InputPartition]:
    """The input partitions (Spark tasks) reading ``ranges``, split by the options' limits.

    Shared by the batch and the streaming reader, so both split and retry alike.
    """
    pieces = split_ranges(
        ranges, min_partitions=options.min_partitions, max_rows=options.max_rows_per_partition
    )
    return [
        TopicRange(
            topic,
            lo,
            hi,
            hubs,
            options.cluster.retry_deadline_s,
            options.fail_on_data_loss,
            options.fetch_messages,
            options.cluster.security,
        )
        for topic, lo, hi in pieces
    ]
