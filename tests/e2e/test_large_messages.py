"""Any entry the broker accepts can be delivered to a client on gRPC's default settings: a
message just under the bound that fits a 4 MiB consume response goes out and comes back
whole on a channel with no options at all, each consume response within 4 MiB; a batch
whose delivery could not fit is refused at produce with RESOURCE_EXHAUSTED naming the limit,
although it is under maxMessageSize (5 MB)."""

from __future__ import annotations

import grpc
import pytest

from pulsar_grpc.broker.errors import ServerError
from pulsar_grpc.handler.codec import GRPC_DEFAULT_RECEIVE_LIMIT, MAX_RESPONSE_BYTES
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.wire import batch, error_code
from tests.support import BrokerThread

SERVICE = "/pulsargrpc.v1.PulsarService/"
MAX_MESSAGE_SIZE = 5 * 1024 * 1024  # the broker's default maxMessageSize
TOPIC = "persistent://public/default/large"


def raw(value: bytes) -> bytes:
    return value


async def test_the_largest_accepted_message_reaches_a_client_on_default_settings(
    broker: BrokerThread,
) -> None:
    big = bytes(range(256)) * ((GRPC_DEFAULT_RECEIVE_LIMIT - (16 << 10)) // 256)
    medium = [bytes([i]) * 700_000 for i in range(4)]  # several fit in no 1 MB response
    async with grpc.aio.insecure_channel(broker.grpc_address) as ch:  # gRPC's defaults
        consume = ch.stream_stream(
            SERVICE + "Consume", request_serializer=raw, response_deserializer=raw
        )(metadata=(("x-pulsar-topic", TOPIC), ("x-pulsar-subscription", "s")))
        assert pb.ConsumeResponse.FromString(await consume.read()).HasField("subscribed")
        produce = ch.stream_stream(
            SERVICE + "Produce", request_serializer=raw, response_deserializer=raw
        )(metadata=(("x-pulsar-topic", TOPIC),))
        await produce.read()
        for i, payload in enumerate([big, *medium]):
            await produce.write(batch(i, [payload]).SerializeToString())
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
    # The big entry alone in one response, within gRPC's default limit; the medium ones never
    # two to a response, so each stays under 1 MB.
    assert len(big) < sizes[0] <= GRPC_DEFAULT_RECEIVE_LIMIT
    assert all(size <= MAX_RESPONSE_BYTES for size in sizes[1:]) and len(sizes) == 5


async def test_a_batch_under_max_message_size_that_no_default_client_could_read_is_refused(
    broker: BrokerThread,
) -> None:
    over = bytes(4_500_000)  # under maxMessageSize, over what fits a 4 MiB consume response
    options = [("grpc.max_send_message_length", MAX_MESSAGE_SIZE)]
    async with grpc.aio.insecure_channel(broker.grpc_address, options=options) as ch:
        produce = ch.stream_stream(
            SERVICE + "Produce", request_serializer=raw, response_deserializer=raw
        )(metadata=(("x-pulsar-topic", TOPIC + "-over"),))
        await produce.read()
        await produce.write(batch(0, [over]).SerializeToString())
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await produce.read()
    assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error_code(refused.value) == ServerError.NotAllowedError
    assert f"receive limit of {GRPC_DEFAULT_RECEIVE_LIMIT} bytes" in (refused.value.details() or "")
