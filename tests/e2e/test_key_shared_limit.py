"""A Key_Shared subscription whose 65,536 hashes each have a consumer refuses the next one with
FAILED_PRECONDITION and Pulsar's ConsumerAssignError, and stays consistent: the consumers it
has keep receiving, and one leaving makes room again.

65,535 of the consumers are attached on the broker's loop with transports that take nothing
(65,536 gRPC streams would be too heavy for a test); the first one and the refused one are
real gRPC streams."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeAlias

import grpc

from pulsar_grpc.broker.service import BrokerService
from pulsar_grpc.broker.topics import Consumer, ConsumerOptions, Delivery, SubType
from pulsar_grpc.broker.topics.key_shared import RANGE_SIZE, sticky_key_hash
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.wire import batch, error_code, stub
from tests.support import BrokerThread

Call: TypeAlias = grpc.aio.StreamStreamCall
TOPIC = "persistent://public/default/key-shared-limit"
METADATA = (
    ("x-pulsar-topic", TOPIC),
    ("x-pulsar-subscription", "sub"),
    ("x-pulsar-subscription-type", "Key_Shared"),
    ("x-pulsar-initial-position", "Earliest"),
)


class IdleTransport:
    """A consumer's transport that never gets anything: it grants no permits."""

    def send_messages(self, deliveries: list[Delivery]) -> None:
        raise AssertionError("a consumer without permits was sent messages")

    def send_active_change(self, is_active: bool) -> None:
        pass

    def close(self, error: object = None) -> None:
        pass

    def writable(self) -> bool:
        return True

    def on_writable(self, callback: Callable[[], None]) -> None:
        pass


async def attach_idle(service: BrokerService, count: int) -> list[Consumer]:
    topic = await service.get_topic(TOPIC)
    return [
        await topic.subscribe(
            "sub", SubType.Key_Shared, ConsumerOptions(f"idle-{i}"), IdleTransport()
        )
        for i in range(count)
    ]


async def detach(consumers: list[Consumer]) -> None:
    for consumer in consumers:
        await consumer.subscription.remove_consumer(consumer)


async def listed_and_served(service: BrokerService) -> tuple[int, int]:
    subscription = (await service.get_topic(TOPIC)).subscriptions["sub"]
    assert subscription.dispatcher is not None
    return len(subscription.consumers), len(subscription.dispatcher.consumers)


async def subscribe(channel: grpc.aio.Channel) -> Call:
    call = stub(channel).Consume(metadata=METADATA)
    assert (await call.read()).HasField("subscribed")
    await call.write(pb.ConsumeRequest(flow=pb.Flow(permits=100)))
    return call


async def publish(channel: grpc.aio.Channel, keys: list[str]) -> None:
    producer = stub(channel).Produce(metadata=(("x-pulsar-topic", TOPIC),))
    assert (await producer.read()).HasField("ready")
    for i, key in enumerate(keys):
        await producer.write(batch(i, [key.encode()], key=key))
        assert (await producer.read()).HasField("receipt")
    await producer.done_writing()


async def receive_and_ack(call: Call) -> bytes:
    """One message, acked: a consumer joining later waits for what was read before it."""
    response = await call.read()
    (entry,) = response.messages.entries
    (message,) = entry.messages
    ack_id = pb.MessageId(ledger_id=entry.ledger_id, entry_id=entry.entry_id)
    await call.write(pb.ConsumeRequest(ack=pb.Ack(ids=[ack_id])))
    return bytes(message.payload)


def key_with_hash(wanted: int) -> str:
    return next(k for i in range(10**7) if sticky_key_hash((k := f"k{i}").encode()) == wanted)


async def test_a_refused_key_shared_consumer_leaves_the_others_working(
    broker: BrokerThread,
) -> None:
    service = broker.service
    assert service is not None
    async with grpc.aio.insecure_channel(broker.grpc_address) as channel:
        first = await subscribe(channel)
        idle = await broker.call(attach_idle(service, RANGE_SIZE - 1))

        refused = stub(channel).Consume(metadata=METADATA)
        try:
            await refused.read()
            raise AssertionError("a consumer past one per hash was accepted")
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, err.details()
            assert error_code(err) == pb.ConsumerAssignError
        assert await broker.call(listed_and_served(service)) == (RANGE_SIZE, RANGE_SIZE)

        # The first consumer kept the lowest hash (every split takes an upper half).
        await publish(channel, [key_with_hash(0)])
        assert await receive_and_ack(first) == key_with_hash(0).encode()

        await broker.call(detach(idle[:1]))
        second = await subscribe(channel)  # room again
        await broker.call(detach(idle[1:]))
        assert await broker.call(listed_and_served(service)) == (2, 2)
        keys = [f"key-{i}" for i in range(20)]
        await publish(channel, keys)
        assert sorted(await collect([first, second], len(keys))) == sorted(k.encode() for k in keys)


async def collect(calls: list[Call], count: int) -> list[bytes]:
    """Messages read from several consumers until ``count`` arrived in all."""
    payloads: list[bytes] = []
    reads = {asyncio.ensure_future(call.read()): call for call in calls}
    try:
        while len(payloads) < count:
            done, _ = await asyncio.wait(reads, timeout=10, return_when=asyncio.FIRST_COMPLETED)
            assert done, f"only {len(payloads)} of {count} messages arrived"
            for future in done:
                call = reads.pop(future)
                response = future.result()
                payloads += [m.payload for e in response.messages.entries for m in e.messages]
                reads[asyncio.ensure_future(call.read())] = call
    finally:
        for future in reads:
            future.cancel()
    return payloads
