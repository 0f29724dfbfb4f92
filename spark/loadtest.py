"""Load test on Spark: P producers spread over the executors write M messages of S bytes to a
partitioned topic, then the ``pulsar-grpc`` source reads them back.

    python -m pulsar_grpc.spark.loadtest --service-url grpc://broker:50051 \\
        --admin-url http://broker:8080 --topic perf --partitions 8 --producers 4 \\
        --messages 1000000 --size 100 --master local[*]

or on a Spark cluster, ``--master spark://host:7077`` with ``--conf KEY=VALUE`` for the
application's resource asks (docs/spark.md, "On a Spark cluster");

or ``spark-submit spark/loadtest.py ...`` (the package's ``pulsar_grpc.client`` and
``pulsar_grpc.spark`` and the generated stubs are shipped to the executors with addPyFile;
they need grpcio, protobuf and pyarrow).
Prints a live progress line (driver thread polling topic stats over admin HTTP), then msgs/s
and MB/s overall and per executor for both phases.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pulsar_grpc.spark import FORMAT, _admin, register
from pulsar_grpc.spark._offsets import format_id, key, last_id
from pulsar_grpc.spark._options import ClientOptions
from pulsar_grpc.spark._runtime import LoopRunner
from pulsar_grpc.spark._topics import full_topic_name, partition_index

ROOT = Path(__file__).resolve().parents[1]
APP_NAME = "pulsar-grpc-loadtest"  # how a cluster's master lists the load test


@dataclass
class Phase:
    """Totals of one phase: wall time and per-executor messages / bytes / task seconds."""

    name: str
    seconds: float = 0.0
    messages: int = 0
    bytes: int = 0
    executors: dict[str, dict[str, float]] = field(default_factory=dict)

    def add(self, row: Any) -> None:
        stats = self.executors.setdefault(row.executor, {"tasks": 0, "messages": 0, "bytes": 0})
        stats["tasks"] += 1
        stats["messages"] += row.messages
        stats["bytes"] += row.bytes
        self.messages += row.messages
        self.bytes += row.bytes

    def report(self) -> str:
        wall = max(self.seconds, 1e-9)
        lines = [
            f"{self.name}: {self.messages} msgs in {wall:.2f} s = "
            f"{self.messages / wall:,.0f} msg/s, {self.bytes / wall / 1e6:,.2f} MB/s"
        ]
        for name, s in sorted(self.executors.items()):
            lines.append(
                f"  executor {name}: {int(s['messages'])} msgs, "
                f"{s['messages'] / wall:,.0f} msg/s, {s['bytes'] / wall / 1e6:,.2f} MB/s"
            )
        return "\n".join(lines)


def _executor() -> str:
    return f"{socket.gethostname()}"


def _produce_task(
    client_options: ClientOptions, topic: str, messages: int, producers: int, size: int
) -> Callable[[Iterator[int]], Iterator[dict[str, Any]]]:
    """The per-task function: each element is one producer writing its share."""

    def run(indexes: Iterator[int]) -> Iterator[dict[str, Any]]:
        for index in indexes:
            share = messages // producers + (1 if index < messages % producers else 0)
            yield _produce_share(client_options, topic, share, size)

    return run


def _produce_share(options: ClientOptions, topic: str, count: int, size: int) -> dict[str, Any]:
    payload = os.urandom(size)
    ends: dict[str, str] = {}
    with LoopRunner(options) as runner:

        async def go() -> None:
            producer = await runner.client.create_producer(
                topic,
                batching_max_messages=1000,
                max_pending_messages=20000,
                block_if_queue_full=True,
            )
            futures = [await producer.enqueue(payload) for _ in range(count)]
            await producer.flush()
            last: dict[int, Any] = {}
            for future in futures:
                mid = await future
                if mid.partition() not in last or key(mid) > key(last[mid.partition()]):
                    last[mid.partition()] = mid
            await producer.close()
            for partition, mid in last.items():
                name = topic if partition < 0 else f"{topic}-partition-{partition}"
                ends[name] = format_id(mid, partition)

        started = time.perf_counter()
        runner.run(go())
        seconds = time.perf_counter() - started
    return {
        "executor": _executor(),
        "messages": count,
        "bytes": count * size,
        "seconds": seconds,
        "ends": json.dumps(ends),
    }


class Progress(threading.Thread):
    """Prints one refreshing line: messages in (and out) of the topic, from admin stats.

    Each partition's stats are asked for on their own: on a cluster the broker at
    ``admin_url`` redirects each to the partition's owner (urllib follows), where a
    partitioned topic's summary would only cover the partitions that broker owns.

    The counters are per partition and not monotonic for reads: a partition's msgOutCounter
    sums its current subscriptions, and a task's reader subscription vanishes when the task
    ends. So the line adds up each partition's *increases* since the previous poll (a drop
    is a reset: the new value counts from zero), which never goes backwards.
    """

    def __init__(
        self,
        admin_url: str,
        partitions: list[str],
        total: int,
        out: Any = sys.stderr,
        interval: float = 1.0,
    ) -> None:
        super().__init__(name="loadtest-progress", daemon=True)
        self.admin_url, self.partitions, self.total, self.out = admin_url, partitions, total, out
        self.interval = interval
        self.phase = "produce"
        self.done = threading.Event()

    def _counters(self, phase: str) -> dict[str, int]:
        """Per partition: messages stored (produce) or sent to connected readers (read)."""
        field = "msgInCounter" if phase == "produce" else "msgOutCounter"
        return {
            name: int(_admin.topic_stats(self.admin_url, name).get(field, 0))
            for name in self.partitions
        }

    def run(self) -> None:
        started = last_t = time.perf_counter()
        phase: str | None = None
        last: dict[str, int] = {}
        done = 0
        while True:
            try:
                counts: dict[str, int] | None = self._counters(self.phase)
            except Exception:  # the progress line must never fail the job
                counts = None
            if counts is not None:
                if self.phase != phase:
                    # A new phase: produce counts from what the topic held; reads from zero.
                    phase, done = self.phase, 0
                    last = counts if phase == "produce" else {}
                step = sum(
                    value - last.get(name, 0) if value >= last.get(name, 0) else value
                    for name, value in counts.items()
                )
                last, done = counts, done + step
                now = time.perf_counter()
                rate = step / max(now - last_t, 1e-9)
                last_t = now
                self.out.write(
                    f"\r[{now - started:6.1f}s] {phase}: {done}/{self.total} msgs, "
                    f"{rate:,.0f} msg/s   "
                )
                self.out.flush()
            if self.done.wait(self.interval):
                break
        self.out.write("\n")


def _ship_code(session: Any) -> None:
    """Make the source, the SDK and the generated stubs importable on cluster executors: a
    zip of ``pulsar_grpc`` (its ``__init__``, ``client`` and ``spark``) and ``pulsargrpc``,
    taken from where this process imports them (a checkout's links are followed)."""
    import pulsar_grpc
    import pulsargrpc

    package = Path(pulsar_grpc.__file__).parent
    stubs = Path(pulsargrpc.__file__).parent
    target = Path(tempfile.mkdtemp(prefix="pulsar-grpc-")) / "pulsar_grpc_code.zip"
    with zipfile.ZipFile(target, "w") as archive:
        archive.write(package / "__init__.py", "pulsar_grpc/__init__.py")
        for folder, name in ((package / "client", "pulsar_grpc/client"),
                             (package / "spark", "pulsar_grpc/spark"),
                             (stubs, "pulsargrpc")):  # fmt: skip
            for path in folder.resolve().rglob("*.py"):
                archive.write(path, f"{name}/{path.relative_to(folder.resolve())}")
    session.sparkContext.addPyFile(str(target))


def run(session: Any, args: argparse.Namespace, out: Any = None) -> tuple[Phase, Phase]:
    """Produce then read back; returns both phases (the tests check their counts)."""
    out = out or sys.stdout
    from pyspark.sql import functions as F

    register(session)
    topic = full_topic_name(args.topic)
    _admin.create_partitioned_topic(args.admin_url, topic, args.partitions)
    options = ClientOptions(args.service_url)
    partitions = [f"{topic}-partition-{i}" for i in range(args.partitions)]
    with LoopRunner(options) as runner:

        async def starts() -> dict[str, str]:
            out_: dict[str, str] = {}
            for name in partitions:
                last = await last_id(runner.client, name)
                out_[name] = "earliest" if last is None else format_id(last, partition_index(name))
            return out_

        starting = runner.run(starts())

    progress = Progress(args.admin_url, partitions, args.messages)
    progress.start()
    produce = Phase("produce")
    try:
        started = time.perf_counter()
        task = _produce_task(options, topic, args.messages, args.producers, args.size)
        rows = [
            SimpleNamespace(**r)
            for r in session.sparkContext.parallelize(range(args.producers), args.producers)
            .mapPartitions(task)
            .collect()
        ]
        produce.seconds = time.perf_counter() - started
        ends: dict[str, str] = {}
        for row in rows:
            produce.add(row)
            for name, mid in json.loads(row.ends).items():
                if name not in ends or _key(mid) > _key(ends[name]):
                    ends[name] = mid
        progress.phase = "read"
        read = Phase("read")
        started = time.perf_counter()
        counted = (
            session.read.format(FORMAT)
            .option("service.url", args.service_url)
            .option("topic", topic)
            .option("startingOffsets", json.dumps(starting))
            .option("endingOffsets", json.dumps(ends))
            .load()
            # reflect() runs on the executor that reads the row: its host names the executor.
            .groupBy(F.expr("reflect('java.net.InetAddress', 'getLocalHost')").alias("executor"))
            .agg(F.count("*").alias("messages"), F.sum(F.length("value")).alias("bytes"))
            .collect()
        )
        read.seconds = time.perf_counter() - started
        for row in counted:
            read.add(row)
    finally:
        progress.done.set()
        progress.join(5)
    out.write(produce.report() + "\n" + read.report() + "\n")
    if read.messages != produce.messages:
        out.write(f"MISMATCH: produced {produce.messages}, read {read.messages}\n")
    return produce, read


def _key(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(":")[:3])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="pulsar_grpc.spark.loadtest", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--service-url", required=True, help="grpc://host:port")
    parser.add_argument("--admin-url", required=True, help="broker web address, http://host:port")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100, help="payload bytes")
    parser.add_argument("--master", default="local[*]", help="local[*] or spark://host:7077")
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark property, e.g. spark.cores.max=4 on a shared cluster (repeatable)",
    )
    return parser.parse_args(argv)


def spark_properties(pairs: list[str]) -> dict[str, str]:
    """``--conf KEY=VALUE`` arguments as a dict; a pair without ``=`` is a usage error."""
    properties = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SystemExit(f"--conf: expected KEY=VALUE, got {pair!r}")
        properties[name] = value
    return properties


def open_session(master: str, properties: dict[str, str] | None = None) -> Any:
    """The load test's SparkSession on ``master`` (``local[*]`` or ``spark://host:port``).

    Its Python workers run this interpreter unless ``PYSPARK_PYTHON`` says otherwise (a
    cluster's workers must find one with grpcio, protobuf and pyarrow at the same path), and
    the package's code is shipped to the executors, so a worker needs no checkout.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), path) if p)
    builder = (
        SparkSession.builder.master(master)
        .appName(APP_NAME)
        .config("spark.ui.showConsoleProgress", "false")
    )
    for name, value in (properties or {}).items():
        builder = builder.config(name, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    _ship_code(session)
    return session


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    session = open_session(args.master, spark_properties(args.conf))
    try:
        produce, read = run(session, args)
    finally:
        session.stop()
    return 0 if produce.messages == read.messages else 1


if __name__ == "__main__":
    sys.exit(main())
