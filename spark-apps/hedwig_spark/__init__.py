"""Hedwig topics as a Spark data source (PySpark's Python Data Source API, no JVM jar).

    from hedwig_spark import register
    register(spark)                       # once per session: format "hedwig"
    spark.read.format("hedwig").option("hubs", "127.0.0.1:4100").option("topic", "t").load()

``docs/spark.md`` lists the options and explains offsets, retries and the writer's guarantee.
"""

from hedwig_spark.session import local_session, register
from hedwig_spark.source import HedwigDataSource

__all__ = ["HedwigDataSource", "local_session", "register"]
