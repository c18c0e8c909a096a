"""Hub-load analytics: per-topic and per-hub traffic, as a Spark batch job.

Two inputs, because the hubs expose their load two ways:

- **The load topic** (``hedwig.load``, default). Hubs write EWMA rates into their ZooKeeper
  ``alive`` records every few seconds but keep no history; ``record`` snapshots those reports
  into the topic (the demo runs it), one JSON message per hub per snapshot. The job then reads
  any period of history back with the ``hedwig`` source: average and peak message and byte
  rates per topic (the topics each report lists: its hub's hottest), which hubs owned each
  topic (a topic that moved shows several), and each hub's share of the traffic (from the
  hubs' totals, which cover every topic).
- **The hubs' Prometheus metrics** (``--metrics URL,...``): the counters since each hub
  started (``hedwig_messages_in_total{topic}`` and friends), summed per topic and per hub.
  No history, but nothing to run beforehand.

    spark-submit jobs/hub_load.py --hubs h:4100 [--output /out]
    python -m jobs.hub_load --local --metrics http://127.0.0.1:9100/metrics,...
    python -m jobs.hub_load record --metadata z:2181 --region r --hubs h:4100 --every 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
import urllib.request
from collections.abc import Iterable, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from hedwig.client import HedwigClient
from hedwig.metadata import open_store
from hedwig.metadata.records import HubStatus
from jobs.common import add_cluster_args, cluster_options, session

LOAD_TOPIC = "hedwig.load"

LOAD_SCHEMA = (
    "hub STRING, alive BOOLEAN, time_ms LONG, report_ms LONG, cpu DOUBLE, connections INT,"
    " msg_in DOUBLE, bytes_in DOUBLE, msg_out DOUBLE, bytes_out DOUBLE, topic_count INT,"
    " topics ARRAY<STRUCT<topic: STRING, msg_in: DOUBLE, bytes_in: DOUBLE, msg_out: DOUBLE,"
    " bytes_out: DOUBLE, subscribers: INT, backlog: LONG>>"
)

# --------------------------------------------------------------------------------------------
# recording load reports into the load topic


def load_records(statuses: Iterable[HubStatus], time_ms: int) -> list[bytes]:
    """One JSON message per hub, from ZooKeeper's view of the hubs."""
    out = []
    for s in statuses:
        load = s.load
        record = {
            "hub": s.address,
            "alive": s.alive,
            "time_ms": time_ms,
            "report_ms": load.timestamp_ms if load else None,
            "cpu": load.cpu if load else None,
            "connections": load.connections if load else None,
            "msg_in": load.msg_in if load else 0.0,
            "bytes_in": load.bytes_in if load else 0.0,
            "msg_out": load.msg_out if load else 0.0,
            "bytes_out": load.bytes_out if load else 0.0,
            # Every owned topic counts in the totals; ``topics`` lists the hottest only.
            "topic_count": load.topics if load else 0,
            "topics": [
                {
                    "topic": topic,
                    "msg_in": t.msg_in,
                    "bytes_in": t.bytes_in,
                    "msg_out": t.msg_out,
                    "bytes_out": t.bytes_out,
                    "subscribers": t.subscribers,
                    "backlog": t.backlog,
                }
                for topic, t in sorted((load.topic_loads if load else {}).items())
            ],
        }
        out.append(json.dumps(record, separators=(",", ":")).encode())
    return out


async def record(
    metadata_url: str,
    region: str,
    hubs: Sequence[str],
    every_s: float,
    count: int | None,
    topic: str = LOAD_TOPIC,
) -> int:
    """Snapshot the hubs' load reports into the load topic every ``every_s`` seconds."""
    store = open_store(metadata_url, region=region)
    await store.start()
    written = 0
    try:
        async with HedwigClient(list(hubs)) as client:
            while count is None or written < count:
                statuses = await store.hubs.list_hubs()
                for raw in load_records(statuses, int(time.time() * 1000)):
                    await client.publish(topic, raw)
                written += 1
                if count is None or written < count:
                    await asyncio.sleep(every_s)
    finally:
        await store.close()
    return written


# --------------------------------------------------------------------------------------------
# analytics on the load topic


def _parsed(messages: DataFrame) -> DataFrame:
    parsed = messages.select(F.from_json(F.col("value").cast("string"), LOAD_SCHEMA).alias("r"))
    return parsed.select("r.*").where(F.col("hub").isNotNull() & F.col("alive"))


def load_reports(messages: DataFrame) -> DataFrame:
    """Load-topic rows -> one row per (snapshot, hub, topic) with that topic's rates (for the
    topics each report lists: its hub's hottest)."""
    return (
        _parsed(messages)
        .select("hub", "time_ms", "cpu", F.explode("topics").alias("t"))
        .select("hub", "time_ms", "cpu", "t.*")
    )


def hub_snapshots(messages: DataFrame) -> DataFrame:
    """Load-topic rows -> one row per (snapshot, hub) with the hub's totals over every topic
    it owns (records from before ``topic_count`` count the topics they list)."""
    return _parsed(messages).select(
        "hub",
        "time_ms",
        "cpu",
        "msg_in",
        "bytes_in",
        F.coalesce(F.col("topic_count"), F.size("topics")).alias("topics"),
    )


def per_topic_from_load(reports: DataFrame) -> DataFrame:
    return (
        reports.groupBy("topic")
        .agg(
            F.round(F.avg("msg_in"), 2).alias("avg_msg_in_per_s"),
            F.round(F.max("msg_in"), 2).alias("peak_msg_in_per_s"),
            F.round(F.avg("bytes_in"), 1).alias("avg_bytes_in_per_s"),
            F.round(F.avg("msg_out"), 2).alias("avg_msg_out_per_s"),
            F.sort_array(F.collect_set("hub")).alias("owners"),
            F.countDistinct("time_ms").alias("snapshots"),
        )
        .orderBy(F.desc("avg_msg_in_per_s"), "topic")
    )


def per_hub_from_load(per_snapshot: DataFrame) -> DataFrame:
    """``hub_snapshots`` -> one row per hub: its averages and its share of the traffic."""
    total = per_snapshot.agg(F.sum("msg_in").alias("all")).first()
    everything = float(total["all"] or 0.0) if total is not None else 0.0
    return (
        per_snapshot.groupBy("hub")
        .agg(
            F.round(F.avg("msg_in"), 2).alias("avg_msg_in_per_s"),
            F.round(F.avg("bytes_in"), 1).alias("avg_bytes_in_per_s"),
            F.round(F.avg("topics"), 1).alias("avg_topics"),
            F.round(F.avg("cpu"), 3).alias("avg_cpu"),
            F.round(F.sum("msg_in") / F.lit(everything or 1.0), 3).alias("traffic_share"),
        )
        .orderBy("hub")
    )


# --------------------------------------------------------------------------------------------
# analytics on the hubs' metrics

_SAMPLE = re.compile(r"^(hedwig_[a-z_]+_total)\{([^}]*)\}\s+([0-9.eE+-]+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
COUNTERS = {
    "hedwig_messages_in_total": "messages_in",
    "hedwig_bytes_in_total": "bytes_in",
    "hedwig_messages_out_total": "messages_out",
    "hedwig_bytes_out_total": "bytes_out",
}


def parse_metrics(hub: str, text: str) -> list[tuple[str, str, str, float]]:
    """(hub, counter, topic, value) for every per-topic traffic counter in Prometheus text."""
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line.strip())
        if not m or m.group(1) not in COUNTERS:
            continue
        labels = dict(_LABEL.findall(m.group(2)))
        if "topic" in labels:
            out.append((hub, COUNTERS[m.group(1)], labels["topic"], float(m.group(3))))
    return out


def scrape(urls: Sequence[str], timeout_s: float = 5.0) -> list[tuple[str, str, str, float]]:
    samples = []
    for url in urls:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            text = r.read().decode()
        hub = url.split("//", 1)[-1].split("/", 1)[0]
        samples.extend(parse_metrics(hub, text))
    return samples


def metric_frame(spark: SparkSession, samples: list[tuple[str, str, str, float]]) -> DataFrame:
    df = spark.createDataFrame(samples, "hub STRING, counter STRING, topic STRING, value DOUBLE")
    return df.groupBy("hub", "topic").pivot("counter", list(COUNTERS.values())).sum("value")


def per_topic_from_metrics(counters: DataFrame) -> DataFrame:
    cols = [F.sum(c).cast("long").alias(c) for c in COUNTERS.values()]
    return (
        counters.groupBy("topic")
        .agg(*cols, F.sort_array(F.collect_set("hub")).alias("hubs"))
        .orderBy(F.desc("messages_in"), "topic")
    )


def per_hub_from_metrics(counters: DataFrame) -> DataFrame:
    cols = [F.sum(c).cast("long").alias(c) for c in COUNTERS.values()]
    return counters.groupBy("hub").agg(*cols, F.count("topic").alias("topics")).orderBy("hub")


# --------------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_cluster_args(p)
    p.add_argument("mode", nargs="?", choices=["analyze", "record"], default="analyze")
    p.add_argument("--metrics", help="comma-separated hub metrics URLs (instead of the topic)")
    p.add_argument("--load-topic", default=LOAD_TOPIC)
    p.add_argument("--output", help="write per_topic/ and per_hub/ as JSON here")
    p.add_argument("--every", type=float, default=5.0, help="record: seconds between snapshots")
    p.add_argument("--count", type=int, help="record: stop after this many snapshots")
    return p


def analyze(spark: SparkSession, args: argparse.Namespace) -> tuple[DataFrame, DataFrame]:
    if args.metrics:
        counters = metric_frame(spark, scrape(args.metrics.split(",")))
        return per_topic_from_metrics(counters), per_hub_from_metrics(counters)
    messages = (
        spark.read.format("hedwig")
        .options(**cluster_options(args))
        .option("topic", args.load_topic)
        .option("failOnDataLoss", "false")  # old snapshots may have been collected: fine
        .load()
    )
    messages = messages.cache()
    return per_topic_from_load(load_reports(messages)), per_hub_from_load(hub_snapshots(messages))


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.mode == "record":
        if not (args.metadata and args.hubs):
            raise SystemExit("record needs --metadata (load reports) and --hubs (to publish)")
        hubs = args.hubs.split(",")
        asyncio.run(
            record(args.metadata, args.region, hubs, args.every, args.count, args.load_topic)
        )
        return
    spark = session(args, "hub-load")
    per_topic, per_hub = analyze(spark, args)
    per_topic.show(100, truncate=False)
    per_hub.show(100, truncate=False)
    if args.output:
        per_topic.coalesce(1).write.mode("overwrite").json(f"{args.output}/per_topic")
        per_hub.coalesce(1).write.mode("overwrite").json(f"{args.output}/per_hub")


if __name__ == "__main__":
    main()
