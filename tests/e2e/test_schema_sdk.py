"""The SDK's schemas against a real broker: typed round trips for every kind of schema, a
compatible evolution read by one consumer, AUTO_CONSUME, and an incompatible producer refused.

Written as pulsar-client users write it: a Record class, ``schema=AvroSchema(User)``,
``send(record)``, ``msg.value()``.
"""

from __future__ import annotations

import datetime as dt
import enum

import pytest

from pulsar_grpc.client import Client, IncompatibleSchema, MessageId, SyncClient
from pulsar_grpc.schema import (
    Array,
    AutoConsumeSchema,
    AvroSchema,
    BooleanSchema,
    ByteSchema,
    Double,
    DoubleSchema,
    FloatSchema,
    InstantSchema,
    Integer,
    IntSchema,
    JsonSchema,
    KeyValueSchema,
    LocalDateSchema,
    LocalDateTimeSchema,
    LocalTimeSchema,
    LongSchema,
    Map,
    ProtobufNativeSchema,
    Record,
    Schema,
    ShortSchema,
    String,
    StringSchema,
)
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.messaging import receive_n
from tests.e2e.test_partitioned_and_dedup import create_partitioned
from tests.support import BrokerThread


class Kind(enum.Enum):
    admin = 1
    guest = 2


class Address(Record):
    city = String()


class User(Record):
    name = String(required=True)
    age = Integer()
    kind = Kind
    scores = Map(Double())
    tags = Array(String())
    address = Address


def a_user(name: str = "ada") -> User:
    return User(
        name=name,
        age=36,
        kind=Kind.admin,
        scores={"math": 9.5},
        tags=["a", "b"],
        address=Address(city="London"),
    )


def _user_v2() -> type[Record]:
    """User with an optional field added (default null): compatible under Pulsar's default
    strategy (FULL), and the same record name, as a real second version has."""

    class User(Record):
        name = String(required=True)
        age = Integer()
        kind = Kind
        scores = Map(Double())
        tags = Array(String())
        address = Address
        email = String(required_default=True)

    return User


UserV2 = _user_v2()


def _incompatible_user() -> type[Record]:
    """User whose name became an int: no strategy but ALWAYS_COMPATIBLE allows it."""

    class User(Record):
        name = Integer(required=True)

    return User


IncompatibleUser = _incompatible_user()


async def round_trip(broker: BrokerThread, topic: str, schema: Schema, values: list) -> list:
    """Send ``values`` with ``schema`` and return what a consumer with the same schema gets."""
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(topic, "sub", schema=schema, initial_position="earliest")
        producer = await client.create_producer(topic, schema=schema)
        for value in values:
            await producer.send(value)
        messages = await receive_n(consumer, len(values))
        assert [m.data() for m in messages] == [schema.encode(v) for v in values]
        version = producer.schema_version().decode("latin-1")
        assert all(m.schema_version() == version for m in messages)
        values = [m.value() for m in messages]
        assert all(m.value() is v for m, v in zip(messages, values, strict=True))  # decoded once
        return values


@pytest.mark.parametrize("schema_class", [AvroSchema, JsonSchema])
async def test_record_round_trip(broker: BrokerThread, schema_class: type) -> None:
    users = [a_user("ada"), User(name="bob")]
    assert (
        await round_trip(broker, f"users-{schema_class.__name__}", schema_class(User), users)
        == users
    )


@pytest.mark.parametrize(
    ("schema", "values"),
    [
        (StringSchema(), ["héllo", ""]),
        (BooleanSchema(), [True, False]),
        (ByteSchema(), [-128, 127]),
        (ShortSchema(), [-3, 30000]),
        (IntSchema(), [-(2**31), 7]),
        (LongSchema(), [2**62, -1]),
        (FloatSchema(), [1.5, -0.25]),
        (DoubleSchema(), [3.141592653589793, -1e300]),
        (KeyValueSchema(StringSchema(), JsonSchema(Address)), [("k", Address(city="Oslo"))]),
        (InstantSchema(), [dt.datetime(2026, 11, 24, 8, 0, 0, 123456, tzinfo=dt.UTC)]),
        (LocalDateSchema(), [dt.date(2026, 11, 24), dt.date(1900, 1, 1)]),
        (LocalTimeSchema(), [dt.time(8, 0, 0, 1)]),
        (LocalDateTimeSchema(), [dt.datetime(2026, 11, 24, 8, 0, 0, 999999)]),
    ],
    ids=lambda p: type(p).__name__ if isinstance(p, Schema) else "",
)
async def test_primitive_and_key_value_round_trips(
    broker: BrokerThread, schema: Schema, values: list
) -> None:
    topic = f"typed-{schema.schema_info().type.name.lower()}"
    assert await round_trip(broker, topic, schema, values) == values


async def test_protobuf_native_round_trip(broker: BrokerThread) -> None:
    values = [pb.MessageId(ledger_id=3, entry_id=4, batch_index=1), pb.MessageId(partition=2)]
    schema = ProtobufNativeSchema(pb.MessageId)
    assert await round_trip(broker, "protos", schema, values) == values


async def test_the_topic_holds_the_producers_schema(broker: BrokerThread) -> None:
    async with Client(broker.service_url) as client:
        producer = await client.create_producer("registered", schema=AvroSchema(User))
        await producer.send(a_user())
        info = await client.get_schema("registered")
        declared = AvroSchema(User).schema_info()
        # The registry names a schema after its topic, as Pulsar's does.
        assert (info.type, info.schema, info.properties) == (
            declared.type,
            declared.schema,
            declared.properties,
        )
        assert await client.get_schema("registered", producer.schema_version()) == info


async def test_evolution_one_consumer_reads_both_versions(broker: BrokerThread) -> None:
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(
            "evolving", "sub", schema=AvroSchema(UserV2), initial_position="earliest"
        )
        v1 = await client.create_producer("evolving", schema=AvroSchema(User))
        await v1.send(a_user("old"))
        v2 = await client.create_producer("evolving", schema=AvroSchema(UserV2))
        await v2.send(UserV2(name="new", email="new@example.com"))
        assert v1.schema_version() != v2.schema_version()
        await v1.send(a_user("older"))
        values = [m.value() for m in await receive_n(consumer, 3)]
    assert [(v.name, v.email) for v in values] == [
        ("old", None),
        ("new", "new@example.com"),
        ("older", None),
    ]
    assert values[0].address == Address(city="London") and values[0].kind is Kind.admin


async def test_auto_consume_takes_each_messages_schema(broker: BrokerThread) -> None:
    async with Client(broker.service_url) as client:
        v1 = await client.create_producer("auto", schema=JsonSchema(User))
        await v1.send(a_user())
        v2 = await client.create_producer("auto", schema=JsonSchema(UserV2))
        await v2.send(UserV2(name="eve", email="e@x"))
        reader = await client.create_reader("auto", MessageId.earliest, schema=AutoConsumeSchema())
        first, second = [(await reader.read_next(10_000)).value() for _ in range(2)]
        strings = await client.create_producer("auto-strings", schema=StringSchema())
        await strings.send("text")
        consumer = await client.subscribe(
            "auto-strings", "s", schema=AutoConsumeSchema(), initial_position="earliest"
        )
        [text] = await receive_n(consumer, 1)
    assert first == {
        "name": "ada",
        "age": 36,
        "kind": "admin",
        "scores": {"math": 9.5},
        "tags": ["a", "b"],
        "address": {"city": "London"},
    }
    assert second["name"] == "eve" and second["email"] == "e@x"
    assert text.value() == "text"


async def test_auto_consume_decodes_the_java_time_types(broker: BrokerThread) -> None:
    when = dt.datetime(2026, 11, 24, 8, 0, tzinfo=dt.UTC)
    sent = {
        "when-instant": (InstantSchema(), when),
        "when-local": (LocalDateTimeSchema(), when.replace(tzinfo=None)),
    }
    async with Client(broker.service_url) as client:
        got = {}
        for topic, (schema, value) in sent.items():
            producer = await client.create_producer(topic, schema=schema)
            await producer.send(value)
            consumer = await client.subscribe(
                topic, "auto", schema=AutoConsumeSchema(), initial_position="earliest"
            )
            got[topic] = (await consumer.receive(10_000)).value()
    assert got == {topic: value for topic, (_, value) in sent.items()}


async def test_an_incompatible_producer_is_refused(broker: BrokerThread) -> None:
    async with Client(broker.service_url) as client:
        producer = await client.create_producer("strict", schema=AvroSchema(User))
        await producer.send(a_user())
        with pytest.raises(IncompatibleSchema):
            await client.create_producer("strict", schema=AvroSchema(IncompatibleUser))
        with pytest.raises(IncompatibleSchema):
            await client.create_producer("strict", schema=StringSchema())


def test_the_blocking_client_sends_and_receives_records(broker: BrokerThread) -> None:
    with SyncClient(broker.service_url) as client:
        consumer = client.subscribe(
            "sync-users", "sub", schema=AvroSchema(User), initial_position="earliest"
        )
        producer = client.create_producer("sync-users", schema=AvroSchema(User))
        producer.send(a_user())
        with pytest.raises(TypeError, match="User"):
            producer.send(b"not a user")
        assert consumer.receive(timeout_millis=10_000).value() == a_user()


async def test_a_partitioned_topic_shares_one_schema(broker: BrokerThread) -> None:
    """Every partition's producer declares the schema (the large protobuf definition is
    registered first); the partitions hold it under one version, so a consumer of all of
    them decodes every message, typed or generic."""
    await create_partitioned(broker.http_url, "parted-users", 3)
    await create_partitioned(broker.http_url, "parted-protos", 2)
    async with Client(broker.service_url) as client:
        typed = await client.subscribe(
            "parted-users", "typed", schema=AvroSchema(UserV2), initial_position="earliest"
        )
        generic = await client.subscribe(
            "parted-users", "generic", schema=AutoConsumeSchema(), initial_position="earliest"
        )
        producer = await client.create_producer("parted-users", schema=AvroSchema(User))
        for i in range(6):
            await producer.send(User(name=f"u{i}"), partition_key=f"key-{i}")
        names = sorted(m.value().name for m in await receive_n(typed, 6))
        generic_names = sorted(m.value()["name"] for m in await receive_n(generic, 6))
        protos = await client.create_producer(
            "parted-protos", schema=ProtobufNativeSchema(pb.MessageId)
        )
        consumer = await client.subscribe(
            "parted-protos", "s", schema=AutoConsumeSchema(), initial_position="earliest"
        )
        for i in range(4):
            await protos.send(pb.MessageId(entry_id=i), partition_key=str(i))
        entries = sorted(m.value()["entry_id"] for m in await receive_n(consumer, 4))
    assert names == generic_names == [f"u{i}" for i in range(6)]
    assert entries == [0, 1, 2, 3]
