"""Permit accounting, ack grouping, and the consumer's stream logic on a fake call."""

import asyncio

import grpc
import pytest

from pulsar_grpc import client
from pulsar_grpc.client import MessageId
from pulsar_grpc.client._acks import AckGroup
from pulsar_grpc.client._consumer import Consumer
from pulsar_grpc.client._flow import PermitTracker
from pulsar_grpc.client._partition_consumer import (
    ConsumerConfig,
    MessageQueue,
    PartitionConsumer,
    seek_request,
)
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.unit.fake_stream import FakeCall
from tests.waiting import eventually


def consumer_of(parts: list[PartitionConsumer], queue: MessageQueue) -> Consumer:
    """The application's consumer over streams started by the test."""
    consumer = Consumer("t", "s", parts[0].config, queue)
    consumer.add_streams(parts)
    return consumer


# ---------------------------------------------------------------- permits


def test_refill_once_half_the_queue_was_consumed():
    t = PermitTracker(receiver_queue_size=10)
    assert t.initial_permits() == 10
    assert [t.consumed() for _ in range(4)] == [0, 0, 0, 0]
    assert t.consumed() == 5
    assert [t.consumed() for _ in range(5)] == [0, 0, 0, 0, 5]


def test_bulk_consumption_is_returned_in_one_flow():
    t = PermitTracker(receiver_queue_size=10)
    assert t.consumed(3) == 0
    assert t.consumed(7) == 10


def test_queue_of_one_refills_every_message():
    t = PermitTracker(receiver_queue_size=1)
    assert [t.consumed() for _ in range(3)] == [1, 1, 1]


# ---------------------------------------------------------------- ack grouping


def test_individual_acks_collapse_into_one_request():
    g = AckGroup()
    for i in range(3):
        g.individual(MessageId(ledger_id=1, entry_id=i, batch_index=0))
    g.individual(MessageId(ledger_id=1, entry_id=0, batch_index=0))  # duplicate
    (request,) = g.take()
    assert request.ack.type == pb.Individual
    assert [(i.entry_id, i.batch_index) for i in request.ack.ids] == [(0, 0), (1, 0), (2, 0)]
    assert g.take() == [] and len(g) == 0


def test_cumulative_keeps_the_highest():
    g = AckGroup()
    g.cumulative(MessageId(ledger_id=1, entry_id=5, batch_index=0))
    g.cumulative(MessageId(ledger_id=1, entry_id=3, batch_index=0))
    g.cumulative(MessageId(ledger_id=1, entry_id=5, batch_index=2))
    (request,) = g.take()
    assert request.ack.type == pb.Cumulative
    assert [(i.entry_id, i.batch_index) for i in request.ack.ids] == [(5, 2)]


def test_nacks_are_their_own_request():
    g = AckGroup()
    g.individual(MessageId(ledger_id=1, entry_id=1))
    g.negative(MessageId(ledger_id=1, entry_id=2))
    g.negative(MessageId(ledger_id=1, entry_id=3))
    kinds = [r.WhichOneof("request") for r in g.take()]
    assert kinds == ["ack", "negative_ack"]


def test_group_full_at_max_pending():
    g = AckGroup(max_pending=3)
    g.individual(MessageId(ledger_id=1, entry_id=1))
    g.negative(MessageId(ledger_id=1, entry_id=2))
    assert not g.is_full()
    g.cumulative(MessageId(ledger_id=1, entry_id=3))
    assert g.is_full()


def test_an_entry_acked_over_several_flushes_sends_each_index_once_then_the_entry():
    g = AckGroup()
    g.delivered(1, 7, 4, partition=2)
    assert g.index((1, 7), 0, 2) is False
    g.individual(
        MessageId(ledger_id=1, entry_id=7, batch_index=1, partition=2)
    )  # by id: the same entry's tracking
    (request,) = g.take()
    assert [(i.entry_id, i.batch_index, i.partition) for i in request.ack.ids] == [
        (7, 0, 2),
        (7, 1, 2),
    ]
    g.index((1, 7), 1, 2)  # a duplicate of an index already sent
    g.index((1, 7), 2, 2)
    (request,) = g.take()
    assert [(i.entry_id, i.batch_index) for i in request.ack.ids] == [(7, 2)]
    g.index((1, 7), 3, 2)
    (request,) = g.take()
    assert [(i.entry_id, i.batch_index, i.partition) for i in request.ack.ids] == [(7, -1, 2)]
    g.index((1, 7), 3, 2)  # the entry is done: a late duplicate goes out as itself
    (request,) = g.take()
    assert [(i.entry_id, i.batch_index) for i in request.ack.ids] == [(7, 3)]


def test_acks_added_before_deliveries_are_forgotten_still_go_out():
    g = AckGroup()
    g.delivered(1, 1, 2)
    g.index((1, 1), 0, -1)
    g.index((1, 1), 1, -1)
    g.forget_deliveries()  # a seek: the entry will be delivered anew
    g.index((1, 1), 0, -1)  # untracked now: by itself
    (request,) = g.take()
    assert sorted((i.entry_id, i.batch_index) for i in request.ack.ids) == [(1, -1), (1, 0)]


def test_an_id_the_broker_cannot_take_is_refused_when_acked_not_when_sent():
    g = AckGroup()
    g.individual(MessageId(ledger_id=1, entry_id=1, batch_index=0))
    for add in (g.individual, g.cumulative, g.negative):
        with pytest.raises(ValueError, match="cannot be sent"):
            add(
                MessageId(ledger_id=-1, entry_id=-1, batch_index=-1, partition=0)
            )  # what a deduplicated send resolves to
    (request,) = g.take()
    assert [(i.entry_id, i.batch_index) for i in request.ack.ids] == [(1, 0)]


def test_seek_request_targets():
    assert (
        seek_request(
            MessageId(ledger_id=3, entry_id=4, batch_index=1, partition=0), 7
        ).message_id.entry_id
        == 4
    )
    assert seek_request(1700, 7).publish_time == 1700
    assert seek_request(MessageId.earliest, 7).publish_time == 0
    assert seek_request(MessageId.latest, 7).publish_time == 2**63 - 1
    assert seek_request(5, 9).request_id == 9


# ---------------------------------------------------------------- consumer on a fake stream


def subscribed(topic="persistent://public/default/t"):
    return pb.ConsumeResponse(
        subscribed=pb.ConsumerSubscribed(consumer_name="c-1", topic=topic, subscription="s")
    )


def batch(entry_id, count, acked=(), ledger=1):
    entry = pb.DeliveredEntry(
        ledger_id=ledger,
        entry_id=entry_id,
        sequence_id=entry_id * 100,
        publish_time=5,
        acked_batch_indexes=list(acked),
        messages=[pb.MessageData(payload=b"%d-%d" % (entry_id, i)) for i in range(count)],
    )
    return pb.ConsumeResponse(messages=pb.MessageBatch(entries=[entry]))


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def start_consumer(call: FakeCall, topic: str = "t", **conf) -> Consumer:
    queue = MessageQueue()
    part = PartitionConsumer(ConsumerConfig(**conf), queue, topic)
    call.push(subscribed())
    await part.start(call.connect)
    return consumer_of([part], queue)


async def test_initial_flow_then_refill_at_half_in_one_flow():
    call = FakeCall()
    consumer = await start_consumer(call, receiver_queue_size=6)
    assert consumer.consumer_name() == "c-1"
    await settle()
    assert [f.permits for f in call.of("flow")] == [6]
    call.push(batch(0, 4))
    call.push(batch(1, 2))
    got = [await consumer.receive(timeout_ms=1000) for _ in range(5)]
    await settle()
    assert [m.data() for m in got] == [b"0-0", b"0-1", b"0-2", b"0-3", b"1-0"]
    assert [f.permits for f in call.of("flow")] == [6, 3]  # one Flow for 3 messages


async def test_already_acked_batch_indexes_are_skipped_and_not_charged():
    call = FakeCall()
    consumer = await start_consumer(call, receiver_queue_size=4)
    call.push(batch(0, 4, acked=[0, 1, 3]))
    msg = await consumer.receive(timeout_ms=1000)
    assert (
        msg.message_id() == MessageId(ledger_id=1, entry_id=0, batch_index=2, partition=-1)
        and msg.sequence_id() == 2
    )
    with pytest.raises(client.Timeout):
        await consumer.receive(timeout_ms=20)
    assert [f.permits for f in call.of("flow")] == [4]  # 1 of 4 consumed: no refill yet


async def test_acks_are_grouped_into_one_request():
    call = FakeCall()
    consumer = await start_consumer(call, ack_group_time_ms=5)
    call.push(batch(0, 3))
    call.push(batch(1, 3))
    msgs = [await consumer.receive(timeout_ms=1000) for _ in range(6)]
    for m in msgs[:4]:
        await consumer.acknowledge(m)
    await consumer.negative_acknowledge(
        MessageId(ledger_id=1, entry_id=9, batch_index=0, partition=-1)
    )
    await settle()
    assert call.of("ack") == []
    await eventually(lambda: call.of("ack"))
    (ack,) = call.of("ack")
    # Entry 0 is fully acked: one id for the whole batch; entry 1 only in part.
    assert sorted((i.entry_id, i.batch_index) for i in ack.ids) == [(0, -1), (1, 0)]
    assert ack.request_id == 0
    (nack,) = call.of("negative_ack")
    assert [i.entry_id for i in nack.ids] == [9]
    for m in msgs[4:]:
        await consumer.acknowledge(m)
    await eventually(lambda: len(call.of("ack")) == 2)
    ack = call.of("ack")[-1]
    assert [(i.entry_id, i.batch_index) for i in ack.ids] == [(1, -1)]


async def test_a_list_of_messages_is_acked_in_one_call_as_whole_entries():
    call = FakeCall()
    consumer = await start_consumer(call, ack_group_time_ms=10_000)
    call.push(batch(0, 3))
    call.push(batch(1, 2))
    msgs = [await consumer.receive(timeout_ms=1000) for _ in range(5)]
    await consumer.acknowledge(msgs[:4])
    await consumer.acknowledge([msgs[4].message_id()])  # ids compress the same way
    await consumer.close()
    (ack,) = call.of("ack")
    assert sorted((i.entry_id, i.batch_index) for i in ack.ids) == [(0, -1), (1, -1)]


async def test_a_message_of_another_consumer_is_refused():
    call, other_call = FakeCall(), FakeCall()
    consumer = await start_consumer(call)
    other = await start_consumer(other_call, topic="other")
    other_call.push(batch(0, 1))
    foreign = await other.receive(timeout_ms=1000)
    with pytest.raises(ValueError, match="is not from"):
        await consumer.acknowledge(foreign)
    await consumer.close()
    await other.close()


async def test_acknowledge_wait_returns_on_ack_receipt():
    call = FakeCall()
    consumer = await start_consumer(call)
    waiting = asyncio.ensure_future(
        consumer.acknowledge_cumulative(
            MessageId(ledger_id=1, entry_id=2, batch_index=0, partition=-1), wait=True
        )
    )
    await settle()
    (ack,) = call.of("ack")
    assert ack.type == pb.Cumulative and ack.request_id > 0
    assert not waiting.done()
    call.push(pb.ConsumeResponse(ack_receipt=pb.AckReceipt(request_id=ack.request_id)))
    await asyncio.wait_for(waiting, 1)


async def test_seek_drops_queued_and_in_between_messages_and_returns_their_permits():
    call = FakeCall()
    consumer = await start_consumer(call, receiver_queue_size=4)
    call.push(batch(0, 1))
    await settle()
    seeking = asyncio.ensure_future(
        consumer.seek(MessageId(ledger_id=1, entry_id=0, batch_index=0, partition=-1))
    )
    await settle()
    (seek,) = call.of("seek")
    call.push(batch(1, 1))  # read before the seek took effect
    call.push(pb.ConsumeResponse(seek_done=pb.SeekDone(request_id=seek.request_id)))
    await asyncio.wait_for(seeking, 1)
    call.push(batch(0, 1, ledger=2))
    msg = await consumer.receive(timeout_ms=1000)
    assert msg.message_id().ledger_id() == 2
    assert sum(f.permits for f in call.of("flow")) == 4 + 2  # the 2 dropped were re-granted


async def test_the_seek_target_is_skipped_even_when_it_arrives_with_seek_done():
    """The broker sends the entries after the seek right behind SeekDone: they are read on
    the stream before the seeking coroutine resumes, and the target itself (seek is
    exclusive, as pulsar-client's) must not reach the application."""
    call = FakeCall()
    consumer = await start_consumer(call, receiver_queue_size=4)
    target = MessageId(ledger_id=1, entry_id=3, batch_index=-1, partition=-1)
    seeking = asyncio.ensure_future(consumer.seek(target))
    await settle()
    (seek,) = call.of("seek")
    call.push(pb.ConsumeResponse(seek_done=pb.SeekDone(request_id=seek.request_id)))
    call.push(batch(3, 1))  # the target, sent at once after SeekDone
    call.push(batch(4, 1))
    await asyncio.wait_for(seeking, 1)
    msg = await consumer.receive(timeout_ms=1000)
    assert msg.message_id().entry_id() == 4


async def test_redeliver_drops_queued_and_in_flight_messages_until_redeliver_done():
    call = FakeCall()
    consumer = await start_consumer(call, receiver_queue_size=10)
    call.push(batch(0, 3))
    await settle()
    redelivering = asyncio.ensure_future(consumer.redeliver_unacknowledged_messages())
    await settle()
    (redeliver,) = call.of("redeliver")
    call.push(batch(1, 2))  # dispatched before the broker saw the request: stale
    done = pb.RedeliverDone(request_id=redeliver.request_id)
    call.push(pb.ConsumeResponse(redeliver_done=done))
    call.push(batch(0, 3))  # the redelivery itself
    await asyncio.wait_for(redelivering, 1)
    received = [await consumer.receive(timeout_ms=1000) for _ in range(3)]
    assert [m.message_id().entry_id() for m in received] == [0, 0, 0]
    with pytest.raises(client.Timeout):
        await consumer.receive(timeout_ms=10)


async def test_non_retryable_stream_error_wakes_receivers_and_fails_requests():
    call = FakeCall()
    consumer = await start_consumer(call)
    receiving = asyncio.ensure_future(consumer.receive())
    unsubscribing = asyncio.ensure_future(consumer.unsubscribe())
    await settle()
    call.fail(grpc.StatusCode.FAILED_PRECONDITION, code="22")  # NotAllowed: no reconnect
    with pytest.raises(client.NotAllowed):
        await asyncio.wait_for(receiving, 1)
    with pytest.raises(client.NotAllowed):
        await asyncio.wait_for(unsubscribing, 1)


async def test_close_flushes_acks_and_ends_iteration():
    call = FakeCall()
    consumer = await start_consumer(call, ack_group_time_ms=10_000)
    await consumer.acknowledge(MessageId(ledger_id=1, entry_id=1, batch_index=0, partition=-1))
    iterating = asyncio.ensure_future(anext(aiter(consumer), None))
    await consumer.close()
    assert len(call.of("ack")) == 1
    assert await asyncio.wait_for(iterating, 1) is None
    with pytest.raises(client.AlreadyClosed):
        await consumer.receive()


async def test_subscribe_error_maps_to_specific_error():
    call = FakeCall()
    trailers = grpc.aio.Metadata(("pulsar-error-code", "5"))
    call.push(grpc.aio.AioRpcError(grpc.StatusCode.FAILED_PRECONDITION, None, trailers, "busy"))
    part = PartitionConsumer(ConsumerConfig(), MessageQueue(), "t")
    with pytest.raises(client.ConsumerBusy):
        await part.start(call.connect)


async def test_partitioned_consumer_merges_and_credits_the_right_partition():
    queue = MessageQueue()
    calls, parts = [FakeCall(), FakeCall()], []
    for i, call in enumerate(calls):
        part = PartitionConsumer(
            ConsumerConfig(receiver_queue_size=2), queue, f"t-partition-{i}", partition=i
        )
        call.push(subscribed(f"t-partition-{i}"))
        await part.start(call.connect)
        parts.append(part)
    consumer = consumer_of(parts, queue)
    calls[1].push(batch(0, 1))
    msg = await consumer.receive(timeout_ms=1000)
    await settle()
    assert msg.message_id().partition() == 1 and msg.topic_name() == "t-partition-1"
    assert [f.permits for f in calls[1].of("flow")] == [2, 1]
    assert [f.permits for f in calls[0].of("flow")] == [2]
    await consumer.acknowledge(msg, wait=False)
    await eventually(lambda: calls[1].of("ack"))
    assert len(calls[1].of("ack")) == 1 and calls[0].of("ack") == []
    with pytest.raises(ValueError):
        await consumer.acknowledge(MessageId(ledger_id=1, entry_id=1, batch_index=0, partition=7))


async def test_inactive_stream_drops_only_its_queued_messages_and_regrants_their_permits():
    """Failover: a partition's stream told it is no longer active drops what it queued (the
    broker hands it to the new active consumer) and returns the permits; another
    partition's queued messages stay."""
    queue = MessageQueue()
    calls, parts = [FakeCall(), FakeCall()], []
    for i, call in enumerate(calls):
        part = PartitionConsumer(
            ConsumerConfig(receiver_queue_size=4), queue, f"t-partition-{i}", partition=i
        )
        call.push(subscribed(f"t-partition-{i}"))
        await part.start(call.connect)
        parts.append(part)
    consumer = consumer_of(parts, queue)
    calls[0].push(batch(0, 3))
    calls[1].push(batch(0, 2))
    await eventually(lambda: len(queue) == 5)
    change = pb.ActiveConsumerChange(is_active=False)
    calls[0].push(pb.ConsumeResponse(active_consumer_change=change))
    await eventually(lambda: parts[0].is_active is False)
    received = [await consumer.receive(timeout_ms=1000) for _ in range(2)]
    assert [m.message_id().partition() for m in received] == [1, 1]
    with pytest.raises(client.Timeout):
        await consumer.receive(timeout_ms=20)
    assert [f.permits for f in calls[0].of("flow")] == [4, 3]  # the 3 dropped, granted again
    # Told it is active again, the stream keeps what arrives.
    calls[0].push(
        pb.ConsumeResponse(active_consumer_change=pb.ActiveConsumerChange(is_active=True))
    )
    calls[0].push(batch(1, 1))
    assert (await consumer.receive(timeout_ms=1000)).message_id().partition() == 0
