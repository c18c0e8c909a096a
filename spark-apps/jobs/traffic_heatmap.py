"""The traffic heat map: a streaming job over the quadrant topics.

Reads every quadrant's topic (``traffic.quadrant-X-Y``), parses the position reports, and
counts, per heat-map cell and sliding event-time window (30 s windows every 10 s by default):
the number of reports, the mean speed and the number of distinct vehicles. Each micro-batch's
updated cells are

- published to a topic (``traffic.heatmap``), one message per (window, cell), key ``"cx,cy"``,
  which is what the demo's web page reads, and
- written as Parquet under ``<output-dir>/batch_id=N`` (overwritten if the batch is replayed,
  so the files are exactly-once too); the latest row per (window_start, cx, cy) is the answer.

Publishing is idempotent per micro-batch: the batch writer's ``writerId`` is made of the
query id (kept in the checkpoint) and the batch id, and rows are sorted first so a replay
publishes the same messages in the same order.

    spark-submit jobs/traffic_heatmap.py --hubs h:4100 --checkpoint /ck --output-dir /out
"""

from __future__ import annotations

import argparse

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from hedwig_spark.writer import QUERY_ID_PROPERTY
from jobs.common import add_cluster_args, cluster_options, session
from traffic.grid import Grid
from traffic.positions import SPARK_SCHEMA

HEATMAP_TOPIC = "traffic.heatmap"


def positions(messages: DataFrame) -> DataFrame:
    """Hedwig rows -> one row per well-formed position report, with its event time."""
    parsed = F.from_json(F.col("value").cast("string"), SPARK_SCHEMA)
    return (
        messages.select(parsed.alias("p"))
        .select("p.*")
        .where(F.col("x").isNotNull() & F.col("y").isNotNull() & F.col("t").isNotNull())
        .withColumn("event_time", F.timestamp_millis(F.col("t")))
    )


def _cell(coord: str, size: float, cells: int) -> Column:
    index = F.floor(F.col(coord) / F.lit(size))
    return F.least(F.lit(cells - 1), F.greatest(F.lit(0), index)).cast("int")


def heatmap(
    reports: DataFrame,
    grid: Grid,
    *,
    window: str = "30 seconds",
    slide: str = "10 seconds",
    watermark: str = "30 seconds",
) -> DataFrame:
    """Per (window, cell): reports, mean speed (km/h) and distinct vehicles."""
    return (
        reports.withColumn("cx", _cell("x", grid.cell_w, grid.cells_x))
        .withColumn("cy", _cell("y", grid.cell_h, grid.cells_y))
        .withWatermark("event_time", watermark)
        .groupBy(F.window("event_time", window, slide).alias("w"), "cx", "cy")
        .agg(
            F.count(F.lit(1)).alias("reports"),
            F.avg("kmh").alias("mean_kmh"),
            F.approx_count_distinct("v").alias("vehicles"),
        )
        .select(
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "cx",
            "cy",
            "reports",
            F.round("mean_kmh", 1).alias("mean_kmh"),
            "vehicles",
        )
    )


def to_messages(cells: DataFrame) -> DataFrame:
    """Heat-map rows -> (key, value) messages, sorted so that a replay repeats them exactly."""
    body = F.struct(
        F.unix_millis("window_start").alias("window_start"),
        F.unix_millis("window_end").alias("window_end"),
        "cx",
        "cy",
        "reports",
        "mean_kmh",
        "vehicles",
    )
    return (
        cells.select(
            F.concat_ws(",", F.col("cx").cast("string"), F.col("cy").cast("string")).alias("key"),
            F.to_json(body).alias("value"),
        )
        .coalesce(1)
        .sortWithinPartitions("key", "value")
    )


class HeatmapSink:
    """``foreachBatch`` target: publish the batch's updated cells, and write them as files."""

    def __init__(
        self, source: dict[str, str], topic: str, output_dir: str | None, name: str
    ) -> None:
        self.source, self.topic, self.output_dir, self.name = source, topic, output_dir, name

    def __call__(self, cells: DataFrame, batch_id: int) -> None:
        cells.persist()
        try:
            writer = cells.transform(to_messages).write.format("hedwig").mode("append")
            for k, v in self.source.items():
                writer = writer.option(k, v)
            # The query id survives restarts from the checkpoint and differs from any earlier
            # query's, so a replayed batch repeats its publisher ids and nothing else does.
            query_id = cells.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
            writer_id = f"{self.name}:{query_id}:{batch_id}"
            writer.option("topic", self.topic).option("writerId", writer_id).save()
            if self.output_dir:
                cells.write.mode("overwrite").parquet(f"{self.output_dir}/batch_id={batch_id}")
        finally:
            cells.unpersist()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_cluster_args(p)
    p.add_argument("--grid", type=Grid.from_json, default=Grid(), help="Grid as JSON")
    p.add_argument("--output-topic", default=HEATMAP_TOPIC)
    p.add_argument("--output-dir", help="also write each batch's cells as Parquet here")
    p.add_argument("--checkpoint", required=True, help="Spark checkpoint location")
    p.add_argument("--name", default="traffic-heatmap", help="query name; part of writer ids")
    p.add_argument("--starting-offsets", default="earliest")
    p.add_argument("--max-records-per-trigger", type=int)
    p.add_argument("--trigger-seconds", type=float, default=2.0)
    p.add_argument("--available-now", action="store_true", help="process what is there, stop")
    p.add_argument("--window", default="30 seconds")
    p.add_argument("--slide", default="10 seconds")
    p.add_argument("--watermark", default="30 seconds")
    return p


def start(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    grid: Grid = args.grid
    cluster = cluster_options(args)
    reader = spark.readStream.format("hedwig").options(**cluster)
    reader = reader.option("topics", ",".join(grid.topics()))
    reader = reader.option("startingOffsets", args.starting_offsets)
    if args.max_records_per_trigger:
        reader = reader.option("maxRecordsPerTrigger", str(args.max_records_per_trigger))
    cells = heatmap(
        positions(reader.load()),
        grid,
        window=args.window,
        slide=args.slide,
        watermark=args.watermark,
    )
    writer = (
        cells.writeStream.queryName(args.name)
        .outputMode("update")
        .option("checkpointLocation", args.checkpoint)
        .foreachBatch(HeatmapSink(cluster, args.output_topic, args.output_dir, args.name))
    )
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{int(args.trigger_seconds * 1000)} milliseconds")
    return writer.start()


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    spark = session(args, "traffic-heatmap")
    query = start(spark, args)
    print(f"HEATMAP query {query.id} started", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main()
