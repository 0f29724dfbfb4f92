"""A receipt means durable: kill -9 the broker, restart it on the same data, nothing is lost."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc

from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.messaging import RECEIVE_MS
from tests.e2e.wire import batch, stub
from tests.support import StandaloneProcess


def consume_metadata(topic: str, sub: str) -> tuple[tuple[str, str], ...]:
    return (
        ("x-pulsar-topic", topic),
        ("x-pulsar-subscription", sub),
        ("x-pulsar-initial-position", "Earliest"),
    )


async def drain(address: str, topic: str, sub: str, expect: int) -> list[bytes]:
    """Receive ``expect`` messages (fails after ``RECEIVE_MS``), acking none."""
    payloads: list[bytes] = []
    async with asyncio.timeout(RECEIVE_MS / 1000), grpc.aio.insecure_channel(address) as ch:
        call = stub(ch).Consume(metadata=consume_metadata(topic, sub))
        await call.read()
        await call.write(pb.ConsumeRequest(flow=pb.Flow(permits=100_000)))
        while len(payloads) < expect:
            response = await call.read()
            for entry in response.messages.entries:
                skip = set(entry.acked_batch_indexes)
                payloads += [m.payload for i, m in enumerate(entry.messages) if i not in skip]
        call.cancel()
    return payloads


async def test_receipted_messages_and_acks_survive_kill_9(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    broker = standalone_factory()
    topic = "persistent://public/default/durable"
    receipts: list[pb.SendReceipt] = []
    async with grpc.aio.insecure_channel(broker.grpc_address) as ch:
        s = stub(ch)
        consumer = s.Consume(metadata=consume_metadata(topic, "sub"))
        await consumer.read()  # subscription exists before anything is produced
        producer = s.Produce(metadata=(("x-pulsar-topic", topic),))
        await producer.read()
        for i in range(50):
            await producer.write(batch(i * 10, [f"m{i}-{j}".encode() for j in range(10)]))
        for _ in range(50):
            receipts.append((await producer.read()).receipt)
        # Ack the first 20 batches, and 3 messages of batch 20; wait until the ack is durable.
        ids = [
            pb.MessageId(ledger_id=r.ledger_id, entry_id=r.entry_id, batch_index=-1)
            for r in receipts[:20]
        ]
        r20 = receipts[20]
        ids += [
            pb.MessageId(ledger_id=r20.ledger_id, entry_id=r20.entry_id, batch_index=i)
            for i in range(3)
        ]
        await consumer.write(pb.ConsumeRequest(flow=pb.Flow(permits=1000)))
        await consumer.write(pb.ConsumeRequest(ack=pb.Ack(ids=ids, request_id=99)))
        while True:
            response = await consumer.read()
            if response.HasField("ack_receipt"):
                assert response.ack_receipt.request_id == 99
                break
        broker.kill9()

    restarted = standalone_factory(broker.data_dir)
    remaining = await drain(restarted.grpc_address, topic, "sub", 500 - 203)
    expected = [f"m{i}-{j}".encode() for i in range(20, 50) for j in range(10)][3:]
    assert remaining == expected
    everything = await drain(restarted.grpc_address, topic, "fresh", 500)
    assert len(everything) == 500
