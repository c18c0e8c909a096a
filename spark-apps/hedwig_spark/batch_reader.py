"""Batch reads: ``spark.read.format("hedwig")``.

Everything is decided when Spark creates the reader on the driver: the hubs, the topics (and
the lanes of each, read as partitions), and each one's ``[start, end)`` from
``startingOffsets`` (default earliest) and ``endingOffsets`` (default latest, and never past
the latest: a batch read does not wait for messages). The ranges travel to the executors
inside the partitions, so every task reads exactly what the plan said even while producers
keep publishing.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from hedwig_spark.connection import (
    HubSession,
    list_topics,
    resolve_hubs,
    topic_bounds,
    with_lanes,
)
from hedwig_spark.fetch import DataLossError, read_range
from hedwig_spark.offsets import EARLIEST, LATEST
from hedwig_spark.options import ReadOptions
from hedwig_spark.partitions import TopicRange, plan_partitions

log = logging.getLogger(__name__)


class HedwigBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.hubs = resolve_hubs(options.cluster)
        topics = list(options.topics) or list_topics(options.cluster, _pattern(options))
        with HubSession(
            self.hubs,
            retry_deadline_s=options.cluster.retry_deadline_s,
            security=options.cluster.security,
        ) as s:
            topics = with_lanes(s, topics)
            bounds = topic_bounds(s, topics)
        self.ranges: list[tuple[str, int, int]] = []
        for topic in topics:
            b = bounds[topic]
            start = options.batch_start.resolve(topic, b, default=EARLIEST)
            end = min(options.ending.resolve(topic, b, default=LATEST), b.latest)
            if start < b.earliest:
                what = f"topic {topic!r}: messages {start}..{b.earliest - 1} were collected"
                if options.fail_on_data_loss:
                    raise DataLossError(f"{what}; set failOnDataLoss to false to skip them")
                log.warning("%s; skipping them (failOnDataLoss=false)", what)
                start = b.earliest
            if end > start:
                self.ranges.append((topic, start, end))

    def partitions(self) -> list[InputPartition]:
        return plan_partitions(self.ranges, self.options, self.hubs)

    def read(self, partition: InputPartition | None) -> Iterator[pa.RecordBatch]:
        # With no partitions to read Spark still runs one task, with ``None``.
        if partition is None:
            return iter(())
        assert isinstance(partition, TopicRange)
        return read_range(partition)


def _pattern(options: ReadOptions) -> re.Pattern[str]:
    assert options.pattern is not None
    return options.pattern
