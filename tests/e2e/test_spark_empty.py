"""Reads that find nothing (issue 17): an empty DataFrame with the full schema, never a crash.

Batch and streaming against a real broker: empty topics, all-empty partitioned topics,
startingOffsets == endingOffsets, startingOffsets=latest, a publish-time window with no
messages, data all trimmed with failOnDataLoss=false, a topic that does not exist.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

import pulsar_grpc.spark as pulsar_grpc_spark
from pulsar_grpc.client import MessageId, SyncClient, Timeout
from pulsar_grpc.spark import _admin
from tests.e2e.sparkcheck import fresh_topic, last_line, oid
from tests.support import BrokerThread
from tests.waiting import eventually_sync

FMT = pulsar_grpc_spark.FORMAT
FULL_SCHEMA = [
    "value",
    "key",
    "keyString",
    "topic",
    "partition",
    "messageId",
    "publishTime",
    "eventTime",
    "properties",
]

pytestmark = pytest.mark.timeout(240)


def produce(broker: BrokerThread, topic: str, count: int) -> list[MessageId]:
    """One message per entry."""
    with SyncClient(broker.service_url) as client:
        producer = client.create_producer(topic, batching_max_messages=1)
        ids = [producer.send(f"m{i}".encode()) for i in range(count)]
        producer.close()
    return ids


def batch(session: SparkSession, broker: BrokerThread, **options: str) -> Any:
    reader = session.read.format(FMT).option("service.url", broker.service_url)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def assert_empty(df: Any) -> None:
    assert df.columns == FULL_SCHEMA
    assert df.collect() == []


def stream_available_now(
    session: SparkSession, broker: BrokerThread, tmp_path: Path, name: str, **options: str
) -> list[Any]:
    """Run an availableNow query into parquet; it must end by itself. Returns its rows."""
    reader = session.readStream.format(FMT).option("service.url", broker.service_url)
    for key, value in options.items():
        reader = reader.option(key, value)
    out = tmp_path / name
    query = (
        reader.load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / f"{name}-chk"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(90), "an availableNow query on nothing must end"
    finally:
        query.stop()  # a query that did not end must not run on in the shared session
    assert query.exception() is None
    assert query.lastProgress is not None
    assert all(p["numInputRows"] == 0 for p in query.recentProgress)
    return session.read.schema(reader.load().schema).parquet(str(out)).collect()


def test_batch_reads_that_plan_nothing_are_empty(
    session: SparkSession, broker: BrokerThread
) -> None:
    empty = fresh_topic("empty")
    produce(broker, empty, 0)  # created by the producer, never written
    assert_empty(batch(session, broker, topic=empty))

    parts = fresh_topic("parts")
    _admin.create_partitioned_topic(broker.http_url, parts, 3)
    assert_empty(batch(session, broker, topic=parts))

    full = fresh_topic("full")
    ids = produce(broker, full, 5)
    same = json.dumps({full: oid(ids[2])})
    assert_empty(batch(session, broker, topic=full, startingOffsets=same, endingOffsets=same))
    assert_empty(batch(session, broker, topic=full, startingOffsets="latest"))

    # A publish-time window holding no message: after the newest, and before the oldest.
    future = str(int(time.time() * 1000) + 3_600_000)
    assert_empty(batch(session, broker, topic=full, startingTime=future))
    assert_empty(batch(session, broker, topic=full, startingTime="0", endingTime="1"))
    # ... while a window around them reads them all.
    rows = batch(session, broker, topic=full, startingTime="0", endingTime=future).collect()
    assert sorted(r.value for r in rows) == [f"m{i}".encode() for i in range(5)]


def test_topic_that_does_not_exist(
    session: SparkSession, broker_factory: Callable[..., BrokerThread]
) -> None:
    auto = broker_factory()
    assert_empty(batch(session, auto, topic=fresh_topic("new")))

    strict = broker_factory(allowAutoTopicCreation=False)
    missing = fresh_topic("missing")
    for options in ({}, {"startingTime": "0"}):
        with pytest.raises(Exception) as failure:
            batch(session, strict, topic=missing, **options).collect()
        assert f"topic: {missing} does not exist" in last_line(failure.value)


def test_all_trimmed_with_fail_on_data_loss_false(
    session: SparkSession, broker_factory: Callable[..., BrokerThread], tmp_path: Path
) -> None:
    broker = broker_factory(managedLedgerMaxEntriesPerLedger=5)
    topic = fresh_topic("trimmed")
    ids = produce(broker, topic, 10)  # two full ledgers, no cursor: both trimmed

    def gone() -> None:
        with SyncClient(broker.service_url) as client:
            reader = client.create_reader(topic, "earliest", receiver_queue_size=1)
            try:
                message = reader.read_next(300)
            except Timeout:
                return
            raise AssertionError(f"not trimmed yet: {message}")

    eventually_sync(gone, timeout=15, interval=0.1)
    for start in ("earliest", json.dumps({topic: oid(ids[3])})):
        df = batch(session, broker, topic=topic, startingOffsets=start, failOnDataLoss="false")
        assert_empty(df)
    # With failOnDataLoss=true (the default), an offset into what was trimmed is a loss.
    with pytest.raises(Exception) as failure:
        batch(
            session, broker, topic=topic, startingOffsets=json.dumps({topic: oid(ids[3])})
        ).collect()
    assert re.search(
        r"DataLossError: .* is older than the first available", last_line(failure.value)
    )
    rows = stream_available_now(
        session, broker, tmp_path, "trimmed", topic=topic, startingOffsets="earliest",
        failOnDataLoss="false",
    )  # fmt: skip
    assert rows == []


def test_streaming_available_now_on_nothing_ends_with_zero_rows(
    session: SparkSession, broker: BrokerThread, tmp_path: Path
) -> None:
    empty = fresh_topic("s-empty")
    assert stream_available_now(session, broker, tmp_path, "a", topic=empty) == []
    assert (
        stream_available_now(
            session, broker, tmp_path, "b", topic=empty, startingOffsets="earliest"
        )
        == []
    )

    parts = fresh_topic("s-parts")
    _admin.create_partitioned_topic(broker.http_url, parts, 2)
    assert stream_available_now(session, broker, tmp_path, "c", topic=parts) == []

    full = fresh_topic("s-full")
    produce(broker, full, 4)
    assert stream_available_now(session, broker, tmp_path, "d", topic=full) == []  # latest
    future = str(int(time.time() * 1000) + 3_600_000)
    assert (
        stream_available_now(session, broker, tmp_path, "e", topic=full, startingTime=future) == []
    )


def test_continuous_query_on_empty_topic_waits_for_data(
    session: SparkSession, broker: BrokerThread
) -> None:
    topic = fresh_topic("wait")
    _admin.create_partitioned_topic(broker.http_url, topic, 2)
    name = f"wait_{time.time_ns()}"
    query = (
        session.readStream.format(FMT)
        .option("service.url", broker.service_url)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("memory")
        .queryName(name)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        eventually_sync(lambda: len(query.recentProgress) >= 3, timeout=60, interval=0.1)
        assert query.exception() is None and query.isActive
        assert session.table(name).count() == 0
        produce(broker, topic, 6)
        eventually_sync(lambda: session.table(name).count() == 6, timeout=60, interval=0.2)
        got = sorted(r.value for r in session.table(name).collect())
        assert got == sorted(f"m{i}".encode() for i in range(6))
    finally:
        query.stop()
