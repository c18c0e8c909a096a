"""A small local SparkSession with the source registered: for tests, the demo and laptops.

Two things make a local session work with a Python data source from a checkout:

- Spark starts Python workers with ``PYSPARK_PYTHON`` (default: ``python3`` on the PATH, which
  may lack pyarrow and hedwig), so we point it at this interpreter;
- workers unpickle readers and writers by module name, so the folder holding
  ``hedwig_spark`` must be on their ``PYTHONPATH`` (installed packages need nothing).

Settings keep Spark small on a shared two-core machine: ``local[2]``, two shuffle partitions,
no UI, a modest driver heap.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

APPS_DIR = str(Path(__file__).resolve().parent.parent)


def prepare_environment() -> None:
    """Make Python workers use this interpreter and find this package."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if APPS_DIR not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([APPS_DIR, *paths])


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
