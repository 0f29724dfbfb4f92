"""Null values (compaction tombstones) through the Spark data source: read as a null ``value``
(raw or typed), as Spark's Kafka source reads a tombstone; a null ``value`` written is sent as
one, as Spark's Kafka sink writes it. An empty payload stays empty bytes both ways.

One SparkSession for all Spark tests (tests/e2e/conftest.py); a fresh broker per test.
"""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

import pulsar_grpc.spark as pulsar_grpc_spark
from pulsar_grpc.client import SyncClient
from pulsar_grpc.schema import StringSchema
from tests.e2e.sparkcheck import fresh_topic
from tests.support import BrokerThread

FMT = pulsar_grpc_spark.FORMAT

pytestmark = pytest.mark.timeout(180)


def _values(session: SparkSession, broker: BrokerThread, topic: str) -> list[object]:
    df = session.read.format(FMT).option("service.url", broker.service_url)
    rows = df.option("topic", topic).load().orderBy("messageId").collect()
    return [row.value for row in rows]


def test_a_tombstone_reads_as_a_null_value(session: SparkSession, broker: BrokerThread) -> None:
    raw, text = fresh_topic("raw-tombstones"), fresh_topic("text-tombstones")
    with SyncClient(broker.service_url) as client:
        producer = client.create_producer(raw, batching_enabled=False)
        for value in (None, b"", b"v"):
            producer.send(value, partition_key="k")
        typed = client.create_producer(text, schema=StringSchema(), batching_enabled=False)
        for text_value in (None, "", "v"):
            typed.send(text_value, partition_key="k")
    assert _values(session, broker, raw) == [None, b"", b"v"]
    assert _values(session, broker, text) == [None, "", "v"]


def test_a_null_value_column_is_written_as_a_tombstone(
    session: SparkSession, broker: BrokerThread
) -> None:
    topic = fresh_topic("write-tombstones")
    df = session.createDataFrame([("k", None), ("k", b""), ("k", b"v")], "key string, value binary")
    df.coalesce(1).write.format(FMT).option("service.url", broker.service_url).option(
        "topic", topic
    ).mode("append").save()
    with SyncClient(broker.service_url) as client:
        consumer = client.subscribe(topic, "sub", initial_position="Earliest")
        got = [consumer.receive(timeout_millis=10_000) for _ in range(3)]
    assert [(m.has_null_value(), m.data()) for m in got] == [
        (True, b""),
        (False, b""),
        (False, b"v"),
    ]
