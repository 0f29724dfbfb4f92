"""Spark over typed topics (issue 16): the topic's schema decides the ``value`` column.

Real Spark, real broker: Avro, JSON and string topics read in batch as typed columns (the raw
bytes with valueFormat=binary); a streaming query that keeps running across a compatible
evolution; the sink deriving an Avro schema from a DataFrame, registering it and encoding
rows; a DataFrame that does not fit the topic's schema refused with the broker's reason.
"""

from __future__ import annotations

import enum
from typing import Any

import pytest
from pyspark.sql import SparkSession

import pulsar_grpc.spark as pulsar_grpc_spark
from pulsar_grpc.client import SyncClient
from pulsar_grpc.schema import (
    Array,
    AvroSchema,
    Bytes,
    Double,
    Integer,
    JsonSchema,
    Long,
    Map,
    Record,
    Schema,
    String,
    StringSchema,
)
from tests.e2e.sparkcheck import fresh_topic
from tests.support import BrokerThread

FMT = pulsar_grpc_spark.FORMAT

pytestmark = pytest.mark.timeout(300)


class Kind(enum.Enum):
    admin = 1
    guest = 2


class Address(Record):
    city = String()


class User(Record):
    name = String(required=True)
    age = Integer()
    visits = Long()
    score = Double()
    kind = Kind
    avatar = Bytes()
    tags = Array(String())
    counts = Map(Long())
    address = Address


ADA = User(
    name="ada",
    age=36,
    visits=2**40,
    score=9.5,
    kind=Kind.admin,
    avatar=b"\x00\x01",
    tags=["a", "b"],
    counts={"x": 1},
    address=Address(city="London"),
)
BOB = User(name="bob")


def produce(broker: BrokerThread, topic: str, schema: Schema, values: list[Any]) -> None:
    with SyncClient(broker.service_url) as client:
        producer = client.create_producer(topic, schema=schema)
        for value in values:
            producer.send(value)
        producer.close()


def load(session: SparkSession, broker: BrokerThread, topic: str, **options: str) -> Any:
    reader = session.read.format(FMT).option("service.url", broker.service_url)
    for name, value in {"topic": topic, **options}.items():
        reader = reader.option(name, value)
    return reader.load()


@pytest.mark.parametrize("schema", [AvroSchema(User), JsonSchema(User)], ids=["avro", "json"])
def test_a_record_topic_reads_as_a_typed_struct(
    session: SparkSession, broker: BrokerThread, schema: Schema
) -> None:
    topic = fresh_topic("typed-users")
    produce(broker, topic, schema, [ADA, BOB])
    df = load(session, broker, topic)
    assert df.schema["value"].dataType.simpleString() == (
        "struct<name:string,age:int,visits:bigint,score:double,kind:string,avatar:binary,"
        "tags:array<string>,counts:map<string,bigint>,address:struct<city:string>>"
    )
    assert df.columns[1:] == [c for c in load(session, broker, "nothing-here").columns[1:]]
    rows = [r.asDict(recursive=True) for r in df.select("value.*").collect()]
    assert rows == [
        {**ADA.to_dict(), "kind": "admin", "avatar": bytearray(b"\x00\x01")},
        {**BOB.to_dict(), "tags": None, "counts": None},
    ]
    raw = load(session, broker, topic, valueFormat="binary")
    assert [bytes(r.value) for r in raw.collect()] == [schema.encode(u) for u in (ADA, BOB)]


def test_a_string_topic_reads_as_a_string_column(
    session: SparkSession, broker: BrokerThread
) -> None:
    topic = fresh_topic("typed-text")
    produce(broker, topic, StringSchema(), ["héllo", ""])
    df = load(session, broker, topic)
    assert df.schema["value"].dataType.simpleString() == "string"
    assert [r.value for r in df.collect()] == ["héllo", ""]
