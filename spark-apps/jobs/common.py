"""What every job's command line shares: where the cluster is, and how to get a session.

Jobs run three ways: ``spark-submit`` (locally or on Kubernetes: the master comes from
spark-submit), inside a test or the demo (a session is passed in), or as a plain
``python jobs/x.py --local`` on a laptop (a small local[2] session).
"""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession

from hedwig_spark import local_session, register


def add_cluster_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("cluster")
    g.add_argument("--hubs", help="comma-separated hub addresses HOST:PORT")
    g.add_argument(
        "--metadata",
        "--zookeeper",
        dest="metadata",
        help="the hubs' metadata URL, to find them (with --region); --zookeeper is an alias",
    )
    g.add_argument("--region", default="default")
    g.add_argument("--local", action="store_true", help="run Spark in this process, local[2]")


def cluster_options(args: argparse.Namespace) -> dict[str, str]:
    if args.hubs:
        return {"hubs": args.hubs}
    if args.metadata:
        return {"metadata": args.metadata, "region": args.region}
    raise SystemExit("give --hubs or --metadata")


def session(args: argparse.Namespace, app_name: str) -> SparkSession:
    if args.local:
        return local_session(app_name, extra={"spark.ui.showConsoleProgress": "false"})
    spark = SparkSession.builder.appName(app_name).getOrCreate()
    register(spark)
    return spark
