"""The Spark load test against the three-broker cluster, from a real Spark standalone cluster.

A master and a worker started from the pyspark package (tests/spark_standalone.py); three
broker processes on ZooKeeper and PostgreSQL (tests/cluster.py). The driver runs as its own
process (tests/e2e/spark_cluster_job.py) with ``--master spark://...`` and the service URL of
one broker only; the partitions of both topics are owned by several brokers, so the
executors' lookups send them to each owner. The load test's producer tasks write, the source
reads the same range back; then rows written with the sink come back, each exactly once,
through a batch read and an ``AvailableNow`` stream.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from pulsar_grpc.broker.naming import TopicName
from pulsar_grpc.spark import _admin, loadtest
from tests.cluster import Cluster, Member, cluster_factory, place, topic_over_every_bundle
from tests.postgres import postgres_server, postgres_url
from tests.spark_standalone import HOST, SparkStandalone, spark_standalone
from tests.waiting import eventually_sync
from tests.zookeeper import zk_chroot, zookeeper

__all__ = [
    "cluster_factory",
    "postgres_server",
    "postgres_url",
    "spark_standalone",
    "zk_chroot",
    "zookeeper",
]

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 4
MESSAGES = 3000  # the load test's, over 2 producer tasks
ROWS = 3000  # written with the sink
JOB_TIMEOUT_S = 240
# The application's asks fit the one worker (1 core, 1 GiB); the rest keeps a small run short.
SPARK_PROPERTIES = {
    "spark.executor.cores": "1",
    "spark.cores.max": "1",
    "spark.executor.memory": "512m",
    "spark.driver.memory": "512m",
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
}

pytestmark = pytest.mark.timeout(420)


async def partitioned_over_brokers(
    members: list[Member], entry: Member, prefix: str
) -> tuple[TopicName, list[Member]]:
    """Create a topic whose partitions span every bundle, place them through ``entry``
    (the leader spreads the bundles), and return it with each partition's owner."""
    topic = topic_over_every_bundle(prefix, PARTITIONS)
    await asyncio.to_thread(
        _admin.create_partitioned_topic, entry.http_url(), topic.full_name, PARTITIONS
    )
    owners = [
        await place(members, entry.service_url(), topic.get_partition(p)) for p in range(PARTITIONS)
    ]
    return topic, owners


def run_driver(argv: list[str], log: Path) -> int:
    """The driver process; its output (Spark's and the load test's report) goes to ``log``.
    Its own process group, stopped whole if it outlives the timeout (its JVM with it)."""
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,  # the executors' Python workers: this venv's
        "SPARK_LOCAL_IP": HOST,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "protos")]),
    }
    with open(log, "wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.e2e.spark_cluster_job", *argv],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            return process.wait(JOB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise


async def test_load_test_on_a_spark_standalone_cluster_against_three_brokers(
    cluster_factory: Callable[..., Cluster],
    spark_standalone: SparkStandalone,
    tmp_path: Path,
) -> None:
    spark = spark_standalone
    assert spark.master_url.startswith("spark://")
    members = cluster_factory().members
    entry = members[0]  # the only broker the driver and the executors are told about
    load_topic, load_owners = await partitioned_over_brokers(members, entry, "spark-load")
    sink_topic, sink_owners = await partitioned_over_brokers(members, entry, "spark-sink")
    for owners in (load_owners, sink_owners):
        assert len({m.name for m in owners}) >= 2, [m.name for m in owners]

    report_path, log = tmp_path / "report.json", tmp_path / "driver.log"
    argv = [
        "--report", str(report_path), "--sink-topic", sink_topic.full_name,
        "--rows", str(ROWS), "--work", str(tmp_path),
        "--service-url", entry.service_url(), "--admin-url", entry.http_url(),
        "--topic", load_topic.full_name, "--partitions", str(PARTITIONS),
        "--producers", "2", "--messages", str(MESSAGES), "--size", "64",
        "--master", spark.master_url,
        *(f"--conf={name}={value}" for name, value in SPARK_PROPERTIES.items()),
    ]  # fmt: skip
    code = await asyncio.to_thread(run_driver, argv, log)
    output = log.read_text(errors="replace")
    assert code == 0, output[-5000:]
    report = json.loads(report_path.read_text())

    # It ran on the standalone cluster: the master, and tasks in the worker's executor.
    assert report["master"] == spark.master_url
    assert SPARK_PROPERTIES.items() <= report["conf"].items()  # --conf reached the session
    assert Path(report["task_cwd"]).is_relative_to(spark.work_dir), report["task_cwd"]

    def finished() -> None:  # the master files the application once the driver has gone
        apps = spark.state()["completedapps"]
        assert [a["state"] for a in apps if a["name"] == loadtest.APP_NAME] == ["FINISHED"], apps

    await asyncio.to_thread(eventually_sync, finished, timeout=30, interval=0.2)

    # The load test: every message its producers wrote, read back by the source.
    assert report["produced"] == report["read"] == MESSAGES, output[-5000:]
    assert report["read_bytes"] == MESSAGES * 64
    assert f"produce: {MESSAGES} msgs" in output and f"read: {MESSAGES} msgs" in output
    assert "MISMATCH" not in output
    # Its progress line, from each partition's stats asked through the one broker it knows.
    assert re.search(rf"\] (produce|read): \d+/{MESSAGES} msgs", output), output[-5000:]

    # The sink's rows, from every partition (owned by several brokers), once each.
    expected = sorted(f"r{i}" for i in range(ROWS))
    assert sorted(report["batch_values"]) == expected
    assert report["batch_ids"] == ROWS
    assert report["batch_partitions"] == list(range(PARTITIONS))
    assert report["stream_finished"] and report["stream_error"] is None, report["stream_error"]
    assert sorted(report["stream_values"]) == expected
    assert report["stream_ids"] == ROWS
