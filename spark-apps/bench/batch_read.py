"""Batch read throughput of the ``hedwig`` data source on local[2] (docs/benchmarks.md).

Publishes ``--messages`` messages of ``--size`` bytes to one topic on a one-hub embedded
cluster, then times a full batch read into Spark's ``noop`` sink (every row is produced and
handed to Spark; nothing is written), ``--runs`` times after a warm-up. Prints one JSON line:

    python spark-apps/bench/batch_read.py [--messages 1000000] [--size 100] [--partitions 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from hedwig.client import HedwigClient
from hedwig.devcluster.cluster import DevCluster
from hedwig_spark import local_session

TOPIC = "bench.read"


async def fill(hubs: list[str], messages: int, size: int) -> float:
    value = b"x" * size
    started = time.perf_counter()
    async with HedwigClient(hubs, max_inflight_batches=32) as client:
        step = 50_000
        for lo in range(0, messages, step):
            futures = [client.publish_nowait(TOPIC, value) for _ in range(min(step, messages - lo))]
            await asyncio.gather(*futures)
    return messages / (time.perf_counter() - started)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--partitions", type=int, default=2, help="the source's minPartitions")
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    with DevCluster(hubs=1, region="bench") as cluster:
        publish_rate = asyncio.run(fill(cluster.addresses, args.messages, args.size))
        spark = local_session("hedwig-bench", extra={"spark.ui.showConsoleProgress": "false"})
        df = (
            spark.read.format("hedwig")
            .option("hubs", ",".join(cluster.addresses))
            .option("topic", TOPIC)
            .option("minPartitions", str(args.partitions))
            .load()
        )
        assert df.count() == args.messages
        times = []
        for _ in range(args.runs):
            started = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            times.append(time.perf_counter() - started)
        spark.stop()
    best, median = min(times), statistics.median(times)
    print(
        json.dumps(
            {
                "benchmark": "spark-batch-read",
                "messages": args.messages,
                "size": args.size,
                "partitions": args.partitions,
                "master": "local[2]",
                "rows_per_s_best": round(args.messages / best),
                "rows_per_s_median": round(args.messages / median),
                "seconds": [round(t, 2) for t in times],
                "publish_rows_per_s": round(publish_rate),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
