"""The Spark driver of tests/e2e/test_spark_cluster.py, run as a process of its own:

    python -m tests.e2e.spark_cluster_job --report R.json --sink-topic T --rows N --work DIR \\
        <pulsar_grpc.spark.loadtest arguments, --master spark://... and --conf included>

It opens the load test's session (``loadtest.open_session``: the master given, the package's
code shipped to the executors), runs the load test (producer tasks on the executors, then the
source reads the range back), then a sink round trip: ``rows`` rows written with the
``pulsar-grpc`` sink to ``sink-topic``, read back by a batch query and by a streaming query with
``Trigger.AvailableNow`` (into parquet). What it saw goes to the report as JSON; the test
asserts on it. A process of its own because a Python process holds one SparkContext, and the
test process's is the local one the other Spark tests share.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from pulsar_grpc.spark import FORMAT, loadtest

STREAM_TIMEOUT_S = 120


def sink_round_trip(
    session: Any, service_url: str, topic: str, rows: int, work: Path
) -> dict[str, Any]:
    """Write r0..r<rows-1> (16 keys, so every partition gets some) with the sink; the
    values, partitions and message ids a batch read and an AvailableNow stream get back."""
    from pyspark.sql import functions as F

    written = session.range(0, rows).select(
        F.concat(F.lit("r"), F.col("id").cast("string")).alias("value"),
        (F.col("id") % 16).cast("string").alias("key"),
    )
    written.write.format(FORMAT).option("service.url", service_url).option("topic", topic).mode(
        "append"
    ).save()

    batch = (
        session.read.format(FORMAT)
        .option("service.url", service_url)
        .option("topic", topic)
        .load()
        .select(F.col("value").cast("string").alias("value"), "partition", "messageId")
        .collect()
    )

    query = (
        session.readStream.format(FORMAT)
        .option("service.url", service_url)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .load()
        .select(F.col("value").cast("string").alias("value"), "messageId")
        .writeStream.format("parquet")
        .option("path", str(work / "stream"))
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    finished = query.awaitTermination(STREAM_TIMEOUT_S)
    error = query.exception()
    if not finished:
        query.stop()
    streamed = session.read.parquet(str(work / "stream")).collect() if finished else []
    return {
        "batch_values": [r.value for r in batch],
        "batch_partitions": sorted({r.partition for r in batch}),
        "batch_ids": len({r.messageId for r in batch}),
        "stream_finished": bool(finished),
        "stream_error": None if error is None else str(error),
        "stream_values": [r.value for r in streamed],
        "stream_ids": len({r.messageId for r in streamed}),
    }


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, argparse.Namespace]:
    """This job's own arguments, and the rest as the load test's."""
    parser = argparse.ArgumentParser(prog="spark_cluster_job")
    parser.add_argument("--report", type=Path, required=True)
    parser.add_argument("--sink-topic", required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--work", type=Path, required=True)
    job, rest = parser.parse_known_args(argv)
    return job, loadtest.parse_args(rest)


def main(argv: list[str]) -> None:
    job, args = parse_args(argv)
    session = loadtest.open_session(args.master, loadtest.spark_properties(args.conf))
    try:
        produce, read = loadtest.run(session, args)  # registers the source (probes executors)
        context = session.sparkContext
        report = {
            "master": context.master,
            "conf": dict(context.getConf().getAll()),
            # Where a task runs: an executor's directory under the worker's work dir.
            "task_cwd": context.parallelize([0], 1).map(lambda _: os.getcwd()).first(),
            "produced": produce.messages,
            "read": read.messages,
            "read_bytes": read.bytes,
            **sink_round_trip(session, args.service_url, job.sink_topic, job.rows, job.work),
        }
    finally:
        session.stop()
    job.report.write_text(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
