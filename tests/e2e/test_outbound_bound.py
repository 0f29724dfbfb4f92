"""A consumer that grants huge permits and does not read its stream costs the broker a bounded
amount of memory: dispatch waits for the consumer's outbound queue to drain (bounded in bytes),
answers to its requests still come through in order, and once it reads, everything arrives."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Callable

import grpc
import psutil
import pytest

from pulsar_grpc.broker.topics.dispatcher import MAX_READ_BYTES
from pulsar_grpc.handler.consume import MAX_QUEUED_ANSWERS, OUTBOUND_HIGH_WATER_BYTES
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.wire import stub
from tests.support import BrokerThread, StandaloneProcess

MAX_PERMITS = 2**32 - 1  # Flow.permits is a uint32
ENTRY_MESSAGES = 10
MESSAGE_BYTES = 10_000  # 100 KB entries
WINDOW = 32


def consume_metadata(topic: str) -> tuple[tuple[str, str], ...]:
    return (
        ("x-pulsar-topic", topic),
        ("x-pulsar-subscription", "stalled"),
        ("x-pulsar-initial-position", "Earliest"),
    )


def payload(i: int, size: int = MESSAGE_BYTES) -> bytes:
    return b"%08d|" % i + b"x" * (size - 9)


async def produce_backlog(
    address: str, topic: str, entries: int, message_bytes: int = MESSAGE_BYTES
) -> None:
    async with grpc.aio.insecure_channel(address) as ch:
        call = stub(ch).Produce(metadata=(("x-pulsar-topic", topic),))
        assert (await call.read()).HasField("ready")
        sent = received = 0
        while received < entries:
            while sent < entries and sent - received < WINDOW:
                first = sent * ENTRY_MESSAGES
                messages = [
                    pb.MessageData(payload=payload(first + i, message_bytes))
                    for i in range(ENTRY_MESSAGES)
                ]
                await call.write(pb.ProduceRequest(sequence_id=first, messages=messages))
                sent += 1
            assert (await call.read()).HasField("receipt")
            received += 1
        await call.done_writing()


def msg_out(http_url: str, topic: str) -> int:
    url = f"{http_url}/admin/v2/persistent/public/default/{topic}/stats"
    with urllib.request.urlopen(url, timeout=10) as response:
        return int(json.loads(response.read())["msgOutCounter"])


async def settled(read: Callable[[], int], quiet: float = 1.5) -> int:
    """The value once it has not changed for ``quiet`` seconds (dispatch has stopped)."""
    deadline = time.monotonic() + 60
    value, since = read(), time.monotonic()
    while time.monotonic() - since < quiet:
        assert time.monotonic() < deadline, "dispatch never stopped"
        await asyncio.sleep(0.1)
        now = await asyncio.to_thread(read)
        if now != value:
            value, since = now, time.monotonic()
    return value


async def read_all(call: grpc.aio.StreamStreamCall, expect: int) -> list[int]:
    """The message numbers received, in order, until ``expect`` of them."""
    numbers: list[int] = []
    while len(numbers) < expect:
        response = await asyncio.wait_for(call.read(), 30)
        for entry in response.messages.entries:
            numbers += [int(m.payload[:8]) for m in entry.messages]
    return numbers


async def test_broker_memory_stays_bounded_for_a_consumer_that_grants_all_and_reads_nothing(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    broker = standalone_factory(None, "--set", "managedLedgerCacheSizeMB=16")
    assert broker.proc is not None
    process = psutil.Process(broker.proc.pid)
    topic = "stalled-reader"
    entries = 800  # an 80 MB backlog
    await produce_backlog(broker.grpc_address, topic, entries)
    rss_before = process.memory_info().rss / 2**20

    async with grpc.aio.insecure_channel(broker.grpc_address) as ch:
        call = stub(ch).Consume(metadata=consume_metadata(topic))
        assert (await call.read()).HasField("subscribed")
        await call.write(pb.ConsumeRequest(flow=pb.Flow(permits=MAX_PERMITS)))
        dispatched = await settled(lambda: msg_out(broker.http_url, topic))
        growth = process.memory_info().rss / 2**20 - rss_before
        print(f"\n{dispatched} of {entries * ENTRY_MESSAGES} messages dispatched; +{growth:.0f} MB")
        assert dispatched < entries * ENTRY_MESSAGES // 2, "dispatch did not wait for the stream"
        assert growth < 40, f"broker RSS grew {growth:.0f} MB for a consumer that reads nothing"

        numbers = await read_all(call, entries * ENTRY_MESSAGES)
        assert numbers == list(range(entries * ENTRY_MESSAGES))
        call.cancel()


async def test_queued_bytes_stay_bounded_and_answers_come_through(broker: BrokerThread) -> None:
    topic = "stalled-answers"
    entries = 300  # 30 MB
    await produce_backlog(broker.grpc_address, topic, entries)

    def queued_bytes() -> int:
        assert broker.service is not None
        (loaded,) = [t for t in broker.service.topics.loaded_topics() if t.name.endswith(topic)]
        (consumer,) = loaded.subscriptions["stalled"].consumers
        return int(consumer.transport.queued_bytes)  # type: ignore[attr-defined]

    async with grpc.aio.insecure_channel(broker.grpc_address) as ch:
        call = stub(ch).Consume(metadata=consume_metadata(topic))
        subscribed = await call.read()
        assert subscribed.HasField("subscribed")
        await call.write(pb.ConsumeRequest(flow=pb.Flow(permits=MAX_PERMITS)))
        await settled(lambda: msg_out(broker.http_url, topic))
        # One dispatcher read (100 entries of 100 KB) may overshoot the high-water mark.
        assert queued_bytes() <= OUTBOUND_HIGH_WATER_BYTES + 100 * ENTRY_MESSAGES * MESSAGE_BYTES
        # Requests keep being served while the stream is full; their answers queue behind
        # what was sent before them.
        await call.write(pb.ConsumeRequest(redeliver=pb.RedeliverUnacknowledged(request_id=7)))
        numbers: list[int] = []
        while True:
            response = await asyncio.wait_for(call.read(), 30)
            if response.HasField("redeliver_done"):
                assert response.redeliver_done.request_id == 7
                break
            for entry in response.messages.entries:
                numbers += [int(m.payload[:8]) for m in entry.messages]
        assert numbers and numbers == list(range(len(numbers)))
        call.cancel()


async def test_answers_to_many_unread_requests_all_arrive_in_order(broker: BrokerThread) -> None:
    """More requests than the call keeps answers queued for (MAX_QUEUED_ANSWERS): the call
    pauses reading requests until the client reads, and then every answer arrives."""
    count = 3 * MAX_QUEUED_ANSWERS
    async with grpc.aio.insecure_channel(broker.grpc_address) as ch:
        call = stub(ch).Consume(metadata=consume_metadata("many-answers"))
        assert (await call.read()).HasField("subscribed")

        async def send() -> None:
            for i in range(1, count + 1):
                redeliver = pb.RedeliverUnacknowledged(request_id=i)
                await call.write(pb.ConsumeRequest(redeliver=redeliver))

        sender = asyncio.create_task(send())
        answered = []
        while len(answered) < count:
            response = await asyncio.wait_for(call.read(), 30)
            if response.HasField("redeliver_done"):
                answered.append(response.redeliver_done.request_id)
        await sender
        assert answered == list(range(1, count + 1))
        call.cancel()


async def test_a_broker_side_close_does_not_wait_behind_unread_messages(
    broker: BrokerThread,
) -> None:
    """The topic closes (unload, shutdown) while the consumer's queue is full: the call ends
    at once with UNAVAILABLE; what was queued and not yet written is dropped, not delivered
    first (it is unacked, so it is redelivered on reconnect)."""
    topic = "stalled-close"
    await produce_backlog(broker.grpc_address, topic, 300)
    async with grpc.aio.insecure_channel(broker.grpc_address) as ch:
        call = stub(ch).Consume(metadata=consume_metadata(topic))
        assert (await call.read()).HasField("subscribed")
        await call.write(pb.ConsumeRequest(flow=pb.Flow(permits=MAX_PERMITS)))
        dispatched = await settled(lambda: msg_out(broker.http_url, topic))
        assert broker.service is not None
        (loaded,) = [t for t in broker.service.topics.loaded_topics() if t.name.endswith(topic)]
        await broker.call(loaded.close())
        received = 0
        with pytest.raises(grpc.aio.AioRpcError) as err:
            while True:
                response = await asyncio.wait_for(call.read(), 30)
                received += sum(len(e.messages) for e in response.messages.entries)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert received < dispatched


async def test_a_read_for_huge_permits_is_bounded_in_bytes_too(broker: BrokerThread) -> None:
    """Entries of 1 MB: a read asks for about MAX_READ_BYTES of them, not a hundred entries
    (a 100 MB read) because the permits would allow it."""
    topic = "stalled-large"
    entries = 60
    await produce_backlog(broker.grpc_address, topic, entries, message_bytes=100_000)
    async with grpc.aio.insecure_channel(broker.grpc_address) as ch:
        call = stub(ch).Consume(metadata=consume_metadata(topic))
        assert (await call.read()).HasField("subscribed")
        await call.write(pb.ConsumeRequest(flow=pb.Flow(permits=MAX_PERMITS)))
        dispatched = await settled(lambda: msg_out(broker.http_url, topic)) // ENTRY_MESSAGES
        entry_bytes = ENTRY_MESSAGES * 100_000
        # One read's worth plus the outbound queue's, and slack for what timing decides: the
        # first read (of one entry), the queue overshooting its high water by an answer, the
        # message grpc core holds per stream and the client's receive window (a CI run saw
        # 11 here; an unbounded read would send all 60).
        bound = (MAX_READ_BYTES + OUTBOUND_HIGH_WATER_BYTES) // entry_bytes + 5
        assert dispatched <= bound < entries
        numbers = await read_all(call, entries * ENTRY_MESSAGES)
        assert numbers == list(range(entries * ENTRY_MESSAGES))
        call.cancel()
