"""Batch container triggers and the producer's batching, sequence ids, receipts and limits.

The producer runs against a fake stream call, so these tests see exactly what goes on the wire.
"""

import asyncio

import grpc
import pytest

from pulsar_grpc import client
from pulsar_grpc.client import MessageId
from pulsar_grpc.client._batching import (
    BatchContainer,
    BatchingType,
    KeyBasedBatchContainer,
    batch_container,
)
from pulsar_grpc.client._producer import PartitionProducer, Producer, ProducerConfig
from pulsar_grpc.client._routing import Router
from pulsar_grpc.client._wire import encode_message, encode_request, frame_message
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.unit.fake_stream import FakeCall
from tests.waiting import eventually


def msg(payload: bytes) -> bytes:
    return frame_message(payload)


# ---------------------------------------------------------------- container


def test_container_full_by_count():
    c = BatchContainer[int](max_messages=3, max_bytes=10**6)
    for i in range(2):
        c.add(msg(b"x"), i)
        assert not c.is_full()
    c.add(msg(b"x"), 2)
    assert c.is_full() and len(c) == 3
    assert not c.fits(msg(b"x"))


def test_container_full_by_bytes():
    size = len(msg(b"a" * 40))
    c = BatchContainer[int](max_messages=100, max_bytes=2 * size)
    c.add(msg(b"a" * 40), 0)
    assert not c.is_full() and c.num_bytes == size
    assert c.fits(msg(b"a" * 40))
    assert not c.fits(msg(b"a" * 41))  # would exceed: send the batch first
    c.add(msg(b"a" * 40), 1)
    assert c.is_full()


def test_oversized_message_travels_alone():
    c = BatchContainer[int](max_messages=100, max_bytes=10)
    assert c.fits(msg(b"z" * 100))  # an empty batch takes anything
    c.add(msg(b"z" * 100), 0)
    assert c.is_full()


def test_drain_builds_one_request_and_empties():
    c = BatchContainer[str](max_messages=10, max_bytes=1000)
    c.add(msg(b"a"), "fa")
    c.add(msg(b"b"), "fb")
    [(sequence_id, raw, tokens)] = c.drain(sequence_id=41)
    assert sequence_id == 41
    request = pb.ProduceRequest.FromString(raw)
    assert request.sequence_id == 41
    assert [m.payload for m in request.messages] == [b"a", b"b"]
    assert tokens == ["fa", "fb"]
    assert len(c) == 0 and c.num_bytes == 0
    assert c.drain(sequence_id=43) == []


@pytest.mark.parametrize(
    "fields",
    [
        {"payload": b"x" * 300},
        {"payload": b"", "key": "k"},
        {"payload": b"p", "key": "user-\u00e9"},
        {"payload": b"p", "properties": {"a": "b"}, "event_time": 7, "ordering_key": b"o"},
    ],
)
def test_hand_encoding_matches_protobuf(fields: dict) -> None:
    assert pb.MessageData.FromString(encode_message(**fields)) == pb.MessageData(**fields)
    framed = frame_message(**fields)
    request = pb.ProduceRequest.FromString(encode_request(2**40, [framed, framed]))
    assert request.sequence_id == 2**40 and list(request.messages) == [pb.MessageData(**fields)] * 2


@pytest.mark.parametrize("size", [0, 1, 127, 128, 2047, 2048, 20_000])
def test_a_payload_alone_is_framed_as_protobuf_frames_it(size: int) -> None:
    # Under 2 KiB the head comes from a table, above it is computed: both must be protobuf's.
    payload = bytes(range(256)) * (size // 256) + b"p" * (size % 256)
    request = pb.ProduceRequest(messages=[pb.MessageData(payload=payload)])
    assert pb.ProduceRequest.FromString(encode_request(0, [frame_message(payload)])) == request


def test_container_validates_limits():
    with pytest.raises(ValueError):
        BatchContainer[int](0, 10)


# ---------------------------------------------------------------- producer on a fake stream


def ready(last_sequence_id=0, name="p-1"):
    return pb.ProduceResponse(
        ready=pb.ProducerReady(producer_name=name, last_sequence_id=last_sequence_id, topic="t")
    )


def receipt(request, ledger=5, entry=0, duplicate=False, partition=-1):
    return pb.ProduceResponse(
        receipt=pb.SendReceipt(
            sequence_id=request.sequence_id,
            highest_sequence_id=request.sequence_id + len(request.messages) - 1,
            ledger_id=ledger,
            entry_id=entry,
            partition=partition,
            batch_size=len(request.messages),
            duplicate=duplicate,
        )
    )


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def start_producer(
    call: FakeCall, last_sequence_id=0, block_if_queue_full=False, **conf
) -> Producer:
    config = ProducerConfig(**conf)
    part = PartitionProducer(config)
    call.push(ready(last_sequence_id))
    await part.start(call.connect)
    return Producer("t", [part], None, config.max_pending_messages, block_if_queue_full)


async def test_batch_sent_when_count_reached_with_consecutive_sequence_ids():
    call = FakeCall()
    producer = await start_producer(
        call, last_sequence_id=99, batching_max_messages=3, batching_max_publish_delay_ms=10_000
    )
    assert producer.producer_name() == "p-1" and producer.last_sequence_id() == 99
    futures = [await producer.enqueue(b"m%d" % i) for i in range(7)]
    await settle()
    assert [(r.sequence_id, len(r.messages)) for r in call.written] == [(100, 3), (103, 3)]
    assert [m.payload for m in call.written[0].messages] == [b"m0", b"m1", b"m2"]
    call.push(receipt(call.written[0], ledger=7, entry=1))
    await settle()
    assert [f.result() for f in futures[:3]] == [
        MessageId(ledger_id=7, entry_id=1, batch_index=i, partition=-1) for i in range(3)
    ]
    assert not any(f.done() for f in futures[3:])
    assert producer.last_sequence_id() == 102


async def test_grouped_receipts_resolve_each_batch_in_order_duplicates_included():
    call = FakeCall()
    producer = await start_producer(
        call, batching_max_messages=2, batching_max_publish_delay_ms=10_000
    )
    futures = [await producer.enqueue(b"m%d" % i) for i in range(6)]
    await settle()
    assert call.metadata["x-pulsar-grouped-receipts"] is True  # the SDK asks for them
    first, second, third = call.written
    grouped = [
        receipt(first, ledger=4, entry=0).receipt,
        receipt(second, duplicate=True).receipt,
        receipt(third, ledger=4, entry=1).receipt,
    ]
    call.push(pb.ProduceResponse(receipts=pb.SendReceipts(receipts=grouped)))
    await settle()
    assert [f.result() for f in futures] == [
        MessageId(ledger_id=4, entry_id=0, batch_index=0, partition=-1),
        MessageId(ledger_id=4, entry_id=0, batch_index=1, partition=-1),
        MessageId(ledger_id=-1, entry_id=-1, batch_index=-1, partition=-1),
        MessageId(ledger_id=-1, entry_id=-1, batch_index=-1, partition=-1),
        MessageId(ledger_id=4, entry_id=1, batch_index=0, partition=-1),
        MessageId(ledger_id=4, entry_id=1, batch_index=1, partition=-1),
    ]
    assert producer.last_sequence_id() == 6  # ids 1..6: the broker had stored up to 0


async def test_batch_sent_by_delay():
    call = FakeCall()
    producer = await start_producer(
        call, batching_max_messages=100, batching_max_publish_delay_ms=20
    )
    await producer.enqueue(b"a")
    await producer.enqueue(b"b")
    await settle()
    assert call.written == []
    await eventually(lambda: call.written)
    assert len(call.written) == 1 and len(call.written[0].messages) == 2


async def test_batch_sent_by_bytes():
    call = FakeCall()
    size = len(msg(b"x" * 100))
    producer = await start_producer(
        call, batching_max_bytes=2 * size + 10, batching_max_publish_delay_ms=10_000
    )
    for _ in range(3):
        await producer.enqueue(b"x" * 100)
    await settle()
    # the third message did not fit: the first two went out together
    assert [len(r.messages) for r in call.written] == [2]


async def test_send_awaits_receipt_and_fields_reach_the_wire():
    call = FakeCall()
    producer = await start_producer(call, batching_max_publish_delay_ms=1)
    task = asyncio.ensure_future(producer.send(b"p", {"a": "b"}, "k", b"o", event_timestamp=77))
    await eventually(lambda: call.written)
    (request,) = call.written
    data = request.messages[0]
    assert (data.payload, data.key, data.ordering_key, dict(data.properties), data.event_time) == (
        b"p",
        "k",
        b"o",
        {"a": "b"},
        77,
    )
    assert not task.done()
    call.push(receipt(request, ledger=3, entry=9))
    assert await task == MessageId(ledger_id=3, entry_id=9, batch_index=0, partition=-1)


async def test_no_stored_sequence_id_starts_at_zero():
    part = PartitionProducer(ProducerConfig())
    part.on_ready(pb.ProducerReady(last_sequence_id=-1))
    assert (part.last_sequence_id, part._next_sequence_id) == (-1, 0)


async def test_initial_sequence_id_is_the_last_published_one():
    """As Pulsar's initialSequenceId: the first message gets the id after it."""
    call = FakeCall()
    producer = await start_producer(call, last_sequence_id=500, initial_sequence_id=10)
    await producer.enqueue(b"a")
    producer._partitions[0].send_batch()
    await settle()
    assert call.written[0].sequence_id == 11
    assert producer.last_sequence_id() == 10


async def test_duplicate_receipt_resolves_to_sentinel_ids():
    call = FakeCall()
    producer = await start_producer(call, batching_max_messages=2)
    futures = [await producer.enqueue(b"a"), await producer.enqueue(b"b")]
    await settle()
    call.push(receipt(call.written[0], duplicate=True))
    ids = await asyncio.gather(*futures)
    assert ids == [MessageId(ledger_id=-1, entry_id=-1, batch_index=-1, partition=-1)] * 2


async def test_backpressure_bounds_pending_messages():
    call = FakeCall()
    producer = await start_producer(
        call,
        block_if_queue_full=True,
        max_pending_messages=4,
        batching_max_messages=2,
        batching_max_publish_delay_ms=10_000,
    )
    for i in range(4):
        await producer.enqueue(b"%d" % i)
    blocked = asyncio.ensure_future(producer.enqueue(b"4"))
    await settle()
    assert not blocked.done()
    call.push(receipt(call.written[0]))
    await settle()
    assert blocked.done()  # room for the receipted batch's two messages


async def test_send_timeout_fails_pending_and_ignores_late_receipt():
    call = FakeCall()
    producer = await start_producer(call, send_timeout_ms=30, batching_max_messages=1)
    first = await producer.enqueue(b"a")
    with pytest.raises(client.Timeout):
        await asyncio.wait_for(first, 1)
    late = call.written[0]
    second = await producer.enqueue(b"b")
    await settle()
    call.push(receipt(late))  # stale: its batch already failed
    call.push(receipt(call.written[1], ledger=8, entry=2))
    assert await asyncio.wait_for(second, 1) == MessageId(
        ledger_id=8, entry_id=2, batch_index=0, partition=-1
    )


async def test_stream_error_fails_every_pending_send_and_later_sends():
    call = FakeCall()
    producer = await start_producer(
        call, batching_max_messages=2, batching_max_publish_delay_ms=10_000
    )
    futures = [await producer.enqueue(b"%d" % i) for i in range(3)]  # 2 sent, 1 batched
    trailers = grpc.aio.Metadata(("pulsar-error-code", "22"))
    call.push(grpc.aio.AioRpcError(grpc.StatusCode.FAILED_PRECONDITION, None, trailers, "no"))
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert all(isinstance(r, client.NotAllowed) for r in results)
    with pytest.raises(client.NotAllowed):
        await producer.enqueue(b"x")
    assert call.cancelled


async def test_out_of_order_receipt_fails_the_producer():
    call = FakeCall()
    producer = await start_producer(call, batching_max_messages=1)
    first = await producer.enqueue(b"a")
    await settle()
    ahead = call.written[0].sequence_id + 5
    call.push(pb.ProduceResponse(receipt=pb.SendReceipt(sequence_id=ahead)))
    with pytest.raises(client.PulsarError, match="expected"):
        await asyncio.wait_for(first, 1)


async def test_flush_and_close_wait_for_receipts():
    call = FakeCall()
    producer = await start_producer(call, batching_max_publish_delay_ms=10_000)
    future = await producer.enqueue(b"a")
    flushing = asyncio.ensure_future(producer.flush())
    await settle()
    assert len(call.written) == 1 and not flushing.done()
    call.push(receipt(call.written[0]))
    await flushing
    assert future.done()
    await producer.close()
    assert call.half_closed
    with pytest.raises(client.AlreadyClosed):
        await producer.enqueue(b"b")


async def test_ready_error_maps_to_specific_error():
    call = FakeCall()
    trailers = grpc.aio.Metadata(("pulsar-error-code", "16"))
    call.push(grpc.aio.AioRpcError(grpc.StatusCode.FAILED_PRECONDITION, None, trailers, "busy"))
    with pytest.raises(client.ProducerBusy):
        await PartitionProducer(ProducerConfig()).start(call.connect)


async def test_partitioned_producer_routes_keys_by_hash_and_ids_carry_partition():
    calls = [FakeCall() for _ in range(3)]
    config = ProducerConfig(batching_max_messages=1)
    parts = []
    for i, call in enumerate(calls):
        part = PartitionProducer(config, partition=i)
        call.push(ready())
        await part.start(call.connect)
        parts.append(part)
    producer = Producer("t", parts, Router(3, "round_robin"), 100)
    future = await producer.enqueue(b"v", partition_key="user-42")
    await settle()
    target = Router(3).choose("user-42")
    assert [len(c.written) for c in calls] == [int(i == target) for i in range(3)]
    calls[target].push(receipt(calls[target].written[0], ledger=1, entry=2))
    assert await future == MessageId(ledger_id=1, entry_id=2, batch_index=0, partition=target)


# ---------------------------------------------------------------- key-based batching


def test_key_based_container_keeps_one_batch_per_key_with_consecutive_ids():
    c = KeyBasedBatchContainer[int](max_messages=5, max_bytes=10**6)
    for i, key in enumerate(["a", "b", "a", None]):
        assert c.fits(msg(b"%d" % i), key)
        c.add(msg(b"%d" % i), i, key)
    assert len(c) == 4 and not c.is_full()
    c.add(msg(b"4"), 4, "b")
    assert c.is_full() and not c.fits(msg(b"5"), "c")  # the limits count every key
    drained = c.drain(sequence_id=100)
    assert [(seq, tokens) for seq, _, tokens in drained] == [
        (100, [0, 2]),
        (102, [1, 4]),
        (104, [3]),
    ]
    requests = [pb.ProduceRequest.FromString(raw) for _, raw, _ in drained]
    payloads = [[m.payload for m in r.messages] for r in requests]
    assert payloads == [[b"0", b"2"], [b"1", b"4"], [b"3"]]
    assert len(c) == 0 and c.num_bytes == 0 and c.drain(sequence_id=105) == []


def test_batching_type_chooses_the_container():
    assert isinstance(batch_container("key_based", 10, 100), KeyBasedBatchContainer)
    assert isinstance(batch_container(BatchingType.Default, 10, 100), BatchContainer)
    with pytest.raises(ValueError):
        batch_container("by_colour", 10, 100)


async def test_key_based_producer_sends_one_request_per_key_ordering_key_first():
    call = FakeCall()
    producer = await start_producer(
        call,
        batching_type=BatchingType.KeyBased,
        batching_max_messages=6,
        batching_max_publish_delay_ms=10_000,
    )
    sends = [
        (b"1", "k1", None),
        (b"2", "k2", None),
        (b"3", "k1", None),
        (b"4", "k2", b"o1"),  # the ordering key wins over the key
        (b"5", "k1", b"o1"),
        (b"6", "k2", None),
    ]
    futures = [await producer.enqueue(p, partition_key=k, ordering_key=o) for p, k, o in sends]
    await settle()
    requests = [(r.sequence_id, [m.payload for m in r.messages]) for r in call.written]
    assert requests == [(1, [b"1", b"3"]), (3, [b"2", b"6"]), (5, [b"4", b"5"])]
    for entry, request in enumerate(call.written):
        call.push(receipt(request, ledger=7, entry=entry))
    ids = await asyncio.wait_for(asyncio.gather(*futures), 1)
    assert ids[0] == MessageId(ledger_id=7, entry_id=0, batch_index=0, partition=-1) and ids[
        2
    ] == MessageId(ledger_id=7, entry_id=0, batch_index=1, partition=-1)
    assert ids[1] == MessageId(ledger_id=7, entry_id=1, batch_index=0, partition=-1) and ids[
        4
    ] == MessageId(ledger_id=7, entry_id=2, batch_index=1, partition=-1)


async def test_default_batching_mixes_keys_in_one_request():
    call = FakeCall()
    producer = await start_producer(
        call, batching_max_messages=3, batching_max_publish_delay_ms=10_000
    )
    for i, key in enumerate(["a", "b", "a"]):
        await producer.enqueue(b"%d" % i, partition_key=key)
    await settle()
    assert [len(r.messages) for r in call.written] == [3]
