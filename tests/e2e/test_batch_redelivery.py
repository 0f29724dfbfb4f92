"""Redelivery of batched entries: a negative ack, an ack timeout or a reconnect brings back
exactly the messages of a batch that were not acked, once per negative ack.

The broker redelivers entries, not messages (as Pulsar: a batch is one entry, and its acked
indexes are skipped on redelivery). A client may nack the messages of one batch in several
requests (the SDK's ack group closes within a millisecond; a raw client sends what it likes):
that is still one redelivery of the batch, never one per request, and a nack of an earlier
delivery never takes back a later one. Real broker, real gRPC; "nothing else arrives" is a
bounded wait longer than the negative-ack delay, stated at each use.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc
import pytest

from pulsar_grpc.client import Client, SyncClient, Timeout
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.messaging import assert_nothing_more, receive_n
from tests.e2e.test_ack_correctness import OpenConsumer, consumer_on, produce
from tests.e2e.test_partitioned_and_dedup import create_partitioned
from tests.e2e.test_reconnect import fast_client
from tests.faultproxy import FaultProxy, free_port
from tests.support import BrokerThread
from tests.waiting import eventually

__all__ = ["consumer_on"]  # the fixture, imported for this module's tests

NACK_DELAY_MS = 300
ACK_TIMEOUT_MS = 1000  # Pulsar's minimum
# Longer than the nack delay: a second redelivery of the batch would arrive within it.
QUIET_MS = 3 * NACK_DELAY_MS
SUB_TYPES = ["Exclusive", "Failover", "Shared", "Key_Shared"]


def _ids(entry: pb.DeliveredEntry, indexes: range | list[int]) -> list[pb.MessageId]:
    return [
        pb.MessageId(ledger_id=entry.ledger_id, entry_id=entry.entry_id, batch_index=i)
        for i in indexes
    ]


@pytest.mark.parametrize("sub_type", SUB_TYPES)
async def test_a_batch_nacked_message_by_message_comes_back_once(
    channel: grpc.aio.Channel, consumer_on: OpenConsumer, sub_type: str
) -> None:
    """Ten nack requests, one per message of a batch: one redelivery (count 1), then none."""
    topic = f"nack-each-{sub_type.lower()}"
    await produce(channel, topic, [b"m%d" % i for i in range(10)])
    consumer = await consumer_on(topic, sub_type, negative_ack_delay_ms=str(NACK_DELAY_MS))
    await consumer.flow(100)
    [entry] = await consumer.entries(1)
    for message_id in _ids(entry, range(10)):
        await consumer.send(negative_ack=pb.NegativeAck(ids=[message_id]))
    [again] = await consumer.entries(1)
    assert (again.entry_id, again.redelivery_count, len(again.messages)) == (entry.entry_id, 1, 10)
    whole = pb.MessageId(ledger_id=again.ledger_id, entry_id=again.entry_id, batch_index=-1)
    await consumer.ack([whole], request_id=7)
    assert (await consumer.next()).ack_receipt.request_id == 7
    await _assert_quiet(consumer, QUIET_MS)


@pytest.mark.parametrize("sub_type", SUB_TYPES)
async def test_a_partly_acked_batch_brings_back_only_its_unacked_messages(
    channel: grpc.aio.Channel, consumer_on: OpenConsumer, sub_type: str
) -> None:
    """Acks and nacks of one batch interleaved in separate requests: the redelivery skips the
    acked indexes, and comes once."""
    topic = f"nack-half-{sub_type.lower()}"
    await produce(channel, topic, [b"m%d" % i for i in range(10)])
    consumer = await consumer_on(topic, sub_type, negative_ack_delay_ms=str(NACK_DELAY_MS))
    await consumer.flow(100)
    [entry] = await consumer.entries(1)
    for i in range(10):
        [message_id] = _ids(entry, [i])
        if i % 2:
            await consumer.send(negative_ack=pb.NegativeAck(ids=[message_id]))
        else:
            await consumer.ack([message_id])
    [again] = await consumer.entries(1)
    assert again.redelivery_count == 1
    assert sorted(again.acked_batch_indexes) == [0, 2, 4, 6, 8]
    await consumer.ack(_ids(again, [1, 3, 5, 7, 9]), request_id=8)
    assert (await consumer.next()).ack_receipt.request_id == 8
    await _assert_quiet(consumer, QUIET_MS)


async def test_a_nack_of_an_earlier_delivery_leaves_the_later_one_alone(
    channel: grpc.aio.Channel, consumer_on: OpenConsumer
) -> None:
    """Nacked, redelivered, and nacked again from the first delivery's messages (a client that
    still held them): the second delivery is taken back once, by the second nack only."""
    topic = "nack-twice"
    await produce(channel, topic, [b"a", b"b"])
    consumer = await consumer_on(topic, "Shared", negative_ack_delay_ms=str(NACK_DELAY_MS))
    await consumer.flow(100)
    [entry] = await consumer.entries(1)
    first, second = _ids(entry, [0, 1])
    await consumer.send(negative_ack=pb.NegativeAck(ids=[first]))
    [again] = await consumer.entries(1)
    assert again.redelivery_count == 1
    await consumer.send(negative_ack=pb.NegativeAck(ids=[second]))
    [third] = await consumer.entries(1)
    assert third.redelivery_count == 2
    await consumer.ack(_ids(third, [-1]), request_id=9)
    assert (await consumer.next()).ack_receipt.request_id == 9
    await _assert_quiet(consumer, QUIET_MS)


async def _assert_quiet(consumer: object, within_ms: int) -> None:
    try:
        extra = await consumer.next(within_ms / 1000)  # type: ignore[attr-defined]
    except TimeoutError:
        return
    pytest.fail(f"redelivered again: {extra}")


# ---------------------------------------------------------------- through the SDK


def test_the_issue_example_with_the_blocking_client_and_default_batching(
    broker: BrokerThread,
) -> None:
    """Issue 25's example as written: send_async with batching on, nack all, ack all."""
    client = SyncClient(broker.service_url)
    try:
        consumer = client.subscribe("example", "sub", negative_ack_redelivery_delay_ms=1000)
        producer = client.create_producer("example")
        for i in range(10):
            producer.send_async(b"m%d" % i, lambda result, message_id: None)
        producer.flush()
        first = [consumer.receive(5000) for _ in range(10)]
        assert len({m.message_id().entry_id() for m in first}) < 10, "batching should be on"
        for m in first:
            consumer.negative_acknowledge(m)
        again = [consumer.receive(5000) for _ in range(10)]
        assert sorted(m.data() for m in again) == sorted(m.data() for m in first)
        assert {m.redelivery_count() for m in again} == {1}
        with pytest.raises(Timeout):  # held, not nacked: it stays with this consumer
            extra = consumer.receive(QUIET_MS)
            pytest.fail(f"{extra.data()!r} came back with count {extra.redelivery_count()}")
        for m in again:
            consumer.acknowledge(m)
        with pytest.raises(Timeout):
            extra = consumer.receive(100 + QUIET_MS)
            pytest.fail(f"{extra.data()!r} came back with count {extra.redelivery_count()}")
    finally:
        client.close()


@pytest.mark.parametrize("partitions", [0, 2])
@pytest.mark.parametrize("sub_type", SUB_TYPES)
async def test_nacks_sent_one_by_one_bring_each_message_back_once(
    broker: BrokerThread, sub_type: str, partitions: int
) -> None:
    """Each nack in a request of its own, the case that once redelivered a batch once per
    request (four times out of five on a loaded machine); on a partitioned topic too."""
    topic = f"one-by-one-{sub_type.lower()}-{partitions}"
    if partitions:
        await create_partitioned(broker.http_url, topic, partitions)
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(
            topic,
            "sub",
            sub_type,
            negative_ack_redelivery_delay_ms=NACK_DELAY_MS,
            ack_group_time_ms=0,
        )
        producer = await client.create_producer(topic, batching_max_publish_delay_ms=50)
        await asyncio.gather(*[await producer.enqueue(b"m%d" % i) for i in range(20)])
        first = await receive_n(consumer, 20)
        for m in first:
            await consumer.negative_acknowledge(m)
            # on the wire before the next nack, so that each goes in a request of its own
            await eventually(lambda: not any(len(s._acks) for s in consumer._streams.values()))
        again = await receive_n(consumer, 20)
        assert sorted(m.data() for m in again) == sorted(m.data() for m in first)
        assert {m.redelivery_count() for m in again} == {1}
        await assert_nothing_more(consumer, QUIET_MS)  # held, not nacked: it stays
        for m in again:
            await consumer.acknowledge(m)
        await assert_nothing_more(consumer, QUIET_MS)


async def test_nacked_batches_come_back_once_across_a_reconnect(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    """Nacks sent, then the connection cut before the delay passed: the new stream gets the
    batch once (the old stream's nack timer finds nothing of its own to take back)."""
    broker_port = free_port()
    async with FaultProxy(broker_port, port=free_port()) as proxy:
        broker_factory(
            grpcServicePort=broker_port, advertisedListeners=f"internal:grpc://{proxy.address}"
        )
        async with fast_client(f"grpc://{proxy.address}") as client:
            consumer = await client.subscribe(
                "nack-cut", "sub", "Shared", negative_ack_redelivery_delay_ms=NACK_DELAY_MS
            )
            producer = await client.create_producer("nack-cut")
            await asyncio.gather(*[await producer.enqueue(b"m%d" % i) for i in range(10)])
            first = await receive_n(consumer, 10)
            for m in first:
                await consumer.negative_acknowledge(m)
            assert proxy.cut() >= 1
            again = await receive_n(consumer, 10)
            assert sorted(m.data() for m in again) == sorted(m.data() for m in first)
            for m in again:
                await consumer.acknowledge(m)
            await assert_nothing_more(consumer, QUIET_MS)


async def test_an_ack_timeout_brings_back_only_the_unacked_messages_of_a_batch(
    broker: BrokerThread,
) -> None:
    """Half of a batch acked, the rest left to the ack timeout: only that half comes back."""
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(
            "ack-timeout-batch", "sub", "Shared", unacked_messages_timeout_ms=ACK_TIMEOUT_MS
        )
        producer = await client.create_producer("ack-timeout-batch")
        await asyncio.gather(*[await producer.enqueue(b"m%d" % i) for i in range(10)])
        first = await receive_n(consumer, 10)
        for m in first[:5]:
            await consumer.acknowledge(m)
        again = await receive_n(consumer, 5)
        assert [m.data() for m in again] == [m.data() for m in first[5:]]
        assert {m.redelivery_count() for m in again} == {1}
        for m in again:
            await consumer.acknowledge(m)
        await assert_nothing_more(consumer, QUIET_MS)
