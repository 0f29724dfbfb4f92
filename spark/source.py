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

from ._arrow import arrow_schema
from ._batch import BatchReader
from ._options import OptionError, SourceOptions
from ._runtime import LoopRunner
from ._stream import StreamReader
from ._typed import ValueShape, topic_shape
from ._write import BatchWriter, StreamWriter, check_save_mode, plan_sink


class PulsarGrpcDataSource(DataSource):
    """``spark.read.format("pulsar-grpc").option("service.url", ...).option("topic", ...)``.

    Options are parsed in the constructor, so a bad one fails on the driver before any task.
    """

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.parsed = SourceOptions.parse(options)
        self._shape: ValueShape | None = None

    @classmethod
    def name(cls) -> str:
        return "pulsar-grpc"

    def shape(self) -> ValueShape:
        """The value column's shape: the topics' latest schema, looked up once, when the
        query is planned (a streaming query keeps it: see spark/_typed.py)."""
        if self._shape is None:
            self.parsed.read_selector()
            with LoopRunner(self.parsed.client) as runner:
                self._shape = runner.run(topic_shape(runner.client, self.parsed))
        return self._shape

    def schema(self) -> StructType:
        from pyspark.sql.pandas.types import from_arrow_schema

        arrow = arrow_schema(self.shape().arrow_type(), self.parsed.include_properties)
        return from_arrow_schema(arrow)

    def _checked_shape(self, schema: StructType) -> ValueShape:
        """The shape, checked against the columns Spark planned with: Spark may call
        :meth:`schema` and the reader in different worker processes, and the topic's schema
        may change in between (or the query gave its own schema)."""
        planned, now = schema.simpleString(), self.schema().simpleString()
        if planned != now:
            raise OptionError(
                f"the query's columns are {planned} but the topic's schema now gives {now}: "
                "the schema changed while the query was planned (start it again), or the "
                "schema given to the query does not match the topic's"
            )
        return self.shape()

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(self.parsed, self._checked_shape(schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(self.parsed, self._checked_shape(schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        check_save_mode(overwrite)
        return BatchWriter(self.parsed, plan_sink(schema, self.parsed))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        check_save_mode(overwrite)
        return StreamWriter(self.parsed, plan_sink(schema, self.parsed))
