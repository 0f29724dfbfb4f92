"""Any entry the broker accepts can be delivered: a message just under maxMessageSize (5 MB,
over gRPC's default 4 MB limit) goes out and comes back whole, each consume response within
the server's send limit, on a channel whose receive limit is raised as docs/protocol.md says."""

from __future__ import annotations

import grpc

from pulsar_grpc.handler.codec import MAX_RESPONSE_BYTES
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.wire import batch
from tests.support import BrokerThread

SERVICE = "/pulsargrpc.v1.PulsarService/"
MAX_MESSAGE_SIZE = 5 * 1024 * 1024  # the broker's default maxMessageSize
# What docs/protocol.md tells a client in another language to set.
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", MAX_MESSAGE_SIZE + (1 << 20))]
TOPIC = "persistent://public/default/large"


def raw(value: bytes) -> bytes:
    return value


async def test_a_message_just_under_max_message_size_is_produced_and_consumed(
    broker: BrokerThread,
) -> None:
    big = bytes(range(256)) * (int(4.9 * 1024 * 1024) // 256)
    medium = [bytes([i]) * 700_000 for i in range(4)]  # several fit in no 1 MB response
    async with grpc.aio.insecure_channel(broker.grpc_address, options=CHANNEL_OPTIONS) as ch:
        consume = ch.stream_stream(
            SERVICE + "Consume", request_serializer=raw, response_deserializer=raw
        )(metadata=(("x-pulsar-topic", TOPIC), ("x-pulsar-subscription", "s")))
        assert pb.ConsumeResponse.FromString(await consume.read()).HasField("subscribed")
        produce = ch.stream_stream(
            SERVICE + "Produce", request_serializer=raw, response_deserializer=raw
        )(metadata=(("x-pulsar-topic", TOPIC),))
        await produce.read()
        for i, payload in enumerate([big, *medium]):
            request = batch(i, [payload]).SerializeToString()
            assert len(request) <= MAX_MESSAGE_SIZE
            await produce.write(request)
            assert pb.ProduceResponse.FromString(await produce.read()).HasField("receipt")
        await produce.done_writing()

        await consume.write(pb.ConsumeRequest(flow=pb.Flow(permits=100)).SerializeToString())
        received: list[bytes] = []
        sizes: list[int] = []
        while len(received) < 5:
            response = await consume.read()
            decoded = pb.ConsumeResponse.FromString(response)
            if decoded.HasField("messages"):
                sizes.append(len(response))
                received += [m.payload for e in decoded.messages.entries for m in e.messages]
        consume.cancel()
    assert received == [big, *medium]
    # The big entry alone in one response, within the server's send limit (maxMessageSize
    # plus framing); the medium ones never two to a response, so each stays under 1 MB.
    assert len(big) < sizes[0] <= MAX_MESSAGE_SIZE + (1 << 20)
    assert all(size <= MAX_RESPONSE_BYTES for size in sizes[1:]) and len(sizes) == 5
