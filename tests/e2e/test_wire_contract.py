"""The wire contract as generic gRPC tooling and other languages' clients see it: misspelt
call parameters are refused, errors carry a standard google.rpc.Status with an ErrorInfo, and
server reflection answers under both v1 and v1alpha."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor_pb2
from google.rpc import error_details_pb2
from grpc_reflection.v1alpha import reflection_pb2
from grpc_status import rpc_status

from pulsar_grpc.interceptors.parameters import KNOWN_PARAMETERS
from pulsargrpc.v1 import pulsar_pb2 as pb
from pulsargrpc.v1 import pulsar_pb2_grpc as pbg
from tests.e2e.wire import batch, error_code, stub
from tests.support import BrokerThread

ROOT = Path(__file__).resolve().parents[2]
HEADER = re.compile(r"x-pulsar-[a-z-]+")
TYPO = "x-pulsar-subscripton-type"  # misspelt on purpose here and by the Go client


# ------------------------------------------------------------------ call parameters


@pytest.mark.parametrize("method", ["Produce", "Consume"])
async def test_a_misspelt_parameter_is_refused_naming_it(
    channel: grpc.aio.Channel, method: str
) -> None:
    metadata = (
        ("x-pulsar-topic", "typo"),
        ("x-pulsar-subscription", "s"),
        (TYPO, "Shared"),  # would silently mean Exclusive if it were ignored
    )
    call = getattr(stub(channel), method)(metadata=metadata)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call.read()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = err.value.details() or ""
    assert f"unknown call parameter {TYPO}" in details
    assert "x-pulsar-subscription-type" in details  # the known names are listed


async def test_a_unary_call_with_an_unknown_parameter_is_refused(
    channel: grpc.aio.Channel,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub(channel).Lookup(
            pb.LookupRequest(topic="t"), metadata=(("x-pulsar-listener-name", "external"),)
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "x-pulsar-listener-name" in (err.value.details() or "")


async def test_other_metadata_is_not_checked(channel: grpc.aio.Channel) -> None:
    """Only the x-pulsar- prefix is the contract's: proxies and tracing add their own keys."""
    metadata = (("x-pulsar-topic", "other"), ("x-request-id", "42"), ("traceparent", "00-x"))
    call = stub(channel).Produce(metadata=metadata)
    assert (await call.read()).HasField("ready")
    call.cancel()


def test_the_documented_parameters_are_the_known_ones() -> None:
    """pulsar.proto's header list is what client authors read: it names exactly these."""
    proto = (ROOT / "protos/pulsargrpc/v1/pulsar.proto").read_text()
    documented = {
        m.group(0)
        for line in proto.splitlines()
        if line.startswith("//")
        for m in HEADER.finditer(line)
        if m.group(0) != "x-pulsar-"
    }
    assert documented == set(KNOWN_PARAMETERS)


def _string_constants(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def test_every_parameter_our_clients_send_is_known() -> None:
    """The SDK, the Node.js and Go clients and the perf tool send only known parameters (a
    new one must be added to the broker's list, or every call sending it fails)."""
    sent: dict[str, set[str]] = {}
    for path in [*(ROOT / "client").rglob("*.py"), *(ROOT / "cli").rglob("*.py")]:
        names = {s for s in _string_constants(path) if HEADER.fullmatch(s)}
        sent.update({str(path.relative_to(ROOT)): names} if names else {})
    for pattern in ("tests/node/*.js", "tests/go/produce_consume/*.go"):
        for path in ROOT.glob(pattern):
            names = set(re.findall(r"['\"](x-pulsar-[a-z-]+)['\"]", path.read_text())) - {TYPO}
            sent.update({str(path.relative_to(ROOT)): names} if names else {})
    assert {"client/_headers.py", "tests/node/produce_consume.js"} <= set(sent), sent
    assert "tests/go/produce_consume/main.go" in sent, sent
    unknown = {path: names - KNOWN_PARAMETERS for path, names in sent.items()}
    assert {path: names for path, names in unknown.items() if names} == {}


# ------------------------------------------------------------------ google.rpc.Status


def _error_info(status: object) -> error_details_pb2.ErrorInfo:
    assert status is not None, "no grpc-status-details-bin trailer"
    (detail,) = status.details  # type: ignore[attr-defined]
    info = error_details_pb2.ErrorInfo()
    assert detail.Unpack(info), detail.type_url
    return info


def test_a_unary_error_carries_error_info_for_generic_tooling(broker: BrokerThread) -> None:
    """The way a Python gRPC user reads rich errors: a blocking stub and rpc_status.from_call."""
    topic = "persistent://public/default/never-produced"
    with grpc.insecure_channel(broker.grpc_address) as channel:
        with pytest.raises(grpc.RpcError) as err:
            pbg.PulsarServiceStub(channel).GetLastMessageId(
                pb.GetLastMessageIdRequest(topic=topic), timeout=30
            )
    call = err.value
    assert call.code() == grpc.StatusCode.NOT_FOUND
    status = rpc_status.from_call(call)
    assert status.code == grpc.StatusCode.NOT_FOUND.value[0]
    assert status.message == call.details()
    info = _error_info(status)
    assert info.reason == "TopicNotFound"
    assert info.domain == "pulsar.apache.org"
    assert dict(info.metadata) == {"topic": topic}
    assert dict(call.trailing_metadata())["pulsar-error-code"] == str(pb.TopicNotFound)


async def test_a_stream_error_carries_error_info_with_the_full_topic(
    channel: grpc.aio.Channel,
) -> None:
    md = (("x-pulsar-topic", "busy-rich"), ("x-pulsar-producer-name", "p1"))
    first = stub(channel).Produce(metadata=md)
    assert (await first.read()).HasField("ready")
    second = stub(channel).Produce(metadata=md)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await second.read()
    first.cancel()
    assert error_code(err.value) == pb.ProducerBusy
    info = _error_info(rpc_status.from_call(err.value))
    assert info.reason == "ProducerBusy"
    assert dict(info.metadata) == {"topic": "persistent://public/default/busy-rich"}


async def test_a_refused_parameter_carries_error_info(channel: grpc.aio.Channel) -> None:
    """Refusals by the interceptors end the call as the servicers' own errors do."""
    call = stub(channel).Produce(metadata=(("x-pulsar-topic", "bogus://x/y/z"),))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call.read()
    status = rpc_status.from_call(err.value)
    assert status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert _error_info(status).reason == "InvalidTopicName"


async def test_an_error_echoing_a_huge_name_still_reaches_the_client(
    channel: grpc.aio.Channel,
) -> None:
    """The trailers stay under the client's 8 KiB metadata limit: the message is cut short."""
    name = "persistent://public/default/" + "n" * 50_000
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub(channel).GetLastMessageId(pb.GetLastMessageIdRequest(topic=name + "/x"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value
    assert error_code(err.value) == pb.InvalidTopicName
    status = rpc_status.from_call(err.value)
    assert len(status.message) <= 1024
    assert len(_error_info(status).metadata["topic"]) <= 256


# ------------------------------------------------------------------ server reflection


def _reflection(channel: grpc.aio.Channel, version: str) -> grpc.aio.StreamStreamMultiCallable:
    """A raw reflection stub: v1 and v1alpha share every message, only the path differs."""
    return channel.stream_stream(
        f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
async def test_reflection_lists_and_describes_the_services(
    channel: grpc.aio.Channel, version: str
) -> None:
    call = _reflection(channel, version)()
    await call.write(reflection_pb2.ServerReflectionRequest(list_services=""))
    listed = await call.read()
    names = {s.name for s in listed.list_services_response.service}
    assert {
        "pulsargrpc.v1.PulsarService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    } <= names, names
    for symbol in ("pulsargrpc.v1.PulsarService", f"grpc.reflection.{version}.ServerReflection"):
        await call.write(reflection_pb2.ServerReflectionRequest(file_containing_symbol=symbol))
        answer = await call.read()
        assert answer.WhichOneof("message_response") == "file_descriptor_response", answer
        files = [
            descriptor_pb2.FileDescriptorProto.FromString(raw)
            for raw in answer.file_descriptor_response.file_descriptor_proto
        ]
        services = {f"{f.package}.{s.name}" for f in files for s in f.service}
        assert symbol in services
    await call.done_writing()


# ------------------------------------------------------------------ what docs/protocol.md says


def _consumer_metadata(topic: str, sub_type: str) -> tuple[tuple[str, str], ...]:
    return (
        ("x-pulsar-topic", topic),
        ("x-pulsar-subscription", "s"),
        ("x-pulsar-subscription-type", sub_type),
        ("x-pulsar-initial-position", "earliest"),
    )


async def test_subscription_type_values_are_case_insensitive(channel: grpc.aio.Channel) -> None:
    """ "shared" is Shared: a second consumer joins instead of being refused as by Exclusive."""
    first = stub(channel).Consume(metadata=_consumer_metadata("case", "shared"))
    assert (await first.read()).HasField("subscribed")
    second = stub(channel).Consume(metadata=_consumer_metadata("case", "SHARED"))
    assert (await second.read()).HasField("subscribed")
    first.cancel()
    second.cancel()


async def test_a_half_closed_consumer_ends_cleanly_and_its_unacked_message_comes_back(
    channel: grpc.aio.Channel,
) -> None:
    producer = stub(channel).Produce(metadata=(("x-pulsar-topic", "half-close"),))
    await producer.read()
    await producer.write(batch(0, [b"unacked"]))
    assert (await producer.read()).HasField("receipt")
    await producer.done_writing()
    assert await producer.read() is grpc.aio.EOF
    md = _consumer_metadata("half-close", "Shared")
    for _ in range(2):
        consumer = stub(channel).Consume(metadata=md)
        assert (await consumer.read()).HasField("subscribed")
        await consumer.write(pb.ConsumeRequest(flow=pb.Flow(permits=10)))
        delivered = (await consumer.read()).messages.entries[0]
        assert delivered.messages[0].payload == b"unacked"
        await consumer.done_writing()  # no ack: the broker must hand the message out again
        assert await consumer.read() is grpc.aio.EOF
        assert await consumer.code() == grpc.StatusCode.OK
