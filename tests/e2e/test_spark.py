"""The pulsar-grpc Spark data source end to end: Spark local mode against a real broker.

One SparkSession for all Spark tests (tests/e2e/conftest.py); a fresh broker per test.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import pulsar_grpc.spark as pulsar_grpc_spark
from pulsar_grpc.client import MessageId, SyncClient
from pulsar_grpc.spark import _admin
from tests.e2e.sparkcheck import fresh_topic, oid
from tests.support import BrokerThread

FMT = pulsar_grpc_spark.FORMAT

pytestmark = pytest.mark.timeout(180)


def produce(
    broker: BrokerThread, topic: str, count: int, start: int = 0, batch: int = 4
) -> list[MessageId]:
    """Send ``count`` keyed messages in batches of ``batch`` (several messages per entry)."""
    got: dict[int, MessageId | None] = {}
    with SyncClient(broker.service_url) as client:
        producer = client.create_producer(topic, batching_max_messages=batch)
        for first in range(start, start + count, batch):
            for i in range(first, min(first + batch, start + count)):
                producer.send_async(
                    f"m{i}".encode(),
                    lambda result, msg_id, i=i: got.__setitem__(i, msg_id),
                    {"i": str(i)},
                    f"k{i % 3}",
                    event_timestamp=1_700_000_000_000 + i,
                )
            producer.flush()  # the callbacks of a batch run before its flush returns
        producer.close()
    ids = [got[i] for i in range(start, start + count)]
    assert None not in ids, "a message was not stored"
    return [i for i in ids if i is not None]


def reader(session: SparkSession, broker: BrokerThread, **options: str):  # type: ignore[no-untyped-def]
    r = session.read.format(FMT).option("service.url", broker.service_url)
    for k, v in options.items():
        r = r.option(k, v)
    return r


def test_batch_read_with_starting_and_ending_offsets(
    session: SparkSession, broker: BrokerThread
) -> None:
    topic = fresh_topic("batch")
    _admin.create_partitioned_topic(broker.http_url, topic, 2)
    ids0 = produce(broker, f"{topic}-partition-0", 10, 0)
    ids1 = produce(broker, f"{topic}-partition-1", 6, 100)

    df = reader(session, broker, topic=topic).load()
    rows = df.collect()
    assert sorted(r.value for r in rows) == sorted(
        [f"m{i}".encode() for i in range(10)] + [f"m{i}".encode() for i in range(100, 106)]
    )
    row = next(r for r in rows if r.value == b"m4")
    assert row.key == b"k1" and row.keyString == "k1"
    assert row.topic == topic and row.partition == 0
    assert row.properties == {"i": "4"} and row.messageId == oid(ids0[4], 0)
    assert int(row.eventTime.timestamp() * 1000) == 1_700_000_000_004
    assert row.publishTime is not None

    # (start, end]: after m2 up to m6 inclusive on partition 0; earliest..m103 on partition 1.
    starting = json.dumps({f"{topic}-partition-0": oid(ids0[2], 0)})
    ending = json.dumps(
        {f"{topic}-partition-0": oid(ids0[6], 0), f"{topic}-partition-1": oid(ids1[3], 1)}
    )
    got = reader(
        session, broker, topic=topic, startingOffsets=starting, endingOffsets=ending
    ).load()
    assert sorted(r.value for r in got.collect()) == sorted(
        [b"m3", b"m4", b"m5", b"m6", b"m100", b"m101", b"m102", b"m103"]
    )

    # Split into message-id ranges: same rows, more Spark partitions.
    split = reader(session, broker, topic=topic, entriesPerSplit="1").load()
    assert split.rdd.getNumPartitions() > 2
    assert sorted(r.messageId for r in split.collect()) == sorted(r.messageId for r in rows)


def test_streaming_available_now_restarts_exactly(
    session: SparkSession, broker: BrokerThread, tmp_path: Path
) -> None:
    topic = fresh_topic("stream")
    _admin.create_partitioned_topic(broker.http_url, topic, 2)
    produce(broker, topic, 10, 0)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run() -> None:
        query = (
            session.readStream.format(FMT)
            .option("service.url", broker.service_url)
            .option("topic", topic)
            .option("startingOffsets", "earliest")
            .option("maxMessagesPerTrigger", "4")
            .load()
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(90)
        assert query.exception() is None

    run()
    first = session.read.parquet(str(out)).select("value", "messageId").collect()
    assert sorted(r.value for r in first) == sorted(f"m{i}".encode() for i in range(10))

    produce(broker, topic, 7, 10)
    run()  # restarted from the checkpoint: exactly the 7 new ones
    rows = session.read.parquet(str(out)).select("value", "messageId").collect()
    assert len(rows) == 17
    assert sorted(r.value for r in rows) == sorted(f"m{i}".encode() for i in range(17))
    assert len({r.messageId for r in rows}) == 17


def test_batch_and_streaming_write_read_back(
    session: SparkSession, broker: BrokerThread, tmp_path: Path
) -> None:
    target = fresh_topic("write")
    df = session.range(0, 50).select(
        F.concat(F.lit("v"), F.col("id").cast("string")).alias("value"),
        (F.col("id") % 5).cast("string").alias("key"),
        F.create_map(F.lit("n"), F.col("id").cast("string")).alias("properties"),
    )
    df.write.format(FMT).option("service.url", broker.service_url).option("topic", target).mode(
        "append"
    ).save()
    back = reader(session, broker, topic=target).load()
    rows = back.collect()
    assert len(rows) == 50
    assert sorted(r.value for r in rows) == sorted(f"v{i}".encode() for i in range(50))
    assert all(r.properties["n"] == r.value.decode()[1:] for r in rows)

    # Streaming: copy the topic into another through the sink.
    copy = fresh_topic("copy")
    query = (
        session.readStream.format(FMT)
        .option("service.url", broker.service_url)
        .option("topic", target)
        .option("startingOffsets", "earliest")
        .load()
        .select("value", "key", "properties", "eventTime")
        .writeStream.format(FMT)
        .option("service.url", broker.service_url)
        .option("topic", copy)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(90)
    assert query.exception() is None
    copied = reader(session, broker, topic=copy).load().collect()
    assert sorted(r.value for r in copied) == sorted(r.value for r in rows)


def test_write_broker_error_fails_the_job(
    session: SparkSession, broker_factory: Callable[..., BrokerThread]
) -> None:
    small = broker_factory(maxMessageSize=1024)
    df = session.range(0, 3).select(F.expr("repeat('x', 4096)").alias("value"))
    with pytest.raises(Exception, match=r"writing to .*big.* failed: MessageTooBig"):
        df.write.format(FMT).option("service.url", small.service_url).option(
            "topic", fresh_topic("big")
        ).mode("append").save()


def test_loadtest_produces_and_reads_back(
    session: SparkSession, broker: BrokerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    from pulsar_grpc.spark import loadtest

    args = loadtest.parse_args(
        ["--service-url", broker.service_url, "--admin-url", broker.http_url,
         "--topic", fresh_topic("load"), "--partitions", "2", "--producers", "2",
         "--messages", "2001", "--size", "64"]
    )  # fmt: skip
    produce, read = loadtest.run(session, args)
    assert produce.messages == read.messages == 2001
    assert read.bytes == 2001 * 64
    out = capsys.readouterr().out
    assert "produce: 2001 msgs" in out and "read: 2001 msgs" in out and "msg/s" in out


def test_loadtest_progress_line_never_goes_backwards() -> None:
    """Read counters drop when a task's reader subscription ends: the line must not."""
    import io
    import re

    from pulsar_grpc.spark import loadtest

    polls = iter(
        [
            {"p0": 100, "p1": 100},  # produce baseline: what the topic held before
            {"p0": 150, "p1": 160},
            ("read", {"p0": 40, "p1": 0}),
            ("read", {"p0": 90, "p1": 30}),
            ("read", {"p0": 10, "p1": 70}),  # p0's first reader ended, a new one started
            ("read", {"p0": 60, "p1": 70}),
        ]
    )
    out = io.StringIO()

    class Scripted(loadtest.Progress):
        def _counters(self, phase: str) -> dict[str, int]:
            item = next(polls, None)
            if item is None:
                self.done.set()
                raise RuntimeError("no more polls")
            if isinstance(item, tuple):
                self.phase, item = item
            return item

    progress = Scripted("http://unused", ["t-partition-0"], 200, out, interval=0.01)
    progress.run()
    lines = re.findall(r"(produce|read): (\d+)/200 msgs, (-?[\d,]+) msg/s", out.getvalue())
    assert [(p, int(d)) for p, d, _ in lines] == [
        ("produce", 0),
        ("produce", 110),
        ("read", 40),
        ("read", 120),
        ("read", 170),
        ("read", 220),
    ]
    assert all(not rate.startswith("-") for _, _, rate in lines)


def test_loadtest_conf_pairs_become_spark_properties() -> None:
    """``--conf KEY=VALUE`` (repeatable) carries a cluster's resource asks to the session."""
    from pulsar_grpc.spark import loadtest

    args = loadtest.parse_args(
        ["--service-url", "grpc://b:50051", "--admin-url", "http://b:8080", "--topic", "t",
         "--master", "spark://m:7077", "--conf", "spark.cores.max=1",
         "--conf=spark.executor.memory=512m", "--conf", "spark.app.extra=a=b"]
    )  # fmt: skip
    assert loadtest.spark_properties(args.conf) == {
        "spark.cores.max": "1",
        "spark.executor.memory": "512m",
        "spark.app.extra": "a=b",
    }
    with pytest.raises(SystemExit, match=r"--conf: expected KEY=VALUE, got 'spark.cores.max'"):
        loadtest.spark_properties(["spark.cores.max"])
