"""Batch compression through a real broker: every codec round-trips, batched and not; the
broker stores and serves a compressed batch byte for byte (smaller than the plaintext, never
decompressed); Key_Shared still sees the key; a codec the consumer cannot undo is a clear error.
"""

from __future__ import annotations

import aiohttp
import grpc
import pytest

from pulsar_grpc.client import Client, CompressionType, InvalidMessage, Timeout
from pulsar_grpc.client._compression import compress_batch
from pulsar_grpc.client._wire import encode_message
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.messaging import assert_nothing_more, dead_letter_pair, receive_n
from tests.e2e.wire import stub
from tests.support import BrokerThread

CODECS = [CompressionType.LZ4, CompressionType.ZLib, CompressionType.ZSTD, CompressionType.SNAPPY]
# Compressible, as JSON records are: the same field names and similar values in every message.
PAYLOADS = [
    b'{"user": "user-%04d", "event": "page_view", "path": "/products/%d", "ok": true}' % (i, i % 7)
    for i in range(200)
]


async def storage_size(broker: BrokerThread, topic: str) -> int:
    """The topic's stored bytes, as its admin stats report them (``storageSize``)."""
    async with (
        aiohttp.ClientSession(base_url=broker.http_url) as http,
        http.get(f"/admin/v2/persistent/public/default/{topic}/stats") as resp,
    ):
        assert resp.status == 200, await resp.text()
        return int((await resp.json())["storageSize"])


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "one-per-entry"])
@pytest.mark.parametrize("codec", CODECS, ids=[c.name for c in CODECS])
async def test_every_codec_round_trips_through_the_broker(
    broker: BrokerThread, codec: CompressionType, batched: bool
) -> None:
    topic = f"zip-{codec.name.lower()}-{int(batched)}"
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(topic, "sub", initial_position="Earliest")
        producer = await client.create_producer(
            topic,
            compression_type=codec,
            batching_enabled=batched,
            batching_max_messages=50,
            batching_max_publish_delay_ms=1000,
            block_if_queue_full=True,
        )
        futures = [
            await producer.enqueue(p, {"i": str(i)}, f"k{i % 5}", event_timestamp=1_000 + i)
            for i, p in enumerate(PAYLOADS)
        ]
        await producer.flush()
        ids = [await f for f in futures]
        entries = {(i.ledger_id(), i.entry_id()) for i in ids}
        assert len(entries) == (4 if batched else len(PAYLOADS))
        got = await receive_n(consumer, len(PAYLOADS))
        assert [m.data() for m in got] == PAYLOADS
        assert [m.message_id() for m in got] == ids
        assert [m.properties() for m in got] == [{"i": str(i)} for i in range(len(PAYLOADS))]
        assert [m.partition_key() for m in got] == [f"k{i % 5}" for i in range(len(PAYLOADS))]
        assert [m.event_timestamp() for m in got] == [1_000 + i for i in range(len(PAYLOADS))]
        await consumer.acknowledge(got[-1])
        reader = await client.create_reader(topic, "earliest")
        assert (await reader.read_next(5000)).data() == PAYLOADS[0]


async def test_compressed_entries_are_stored_smaller(broker: BrokerThread) -> None:
    """The same messages take less room on the broker compressed than plain."""
    sizes = {}
    async with Client(broker.service_url) as client:
        for codec in [CompressionType.NONE, *CODECS]:
            topic = f"size-{codec.name.lower()}"
            producer = await client.create_producer(
                topic, compression_type=codec, batching_max_publish_delay_ms=1000
            )
            for p in PAYLOADS:
                await producer.enqueue(p)
            await producer.flush()
            await producer.close()
            sizes[codec] = await storage_size(broker, topic)
    plaintext = sum(len(p) for p in PAYLOADS)
    assert sizes[CompressionType.NONE] > plaintext
    for codec in CODECS:
        assert sizes[codec] < plaintext / 2, (codec, sizes)


async def test_the_broker_serves_a_compressed_batch_byte_for_byte(
    channel: grpc.aio.Channel,
) -> None:
    """What a producer in any language sends is what a consumer gets: the broker counts the
    batch's messages from num_messages and never decompresses it."""
    messages = b"".join(
        b"\x6a" + bytes([len(m)]) + m for m in (encode_message(p) for p in PAYLOADS[:3])
    )
    sent = compress_batch(CompressionType.ZSTD, messages, 3, b"key-a")
    s = stub(channel)
    producer = s.Produce(metadata=(("x-pulsar-topic", "raw-zip"),))
    await producer.read()
    await producer.write(pb.ProduceRequest(sequence_id=0, compressed=sent))
    receipt = (await producer.read()).receipt
    assert (receipt.batch_size, receipt.highest_sequence_id) == (3, 2)
    consumer = s.Consume(
        metadata=(
            ("x-pulsar-topic", "raw-zip"),
            ("x-pulsar-subscription", "s"),
            ("x-pulsar-initial-position", "Earliest"),
        )
    )
    await consumer.read()
    await consumer.write(pb.ConsumeRequest(flow=pb.Flow(permits=10)))
    response = await consumer.read()
    while response.WhichOneof("response") != "messages":  # e.g. active_consumer_change
        response = await consumer.read()
    (entry,) = response.messages.entries
    assert entry.compressed == sent and not entry.messages
    consumer.cancel()
    producer.cancel()


@pytest.mark.parametrize(
    ("plain", "count", "why"),
    [
        ([], 0, "num_messages 0"),
        ([pb.MessageData(payload=b"y")], 1, "both messages and compressed"),
    ],
    ids=["no-count", "both"],
)
async def test_the_broker_refuses_an_inconsistent_compressed_batch(
    channel: grpc.aio.Channel, plain: list[pb.MessageData], count: int, why: str
) -> None:
    batch = compress_batch(CompressionType.LZ4, b"\x6a\x03\x0a\x01x", 1, b"")
    batch.num_messages = count
    producer = stub(channel).Produce(metadata=(("x-pulsar-topic", "raw-zip-bad"),))
    await producer.read()
    await producer.write(pb.ProduceRequest(sequence_id=0, messages=plain, compressed=batch))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await producer.read()
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert why in (info.value.details() or "")


async def test_key_shared_dispatches_compressed_batches_by_key(broker: BrokerThread) -> None:
    """A key-based batching producer with compression: each entry holds one key, which the
    broker reads from beside the compressed bytes, so all entries of a key go to one
    consumer (without it, entries without a key spread over the consumers)."""
    topic = "zip-key-shared"
    async with Client(broker.service_url) as client:
        consumers = [
            await client.subscribe(topic, "ks", "Key_Shared", initial_position="Earliest")
            for _ in range(2)
        ]
        producer = await client.create_producer(
            topic,
            compression_type=CompressionType.LZ4,
            batching_type="key_based",
            batching_max_publish_delay_ms=1000,
        )
        keys = [f"key-{i}" for i in range(32)]
        for round_ in range(5):  # one entry per key and round
            for key in keys:
                await producer.enqueue(b"%s|%d" % (key.encode(), round_), partition_key=key)
            await producer.flush()
        owner: dict[str, int] = {}
        received = 0
        for index, consumer in enumerate(consumers):  # everything is dispatched by now
            while True:
                try:
                    message = await consumer.receive(1000)
                except Timeout:
                    break
                received += 1
                key = message.partition_key()
                assert owner.setdefault(key, index) == index, f"{key} went to both consumers"
        assert received == len(keys) * 5
        assert set(owner) == set(keys)
        # Both consumers own keys: were the key lost in compression, one would get them all.
        assert set(owner.values()) == {0, 1}
        for consumer in consumers:
            await assert_nothing_more(consumer)


async def test_a_codec_the_consumer_cannot_undo_is_a_clear_error(
    broker: BrokerThread, channel: grpc.aio.Channel
) -> None:
    """A batch in a codec this client does not know (as a newer producer might send) fails
    the consumer's receive with InvalidMessage naming the entry and the codec, after the
    messages before it were delivered."""
    producer = stub(channel).Produce(metadata=(("x-pulsar-topic", "zip-unknown"),))
    await producer.read()
    await producer.write(pb.ProduceRequest(sequence_id=0, messages=[pb.MessageData(payload=b"ok")]))
    await producer.read()
    unknown = compress_batch(CompressionType.ZLIB, b"\x6a\x03\x0a\x01x", 1, b"")
    unknown.compression = 7  # no such codec in this client
    await producer.write(pb.ProduceRequest(sequence_id=1, compressed=unknown))
    await producer.read()
    producer.cancel()
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe("zip-unknown", "sub", initial_position="Earliest")
        assert (await consumer.receive(5000)).data() == b"ok"
        with pytest.raises(InvalidMessage, match="codec 7, which this client cannot"):
            await consumer.receive(5000)


async def test_a_dead_lettered_compressed_batch_moves_whole(broker: BrokerThread) -> None:
    """The broker does not decompress, so a compressed batch past max_redeliver_count goes to
    the dead-letter topic as it was: all its messages, still readable, without the origin
    properties an uncompressed batch's messages get."""
    topic = "zip-dlq"
    async with Client(broker.service_url) as client:
        dlq, consumer = await dead_letter_pair(client, topic)
        producer = await client.create_producer(
            topic,
            compression_type=CompressionType.LZ4,
            batching_max_messages=3,
            batching_max_publish_delay_ms=10_000,
        )
        for i in range(3):
            await producer.enqueue(b"p%d" % i, {"i": str(i)})
        await producer.flush()
        for _ in range(2):  # delivered, then redelivered once: then dead-lettered
            for message in await receive_n(consumer, 3):
                await consumer.negative_acknowledge(message)
        dead = await receive_n(dlq, 3)
        assert [(m.data(), m.properties()) for m in dead] == [
            (b"p%d" % i, {"i": str(i)}) for i in range(3)
        ]
        await assert_nothing_more(consumer, 300)
