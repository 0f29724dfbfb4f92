"""A broker that shuts down (SIGTERM, BrokerService.close()) or unloads a topic ends every open
Produce and Consume stream with a status clients in any language retry: UNAVAILABLE with
Pulsar's ServiceNotReady code, never gRPC's CANCELLED "Cancelling all calls". Receipts sent
before the end hold: those messages are there after a restart."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TypeAlias

import grpc
import pytest

from pulsar_grpc.broker.naming import NamespaceBundle, topic_hash
from pulsar_grpc.broker.service import BrokerService, ServiceState
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.wire import batch, error_code, stub
from tests.support import BrokerThread, StandaloneProcess

Call: TypeAlias = grpc.aio.StreamStreamCall


async def open_producer(channel: grpc.aio.Channel, topic: str) -> Call:
    call = stub(channel).Produce(metadata=(("x-pulsar-topic", topic),))
    assert (await call.read()).HasField("ready")
    return call


async def open_consumer(channel: grpc.aio.Channel, topic: str, sub: str, sub_type: str) -> Call:
    metadata = (
        ("x-pulsar-topic", topic),
        ("x-pulsar-subscription", sub),
        ("x-pulsar-subscription-type", sub_type),
        ("x-pulsar-initial-position", "Earliest"),
    )
    call = stub(channel).Consume(metadata=metadata)
    assert (await call.read()).HasField("subscribed")
    await call.write(pb.ConsumeRequest(flow=pb.Flow(permits=1000)))
    return call


async def publish(producer: Call, first: int, count: int) -> list[int]:
    """Send ``count`` batches and read their receipts: the sequence ids receipted."""
    for sequence_id in range(first, first + count):
        await producer.write(batch(sequence_id, [f"m{sequence_id}".encode()]))
    return [(await producer.read()).receipt.sequence_id for _ in range(count)]


async def read_messages(consumer: Call, count: int) -> list[bytes]:
    payloads: list[bytes] = []
    while len(payloads) < count:
        response = await consumer.read()
        for entry in response.messages.entries:
            payloads += [m.payload for m in entry.messages]
    return payloads


async def receipts_until_end(producer: Call) -> tuple[list[int], grpc.aio.AioRpcError]:
    """The receipts still written after the broker began ending the call, then its error."""
    receipted: list[int] = []
    with pytest.raises(grpc.aio.AioRpcError) as err:
        while True:
            response = await producer.read()
            assert response is not grpc.aio.EOF, "the call ended without an error"
            receipted.append(response.receipt.sequence_id)
    return receipted, err.value


async def end_of(call: Call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        while True:
            assert await call.read() is not grpc.aio.EOF, "the call ended without an error"
    return err.value


def assert_retryable(error: grpc.aio.AioRpcError) -> None:
    assert error.code() == grpc.StatusCode.UNAVAILABLE, (error.code(), error.details())
    assert error_code(error) == pb.ServiceNotReady, error.details()


async def open_streams(channel: grpc.aio.Channel, topic: str) -> tuple[Call, list[Call]]:
    """A producer whose 20 first batches are receipted and 30 more are in flight, and one
    consumer per subscription type, each having received the 20."""
    producer = await open_producer(channel, topic)
    assert await publish(producer, 0, 20) == list(range(20))
    consumers = [
        await open_consumer(channel, topic, f"sub-{sub_type}", sub_type)
        for sub_type in ("Exclusive", "Failover", "Shared", "Key_Shared")
    ]
    for consumer in consumers:
        assert len(await read_messages(consumer, 20)) == 20
    for sequence_id in range(20, 50):
        await producer.write(batch(sequence_id, [f"m{sequence_id}".encode()]))
    return producer, consumers


async def assert_all_end_retryable(producer: Call, consumers: list[Call]) -> list[int]:
    """Every stream ends with UNAVAILABLE + ServiceNotReady; the late receipts, in order."""
    late, error = await receipts_until_end(producer)
    assert_retryable(error)
    assert late == list(range(20, 20 + len(late)))
    for consumer in consumers:
        assert_retryable(await end_of(consumer))
    return late


async def stored_payloads(address: str, topic: str) -> list[bytes]:
    async with grpc.aio.insecure_channel(address) as channel:
        reader = await open_consumer(channel, topic, "after-restart", "Exclusive")
        payloads: list[bytes] = []
        while True:
            try:
                response = await asyncio.wait_for(reader.read(), 2)
            except TimeoutError:
                return payloads
            for entry in response.messages.entries:
                payloads += [m.payload for m in entry.messages]


async def test_broker_close_ends_every_stream_with_service_not_ready(
    broker_factory: Callable[..., BrokerThread], tmp_path: Path
) -> None:
    broker = broker_factory(data_dir=tmp_path / "data")
    async with grpc.aio.insecure_channel(broker.grpc_address) as channel:
        producer, consumers = await open_streams(channel, "closing")
        assert broker.service is not None
        closing = asyncio.ensure_future(broker.call(broker.service.close()))
        late = await assert_all_end_retryable(producer, consumers)
        await closing
    again = broker_factory(data_dir=tmp_path / "data")
    stored = await stored_payloads(again.grpc_address, "closing")
    receipted = [f"m{i}".encode() for i in range(20 + len(late))]
    assert stored[: len(receipted)] == receipted


async def test_sigterm_ends_every_stream_with_service_not_ready(
    standalone_factory: Callable[..., StandaloneProcess], tmp_path: Path
) -> None:
    standalone = standalone_factory(tmp_path / "standalone")
    async with grpc.aio.insecure_channel(standalone.grpc_address) as channel:
        producer, consumers = await open_streams(channel, "sigterm")
        stopping = asyncio.ensure_future(asyncio.to_thread(standalone.stop))
        late = await assert_all_end_retryable(producer, consumers)
        assert await stopping == 0
    restarted = standalone_factory(tmp_path / "standalone")
    stored = await stored_payloads(restarted.grpc_address, "sigterm")
    receipted = [f"m{i}".encode() for i in range(20 + len(late))]
    assert stored[: len(receipted)] == receipted


async def _unload(service: BrokerService, name: str) -> None:
    """What a bundle move does to a topic: unload its bundle here (a bundle of its hash
    alone, so other topics stay); the next client loads the topic again."""
    topic = (await service.get_topic(name, create=False)).topic_name
    hash_value = topic_hash(topic)
    await service.topics.unload_bundles(
        [NamespaceBundle(topic.namespace, hash_value, hash_value + 1)]
    )


async def test_topic_unload_ends_its_streams_with_service_not_ready(broker: BrokerThread) -> None:
    async with grpc.aio.insecure_channel(broker.grpc_address) as channel:
        producer, consumers = await open_streams(channel, "unloaded")
        other = await open_producer(channel, "not-unloaded")
        assert broker.service is not None
        await broker.call(_unload(broker.service, "unloaded"))
        late = await assert_all_end_retryable(producer, consumers)
        # The topic comes back on the next call, with everything receipted; others never left.
        reader = await open_consumer(channel, "unloaded", "sub-Shared", "Shared")
        redelivered = await read_messages(reader, 20 + len(late))
        assert set(redelivered) >= {f"m{i}".encode() for i in range(20 + len(late))}
        assert await publish(other, 0, 1) == [0]


@pytest.mark.parametrize(
    "rpc",
    ["Produce", "Consume", "Lookup", "GetPartitionedTopicMetadata", "GetLastMessageId"],
)
async def test_calls_arriving_while_closing_are_service_not_ready(
    broker: BrokerThread, rpc: str
) -> None:
    service = broker.service
    assert service is not None

    async def set_state(state: ServiceState) -> None:
        service.state = state

    # Held in the closing state (as between close()'s start and the servers' stop) so that a
    # call surely arrives in it; set back for the fixture's real close.
    await broker.call(set_state(ServiceState.CLOSING))
    try:
        async with grpc.aio.insecure_channel(broker.grpc_address) as channel:
            api = stub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                if rpc == "Produce":
                    await api.Produce(metadata=(("x-pulsar-topic", "t"),)).read()
                elif rpc == "Consume":
                    await api.Consume(
                        metadata=(("x-pulsar-topic", "t"), ("x-pulsar-subscription", "s"))
                    ).read()
                elif rpc == "Lookup":
                    await api.Lookup(pb.LookupRequest(topic="t"))
                elif rpc == "GetPartitionedTopicMetadata":
                    await api.GetPartitionedTopicMetadata(
                        pb.PartitionedTopicMetadataRequest(topic="t")
                    )
                else:
                    await api.GetLastMessageId(pb.GetLastMessageIdRequest(topic="t"))
            assert_retryable(err.value)
    finally:
        await broker.call(set_state(ServiceState.OPEN))
