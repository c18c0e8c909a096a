"""Streaming reads: ``spark.readStream.format("hedwig")``, offsets checkpointed by Spark.

Offsets are ``{topic: next seq to read}`` (``hedwig_spark.offsets``). Spark writes each
micro-batch's end offsets to the checkpoint before running it and asks the source for exactly
``[start, end)`` again if it has to replay it, so the source itself keeps no progress: restart
a query from its checkpoint and it neither loses nor repeats rows, whatever the hubs did in
between. Nothing is ever written back to Hedwig (no subscription, no consume marks).

The driver-side methods run in one long-lived Python process, in this order on Spark 4.1:
``latestOffset`` (before ``initialOffset`` on a fresh query), ``initialOffset``, then per batch
``latestOffset``, ``partitions(start, end)``, ``commit(end)``. After a restart the engine calls
``partitions`` for the last logged batch first. On 4.1 ``latestOffset`` is not told where the
batch starts, so we remember the furthest end we have planned (``partitions``) or handed out
(``latestOffset``); Spark 4.2+ passes ``start`` and a read limit (admission control) and we
use those.

Rules for ``latestOffset``:

- Every known topic ends at its latest sequence id plus one, capped by
  ``maxRecordsPerTrigger`` (or Spark's ``ReadMaxRows`` limit): the cap is shared among topics
  in proportion to their backlog, so a busy topic cannot starve a quiet one.
- A topic that appears (``topicPattern``), or a lane of a topic (a topic served by lanes is
  read lane by lane, ``T~laneN``, an offset each), enters the offsets at its earliest
  retained seq with no rows in that batch, so its starting point is written to the
  checkpoint before anything is read from it and a replay reads the same rows.
- Offsets never go backwards, even if a hub reports less than we already planned.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from hedwig_spark.connection import (
    HubSession,
    list_topics,
    resolve_hubs,
    topic_bounds,
    with_lanes,
)
from hedwig_spark.fetch import read_range
from hedwig_spark.offsets import LATEST, Offsets, TopicBounds, normalise
from hedwig_spark.options import ReadOptions
from hedwig_spark.partitions import TopicRange, plan_partitions, ranges_between

log = logging.getLogger(__name__)

try:  # Spark 4.2+: admission control
    from pyspark.sql.streaming.datasource import (  # type: ignore[import-not-found]
        ReadAllAvailable,
        ReadMaxRows,
    )
except ImportError:  # Spark 4.0 / 4.1: we cap batches ourselves
    ReadAllAvailable = ReadMaxRows = None


class HedwigStreamReader(DataSourceStreamReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.hubs = resolve_hubs(options.cluster)
        # Driver-side state (never pickled, see __getstate__).
        self._session: HubSession | None = None
        self._initial: Offsets | None = None
        self._planned: Offsets | None = None
        self._topics: list[str] = list(options.topics)
        self._topics_listed_at = 0.0

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_session"] = None
        return state

    # driver side ---------------------------------------------------------------------------

    def _client(self) -> HubSession:
        if self._session is None:
            self._session = HubSession(
                self.hubs,
                retry_deadline_s=self.options.cluster.retry_deadline_s,
                security=self.options.cluster.security,
            )
        return self._session

    def _current_topics(self) -> list[str]:
        """The topics, and their lanes, listed again every ``topicRefreshSeconds``: a lane
        that opens enters as a new topic does (at its start, with no rows in that batch)."""
        o = self.options
        if time.monotonic() - self._topics_listed_at >= o.topic_refresh_s:
            named = list_topics(o.cluster, o.pattern) if o.pattern is not None else o.topics
            self._topics = with_lanes(self._client(), list(named))
            self._topics_listed_at = time.monotonic()
        return self._topics

    def initialOffset(self) -> dict[str, int]:
        if self._initial is None:
            topics = self._current_topics()
            bounds = topic_bounds(self._client(), topics)
            spec = self.options.stream_start
            self._initial = normalise(
                {t: spec.resolve(t, bounds[t], default=LATEST) for t in topics}
            )
        return self._initial

    def getDefaultReadLimit(self) -> Any:
        cap = self.options.max_records_per_trigger
        if ReadMaxRows is None:
            return None
        return ReadMaxRows(cap) if cap else ReadAllAvailable()

    def latestOffset(
        self, start: dict[str, int] | None = None, limit: Any = None
    ) -> dict[str, int]:
        begin = dict(start or self._planned or self.initialOffset())
        topics = sorted(set(self._current_topics()) | set(begin))
        bounds = topic_bounds(self._client(), topics)
        cap = _max_rows(limit)
        if cap is None:
            cap = self.options.max_records_per_trigger
        end = next_offsets(begin, bounds, cap)
        self._advance(end)
        return end

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        self._advance(end)
        return plan_partitions(ranges_between(start, end), self.options, self.hubs)

    def _advance(self, end: Offsets) -> None:
        planned = dict(self._planned or {})
        for topic, seq in end.items():
            planned[topic] = max(seq, planned.get(topic, 0))
        self._planned = normalise(planned)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: Spark's checkpoint is the only record of progress."""

    def stop(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    # executor side -------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, TopicRange)
        return read_range(partition)


def next_offsets(begin: Offsets, bounds: dict[str, TopicBounds], cap: int | None) -> Offsets:
    """The end offsets of the next batch (see the module docstring's rules)."""
    end: Offsets = {}
    backlog: dict[str, int] = {}
    for topic, b in bounds.items():
        if topic not in begin:
            end[topic] = b.earliest  # new topic: enters with no rows
            continue
        lo = begin[topic]
        end[topic] = max(lo, b.latest)
        backlog[topic] = end[topic] - lo
    for topic, seq in begin.items():
        end.setdefault(topic, seq)
    total = sum(backlog.values())
    if cap is not None and total > cap:
        shares = {t: cap * n // total for t, n in backlog.items()}
        left = cap - sum(shares.values())
        for topic in sorted(backlog, key=lambda t: (-backlog[t], t)):
            if left == 0:
                break
            if shares[topic] < backlog[topic]:
                shares[topic] += 1
                left -= 1
        for topic, share in shares.items():
            end[topic] = begin[topic] + share
    return normalise(end)


def _max_rows(limit: Any) -> int | None:
    """The row cap of a Spark 4.2+ read limit, or None for 'all available' / no limit."""
    if limit is None:
        return None
    if isinstance(limit, dict):
        value = limit.get("maxRows")
    else:
        value = getattr(limit, "max_rows", getattr(limit, "maxRows", None))
    return int(value) if value is not None else None
