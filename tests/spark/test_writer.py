"""The writer: batch and streaming writes, and replays that add no duplicates."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from .helpers import publish, read_topic

pytestmark = pytest.mark.timeout(300)


def test_batch_write_with_keys_headers_and_topic_column(
    spark: SparkSession, hubs: str, topic: str
) -> None:
    rows = [(f"k{i}", f"v{i}", f"{topic}-{i % 2}") for i in range(100)]
    df = spark.createDataFrame(rows, "key string, value string, topic string").selectExpr(
        "key", "value", "topic", "array(named_struct('key', 'row', 'value', key)) AS headers"
    )
    df.write.format("hedwig").option("hubs", hubs).mode("append").save()
    for parity in (0, 1):
        got = read_topic(spark, hubs, f"{topic}-{parity}").collect()
        expected = {(f"k{i}", f"v{i}") for i in range(parity, 100, 2)}
        assert {(bytes(r.key).decode(), bytes(r.value).decode()) for r in got} == expected
        assert all(bytes(r.headers[0].value) == bytes(r.key) for r in got)


def test_batch_rewrite_with_the_same_writer_id_adds_nothing(
    spark: SparkSession, hubs: str, topic: str
) -> None:
    df = spark.range(5000).selectExpr("CAST(id AS STRING) AS value").repartition(2)
    df = df.sortWithinPartitions("value")  # the same rows in the same order on every run
    for _ in range(2):
        (
            df.write.format("hedwig")
            .option("hubs", hubs)
            .option("topic", topic)
            .option("writerId", "nightly-2026-01-01")
            .option("chunkRows", "1500")
            .mode("append")
            .save()
        )
    got = read_topic(spark, hubs, topic).select("value").collect()
    assert sorted(int(bytes(r.value)) for r in got) == list(range(5000))


def test_replayed_streaming_batch_adds_no_duplicates(
    spark: SparkSession, hubs: str, topic: str, tmp_path: Path
) -> None:
    source, sink = f"{topic}-in", f"{topic}-out"
    publish(hubs, source, [f"m{i}".encode() for i in range(4000)])
    checkpoint = tmp_path / "checkpoint"

    def run() -> dict[str, object]:
        query = (
            spark.readStream.format("hedwig")
            .option("hubs", hubs)
            .option("topic", source)
            .option("startingOffsets", "earliest")
            .option("minPartitions", "2")
            .load()
            .select("key", "value")
            .writeStream.format("hedwig")
            .option("hubs", hubs)
            .option("topic", sink)
            .option("chunkRows", "1000")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        assert progress, "the query read nothing"
        return progress[-1]

    first = run()
    assert first["batchId"] == 0 and first["numInputRows"] == 4000
    assert read_topic(spark, hubs, sink).count() == 4000
    # Forget that batch 0 was committed: Spark replays it (same offsets, same partitions)
    # and the sink publishes every row again, as after a crash before the commit log.
    (checkpoint / "commits" / "0").unlink()
    (checkpoint / "commits" / ".0.crc").unlink(missing_ok=True)
    again = run()
    assert again["batchId"] == 0 and again["numInputRows"] == 4000
    rows = read_topic(spark, hubs, sink).select("value", "publisherId").collect()
    assert len(rows) == 4000
    assert sorted(bytes(r.value) for r in rows) == sorted(f"m{i}".encode() for i in range(4000))
    assert len({r.publisherId for r in rows}) == 2  # one per partition of batch 0
