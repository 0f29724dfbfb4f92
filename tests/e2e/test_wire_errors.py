"""Bad input ends a call with the right gRPC status and Pulsar's ServerError code."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.wire import batch, error_code, stub


async def first_response(call: grpc.aio.StreamStreamCall) -> object:
    return await call.read()


@pytest.mark.parametrize(
    ("metadata", "status", "code"),
    [
        ((), grpc.StatusCode.INVALID_ARGUMENT, pb.InvalidTopicName),
        (
            (("x-pulsar-topic", "persistent://public/default"),),
            grpc.StatusCode.INVALID_ARGUMENT,
            pb.InvalidTopicName,
        ),
        (
            (("x-pulsar-topic", "bogus://public/default/t"),),
            grpc.StatusCode.INVALID_ARGUMENT,
            pb.InvalidTopicName,
        ),
    ],
)
async def test_produce_with_bad_topic_is_invalid_argument(
    channel: grpc.aio.Channel,
    metadata: tuple[tuple[str, str], ...],
    status: grpc.StatusCode,
    code: int,
) -> None:
    call = stub(channel).Produce(metadata=metadata)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call.read()
    assert err.value.code() == status
    assert error_code(err.value) == code


@pytest.mark.parametrize(
    ("metadata", "needle"),
    [
        ((("x-pulsar-topic", "t"),), "x-pulsar-subscription"),
        (
            (
                ("x-pulsar-topic", "t"),
                ("x-pulsar-subscription", "s"),
                ("x-pulsar-subscription-type", "Sharde"),
            ),
            "Sharde",
        ),
        (
            (
                ("x-pulsar-topic", "t"),
                ("x-pulsar-subscription", "s"),
                ("x-pulsar-priority-level", "high"),
            ),
            "high",
        ),
        (
            (
                ("x-pulsar-topic", "t"),
                ("x-pulsar-durable", "false"),
                ("x-pulsar-start-message-id", "1:x"),
            ),
            "1:x",
        ),
    ],
)
async def test_consume_with_bad_parameters_names_the_parameter(
    channel: grpc.aio.Channel, metadata: tuple[tuple[str, str], ...], needle: str
) -> None:
    call = stub(channel).Consume(metadata=metadata)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call.read()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert needle in (err.value.details() or "")


async def test_second_producer_with_same_name_is_producer_busy(channel: grpc.aio.Channel) -> None:
    md = (("x-pulsar-topic", "busy"), ("x-pulsar-producer-name", "p1"))
    first = stub(channel).Produce(metadata=md)
    ready = await first.read()
    assert ready.ready.producer_name == "p1"
    second = stub(channel).Produce(metadata=md)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await second.read()
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_code(err.value) == pb.ProducerBusy
    first.cancel()


async def test_second_exclusive_consumer_is_consumer_busy(channel: grpc.aio.Channel) -> None:
    md = (("x-pulsar-topic", "excl"), ("x-pulsar-subscription", "s"))
    first = stub(channel).Consume(metadata=md)
    assert (await first.read()).HasField("subscribed")
    second = stub(channel).Consume(metadata=md)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await second.read()
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_code(err.value) == pb.ConsumerBusy
    first.cancel()


async def test_cumulative_ack_on_shared_is_refused_and_the_consumer_stays_open(
    channel: grpc.aio.Channel,
) -> None:
    s = stub(channel)
    producer = s.Produce(metadata=(("x-pulsar-topic", "cumul"),))
    await producer.read()
    await producer.write(batch(0, [b"a"]))
    receipt = (await producer.read()).receipt
    consumer = s.Consume(
        metadata=(
            ("x-pulsar-topic", "cumul"),
            ("x-pulsar-subscription", "s"),
            ("x-pulsar-subscription-type", "Shared"),
            ("x-pulsar-initial-position", "Earliest"),
        )
    )
    await consumer.read()
    msg_id = pb.MessageId(ledger_id=receipt.ledger_id, entry_id=receipt.entry_id, batch_index=0)
    cumulative = pb.Ack(type=pb.Cumulative, ids=[msg_id], request_id=7)
    await consumer.write(pb.ConsumeRequest(ack=cumulative))
    refused = await consumer.read()
    assert refused.request_error.request_id == 7, refused
    assert refused.request_error.code == pb.NotAllowedError
    # Still open: an individual ack of the same id is answered.
    await consumer.write(pb.ConsumeRequest(ack=pb.Ack(ids=[msg_id], request_id=8)))
    assert (await consumer.read()).ack_receipt.request_id == 8
    consumer.cancel()
    producer.cancel()


async def test_batch_over_max_message_size_is_resource_exhausted(
    broker_factory: object,
) -> None:
    broker = broker_factory(maxMessageSize=10_000)  # type: ignore[operator]
    async with grpc.aio.insecure_channel(broker.grpc_address) as ch:
        call = stub(ch).Produce(metadata=(("x-pulsar-topic", "big"),))
        await call.read()
        await call.write(batch(0, [b"small"]))
        assert (await call.read()).HasField("receipt")
        await call.write(batch(1, [b"x" * 20_000]))
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call.read()
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "maxMessageSize" in (err.value.details() or "")


async def test_absent_topic_without_auto_creation_is_not_found(broker_factory: object) -> None:
    broker = broker_factory(allowAutoTopicCreation=False)  # type: ignore[operator]
    async with grpc.aio.insecure_channel(broker.grpc_address) as ch:
        call = stub(ch).Produce(metadata=(("x-pulsar-topic", "nowhere"),))
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call.read()
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert error_code(err.value) == pb.TopicNotFound


async def test_health_and_reflection_are_served(channel: grpc.aio.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    answer = await health.Check(
        health_pb2.HealthCheckRequest(service="pulsargrpc.v1.PulsarService")
    )
    assert answer.status == health_pb2.HealthCheckResponse.SERVING
    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
    call = reflection.ServerReflectionInfo()
    await call.write(reflection_pb2.ServerReflectionRequest(list_services=""))
    response = await call.read()
    names = {s.name for s in response.list_services_response.service}
    assert "pulsargrpc.v1.PulsarService" in names
    await call.done_writing()
