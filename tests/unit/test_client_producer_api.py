"""pulsar-client's producer API on a fake stream: the queue-full rules, send_async's callback,
custom sequence ids, and compressed batches as they go on the wire."""

import asyncio

import pytest

from pulsar_grpc import client
from pulsar_grpc.client import CompressionType, MessageId, Result
from pulsar_grpc.client._compression import decompress_entry
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.unit.fake_stream import FakeCall
from tests.unit.test_client_batching import receipt, settle, start_producer


async def test_queue_full_fails_at_once_by_default():
    """block_if_queue_full=False (pulsar-client's default): the send beyond
    max_pending_messages raises ProducerQueueIsFull without waiting."""
    call = FakeCall()
    producer = await start_producer(
        call, max_pending_messages=2, batching_max_messages=1, send_timeout_ms=0
    )
    await producer.enqueue(b"a")
    await producer.enqueue(b"b")
    with pytest.raises(client.ProducerQueueIsFull, match="max_pending_messages=2"):
        await asyncio.wait_for(producer.enqueue(b"c"), 1)
    with pytest.raises(client.ProducerQueueIsFull):
        await asyncio.wait_for(producer.send(b"c"), 1)
    call.push(receipt(call.written[0]))
    await settle()
    await producer.enqueue(b"c")  # a receipt made room


async def test_blocked_sends_get_room_in_call_order():
    call = FakeCall()
    producer = await start_producer(
        call, block_if_queue_full=True, max_pending_messages=1, batching_max_messages=1
    )
    await producer.enqueue(b"0")
    waiting = [asyncio.ensure_future(producer.enqueue(b"%d" % i)) for i in (1, 2)]
    await settle()
    assert not any(w.done() for w in waiting)
    call.push(receipt(call.written[0]))
    await settle()
    assert waiting[0].done() and not waiting[1].done()
    assert [m.payload for r in call.written for m in r.messages] == [b"0", b"1"]
    closing = asyncio.ensure_future(producer.close())  # the one still waiting fails
    with pytest.raises(client.AlreadyClosed):
        await waiting[1]
    call.push(receipt(call.written[1]))
    await closing


async def test_send_async_calls_back_with_result_and_id():
    call = FakeCall()
    producer = await start_producer(
        call, max_pending_messages=1, batching_max_messages=1, send_timeout_ms=0
    )
    results: list[tuple[Result, MessageId | None]] = []

    def callback(result: Result, message_id: MessageId | None) -> None:
        results.append((result, message_id))

    producer.send_async(b"a", callback, {"p": "1"}, "key-1")
    producer.send_async(b"b", callback)  # queue full: fails at once, through the callback
    await settle()
    assert results == [(Result.ProducerQueueIsFull, None)]
    (request,) = call.written
    assert request.messages[0].key == "key-1" and dict(request.messages[0].properties) == {"p": "1"}
    call.push(receipt(request, ledger=4, entry=2))
    await settle()
    assert results[1] == (
        Result.Ok,
        MessageId(ledger_id=4, entry_id=2, batch_index=0, partition=-1),
    )
    await producer.close()
    producer.send_async(b"c", callback)
    await settle()
    assert results[2] == (Result.AlreadyClosed, None)


async def test_custom_sequence_ids_start_a_new_batch():
    """A batch's messages have consecutive ids on the wire: a custom id that breaks the run
    sends what is batched first, and later messages go on from it."""
    call = FakeCall()
    producer = await start_producer(
        call, last_sequence_id=-1, batching_max_messages=10, batching_max_publish_delay_ms=10_000
    )
    await producer.enqueue(b"a")  # id 0
    await producer.enqueue(b"b", sequence_id=1)  # the next id anyway: same batch
    await producer.enqueue(b"c", sequence_id=100)  # new batch
    await producer.enqueue(b"d")  # 101
    producer._partitions[0].send_batch()
    await settle()
    assert [(r.sequence_id, len(r.messages)) for r in call.written] == [(0, 2), (100, 2)]
    for request in call.written:
        call.push(receipt(request))
    await producer.flush()
    assert producer.last_sequence_id() == 101


@pytest.mark.parametrize(
    "codec",
    [CompressionType.LZ4, CompressionType.ZLib, CompressionType.ZSTD, CompressionType.SNAPPY],
)
async def test_compressed_batch_on_the_wire(codec: CompressionType) -> None:
    """A compressing producer sends one CompressedBatch per batch: codec, sizes, count and the
    first message's key beside the compressed bytes, which decompress to the messages."""
    call = FakeCall()
    producer = await start_producer(
        call,
        compression_type=codec,
        batching_max_messages=3,
        batching_max_publish_delay_ms=10_000,
    )
    sends = [(b"payload %d " % i * 20, f"k{i}") for i in range(3)]
    for payload, key in sends:
        await producer.enqueue(payload, partition_key=key)
    await settle()
    (request,) = call.written
    assert not request.messages
    batch = request.compressed
    assert (batch.compression, batch.num_messages, batch.key) == (codec, 3, b"k0")
    assert len(batch.messages) < batch.uncompressed_size
    entry = pb.DeliveredEntry(compressed=batch)
    decompress_entry(entry)
    assert [(m.payload, m.key) for m in entry.messages] == sends


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda b: setattr(b, "compression", 9), "codec 9, which this client cannot"),
        (lambda b: setattr(b, "messages", b"garbage!"), "does not decompress as ZLib"),
        (lambda b: setattr(b, "uncompressed_size", b.uncompressed_size + 1), "decompress"),
        (lambda b: setattr(b, "num_messages", 3), "holds 2 messages, not the announced 3"),
        (lambda b: setattr(b, "uncompressed_size", 2**31), "over the client's limit"),
    ],
)
def test_undecodable_batch_is_a_clear_error(mutate, match) -> None:
    from pulsar_grpc.client._wire import encode_request, frame_message

    raw = encode_request(
        5, [frame_message(b"x" * 50), frame_message(b"y" * 50)], CompressionType.ZLIB
    )
    batch = pb.ProduceRequest.FromString(raw).compressed
    mutate(batch)
    entry = pb.DeliveredEntry(ledger_id=3, entry_id=4, compressed=batch)
    with pytest.raises(client.InvalidMessage, match=match) as info:
        decompress_entry(entry)
    assert "entry 3:4" in str(info.value)
