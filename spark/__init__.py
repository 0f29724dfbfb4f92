"""Spark integration of pulsar-grpc: the ``pulsar-grpc`` data source and the load test.

Register the source once per SparkSession, then use it by name::

    session = SparkSession.builder.config("spark.pyspark.python", sys.executable).getOrCreate()
    import pulsar_grpc.spark as pulsar_grpc_spark
    pulsar_grpc_spark.register(session)
    df = session.read.format("pulsar-grpc").option("service.url", "grpc://host:50051") \\
        .option("topic", "my-topic").load()

The package depends on the client SDK only (ARCHITECTURE.md layering).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FORMAT = "pulsar-grpc"


class ExecutorsCannotImport(RuntimeError):
    """Spark's Python workers run an interpreter that cannot import pulsar_grpc."""


def _importable(_: Any) -> tuple[bool, str]:
    """Runs on an executor: can it import the source, and which python is it?"""
    import importlib.util
    import sys

    return importlib.util.find_spec("pulsar_grpc.spark") is not None, sys.executable


def register(session: SparkSession, check_executors: bool = True) -> None:
    """Register the ``pulsar-grpc`` format on ``session`` (Python data sources are
    per-session; pyspark is imported only here so ``pulsar_grpc.spark`` imports without it).

    Spark starts its Python workers with ``python3`` unless told otherwise, and a
    ``python3`` outside the virtual environment cannot import this package: every read would
    then fail in its tasks with ``No module named ...``. So ``register`` runs one tiny task
    first and, if its worker cannot import ``pulsar_grpc``, fails here with the fix
    (``.config("spark.pyspark.python", sys.executable)`` or ``PYSPARK_PYTHON``);
    ``check_executors=False`` skips it (e.g. on Spark Connect, where the server's workers
    are configured elsewhere).
    """
    from .source import PulsarGrpcDataSource

    if check_executors and hasattr(session, "sparkContext"):
        ok, python = session.sparkContext.parallelize([0], 1).map(_importable).first()
        if not ok:
            raise ExecutorsCannotImport(
                f"Spark's Python workers run {python}, which cannot import pulsar_grpc: build "
                'the session with .config("spark.pyspark.python", sys.executable) (or set '
                "PYSPARK_PYTHON to the python that has pulsar-grpc installed)"
            )
    session.dataSource.register(PulsarGrpcDataSource)


def lag(source_progress: dict[str, Any]) -> dict[str, Any]:
    """Entries behind latest from one ``StreamingQuery.lastProgress["sources"][i]`` dict.

    Python data sources cannot add metrics to a progress (see docs/spark.md); the source
    reports each partition's newest id as ``latestOffset`` instead. Within one ledger entry
    ids are contiguous, so ``latest.entry - end.entry`` is the number of entries (messages,
    unless the producer batched) the query is behind; across a ledger boundary the distance
    is unknown from ids alone and the partition is counted as None.
    """
    import json

    end, latest = (
        json.loads(v) if isinstance(v, str) else (v or {})
        for v in (source_progress.get("endOffset"), source_progress.get("latestOffset"))
    )
    behind: dict[str, int | None] = {}
    for partition, newest in latest.items():
        done = end.get(partition, "earliest")
        if newest == "earliest" or newest == done:
            behind[partition] = 0
            continue
        new = [int(x) for x in newest.split(":")[:2]]
        old = [int(x) for x in done.split(":")[:2]] if done != "earliest" else None
        same = old is not None and old[0] == new[0]
        behind[partition] = new[1] - old[1] if same and old is not None else None
    known = [b for b in behind.values() if b is not None]
    return {
        "avgEntriesBehindLatest": sum(known) / len(known) if known else None,
        "maxEntriesBehindLatest": max(known) if known else None,
        "partitions": behind,
    }


__all__ = ["FORMAT", "ExecutorsCannotImport", "lag", "register"]
