"""Schemas over the wire with raw stubs: a producer's schema is registered and its version
carried by every entry, evolution under each strategy, refusals naming the field and rule,
auto-update and validation policies, partitions sharing a registry, consumers' schemas,
restarts, and hostile schema bytes."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest

from pulsar_grpc.broker.naming import NamespaceName
from pulsar_grpc.broker.schema import CompatibilityStrategy
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.schemas import (
    USER_V1,
    USER_V2,
    consume,
    field,
    open_producer,
    record,
    refusal,
    schema_bin,
    send,
    version,
)
from tests.e2e.wire import error_code, stub
from tests.support import BrokerThread

NS = NamespaceName.get("public/default")


def set_strategy(broker: BrokerThread, strategy: CompatibilityStrategy) -> None:
    assert broker.service is not None
    broker.run(broker.service.schemas.policies.set_strategy(NS, strategy))


async def test_a_producers_schema_is_registered_and_each_entry_carries_its_version(
    channel: grpc.aio.Channel,
) -> None:
    call, ready = await open_producer(channel, "typed", schema_bin(USER_V1))
    assert ready.schema_version == version(0)
    await send(call, 0, b"\x06Ann\x54")
    call.cancel()
    got = await stub(channel).GetSchema(pb.GetSchemaRequest(topic="typed"))
    assert got.schema_version == version(0)
    assert got.schema.type == pb.SCHEMA_TYPE_AVRO and got.schema.schema_data == USER_V1
    [entry] = await consume(channel, "typed", 1)
    assert entry.schema_version == version(0)


async def test_the_same_schema_again_gets_the_same_version(channel: grpc.aio.Channel) -> None:
    first, ready = await open_producer(channel, "again", schema_bin(USER_V1))
    second, again = await open_producer(channel, "again", schema_bin(USER_V1))
    assert ready.schema_version == again.schema_version == version(0)
    first.cancel()
    second.cancel()


async def test_messages_carry_the_version_they_were_written_with_across_an_evolution(
    broker: BrokerThread, channel: grpc.aio.Channel
) -> None:
    set_strategy(broker, CompatibilityStrategy.BACKWARD)
    old, old_ready = await open_producer(channel, "evolving", schema_bin(USER_V1))
    new, new_ready = await open_producer(channel, "evolving", schema_bin(USER_V2))
    plain, plain_ready = await open_producer(channel, "evolving")
    assert (old_ready.schema_version, new_ready.schema_version) == (version(0), version(1))
    assert plain_ready.schema_version == b""
    await send(old, 0, b"old")
    await send(new, 0, b"new")
    await send(old, 1, b"old again")
    await send(plain, 0, b"bytes")
    for call in (old, new, plain):
        call.cancel()
    entries = await consume(channel, "evolving", 4)
    assert [(e.messages[0].payload, e.schema_version) for e in entries] == [
        (b"old", version(0)),
        (b"new", version(1)),
        (b"old again", version(0)),
        (b"bytes", b""),
    ]
    older = await stub(channel).GetSchema(
        pb.GetSchemaRequest(topic="evolving", schema_version=version(0))
    )
    assert older.schema.schema_data == USER_V1


async def test_full_refuses_a_removed_field_without_default_naming_it(
    channel: grpc.aio.Channel,
) -> None:
    first, _ = await open_producer(channel, "full", schema_bin(USER_V1))
    error = await refusal(channel, "full", schema_bin(record(field("name", "string"))))
    first.cancel()
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_code(error) == pb.IncompatibleSchema
    details = error.details() or ""
    assert "field 'age'" in details and "reader_field_missing_default_value" in details
    assert "FULL" in details


async def test_a_changed_field_type_is_refused_naming_the_field(
    channel: grpc.aio.Channel,
) -> None:
    first, _ = await open_producer(channel, "retyped", schema_bin(USER_V1))
    changed = record(field("name", "string"), field("age", "string"))
    error = await refusal(channel, "retyped", schema_bin(changed))
    first.cancel()
    details = error.details() or ""
    assert error_code(error) == pb.IncompatibleSchema
    assert "field 'age'" in details and "type_mismatch" in details


async def test_a_changed_schema_type_is_refused(channel: grpc.aio.Channel) -> None:
    first, _ = await open_producer(channel, "kind", schema_bin(USER_V1))
    error = await refusal(channel, "kind", schema_bin(b"", pb.SCHEMA_TYPE_STRING))
    first.cancel()
    assert error_code(error) == pb.IncompatibleSchema
    assert "AVRO" in (error.details() or "") and "STRING" in (error.details() or "")


@pytest.mark.parametrize(
    ("strategy", "accepted"),
    [
        # a new field without a default: the old schema reads new data (FORWARD), the new
        # schema cannot read old data (BACKWARD)
        (CompatibilityStrategy.FORWARD, True),
        (CompatibilityStrategy.BACKWARD, False),
        (CompatibilityStrategy.FULL, False),
        (CompatibilityStrategy.ALWAYS_COMPATIBLE, True),
        (CompatibilityStrategy.ALWAYS_INCOMPATIBLE, False),
    ],
)
async def test_each_strategy_decides_a_field_added_without_default(
    broker: BrokerThread,
    channel: grpc.aio.Channel,
    strategy: CompatibilityStrategy,
    accepted: bool,
) -> None:
    set_strategy(broker, strategy)
    first, _ = await open_producer(channel, "strategy", schema_bin(USER_V1))
    added = record(field("name", "string"), field("age", "int"), field("city", "string"))
    if accepted:
        call, ready = await open_producer(channel, "strategy", schema_bin(added))
        assert ready.schema_version == version(1)
        call.cancel()
    else:
        error = await refusal(channel, "strategy", schema_bin(added))
        assert error_code(error) == pb.IncompatibleSchema
        assert strategy.value in (error.details() or "")
    first.cancel()


@pytest.mark.parametrize(
    ("strategy", "accepted"),
    [(CompatibilityStrategy.BACKWARD, True), (CompatibilityStrategy.BACKWARD_TRANSITIVE, False)],
)
async def test_a_transitive_strategy_checks_every_version_not_only_the_latest(
    broker: BrokerThread,
    channel: grpc.aio.Channel,
    strategy: CompatibilityStrategy,
    accepted: bool,
) -> None:
    set_strategy(broker, strategy)
    v0 = record(field("id", "int"), field("a", "int"))
    v1 = record(field("id", "int"))  # a dropped: the new schema still reads v0's data
    v2 = record(field("id", "int"), field("a", "string", default=""))  # reads v1, not v0
    for definition in (v0, v1):
        call, _ = await open_producer(channel, "transitive", schema_bin(definition))
        call.cancel()
    if accepted:
        call, ready = await open_producer(channel, "transitive", schema_bin(v2))
        assert ready.schema_version == version(2)
        call.cancel()
    else:
        error = await refusal(channel, "transitive", schema_bin(v2))
        details = error.details() or ""
        assert "version 0" in details and "field 'a'" in details and "type_mismatch" in details


async def test_auto_update_off_accepts_only_registered_schemas(
    broker: BrokerThread, channel: grpc.aio.Channel
) -> None:
    assert broker.service is not None
    first, _ = await open_producer(channel, "frozen", schema_bin(USER_V1))
    broker.run(broker.service.schemas.policies.set_allow_auto_update(NS, False))
    error = await refusal(channel, "frozen", schema_bin(USER_V2))
    assert error_code(error) == pb.IncompatibleSchema
    assert "auto updating is disabled" in (error.details() or "")
    again, ready = await open_producer(channel, "frozen", schema_bin(USER_V1))
    assert ready.schema_version == version(0)
    for call in (first, again):
        call.cancel()


async def test_validation_enforced_refuses_a_producer_without_schema(
    broker: BrokerThread, channel: grpc.aio.Channel
) -> None:
    assert broker.service is not None
    first, _ = await open_producer(channel, "enforced", schema_bin(USER_V1))
    plain, _ = await open_producer(channel, "enforced")  # not enforced: allowed
    plain.cancel()
    broker.run(broker.service.schemas.policies.set_validation_enforced(NS, True))
    error = await refusal(channel, "enforced")
    assert error_code(error) == pb.IncompatibleSchema
    assert "without a schema" in (error.details() or "")
    untyped, _ = await open_producer(channel, "untyped-topic")  # a topic without a schema
    untyped.cancel()
    first.cancel()


async def test_a_partitioned_topics_partitions_share_one_registry(
    broker: BrokerThread, channel: grpc.aio.Channel
) -> None:
    assert broker.service is not None
    broker.run(broker.service.resources.create_partitioned_topic("parted", 2))
    p0, ready0 = await open_producer(channel, "parted-partition-0", schema_bin(USER_V1))
    p1, ready1 = await open_producer(channel, "parted-partition-1", schema_bin(USER_V1))
    assert ready0.schema_version == ready1.schema_version == version(0)
    error = await refusal(channel, "parted-partition-1", schema_bin(record(field("x", "int"))))
    assert error_code(error) == pb.IncompatibleSchema
    got = await stub(channel).GetSchema(pb.GetSchemaRequest(topic="parted"))
    assert got.schema.schema_data == USER_V1
    via_partition = await stub(channel).GetSchema(pb.GetSchemaRequest(topic="parted-partition-1"))
    assert via_partition.schema_version == version(0)
    p0.cancel()
    p1.cancel()


async def test_a_consumers_schema_is_registered_on_an_idle_topic(
    channel: grpc.aio.Channel,
) -> None:
    await consume(channel, "idle", 0, schema_bin(USER_V1))
    got = await stub(channel).GetSchema(pb.GetSchemaRequest(topic="idle"))
    assert got.schema.schema_data == USER_V1 and got.schema_version == version(0)


async def test_a_consumers_schema_must_read_the_topics(channel: grpc.aio.Channel) -> None:
    producer, _ = await open_producer(channel, "read-check", schema_bin(USER_V1))
    await consume(channel, "read-check", 0, schema_bin(USER_V2))  # reads v1 data: fine
    unreadable = record(field("name", "string"), field("zip", "int"))
    call = stub(channel).Consume(
        metadata=(
            ("x-pulsar-topic", "read-check"),
            ("x-pulsar-subscription", "s"),
            schema_bin(unreadable),
        )
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call.read()
    producer.cancel()
    assert error_code(err.value) == pb.IncompatibleSchema
    assert "field 'zip'" in (err.value.details() or "")


async def test_a_large_schema_registered_by_rpc_is_declared_by_its_version(
    channel: grpc.aio.Channel,
) -> None:
    big = record(*(field(f"f{i:04d}", "string", doc="x" * 40) for i in range(400)))
    assert len(big) > 16_000  # more than call metadata takes
    schema = pb.Schema(name="big", schema_data=big, type=pb.SCHEMA_TYPE_AVRO)
    answer = await stub(channel).GetOrCreateSchema(
        pb.GetOrCreateSchemaRequest(topic="big", schema=schema)
    )
    assert answer.schema_version == version(0)
    call, ready = await open_producer(
        channel, "big", ("x-pulsar-schema-version-bin", answer.schema_version)
    )
    assert ready.schema_version == version(0)
    await send(call, 0, b"x")
    call.cancel()
    [entry] = await consume(channel, "big", 1)
    assert entry.schema_version == version(0)
    error = await refusal(channel, "big", ("x-pulsar-schema-version-bin", version(7)))
    assert error_code(error) == pb.IncompatibleSchema and "version 7" in (error.details() or "")


async def test_schemas_survive_a_restart(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    first = broker_factory()
    async with grpc.aio.insecure_channel(first.grpc_address) as channel:
        call, _ = await open_producer(channel, "kept", schema_bin(USER_V1))
        call.cancel()
    data_dir = first.config.dataDirectory
    assert first.service is not None
    await first.call(first.service.close())  # the data directory is free again
    again = broker_factory(data_dir=data_dir)
    async with grpc.aio.insecure_channel(again.grpc_address) as channel:
        got = await stub(channel).GetSchema(pb.GetSchemaRequest(topic="kept"))
        assert got.schema.schema_data == USER_V1
        call, ready = await open_producer(channel, "kept", schema_bin(USER_V2))
        assert ready.schema_version == version(1)
        call.cancel()


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (("x-pulsar-schema-bin", b"\xff\xff\xff"), "not a serialized Schema"),
        (schema_bin(b"{not json"), "not a valid Avro schema"),
        (schema_bin(b'{"type": "record", "name": "R"}'), "not a valid Avro schema"),
        (schema_bin(b"{}", type_=99), "unknown schema type 99"),
        (("x-pulsar-schema-version-bin", b"\x01"), "8 bytes"),
    ],
)
async def test_hostile_schema_headers_are_invalid_arguments(
    channel: grpc.aio.Channel, header: tuple[str, bytes], expected: str
) -> None:
    error = await refusal(channel, "hostile", header)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert expected in (error.details() or "")


async def test_a_huge_definition_is_refused(channel: grpc.aio.Channel) -> None:
    huge = record(field("f", "string", doc="x" * 300_000))
    schema = pb.Schema(name="huge", schema_data=huge, type=pb.SCHEMA_TYPE_AVRO)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub(channel).GetOrCreateSchema(
            pb.GetOrCreateSchemaRequest(topic="huge", schema=schema)
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "exceeds 262144" in (err.value.details() or "")


async def test_get_schema_of_a_topic_without_one_is_not_found(channel: grpc.aio.Channel) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub(channel).GetSchema(pb.GetSchemaRequest(topic="schemaless"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize("kind", [pb.SCHEMA_TYPE_PROTOBUF_NATIVE, pb.SCHEMA_TYPE_JSON])
async def test_a_definition_nested_past_the_recursion_limit_is_an_invalid_argument(
    channel: grpc.aio.Channel, kind: int
) -> None:
    """Before: RecursionError escaped the PROTOBUF_NATIVE check (issue 25)."""
    nested = b"[" * 2_000 + b"]" * 2_000
    schema = pb.Schema(name="nested", schema_data=nested, type=kind)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub(channel).GetOrCreateSchema(
            pb.GetOrCreateSchemaRequest(topic="nested", schema=schema)
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_code(err.value) == pb.IncompatibleSchema  # Pulsar's for InvalidSchemaData
