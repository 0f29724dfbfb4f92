"""Options of the pulsar-grpc Spark source and sink: one clear message per mistake, Spark's
Kafka-connector habits (minPartitions, startingTime/endingTime, maxBytesPerTrigger,
minOffsetsPerTrigger/maxTriggerDelay, key binary + keyString, includeProperties), pass-through
SDK options, save modes, and the latest offset / lag in streaming progress.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import pulsar_grpc.spark as pulsar_grpc_spark
from pulsar_grpc.client import MessageId, SyncClient
from tests.e2e.sparkcheck import fresh_topic, last_line
from tests.support import BrokerThread
from tests.waiting import eventually_sync

FMT = pulsar_grpc_spark.FORMAT

pytestmark = pytest.mark.timeout(240)


def produce(broker: BrokerThread, topic: str, values: list[bytes]) -> list[MessageId]:
    with SyncClient(broker.service_url) as client:
        producer = client.create_producer(topic, batching_max_messages=1)
        ids = [producer.send(v) for v in values]
        producer.close()
    return ids


def load(session: SparkSession, url: str, **options: str) -> Any:
    reader = session.read.format(FMT).option("service.url", url)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def refused(action: Any) -> str:
    """Run ``action``; it must fail with one of the source's messages: return its last line."""
    with pytest.raises(Exception) as failure:
        action()
    text = str(failure.value)
    for wrong in ("AssertionError", "KeyError", "TypeError"):
        assert wrong not in text, text
    return last_line(failure.value)


BAD = [
    (
        {"topic": "t", "startingOffsets": "bogus"},
        "startingOffsets: expected earliest, latest or a JSON object of partition -> message id,"
        " got 'bogus'",
    ),
    ({"topic": "t", "startingOffsets": '{"t": "1:x"}'}, "startingOffsets: expected earliest"),
    ({"topic": "t", "endingOffsets": "earliest"}, "endingOffsets: expected latest or a JSON"),
    ({"topic": "t", "maxMessagesPerTrigger": "ten"}, "maxMessagesPerTrigger: expected an integer"),
    ({"topic": "t", "minPartitions": "0"}, "minPartitions: expected an integer >= 1, got '0'"),
    ({"topic": "t", "failOnDataLoss": "maybe"}, "failOnDataLoss: expected true or false"),
    ({"topic": "t", "maxTriggerDelay": "soon"}, "maxTriggerDelay: expected a duration"),
    ({"topic": "t", "startingTime": "yesterday"}, "startingTime: expected an integer"),
    ({"topic": "t", "startingOffset": "earliest"}, "did you mean startingOffsets?"),
    ({"topic": "t", "pulsar.client.operationTimeoutMss": "1"}, "did you mean pulsar.client."),
    ({"topic": "t", "pulsar.reader.receiverQueueSize": "x"}, "receiverqueuesize: expected an"),
    ({"topics": "a", "topic": "b"}, "topic: expected exactly one of the options topic, topics"),
    ({}, "topic: expected exactly one of the options topic, topics, topicsPattern, got 'none'"),
    ({"topicsPattern": "orders-.*"}, "admin.url: expected the broker's http://host:port"),
]


def test_bad_options_fail_at_planning_with_one_message(
    session: SparkSession, broker: BrokerThread
) -> None:
    for options, expected in BAD:
        line = refused(lambda o=options: load(session, broker.service_url, **o).collect())
        assert expected in line, (options, line)
        assert "startingOffset" not in options or "startingOffset:" in line or "did" in line
    # Without any broker address at all.
    line = refused(lambda: session.read.format(FMT).option("topic", "t").load())
    assert "service.url: expected grpc://host:port or grpc+ssl://host:port, got None" in line
    # A JSON offset naming a partition that is not read: at planning, before any task.
    topic = fresh_topic("other")
    line = refused(
        lambda: load(
            session, broker.service_url, topic=topic, startingOffsets='{"elsewhere": "1:2"}'
        ).collect()
    )
    assert "startingOffsets: expected partitions of the topics read" in line, line


def test_unreachable_broker_fails_in_bounded_time_naming_the_url(session: SparkSession) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    url = f"grpc://127.0.0.1:{port}"
    started = time.monotonic()
    line = refused(lambda: load(session, url, topic="t", operationTimeoutMs="2000").collect())
    assert time.monotonic() - started < 30
    assert f"service.url: cannot reach the broker at {url} within operationTimeoutMs=2000" in line


def test_time_window_min_partitions_keys_properties_and_pass_through(
    session: SparkSession, broker: BrokerThread
) -> None:
    topic = fresh_topic("window")
    with SyncClient(broker.service_url) as client:
        producer = client.create_producer(topic, batching_max_messages=1)
        early = [producer.send(f"a{i}".encode(), partition_key=f"k{i}") for i in range(20)]
        producer.close()
    rows = load(session, broker.service_url, topic=topic).collect()
    boundary = max(int(r.publishTime.timestamp() * 1000) for r in rows)
    eventually_sync(lambda: time.time() * 1000 > boundary + 5, timeout=5, interval=0.01)
    produce(broker, topic, [f"b{i}".encode() for i in range(5)])

    late = load(session, broker.service_url, topic=topic, startingTime=str(boundary + 1))
    assert sorted(r.value for r in late.collect()) == sorted(f"b{i}".encode() for i in range(5))
    old = load(session, broker.service_url, topic=topic, endingTime=str(boundary)).collect()
    assert sorted(r.value for r in old) == sorted(f"a{i}".encode() for i in range(20))

    # key is binary as in Spark's Kafka source, keyString the same as text.
    row = next(r for r in old if r.value == b"a3")
    mid = early[3]
    assert (row.key, row.keyString) == (b"k3", "k3")
    assert row.messageId == f"{mid.ledger_id()}:{mid.entry_id()}:{mid.batch_index()}:-1"

    # minPartitions: at least that many tasks, the same rows.
    split = load(session, broker.service_url, topic=topic, minPartitions="4")
    assert split.rdd.getNumPartitions() >= 4
    everything = sorted(
        [f"a{i}".encode() for i in range(20)] + [f"b{i}".encode() for i in range(5)]
    )
    assert sorted(r.value for r in split.collect()) == everything

    # includeProperties=false drops the column (Kafka's includeHeaders habit; alias accepted).
    for option in ("includeProperties", "includeHeaders"):
        df = load(session, broker.service_url, topic=topic, **{option: "false"})
        assert "properties" not in df.columns and df.count() == 25

    # Pass-through options reach the SDK (both spellings) and the read still works.
    passed = load(
        session,
        broker.service_url,
        topic=topic,
        **{
            "pulsar.client.operationTimeoutMs": "5000",
            "pulsar.client.keep_alive_interval_seconds": "10",
            "pulsar.reader.receiverQueueSize": "7",
        },
    )
    assert passed.count() == 25


def test_save_modes_follow_the_kafka_sink(session: SparkSession, broker: BrokerThread) -> None:
    target = fresh_topic("modes")
    df = session.range(0, 5).select(F.col("id").cast("string").alias("value"))
    writer = (
        df.write.format(FMT)
        .option("service.url", broker.service_url)
        .option("topic", target)
        .option(
            "pulsar.producer.batchingMaxAllowedSizeInBytes", "65536"
        )  # passed to create_producer
    )
    writer.mode("append").save()
    line = refused(lambda: writer.mode("overwrite").save())
    assert "mode: expected append, got 'overwrite'" in line, line
    # Spark itself refuses ErrorIfExists (the default) and Ignore for every Python data
    # source before calling it (only a JVM CreatableRelationProvider, as Kafka's sink is,
    # can take them): documented in docs/spark.md, the source cannot change it.
    for mode in ("errorifexists", "ignore"):
        assert "UNSUPPORTED_DATA_SOURCE_SAVE_MODE" in refused(lambda m=mode: writer.mode(m).save())
    assert load(session, broker.service_url, topic=target).count() == 5


def test_streaming_admission_control_and_lag(
    session: SparkSession, broker: BrokerThread, tmp_path: Path
) -> None:
    topic = fresh_topic("admit")
    produce(broker, topic, [b"x" * 100 for _ in range(12)])

    # maxBytesPerTrigger: 350 bytes per trigger = 3 messages of 100 bytes per micro-batch.
    query = (
        session.readStream.format(FMT)
        .option("service.url", broker.service_url)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .option("maxBytesPerTrigger", "350")
        .load()
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "bytes"))
        .option("checkpointLocation", str(tmp_path / "bytes-chk"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(90) and query.exception() is None
    finally:
        query.stop()  # a query that did not end must not run on in the shared session
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [3, 3, 3, 3], sizes
    source = query.recentProgress[0]["sources"][0]
    lag = pulsar_grpc_spark.lag(source)  # latestOffset is reported: 9 entries left after 3
    assert source["latestOffset"] is not None and lag["maxEntriesBehindLatest"] == 9, source

    # minOffsetsPerTrigger: fewer messages wait until maxTriggerDelay after the last batch.
    name = f"admit_{time.time_ns()}"
    waiting = (
        session.readStream.format(FMT)
        .option("service.url", broker.service_url)
        .option("topic", topic)
        .option("minOffsetsPerTrigger", "5")
        .option("maxTriggerDelay", "6s")
        .load()
        .writeStream.format("memory")
        .queryName(name)
        .trigger(processingTime="200 milliseconds")
        .start()
    )

    def rows() -> int:
        return int(session.table(name).count())

    try:
        eventually_sync(lambda: len(waiting.recentProgress) >= 2, timeout=60, interval=0.1)
        produce(broker, topic, [b"y"] * 5)  # the minimum: taken at once
        eventually_sync(lambda: rows() == 5, timeout=30, interval=0.1)
        batched = time.monotonic()
        produce(broker, topic, [b"z"] * 3)  # below it: held back ...
        triggers = len(waiting.recentProgress)
        eventually_sync(lambda: len(waiting.recentProgress) >= triggers + 3, timeout=30)
        assert rows() == 5 or time.monotonic() - batched >= 6
        eventually_sync(lambda: rows() == 8, timeout=30, interval=0.1)  # ... until the delay
        assert time.monotonic() - batched >= 2  # maxTriggerDelay=6s after the batch of 5
        assert waiting.exception() is None
    finally:
        waiting.stop()
