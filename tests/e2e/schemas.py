"""Helpers for schema tests over raw stubs: Avro definitions, the call headers that declare a
schema, and producers and consumers that say which version each entry carries."""

from __future__ import annotations

import json
from typing import Any

import grpc

from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.wire import batch, stub


def record(*fields: dict[str, Any], name: str = "User") -> bytes:
    """An Avro record schema, as JSON text."""
    return json.dumps({"type": "record", "name": name, "fields": list(fields)}).encode()


def field(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


USER_V1 = record(field("name", "string"), field("age", "int"))
# A new optional field with a default: BACKWARD, FORWARD and FULL all accept it.
USER_V2 = record(field("name", "string"), field("age", "int"), field("email", "string", default=""))


def schema_bin(
    data: bytes, type_: int = pb.SCHEMA_TYPE_AVRO, properties: dict[str, str] | None = None
) -> tuple[str, bytes]:
    schema = pb.Schema(name="t", schema_data=data, type=type_, properties=properties or {})
    return ("x-pulsar-schema-bin", schema.SerializeToString())


def version(n: int) -> bytes:
    return n.to_bytes(8, "big")


async def open_producer(
    channel: grpc.aio.Channel, topic: str, *headers: tuple[str, Any]
) -> tuple[grpc.aio.StreamStreamCall, pb.ProducerReady]:
    """A Produce call and its ProducerReady (raises the call's error when refused)."""
    call = stub(channel).Produce(metadata=(("x-pulsar-topic", topic), *headers))
    response = await call.read()
    if response is grpc.aio.EOF:
        await call  # raises the refusal
    assert isinstance(response, pb.ProduceResponse)
    return call, response.ready


async def send(call: grpc.aio.StreamStreamCall, sequence_id: int, payload: bytes) -> None:
    await call.write(batch(sequence_id, [payload]))
    response = await call.read()
    assert isinstance(response, pb.ProduceResponse) and response.HasField("receipt")


async def refusal(channel: grpc.aio.Channel, topic: str, *headers: tuple[str, Any]) -> Any:
    """The error a Produce call with ``headers`` ends with."""
    call = stub(channel).Produce(metadata=(("x-pulsar-topic", topic), *headers))
    try:
        await call.read()
        await call
    except grpc.aio.AioRpcError as exc:
        return exc
    raise AssertionError("the producer was not refused")


async def consume(
    channel: grpc.aio.Channel, topic: str, count: int, *headers: tuple[str, Any]
) -> list[pb.DeliveredEntry]:
    """``count`` entries from the start of ``topic``."""
    call = stub(channel).Consume(
        metadata=(
            ("x-pulsar-topic", topic),
            ("x-pulsar-subscription", "check"),
            ("x-pulsar-initial-position", "Earliest"),
            *headers,
        )
    )
    entries: list[pb.DeliveredEntry] = []
    try:
        first = await call.read()
        assert isinstance(first, pb.ConsumeResponse) and first.HasField("subscribed")
        await call.write(pb.ConsumeRequest(flow=pb.Flow(permits=count)))
        while len(entries) < count:
            response = await call.read()
            assert isinstance(response, pb.ConsumeResponse)
            entries.extend(response.messages.entries)
    finally:
        call.cancel()
    return entries
