"""The rows the source produces, and their Arrow form.

One row per message, as Kafka users expect them, with Hedwig's names for Hedwig's ideas:

| column | type | what |
|---|---|---|
| key | binary (nullable) | the message key |
| value | binary | the message value |
| topic | string | the topic |
| seq | long | the message's sequence id in its topic (1, 2, ...: Kafka's offset) |
| publishTime | timestamp | when the owning hub stored the message's batch |
| publisherId | string | the id of the client that published it |
| headers | array<struct<key: string, value: binary>> | the message headers, in order |
| lane | int | the lane of the topic it is in (0: the topic itself; ``seq`` is its place there) |

A topic served by lanes (``docs/architecture.md``, "Lanes") is read as Kafka's partitions
are: each lane has its own sequence ids, and ``(topic, lane, seq)`` names a message.

Reads hand Spark ``pyarrow.RecordBatch`` objects built column by column: converting Python
tuples row by row costs more than decoding the messages does.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from hedwig.protocol import Batch, lane_of

HEADER_TYPE = StructType(
    [StructField("key", StringType(), False), StructField("value", BinaryType(), True)]
)

SCHEMA = StructType(
    [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), True),
        StructField("seq", LongType(), True),
        StructField("publishTime", TimestampType(), True),
        StructField("publisherId", StringType(), True),
        StructField("headers", ArrayType(HEADER_TYPE, True), True),
        StructField("lane", IntegerType(), True),
    ]
)

_ARROW_HEADER = pa.struct([pa.field("key", pa.string(), False), pa.field("value", pa.binary())])
ARROW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("seq", pa.int64()),
        pa.field("publishTime", pa.timestamp("us", tz="UTC")),
        pa.field("publisherId", pa.string()),
        pa.field("headers", pa.list_(_ARROW_HEADER)),
        pa.field("lane", pa.int32()),
    ]
)


def to_record_batch(topic: str, batches: Sequence[Batch]) -> pa.RecordBatch:
    """One Arrow record batch holding every message of ``batches`` (already sliced to range)
    of ``topic`` (or of a lane of it: its name says which)."""
    base, lane = lane_of(topic)
    keys: list[bytes | None] = []
    values: list[bytes] = []
    headers: list[list[tuple[str, bytes]]] = []
    seqs: list[int] = []
    times: list[int] = []
    publishers: list[str] = []
    for b in batches:
        messages = b.messages.decode()
        seqs.extend(range(b.first_seq, b.first_seq + b.count))
        times.extend([b.publish_time_ms * 1000] * b.count)
        publishers.extend([b.publisher_id] * b.count)
        for m in messages:
            keys.append(m.key)
            values.append(m.value)
            headers.append(list(m.headers))
    n = len(values)
    columns = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.repeat(pa.scalar(base, pa.string()), n),
        pa.array(seqs, pa.int64()),
        pa.array(times, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        pa.array(publishers, pa.string()),
        pa.array(headers, pa.list_(_ARROW_HEADER)),
        pa.repeat(pa.scalar(lane, pa.int32()), n),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
