"""Helpers for the Spark tests: publish known messages, read a topic back, wait for a query."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from pyspark.sql import DataFrame, SparkSession

from hedwig.client import SyncClient


def publish(hubs: str, topic: str, values: Sequence[bytes]) -> None:
    with SyncClient(hubs.split(",")) as client:
        client.publish_batch(topic, values)


def read_topic(spark: SparkSession, hubs: str, topic: str, **options: str) -> DataFrame:
    reader = spark.read.format("hedwig").option("hubs", hubs).option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def wait_for(check: Callable[[], bool], timeout: float = 90.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"{what} not met within {timeout}s")
