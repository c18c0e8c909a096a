"""A small local SparkSession with the source registered: for tests, the demo and laptops.

Spark starts Python workers with ``PYSPARK_PYTHON`` (default: ``python3`` on the PATH, which
may lack pyarrow and hedwig), so we point it at this interpreter. Workers unpickle readers and
writers by module name, so they must be able to import ``hedwig_spark``: it is part of the
``hedwig-pubsub`` distribution (``pip install 'hedwig-pubsub[spark]'``; ``make venv`` installs it
editable), so an interpreter that has it installed needs nothing else, in a checkout or in the Spark
image alike.

Settings keep Spark small on a shared two-core machine: ``local[2]``, two shuffle partitions,
no UI, a modest driver heap.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession


def prepare_environment() -> None:
    """Make Python workers use this interpreter, which has this package installed."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def local_session(
    app_name: str = "hedwig", *, master: str = "local[2]", extra: dict[str, str] | None = None
) -> SparkSession:
    prepare_environment()
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    for k, v in (extra or {}).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark


def register(spark: SparkSession) -> None:
    from hedwig_spark.source import HedwigDataSource

    spark.dataSource.register(HedwigDataSource)
