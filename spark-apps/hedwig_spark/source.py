"""The ``hedwig`` data source: Spark's entry point, which only parses options and delegates.

    spark.dataSource.register(HedwigDataSource)
    spark.read.format("hedwig").option("hubs", "h1:4100").option("topic", "t").load()

Spark instantiates the source with the user's options wherever it plans a query; each
``reader``/``writer`` call builds the object that does the work (see the modules named after
them). Option errors surface here, at planning time, as ``ValueError``.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from hedwig_spark.batch_reader import HedwigBatchReader
from hedwig_spark.options import parse_read_options, parse_write_options
from hedwig_spark.schema import SCHEMA
from hedwig_spark.stream_reader import HedwigStreamReader
from hedwig_spark.writer import HedwigBatchWriter, HedwigStreamWriter


class HedwigDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "hedwig"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return HedwigBatchReader(parse_read_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return HedwigStreamReader(parse_read_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise ValueError("a topic cannot be overwritten; use mode 'append'")
        return HedwigBatchWriter(parse_write_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return HedwigStreamWriter(parse_write_options(self.options), schema)
