"""Spark over typed topics (issue 16): the topic's schema decides the ``value`` column.

Real Spark, real broker: Avro, JSON and string topics read in batch as typed columns (the raw
bytes with valueFormat=binary); a streaming query that keeps running across a compatible
evolution; the sink deriving an Avro schema from a DataFrame, registering it and encoding
rows; a DataFrame that does not fit the topic's schema refused with the broker's reason.
"""

from __future__ import annotations

import enum
import json
import urllib.request
from pathlib import Path
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
from tests.waiting import eventually_sync

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


def stream(
    session: SparkSession, broker: BrokerThread, topic: str, columns: tuple[str, ...] = ("value.*",)
) -> Any:
    """A stream of ``topic`` from the earliest message: its writeStream, to finish."""
    return (
        session.readStream.format(FMT)
        .option("service.url", broker.service_url)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .load()
        .select(*columns)
        .writeStream
    )


def write(df: Any, broker: BrokerThread, topic: str) -> None:
    df.write.format(FMT).option("service.url", broker.service_url).option("topic", topic).mode(
        "append"
    ).save()


def registered(broker: BrokerThread, topic: str) -> dict[str, Any]:
    """The topic's latest schema from the admin REST API (Pulsar's path)."""
    local = topic.rsplit("/", 1)[1]
    url = f"{broker.http_url}/admin/v2/schemas/public/default/{local}/schema"
    with urllib.request.urlopen(url, timeout=10) as response:
        return dict(json.load(response))


def test_a_typed_dataframe_registers_its_schema_and_reads_back_typed(
    session: SparkSession, broker: BrokerThread, tmp_path: Path
) -> None:
    topic = fresh_topic("typed-sink")
    df = session.sql(
        "SELECT 'k1' AS key, named_struct('name', 'ada', 'age', 36, 'tags', array('a', 'b'), "
        "'counts', map('x', 1L), 'address', named_struct('city', 'London')) AS value "
        "UNION ALL SELECT 'k2', named_struct('name', 'bob', 'age', CAST(NULL AS INT), "
        "'tags', array(), 'counts', map(), 'address', CAST(NULL AS STRUCT<city: STRING>))"
    )
    write(df, broker, topic)
    schema = registered(broker, topic)
    assert schema["type"] == "AVRO"
    fields = json.loads(schema["data"])["fields"]
    assert [f["name"] for f in fields] == ["name", "age", "tags", "counts", "address"]
    back = load(session, broker, topic)
    typed = back.schema["value"].dataType.simpleString()
    assert typed == df.schema["value"].dataType.simpleString(), typed
    expected = sorted((r.key, r.value.asDict(recursive=True)) for r in df.collect())
    assert sorted((r.keyString, r.value.asDict(recursive=True)) for r in back.collect()) == expected
    # A streaming copy writes the typed rows on, registering the schema on the copy.
    copy = fresh_topic("typed-sink-copy")
    query = (
        stream(session, broker, topic, columns=("keyString", "value"))
        .format(FMT)
        .option("service.url", broker.service_url)
        .option("topic", copy)
        .option("checkpointLocation", str(tmp_path / "copy-chk"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120) and query.exception() is None, query.exception()
    assert registered(broker, copy)["type"] == "AVRO"
    rows = load(session, broker, copy).collect()
    assert sorted((r.keyString, r.value.asDict(recursive=True)) for r in rows) == expected
    # Without a value column, the columns that are not metadata make the record.
    flat_topic = fresh_topic("typed-sink-flat")
    flat = session.sql("SELECT 'carol' AS name, CAST(7 AS INT) AS age, 'k3' AS keyString")
    write(flat, broker, flat_topic)
    back = load(session, broker, flat_topic)
    assert [(r.keyString, r.value.asDict()) for r in back.collect()] == [
        ("k3", {"name": "carol", "age": 7})
    ]


def test_rows_that_do_not_fit_the_topics_schema_are_refused_with_the_reason(
    session: SparkSession, broker: BrokerThread
) -> None:
    topic = fresh_topic("typed-mismatch")
    produce(broker, topic, AvroSchema(User), [ADA])
    df = session.sql("SELECT 42L AS name")  # name is a string in the topic's schema (FULL)
    with pytest.raises(Exception) as caught:
        write(df, broker, topic)
    message = str(caught.value)
    assert "the DataFrame's columns do not fit the schema of" in message, message
    assert "field 'name'" in message, message
    assert registered(broker, topic)["version"] == 0  # nothing registered
    assert load(session, broker, topic).count() == 1


def event_schema(*extra: dict[str, Any]) -> AvroSchema:
    """Two versions of one record (same name), the second with a field that has a default."""
    fields = [{"name": "id", "type": "long"}, *extra]
    return AvroSchema(None, schema_definition={"type": "record", "name": "Event", "fields": fields})


V1 = event_schema()
V2 = event_schema({"name": "source", "type": "string", "default": "legacy"})


def test_a_stream_keeps_running_across_a_compatible_evolution(
    session: SparkSession, broker: BrokerThread
) -> None:
    topic = fresh_topic("typed-evolution")
    produce(broker, topic, V1, [{"id": 1}, {"id": 2}])
    query = (
        stream(session, broker, topic)
        .format("memory")
        .queryName("evolving")
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:

        def ids() -> list[int]:
            assert query.exception() is None, query.exception()
            return sorted(r.id for r in session.sql("SELECT * FROM evolving").collect())

        eventually_sync(lambda: ids() == [1, 2], timeout=60, what="v1 rows")
        produce(broker, topic, V2, [{"id": 3, "source": "app"}])  # the topic now has v2
        eventually_sync(lambda: ids() == [1, 2, 3], timeout=60, what="a v2 row, v1 columns")
        assert query.isActive
        assert session.table("evolving").columns == ["id"]  # the shape it started with
    finally:
        query.stop()
    # A query started now reads every row in v2's shape: old rows take the default.
    again = stream(session, broker, topic).format("memory").queryName("evolved")
    again = again.trigger(availableNow=True).start()
    again.awaitTermination(120)
    rows = session.sql("SELECT id, source FROM evolved ORDER BY id").collect()
    assert [tuple(r) for r in rows] == [(1, "legacy"), (2, "legacy"), (3, "app")]
