"""The broker and an encrypted batch, over raw stubs: it stores and serves the batch byte
for byte (never decrypting), charges a consumer ``num_messages`` permits for it, dispatches it
on Key_Shared by the key in clear, and refuses an encryption block without keys.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from pulsar_grpc import Client, ConsumerCryptoFailureAction, CryptoKeyReader
from pulsar_grpc.client._compression import CompressionType, compress_batch
from pulsar_grpc.client._crypto import BatchEncryptor
from pulsar_grpc.client._wire import encode_message
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.messaging import assert_nothing_more
from tests.e2e.wire import stub
from tests.support import BrokerThread

KEYS = Path(__file__).resolve().parents[1] / "data" / "e2ee"
ENCRYPTOR = BatchEncryptor(["k"], CryptoKeyReader(str(KEYS / "ec_public.pem"), None))
DELAY_MS = 400  # bounded wait for "the broker sends nothing more"


def encrypted(key: bytes, count: int = 3) -> pb.CompressedBatch:
    """A batch of ``count`` messages, encrypted as the SDK's producer does, keyed ``key``."""
    framed = b"".join(
        b"\x6a" + bytes([len(m)]) + m
        for m in (encode_message(b"secret %d" % i, key.decode()) for i in range(count))
    )
    return compress_batch(CompressionType.NONE, framed, count, key, ENCRYPTOR)


async def produce(channel: grpc.aio.Channel, topic: str, batches: list[pb.CompressedBatch]) -> None:
    producer = stub(channel).Produce(metadata=(("x-pulsar-topic", topic),))
    await producer.read()
    sequence_id = 0
    for batch in batches:
        await producer.write(pb.ProduceRequest(sequence_id=sequence_id, compressed=batch))
        receipt = (await producer.read()).receipt
        assert receipt.batch_size == batch.num_messages
        sequence_id += batch.num_messages
    producer.cancel()


class EntryReader:
    """Reads a raw Consume stream in the background (a cancelled read would end the call)."""

    def __init__(self, call: grpc.aio.StreamStreamCall) -> None:
        self.entries: asyncio.Queue[list[pb.DeliveredEntry]] = asyncio.Queue()
        self.task = asyncio.create_task(self._run(call))

    async def _run(self, call: grpc.aio.StreamStreamCall) -> None:
        while True:
            response = await call.read()
            if response is grpc.aio.EOF:
                return
            if response.WhichOneof("response") == "messages":
                self.entries.put_nowait(list(response.messages.entries))

    async def next(self, within_s: float) -> list[pb.DeliveredEntry]:
        """The entries of the next MessageBatch within ``within_s`` ([] if none comes)."""
        try:
            return await asyncio.wait_for(self.entries.get(), within_s)
        except TimeoutError:
            return []


async def test_an_encrypted_batch_is_served_unchanged_and_counts_its_messages_as_permits(
    channel: grpc.aio.Channel,
) -> None:
    sent = [encrypted(b"a"), encrypted(b"b")]
    await produce(channel, "raw-enc", sent)
    consumer = stub(channel).Consume(
        metadata=(
            ("x-pulsar-topic", "raw-enc"),
            ("x-pulsar-subscription", "s"),
            ("x-pulsar-initial-position", "Earliest"),
        )
    )
    await consumer.read()
    reader = EntryReader(consumer)
    try:
        await consumer.write(pb.ConsumeRequest(flow=pb.Flow(permits=3)))
        (first,) = await reader.next(5)
        assert first.compressed == sent[0] and first.compressed.HasField("encryption")
        # The 3 permits are spent on the batch's 3 messages: the second batch waits for more.
        assert await reader.next(DELAY_MS / 1000) == []
        await consumer.write(pb.ConsumeRequest(flow=pb.Flow(permits=1)))
        (second,) = await reader.next(5)
        assert second.compressed == sent[1]
    finally:
        consumer.cancel()
        await asyncio.gather(reader.task, return_exceptions=True)


async def test_key_shared_dispatches_encrypted_batches_by_their_clear_key(
    broker: BrokerThread, channel: grpc.aio.Channel
) -> None:
    keys = [b"key-%d" % i for i in range(24)]
    async with Client(broker.service_url) as client:
        consumers = [
            await client.subscribe(
                "raw-enc-ks",
                "ks",
                "Key_Shared",
                initial_position="Earliest",
                crypto_failure_action=ConsumerCryptoFailureAction.CONSUME,
            )
            for _ in range(2)
        ]
        await produce(channel, "raw-enc-ks", [encrypted(k, 1) for k in keys * 2])
        owner: dict[str, int] = {}
        received = 0
        deadline = asyncio.get_running_loop().time() + 30
        while received < len(keys) * 2:
            assert asyncio.get_running_loop().time() < deadline, f"{received} received"
            for index, consumer in enumerate(consumers):
                for message in await consumer.batch_receive():
                    received += 1
                    key = message.partition_key()
                    assert owner.setdefault(key, index) == index, f"{key} went to both"
        assert set(owner) == {k.decode() for k in keys}
        assert set(owner.values()) == {0, 1}  # a lost key would send every batch to one
        for consumer in consumers:
            await assert_nothing_more(consumer)


async def test_an_encryption_block_without_keys_is_refused(channel: grpc.aio.Channel) -> None:
    batch = encrypted(b"a")
    del batch.encryption.keys[:]
    producer = stub(channel).Produce(metadata=(("x-pulsar-topic", "raw-enc-bad"),))
    await producer.read()
    await producer.write(pb.ProduceRequest(sequence_id=0, compressed=batch))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await producer.read()
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "encryption has no keys" in (info.value.details() or "")
