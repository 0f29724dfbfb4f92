"""Keepalive both ways: clients that ping often keep their idle streams (gRPC's default server
policy would answer with GOAWAY too_many_pings), and the broker's own pings find a client
that vanished without closing its connection, so its unacked messages go to the others."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeAlias

import grpc

from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.wire import batch, stub
from tests.faultproxy import FaultProxy
from tests.support import BrokerThread

Call: TypeAlias = grpc.aio.StreamStreamCall

# A client pinging every second, also without calls and without waiting for data in between.
EAGER_PINGS = (
    ("grpc.keepalive_time_ms", 1000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
)


async def consumer(channel: grpc.aio.Channel, topic: str, sub: str, permits: int) -> Call:
    metadata = (
        ("x-pulsar-topic", topic),
        ("x-pulsar-subscription", sub),
        ("x-pulsar-subscription-type", "Shared"),
        ("x-pulsar-initial-position", "Earliest"),
    )
    call = stub(channel).Consume(metadata=metadata)
    assert (await call.read()).HasField("subscribed")
    await call.write(pb.ConsumeRequest(flow=pb.Flow(permits=permits)))
    return call


async def produce(channel: grpc.aio.Channel, topic: str, payloads: list[bytes]) -> None:
    call = stub(channel).Produce(metadata=(("x-pulsar-topic", topic),))
    assert (await call.read()).HasField("ready")
    for i, payload in enumerate(payloads):
        await call.write(batch(i, [payload]))
    for _ in payloads:
        assert (await call.read()).HasField("receipt")
    await call.done_writing()


async def receive(call: Call, count: int) -> list[bytes]:
    payloads: list[bytes] = []
    while len(payloads) < count:
        response = await call.read()
        assert response is not grpc.aio.EOF
        for entry in response.messages.entries:
            payloads += [m.payload for m in entry.messages]
    return payloads


async def test_an_idle_consumer_pinging_every_second_keeps_its_stream(
    broker: BrokerThread,
) -> None:
    async with (
        grpc.aio.insecure_channel(broker.grpc_address, options=EAGER_PINGS) as pinging,
        grpc.aio.insecure_channel(broker.grpc_address) as plain,
    ):
        idle = await consumer(pinging, "keepalive", "sub", 10)
        # Five pings with no data: gRPC's default policy sends GOAWAY at the third.
        read = asyncio.ensure_future(idle.read())
        done, _ = await asyncio.wait([read], timeout=5.5)
        assert not done, f"the idle stream ended: {read.result() if done else ''}"
        await produce(plain, "keepalive", [b"still here"])
        response = await asyncio.wait_for(read, 10)
        assert [m.payload for e in response.messages.entries for m in e.messages] == [b"still here"]
        assert pinging.get_state() is grpc.ChannelConnectivity.READY


async def test_a_vanished_consumers_messages_go_to_the_others(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    broker = broker_factory(keepAliveIntervalSeconds=1)
    port = int(broker.grpc_address.rsplit(":", 1)[1])
    payloads = [f"m{i}".encode() for i in range(5)]
    async with (
        FaultProxy(port) as proxy,
        grpc.aio.insecure_channel(proxy.address) as through_proxy,
        grpc.aio.insecure_channel(broker.grpc_address) as direct,
    ):
        vanishing = await consumer(through_proxy, "vanish", "sub", 100)
        await produce(direct, "vanish", payloads)
        assert sorted(await receive(vanishing, 5)) == payloads  # and never acked
        other = await consumer(direct, "vanish", "sub", 100)
        # The client's host goes silent: nothing crosses the connection any more, no reset.
        proxy.delay_s = 3600
        assert sorted(await asyncio.wait_for(receive(other, 5), 20)) == payloads
