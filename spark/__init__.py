"""Spark integration of pulsar-grpc: the ``pulsar-grpc`` data source and the load test.

Register the source once per SparkSession, then use it by name::

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's workers: this python
    session = SparkSession.builder.getOrCreate()
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


def _check_workers(session: SparkSession) -> None:
    """Fail (or, in local mode, fix) Python workers that cannot load the source.

    Spark starts its workers with ``$PYSPARK_PYTHON`` or ``python3``, not the interpreter
    that runs the driver script, and a ``python3`` outside the virtual environment cannot
    import this package: every read would fail in its tasks. In local mode the workers run on
    this machine, so the driver's own interpreter is the right one: the session is switched
    to it. Elsewhere the error says what to set.
    """
    import logging
    import sys

    def probe(_: Any) -> tuple[str, str]:
        """Runs in a worker: its python, and why it cannot load what a task loads (the SDK,
        its stubs, grpc, pyarrow); empty when it can. Nested, so that it is pickled by value:
        a worker that cannot import this package can still run it."""
        import sys

        try:
            import pulsar_grpc.spark._arrow  # noqa: F401
        except Exception as exc:  # any reason a worker cannot load it is worth reporting
            return sys.executable, f"{type(exc).__name__}: {exc}"
        return sys.executable, ""

    context = session.sparkContext
    python, error = context.parallelize([0], 1).map(probe).first()
    if error and (context.master or "").startswith("local"):
        logging.getLogger(__name__).warning(
            "Spark's Python workers ran %s, which cannot load pulsar_grpc (%s); this local "
            "session's workers now run %s (set PYSPARK_PYTHON to choose)",
            python,
            error,
            sys.executable,
        )
        context.pythonExec = sys.executable
        python, error = context.parallelize([0], 1).map(probe).first()
    if error:
        raise ExecutorsCannotImport(
            f"Spark's Python workers run {python}, which cannot load pulsar_grpc ({error}): "
            "set PYSPARK_PYTHON (or spark.pyspark.python with spark-submit) to a python that "
            "has pulsar-grpc installed"
        )


def register(session: SparkSession, check_executors: bool = True) -> None:
    """Register the ``pulsar-grpc`` format on ``session`` (Python data sources are
    per-session; pyspark is imported only here so ``pulsar_grpc.spark`` imports without it).

    First one tiny task checks that Spark's Python workers can load the source (see
    :func:`_check_workers`); ``check_executors=False`` skips it (e.g. on Spark Connect,
    whose server configures its workers).
    """
    from .source import PulsarGrpcDataSource

    if check_executors and hasattr(session, "sparkContext"):
        _check_workers(session)
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
