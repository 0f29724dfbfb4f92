"""The SDK's schemas on the wire, against a small in-process servicer that keeps schemas as
the contract says (tests/e2e/test_schema_sdk.py runs the same against the real broker): the
headers a producer and a consumer open with, registration of a large definition, values
decoded with the version each message was written with, AUTO_CONSUME, refusals."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
import pytest

from pulsar_grpc.client import Client, IncompatibleSchema, SyncClient
from pulsar_grpc.schema import (
    AutoConsumeSchema,
    AvroSchema,
    Integer,
    JsonSchema,
    Record,
    SchemaSerializationError,
    String,
    StringSchema,
)
from pulsargrpc.v1 import pulsar_pb2 as pb
from pulsargrpc.v1 import pulsar_pb2_grpc as pb_grpc
from tests.unit.test_client_fake_server import FakeBroker

SCHEMA_HEADER = "x-pulsar-schema-bin"
VERSION_HEADER = "x-pulsar-schema-version-bin"


class User(Record):
    name = String(required=True)


def _second_version() -> type[Record]:
    """User with an optional field added: the same record name, as a real v2 has."""

    class User(Record):
        name = String(required=True)
        age = Integer(required_default=True)

    return User


UserV2 = _second_version()


def full_name(topic: str) -> str:
    return topic if "://" in topic else f"persistent://public/default/{topic}"


class SchemaBroker(FakeBroker):
    """Keeps each topic's schemas as versions 0, 1, ... and stamps entries with the
    producer's; the definition of a record named Refused is refused as incompatible."""

    def __init__(self) -> None:
        super().__init__()
        self.schemas: dict[str, list[pb.Schema]] = {}
        self.versions: dict[str, list[bytes]] = {}
        self.fetched: list[pb.GetSchemaRequest] = []
        self.registered: list[pb.GetOrCreateSchemaRequest] = []
        self.fail_fetches = False

    def version_of(self, topic: str, schema: pb.Schema) -> bytes:
        known = self.schemas.setdefault(full_name(topic), [])
        if schema not in known:
            known.append(schema)
        return known.index(schema).to_bytes(8, "big")

    async def GetOrCreateSchema(self, request, context):
        self.registered.append(request)
        return pb.GetOrCreateSchemaResponse(
            schema_version=self.version_of(request.topic, request.schema)
        )

    async def GetSchema(self, request, context):
        self.fetched.append(request)
        if self.fail_fetches:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "registry down")
        versions = self.schemas[full_name(request.topic)]
        schema = versions[int.from_bytes(request.schema_version, "big")]
        return pb.GetSchemaResponse(schema=schema, schema_version=request.schema_version)

    async def Produce(self, request_iterator, context):
        md = dict(context.invocation_metadata())
        self.metadata.append(md)
        topic = md["x-pulsar-topic"]
        version = md.get(VERSION_HEADER, b"")
        if SCHEMA_HEADER in md:
            schema = pb.Schema.FromString(md[SCHEMA_HEADER])
            if b'"Refused"' in schema.schema_data:
                context.set_trailing_metadata((("pulsar-error-code", "18"),))
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "field x: BACKWARD")
            version = self.version_of(topic, schema)
        yield pb.ProduceResponse(
            ready=pb.ProducerReady(producer_name="p", topic=topic, schema_version=version)
        )
        async for request in request_iterator:
            entries = self.entries.setdefault(topic, [])
            entries.append(request)
            self.versions.setdefault(topic, []).append(version)
            yield pb.ProduceResponse(
                receipt=pb.SendReceipt(
                    sequence_id=request.sequence_id, ledger_id=1, entry_id=len(entries) - 1
                )
            )

    async def Consume(self, request_iterator, context):
        md = dict(context.invocation_metadata())
        self.metadata.append(md)
        topic = md["x-pulsar-topic"]
        yield pb.ConsumeResponse(subscribed=pb.ConsumerSubscribed(consumer_name="c", topic=topic))
        sent = 0
        async for request in request_iterator:
            if request.WhichOneof("request") != "flow":
                continue
            stored = self.entries.get(topic, [])
            entries = [
                pb.DeliveredEntry(
                    ledger_id=1,
                    entry_id=i,
                    sequence_id=r.sequence_id,
                    messages=r.messages,
                    schema_version=self.versions[topic][i],
                )
                for i, r in enumerate(stored)
                if i >= sent
            ]
            sent = len(stored)
            if entries:
                yield pb.ConsumeResponse(messages=pb.MessageBatch(entries=entries))


@contextlib.asynccontextmanager
async def schema_broker() -> AsyncIterator[SchemaBroker]:
    server = grpc.aio.server()
    fake = SchemaBroker()
    pb_grpc.add_PulsarServiceServicer_to_server(fake, server)
    fake.url = f"grpc://127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    await server.start()
    try:
        yield fake
    finally:
        await server.stop(None)


@pytest.fixture
async def broker():
    async with schema_broker() as fake:
        yield fake


async def receive_all(consumer, count: int) -> list:
    return [await consumer.receive(timeout_millis=5000) for _ in range(count)]


async def test_avro_producer_declares_its_schema_and_consumer_gets_records(broker):
    schema = AvroSchema(User)
    async with Client(broker.url) as c:
        producer = await c.create_producer("t", schema=schema)
        await producer.send(User(name="ada"))
        assert producer.schema_version() == (0).to_bytes(8, "big")
        consumer = await c.subscribe("t", "s", schema=AvroSchema(User))
        [msg] = await receive_all(consumer, 1)
        assert msg.value() == User(name="ada")
        assert msg.data() == schema.encode(User(name="ada"))
        assert msg.schema_version() == "\x00" * 8  # pulsar-client's str of the 8 bytes
    produce_md, consume_md = broker.metadata
    assert pb.Schema.FromString(produce_md[SCHEMA_HEADER]) == schema.schema_info().to_proto()
    assert consume_md[SCHEMA_HEADER] == produce_md[SCHEMA_HEADER]
    assert VERSION_HEADER not in produce_md
    assert broker.registered == []
    # As Pulsar's consumer, it fetches the writer's version once, even its own.
    assert [r.schema_version for r in broker.fetched] == [(0).to_bytes(8, "big")]


async def test_a_large_definition_is_registered_then_named_by_version(broker):
    fields = {f"field_{i:03d}_with_a_long_name": String() for i in range(150)}
    Wide = type("Wide", (Record,), fields)
    schema = JsonSchema(Wide)
    assert len(schema.schema_info().schema) > 4096
    async with Client(broker.url) as c:
        producer = await c.create_producer("wide", schema=schema)
        await producer.send(Wide(field_000_with_a_long_name="x"))
    [produce_md] = broker.metadata
    assert SCHEMA_HEADER not in produce_md
    assert produce_md[VERSION_HEADER] == (0).to_bytes(8, "big")
    [registration] = broker.registered
    assert registration.topic == "wide"
    assert registration.schema == schema.schema_info().to_proto()


async def test_consumer_decodes_each_writer_version_fetching_each_once(broker):
    async with Client(broker.url) as c:
        v1 = await c.create_producer("evolving", schema=AvroSchema(User))
        await v1.send(User(name="old"))
        v2 = await c.create_producer("evolving", schema=AvroSchema(UserV2))
        await v2.send(UserV2(name="new", age=3))
        await v1.send(User(name="old again"))
        consumer = await c.subscribe("evolving", "s", schema=AvroSchema(UserV2))
        values = [m.value() for m in await receive_all(consumer, 3)]
        reader = await c.create_reader("evolving", "earliest", schema=AutoConsumeSchema())
        generic = [(await reader.read_next(5000)).value() for _ in range(3)]
    assert values == [
        UserV2(name="old", age=None),
        UserV2(name="new", age=3),
        UserV2(name="old again", age=None),
    ]
    assert generic == [{"name": "old"}, {"name": "new", "age": 3}, {"name": "old again"}]
    # The consumer and the reader fetched each version once.
    fetched = [int.from_bytes(r.schema_version, "big") for r in broker.fetched]
    assert sorted(fetched) == [0, 0, 1, 1]
    consume_md = [md for md in broker.metadata if "x-pulsar-subscription" in md]
    assert SCHEMA_HEADER in consume_md[0] and SCHEMA_HEADER not in consume_md[1]


async def test_a_version_that_cannot_be_fetched_fails_only_value(broker):
    broker.fail_fetches = True
    async with Client(broker.url) as c:
        producer = await c.create_producer("t", schema=StringSchema())
        await producer.send("hi")
        consumer = await c.subscribe("t", "s", schema=AutoConsumeSchema())
        [msg] = await receive_all(consumer, 1)
        assert msg.data() == b"hi"
        with pytest.raises(SchemaSerializationError, match=r"schema version 0 of .* registry"):
            msg.value()


async def test_a_schema_that_decodes_every_version_alike_fetches_none(broker):
    """JSON, string, the primitives: the writer's version does not change the decoding, so
    the consumer does not depend on GetSchema."""
    broker.fail_fetches = True
    async with Client(broker.url) as c:
        producer = await c.create_producer("t", schema=JsonSchema(User))
        await producer.send(User(name="ada"))
        consumer = await c.subscribe("t", "s", schema=JsonSchema(User))
        [msg] = await receive_all(consumer, 1)
        assert msg.value() == User(name="ada")
    assert broker.fetched == []


async def test_a_value_of_the_wrong_type_is_refused_before_sending(broker):
    async with Client(broker.url) as c:
        producer = await c.create_producer("t", schema=AvroSchema(User))
        with pytest.raises(TypeError, match="User"):
            await producer.send(b"raw bytes")
        with pytest.raises(TypeError, match="User"):
            producer.send_async(UserV2(name="x"), lambda *_: None)
        await producer.flush()
    assert broker.entries.get("t") is None


async def test_an_incompatible_schema_raises_incompatible_schema(broker):
    class Refused(Record):
        x = Integer()

    async with Client(broker.url) as c:
        with pytest.raises(IncompatibleSchema, match="field x"):
            await c.create_producer("t", schema=AvroSchema(Refused))


async def test_without_a_schema_values_are_the_bytes(broker):
    async with Client(broker.url) as c:
        producer = await c.create_producer("t")
        await producer.send(b"\x00raw")
        consumer = await c.subscribe("t", "s")
        [msg] = await receive_all(consumer, 1)
        assert msg.value() == b"\x00raw" and msg.schema_version() == ""
    assert all(SCHEMA_HEADER not in md for md in broker.metadata)


async def test_the_sync_client_sends_and_receives_values(broker):
    def run():
        with SyncClient(broker.url) as client:
            producer = client.create_producer("sync", schema=JsonSchema(User))
            producer.send(User(name="sync"))
            consumer = client.subscribe("sync", "s", schema=JsonSchema(User))
            return consumer.receive(timeout_millis=5000).value()

    assert await asyncio.to_thread(run) == User(name="sync")


async def test_a_multi_topic_consumer_declares_its_schema_on_each_topic(broker):
    """A large definition is registered on each topic, since a version is a topic's own."""
    fields = {f"field_{i:03d}_with_a_long_name": String() for i in range(150)}
    Wide = type("Wide", (Record,), fields)
    schema = JsonSchema(Wide)
    async with Client(broker.url) as c:
        for topic in ("a", "b"):
            producer = await c.create_producer(topic, schema=JsonSchema(User))
            await producer.send(User(name=topic))
        consumer = await c.subscribe(["a", "b"], "s", schema=AutoConsumeSchema())
        values = sorted(m.value()["name"] for m in await receive_all(consumer, 2))
        await c.subscribe(["a", "b"], "wide", schema=schema)
    assert values == ["a", "b"]
    assert sorted(r.topic for r in broker.registered) == ["a", "b"]
    wide_md = [md for md in broker.metadata if md.get("x-pulsar-subscription") == "wide"]
    assert sorted(md[VERSION_HEADER] for md in wide_md) == [(1).to_bytes(8, "big")] * 2
