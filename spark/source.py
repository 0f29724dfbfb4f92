"""The ``pulsar-grpc`` Spark data source: read and write Pulsar topics over gRPC.

A Python data source (``pyspark.sql.datasource``, Spark 4) built on the client SDK only, so
it runs wherever the SDK runs (executors need grpcio and pyarrow, no JVM connector).
Named ``pulsar-grpc`` because a JVM source named ``pulsar`` would win over a Python one.
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

from ._arrow import SCHEMA_DDL, SCHEMA_DDL_NO_PROPERTIES
from ._batch import BatchReader
from ._options import SourceOptions
from ._stream import StreamReader
from ._write import BatchWriter, StreamWriter, check_save_mode, check_schema


class PulsarGrpcDataSource(DataSource):
    """``spark.read.format("pulsar-grpc").option("service.url", ...).option("topic", ...)``.

    Options are parsed in the constructor, so a bad one fails on the driver before any task.
    """

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.parsed = SourceOptions.parse(options)

    @classmethod
    def name(cls) -> str:
        return "pulsar-grpc"

    def schema(self) -> str:
        return SCHEMA_DDL if self.parsed.include_properties else SCHEMA_DDL_NO_PROPERTIES

    def reader(self, schema: StructType) -> DataSourceReader:
        self.parsed.read_selector()
        return BatchReader(self.parsed)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        self.parsed.read_selector()
        return StreamReader(self.parsed)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        check_save_mode(overwrite)
        check_schema(schema, self.parsed)
        return BatchWriter(self.parsed)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        check_save_mode(overwrite)
        check_schema(schema, self.parsed)
        return StreamWriter(self.parsed)
