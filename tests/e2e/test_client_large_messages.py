"""The SDK produces and consumes the largest message the broker accepts, which is the largest
whose delivery fits gRPC's default 4 MiB receive limit; a larger one, although under
maxMessageSize (5 MB), fails its send with the broker's refusal naming that limit."""

from __future__ import annotations

import pytest

from pulsar_grpc.client import Client, MessageId
from pulsar_grpc.exceptions import PulsarException
from pulsar_grpc.handler.codec import GRPC_DEFAULT_RECEIVE_LIMIT
from tests.support import BrokerThread

BIG = GRPC_DEFAULT_RECEIVE_LIMIT - (16 << 10)  # fits, with the broker's fields and the ids
OVER = 4_500_000  # over 4 MiB, under 5 MB


async def test_the_largest_accepted_message_is_produced_consumed_and_read(
    broker: BrokerThread,
) -> None:
    payload = bytes(range(256)) * (BIG // 256)
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe("big", "sub", initial_position="earliest")
        producer = await client.create_producer("big")
        message_id = await producer.send(payload)
        small = await producer.send(b"after")
        received = await consumer.receive(timeout_ms=10_000)
        assert received.message_id() == message_id and received.data() == payload
        assert (await consumer.receive(timeout_ms=10_000)).message_id() == small
        reader = await client.create_reader("big", MessageId.earliest)
        assert (await reader.read_next(timeout_ms=10_000)).data() == payload


async def test_a_message_no_default_client_could_read_fails_its_send(broker: BrokerThread) -> None:
    async with Client(broker.service_url) as client:
        producer = await client.create_producer("too-big")
        with pytest.raises(PulsarException, match="receive limit"):
            await producer.send(bytes(OVER))
