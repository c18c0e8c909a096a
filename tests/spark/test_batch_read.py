"""Batch reads with a real local Spark session against real hubs."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import SparkSession

from hedwig.client import SyncClient
from hedwig.devcluster.cluster import DevCluster

from .helpers import publish, read_topic


def test_batch_read_returns_exactly_the_topics_messages(
    spark: SparkSession, hubs: str, topic: str
) -> None:
    values = [f"message {i}".encode() for i in range(2500)]
    publish(hubs, topic, values)
    with SyncClient(hubs.split(",")) as client:
        client.publish(topic, b"keyed", key=b"k1", headers=[("trace", b"abc"), ("n", b"2")])
    df = read_topic(spark, hubs, topic, minPartitions="3")
    assert df.schema.fieldNames() == [
        "key",
        "value",
        "topic",
        "seq",
        "publishTime",
        "publisherId",
        "headers",
        "lane",
    ]
    rows = df.orderBy("seq").collect()
    assert [r.seq for r in rows] == list(range(1, 2502))
    assert [bytes(r.value) for r in rows[:-1]] == values
    assert {r.topic for r in rows} == {topic} and {r.lane for r in rows} == {0}
    last = rows[-1]
    assert bytes(last.key) == b"k1" and bytes(last.value) == b"keyed"
    assert [(h.key, bytes(h.value)) for h in last.headers] == [("trace", b"abc"), ("n", b"2")]
    assert rows[0].key is None and rows[0].headers == []
    assert rows[0].publishTime is not None and rows[0].publisherId
    assert df.rdd.getNumPartitions() >= 3


def test_starting_and_ending_offsets(spark: SparkSession, hubs: str, topic: str) -> None:
    publish(hubs, topic, [str(i).encode() for i in range(1, 101)])
    df = read_topic(
        spark,
        hubs,
        topic,
        startingOffsets=json.dumps({topic: 11}),
        endingOffsets=json.dumps({topic: 21}),
    )
    assert sorted(r.seq for r in df.select("seq").collect()) == list(range(11, 21))
    latest = read_topic(spark, hubs, topic, startingOffsets="latest")
    assert latest.count() == 0


def test_topic_pattern_through_zookeeper(
    spark: SparkSession, spark_cluster: DevCluster, hubs: str, topic: str
) -> None:
    names = [f"{topic}.a", f"{topic}.b", f"other-{topic}"]
    for i, name in enumerate(names):
        publish(hubs, name, [b"x"] * (i + 1))
    df = (
        spark.read.format("hedwig")
        .option("metadata", spark_cluster.zk)
        .option("region", spark_cluster.region)
        .option("topicPattern", f"{topic}\\..*")
        .load()
    )
    counts = {r.topic: r["count"] for r in df.groupBy("topic").count().collect()}
    assert counts == {f"{topic}.a": 1, f"{topic}.b": 2}


def test_empty_topic_reads_no_rows(spark: SparkSession, hubs: str, topic: str) -> None:
    assert read_topic(spark, hubs, topic).count() == 0


def test_unknown_option_value_fails_at_planning(spark: SparkSession, hubs: str) -> None:
    with pytest.raises(Exception, match="exactly one"):
        spark.read.format("hedwig").option("hubs", hubs).load().collect()
