"""Spark source read throughput against the plain Python SDK, side by side on one topic.

Starts a standalone broker (child process, its own core as far as 2 cores allow), fills a
partitioned topic through the SDK producer, then reads every message of it back, in turn:

* ``sdk consumer``  — ``Client.subscribe`` (Exclusive, Earliest), an ack per message;
* ``sdk reader``    — ``Client.create_reader("earliest")``, non-durable, no acks;
* ``raw consume``   — one hand-driven Consume stream per partition (the wire's own cost);
* ``spark cold`` / ``spark warm`` — ``spark.read.format("pulsar-grpc")...load()
  .agg(count("*"), sum(length("value")))`` on ``local[N]``, twice: the first includes
  starting the Python workers, the second is the steady state. The aggregation forces every
  row's value through Arrow without collecting rows to the driver.

    .venv/bin/python bench/spark_vs_client.py --partitions 4 --messages 250000 --size 100

Prints a table (or --json). The Spark driver, its JVM and its Python workers share the
machine with the broker, as the SDK readers do.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pulsar_grpc.cli.perf import create_partitioned_topic  # noqa: E402
from pulsar_grpc.cli.perf.load import consume_sdk, produce_sdk  # noqa: E402
from pulsar_grpc.cli.perf.procs import standalone  # noqa: E402
from pulsar_grpc.cli.perf.raw import consume_raw  # noqa: E402
from pulsar_grpc.cli.perf.report import machine  # noqa: E402
from pulsar_grpc.cli.perf.spec import LoadSpec  # noqa: E402
from pulsar_grpc.cli.perf.stats import Recorder  # noqa: E402
from pulsar_grpc.client import Client  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--messages", type=int, default=250_000, help="per partition")
    parser.add_argument("--size", type=int, default=100, help="payload bytes")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    import uvloop

    total = args.partitions * args.messages
    report: dict[str, Any] = {"machine": machine(), "settings": vars(args), "runs": []}
    topic = "spark-vs-client"
    with standalone() as broker:
        create_partitioned_topic(broker.http_url, topic, args.partitions)
        partitions = tuple(f"{topic}-partition-{i}" for i in range(args.partitions))
        spec = LoadSpec(
            broker.service_url, (topic,), size=args.size, messages=total, producers=2,
            partitions=args.partitions, interval=5.0, idle_timeout=10.0,
        )  # fmt: skip
        fill = Recorder("fill (produce)", args.size)
        uvloop.run(produce_sdk(spec, fill))
        report["fill"] = fill.summary()
        print(f"filled: {fill.count:,} messages", file=sys.stderr, flush=True)
        runs = report["runs"]
        runs.append(_timed("sdk consumer", args.size, consume_sdk, spec))
        runs.append(_reader_run(broker.service_url, topic, total, args.size))
        raw = LoadSpec(
            broker.service_url, partitions, size=args.size, messages=total,
            subscription="raw-sub", interval=5.0,
        )  # fmt: skip
        runs.append(_timed("raw consume", args.size, consume_raw, raw))
        runs.extend(_spark_runs(args.master, broker.service_url, topic, args.size))
    import pyspark

    report["machine"].update(load_after=os.getloadavg(), pyspark=pyspark.__version__)
    for run in runs:
        run["ok"] = run["messages"] == total
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(_table(report, total))
    return 0 if all(r["ok"] for r in runs) else 1


def _timed(label: str, size: int, runner: Any, spec: LoadSpec) -> dict[str, Any]:
    """One perf runner reading ``spec.messages``; its clock covers the reading only."""
    import uvloop

    rec = Recorder(label, size)
    uvloop.run(runner(spec, rec))
    s = rec.summary()
    return {"run": label, "messages": s["messages"], "seconds": s["seconds"]}


def _reader_run(service_url: str, topic: str, total: int, size: int) -> dict[str, Any]:
    """A reader from earliest, ``receive`` per message, reading the payload of each."""
    import uvloop

    async def read() -> tuple[int, int, float]:
        async with Client(service_url) as client:
            reader = await client.create_reader(topic, "earliest", receiver_queue_size=10_000)
            started = time.perf_counter()
            count = nbytes = 0
            while count < total:
                message = await reader.read_next()
                nbytes += len(message.data())
                count += 1
            return count, nbytes, time.perf_counter() - started

    count, nbytes, seconds = uvloop.run(read())
    assert nbytes == count * size
    return {"run": "sdk reader", "messages": count, "seconds": round(seconds, 3)}


def _spark_runs(master: str, service_url: str, topic: str, size: int) -> list[dict[str, Any]]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), path) if p)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import pulsar_grpc.spark as pulsar_grpc_spark

    session = (
        SparkSession.builder.master(master)
        .appName("spark-vs-client")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    pulsar_grpc_spark.register(session)
    runs = []
    try:
        for label in ("spark cold", "spark warm"):
            started = time.perf_counter()
            row = (
                session.read.format(pulsar_grpc_spark.FORMAT)
                .option("service.url", service_url)
                .option("topic", topic)
                .option("startingOffsets", "earliest")
                .option("endingOffsets", "latest")
                .load()
                .agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes"))
                .collect()[0]
            )
            seconds = time.perf_counter() - started
            assert row["bytes"] == row["n"] * size
            runs.append({"run": label, "messages": row["n"], "seconds": round(seconds, 3)})
            print(f"{label}: {row['n']:,} in {seconds:.1f} s", file=sys.stderr, flush=True)
    finally:
        session.stop()
    return runs


def _table(report: dict[str, Any], total: int) -> str:
    size = report["settings"]["size"]
    lines = [f"{'read':<14}{'messages':>11}{'seconds':>9}{'msg/s':>11}{'MB/s':>7}"]
    for r in report["runs"]:
        rate = r["messages"] / max(r["seconds"], 1e-9)
        line = f"{r['run']:<14}{r['messages']:>11,}{r['seconds']:>9.2f}{rate:>11,.0f}"
        lines.append(line + f"{rate * size / 1e6:>7.1f}" + ("" if r["ok"] else "  MISMATCH"))
    fill = report["fill"]
    lines.append(f"(filled {fill['messages']:,} of {total:,} at {fill['msg_per_s']:,.0f} msg/s)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
