"""The hub-load analytics job, from the hubs' metrics and from the recorded load topic."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from hedwig.client import SyncClient
from hedwig.devcluster.cluster import DevCluster
from jobs import hub_load

from .helpers import publish

pytestmark = pytest.mark.timeout(300)


def test_metrics_counters_per_topic_and_hub(
    spark: SparkSession, spark_cluster: DevCluster, hubs: str, topic: str
) -> None:
    publish(hubs, f"{topic}.a", [b"x" * 10] * 300)
    publish(hubs, f"{topic}.b", [b"y" * 20] * 100)
    urls = ",".join(h.metrics_url + "/metrics" for h in spark_cluster.hub_procs)
    args = hub_load.parser().parse_args(["--hubs", hubs, "--metrics", urls])
    per_topic, per_hub = hub_load.analyze(spark, args)
    rows = {r.topic: r for r in per_topic.collect() if r.topic.startswith(topic)}
    assert rows[f"{topic}.a"].messages_in == 300
    assert rows[f"{topic}.b"].messages_in == 100
    assert rows[f"{topic}.b"].bytes_in >= 2000
    hubs_seen = {r.hub for r in per_hub.collect()}
    assert hubs_seen <= {h.metrics_url.split("//")[1] for h in spark_cluster.hub_procs}
    assert sum(r.messages_in for r in per_hub.collect()) >= 400


def test_load_topic_history(
    spark: SparkSession, spark_cluster: DevCluster, hubs: str, topic: str, tmp_path: Path
) -> None:
    busy, quiet = f"{topic}.busy", f"{topic}.quiet"
    stop = threading.Event()

    def traffic() -> None:
        with SyncClient(hubs.split(",")) as client:
            while not stop.is_set():
                client.publish_batch(busy, [b"b"] * 50)
                client.publish(quiet, b"q")
                time.sleep(0.1)

    worker = threading.Thread(target=traffic, daemon=True)
    worker.start()
    load_topic = f"{topic}.load"
    try:
        # Hubs report their load every 5 s (EWMA rates need two reports to be non-zero).
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            records = _snapshot(spark_cluster)
            rates = {t["topic"]: t["msg_in"] for r in records for t in r["topics"]}
            if rates.get(busy, 0) > 0 and rates.get(quiet, 0) > 0:
                break
            time.sleep(1)
        asyncio.run(_record(spark_cluster, hubs, load_topic))
    finally:
        stop.set()
        worker.join(10)
    out = tmp_path / "report"
    args = hub_load.parser().parse_args(
        ["--hubs", hubs, "--load-topic", load_topic, "--output", str(out)]
    )
    per_topic, per_hub = hub_load.analyze(spark, args)
    rows = {r.topic: r for r in per_topic.collect()}
    assert rows[busy].avg_msg_in_per_s > rows[quiet].avg_msg_in_per_s > 0
    assert rows[busy].snapshots == 2 and len(rows[busy].owners) >= 1
    shares = [r.traffic_share for r in per_hub.collect()]
    assert abs(sum(shares) - 1.0) < 0.01
    hub_load.main(["--local", "--hubs", hubs, "--load-topic", load_topic, "--output", str(out)])
    written = [json.loads(line) for f in (out / "per_topic").glob("*.json") for line in f.open()]
    assert {busy, quiet} <= {r["topic"] for r in written}


def _snapshot(cluster: DevCluster) -> list[dict[str, Any]]:
    from hedwig.metadata import open_store

    async def go() -> list[bytes]:
        store = open_store(cluster.zk, region=cluster.region)
        await store.start()
        try:
            return hub_load.load_records(await store.hubs.list_hubs(), 0)
        finally:
            await store.close()

    return [json.loads(r) for r in asyncio.run(go())]


async def _record(cluster: DevCluster, hubs: str, load_topic: str) -> None:
    await hub_load.record(cluster.zk, cluster.region, hubs.split(","), 0.5, 2, load_topic)
