"""An entry the broker accepts (under maxMessageSize, 5 MB by default) reaches an SDK consumer
although it is over gRPC's default 4 MiB message limit: the SDK's channels lift that limit."""

from __future__ import annotations

from pulsar_grpc.client import Client, MessageId
from tests.support import BrokerThread

BIG = 4_500_000  # over 4 MiB, under 5 MB


async def test_a_message_over_4_mib_is_produced_consumed_and_read(broker: BrokerThread) -> None:
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
