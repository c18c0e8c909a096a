"""Writing rows to topics, from batch queries (``df.write``) and streaming ones (``writeStream``).

Input columns, as for Spark's Kafka sink: ``value`` (string or binary, required), ``key``
(string or binary, optional), ``topic`` (string, optional: else the ``topic`` option), and
``headers`` (array of struct<key: string, value: binary or string>, optional). Other columns
are ignored.

**Replays add no duplicates.** Spark runs a task again after a failure and replays a whole
micro-batch after a restart (the sink may even see a batch id twice, after a stop between the
sink's commit and the commit log). Every task publishes under a publisher id derived from
what identifies its rows:

- streaming: ``spark:<query id>:<batch id>:<partition id>`` (the ids Spark gives the task as
  local properties; the query id survives restarts from a checkpoint),
- batch: ``spark:<writerId option or a fresh id per write>:<partition id>``; ``foreachBatch``
  users pass ``writerId`` = query id and batch id to get the same guarantee.

The hub remembers each publisher's last sequence and answers a re-sent batch as a duplicate
instead of storing it. It recognises a batch only if it is the same batch (same first
publisher sequence and same length), so we make batch boundaries a function of the rows
alone: rows are handed to the client ``chunkRows`` at a time, all at once, and the next chunk
starts only after the previous one is acknowledged; the client cuts a chunk into batches
greedily (2,000 messages or 1 MiB). A replay of the same rows in the same order therefore
produces the same batches. A replay in another order (a nondeterministic upstream shuffle)
is not recognised: sort before writing if that matters.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from hedwig.client import HedwigClient, PublishResult
from hedwig_spark.connection import HubSession, resolve_hubs
from hedwig_spark.options import WriteOptions

log = logging.getLogger(__name__)

# Local properties Spark's MicroBatchExecution sets on every task of a micro-batch.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"

Outgoing = tuple[str, bytes, bytes | None, tuple[tuple[str, bytes], ...]]


@dataclass
class PublishedRows(WriterCommitMessage):
    """What one task published: new messages and recognised duplicates, per topic."""

    publisher_id: str
    written: dict[str, int] = field(default_factory=dict)
    duplicates: dict[str, int] = field(default_factory=dict)


class _RowPublisher:
    """Shared by both writers: turns rows into messages and publishes them chunk by chunk."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        self.options = options
        self.hubs = resolve_hubs(options.cluster)
        names = set(schema.fieldNames())
        if "value" not in names:
            raise ValueError("writing to Hedwig needs a 'value' column (string or binary)")
        self.has_key = "key" in names
        self.has_topic = "topic" in names
        self.has_headers = "headers" in names
        if not self.has_topic and options.topic is None:
            raise ValueError("set the 'topic' option or give the rows a 'topic' column")

    def _message(self, row: Any) -> Outgoing:
        topic = (row["topic"] if self.has_topic else None) or self.options.topic
        if topic is None:
            raise ValueError("a row has no topic and no 'topic' option is set")
        value = _bytes(row["value"])
        if value is None:
            raise ValueError(f"a row for topic {topic!r} has a null value")
        key = _bytes(row["key"]) if self.has_key else None
        headers: tuple[tuple[str, bytes], ...] = ()
        if self.has_headers and row["headers"]:
            headers = tuple((str(h["key"]), _bytes(h["value"]) or b"") for h in row["headers"])
        return str(topic), value, key, headers

    def publish(self, rows: Iterator[Any], publisher_id: str) -> PublishedRows:
        result = PublishedRows(publisher_id)
        with HubSession(
            self.hubs,
            retry_deadline_s=self.options.cluster.retry_deadline_s,
            security=self.options.cluster.security,
            publisher_id=publisher_id,
        ) as session:
            while True:
                chunk = [self._message(r) for r in islice(rows, self.options.chunk_rows)]
                if not chunk:
                    break
                results = session.call(functools.partial(_publish_chunk, chunk=chunk))
                for (topic, *_), res in zip(chunk, results, strict=True):
                    counts = result.duplicates if res.duplicate else result.written
                    counts[topic] = counts.get(topic, 0) + 1
        return result


async def _publish_chunk(client: HedwigClient, chunk: Sequence[Outgoing]) -> list[PublishResult]:
    # (A new topic's first batches go out one at a time until its owner is known, and hubs
    # refuse a batch that would overtake an earlier one: the client keeps the order.)
    # No await until every message is queued: the client cuts batches from a full queue.
    futures = [client.publish_nowait(t, v, key=k, headers=h) for t, v, k, h in chunk]
    return list(await asyncio.gather(*futures))


def _bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


def _partition_id() -> int:
    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


def _summarise(messages: Sequence[WriterCommitMessage | None], what: str) -> None:
    written = duplicates = 0
    for m in messages:
        if isinstance(m, PublishedRows):
            written += sum(m.written.values())
            duplicates += sum(m.duplicates.values())
    if duplicates:
        log.info("%s: %d messages published, %d replayed ones dropped", what, written, duplicates)
    else:
        log.info("%s: %d messages published", what, written)


class HedwigBatchWriter(DataSourceWriter):
    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        self._rows = _RowPublisher(options, schema)
        self.writer_id = options.writer_id or uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> PublishedRows:
        return self._rows.publish(iterator, f"spark:{self.writer_id}:{_partition_id()}")

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _summarise(messages, f"write {self.writer_id}")

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning("write %s aborted; published messages stay published", self.writer_id)


class HedwigStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        self._rows = _RowPublisher(options, schema)
        # Only used if Spark does not tell the task its query and batch (it always should).
        self.fallback_id = uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> PublishedRows:
        ctx = TaskContext.get()
        query = ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx is not None else None
        batch = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
        if query is None or batch is None:
            attempt = ctx.stageId() if ctx is not None else 0
            query, batch = self.fallback_id, f"stage{attempt}"
        return self._rows.publish(iterator, f"spark:{query}:{batch}:{_partition_id()}")

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _summarise(messages, f"micro-batch {batchId}")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("micro-batch %d aborted; it will be replayed without duplicates", batchId)
