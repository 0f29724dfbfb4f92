"""Spark integration of pulsar-grpc: the ``pulsar-grpc`` data source and the load test.

Register the source once per SparkSession, then use it by name::

    import pulsar_grpc.spark as pulsar_grpc_spark
    pulsar_grpc_spark.register(session)
    df = session.read.format("pulsar-grpc").option("service.url", "grpc://host:50051") \\
        .option("topic", "my-topic").load()

The package depends on the client SDK only (ARCHITECTURE.md layering).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FORMAT = "pulsar-grpc"


def register(session: SparkSession) -> None:
    """Register the ``pulsar-grpc`` format on ``session`` (Python data sources are
    per-session; pyspark is imported only here so ``spark`` imports without it)."""
    from .source import PulsarGrpcDataSource

    session.dataSource.register(PulsarGrpcDataSource)


__all__ = ["FORMAT", "register"]
