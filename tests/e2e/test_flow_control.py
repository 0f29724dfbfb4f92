"""Flow control end to end: the broker sends against permits only, and a consumer that lags
far behind costs the broker no memory.

Permits count messages, but an entry (one produced batch) is delivered whole, as in Pulsar:
the broker sends entries while the consumer has permits left, so the last entry can overshoot
the permits by less than one batch, never by more. With 250 permits and batches of 100 that is
exactly 3 entries (300 messages): after 2 entries 50 permits remain, so a third is sent, after
which the permits are spent (-50).

"Nothing more arrives" is checked with a short bounded wait (``QUIET_S``): on loopback the
broker pushes what permits allow within milliseconds, so anything extra would show up in it.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import grpc
import psutil
import pytest

from pulsar_grpc.client import Client, Timeout
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.wire import batch, stub
from tests.support import BrokerThread, StandaloneProcess

QUIET_S = 0.4  # bounded wait for "nothing more arrives"
ARRIVE_S = 5.0  # what must arrive does so within this


@dataclass
class RawConsumer:
    """A Consume call without the SDK: a task reads responses into a queue, so waiting for
    one with a timeout never cancels a read on the call itself."""

    call: grpc.aio.StreamStreamCall
    responses: asyncio.Queue[pb.ConsumeResponse] = field(default_factory=asyncio.Queue)
    entries: list[pb.DeliveredEntry] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        first = await self.call.read()
        assert first.HasField("subscribed"), first
        self.task = asyncio.create_task(self._pump())

    async def _pump(self) -> None:
        while True:
            response = await self.call.read()
            if response is grpc.aio.EOF:
                return
            await self.responses.put(response)

    async def flow(self, permits: int) -> None:
        await self.call.write(pb.ConsumeRequest(flow=pb.Flow(permits=permits)))

    async def _next_entries(self, timeout_s: float) -> list[pb.DeliveredEntry]:
        while True:
            response = await asyncio.wait_for(self.responses.get(), timeout_s)
            if response.HasField("messages"):
                return list(response.messages.entries)

    async def receive_entries(self, count: int) -> list[pb.DeliveredEntry]:
        """Wait until ``count`` more entries arrived (fails after ``ARRIVE_S``), then make
        sure nothing else arrives within ``QUIET_S``; returns what arrived."""
        got: list[pb.DeliveredEntry] = []
        try:
            async with asyncio.timeout(ARRIVE_S):
                while len(got) < count:
                    got += await self._next_entries(ARRIVE_S)
        except TimeoutError:
            pytest.fail(f"expected {count} entries, got {len(got)}")
        try:
            got += await self._next_entries(QUIET_S)
        except TimeoutError:
            pass
        self.entries += got
        return got

    async def close(self) -> None:
        self.call.cancel()
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)


async def produce_batches(channel: grpc.aio.Channel, topic: str, batches: int, size: int) -> None:
    """``batches`` entries of ``size`` messages, payload ``b"<batch>-<index>"``."""
    call = stub(channel).Produce(metadata=(("x-pulsar-topic", topic),))
    assert (await call.read()).HasField("ready")
    for b in range(batches):
        await call.write(batch(b * size, [f"{b}-{i}".encode() for i in range(size)]))
    for _ in range(batches):
        assert (await call.read()).HasField("receipt")
    call.cancel()


OpenConsumer = Callable[[str, str], Awaitable[RawConsumer]]


@pytest.fixture
async def consumer_on(channel: grpc.aio.Channel) -> AsyncIterator[OpenConsumer]:
    """Opens a raw consumer of subscription "sub" (Earliest) of the given type."""
    opened: list[RawConsumer] = []

    async def open_consumer(topic: str, sub_type: str) -> RawConsumer:
        metadata = (
            ("x-pulsar-topic", topic),
            ("x-pulsar-subscription", "sub"),
            ("x-pulsar-subscription-type", sub_type),
            ("x-pulsar-initial-position", "Earliest"),
        )
        consumer = RawConsumer(stub(channel).Consume(metadata=metadata))
        await consumer.start()
        opened.append(consumer)
        return consumer

    yield open_consumer
    for consumer in opened:
        await consumer.close()


def messages_of(entries: list[pb.DeliveredEntry]) -> list[bytes]:
    return [m.payload for e in entries for m in e.messages]


SUB_TYPES = ["Exclusive", "Failover", "Shared", "Key_Shared"]


@pytest.mark.parametrize("sub_type", SUB_TYPES)
async def test_broker_sends_no_more_than_permits_allow(
    channel: grpc.aio.Channel, consumer_on: OpenConsumer, sub_type: str
) -> None:
    """A backlog of 20 batches of 100: 250 permits let exactly 3 entries through (see the
    module docstring), and nothing more until more permits are granted."""
    topic = f"flow-batches-{sub_type.lower()}"
    await produce_batches(channel, topic, batches=20, size=100)
    consumer = await consumer_on(topic, sub_type)
    assert await consumer.receive_entries(0) == []  # nothing without permits

    await consumer.flow(250)
    got = await consumer.receive_entries(3)
    delivered = len(got)  # not len(got) in the assert: pytest would print every entry
    assert delivered == 3, f"250 permits delivered {delivered} entries of 100 messages"
    assert all(len(e.messages) == 100 for e in got)

    # 300 delivered for 250 granted: 50 more permits leave 0, so nothing is sent...
    await consumer.flow(50)
    assert await consumer.receive_entries(0) == []
    # ...and one more lets exactly one more entry through.
    await consumer.flow(1)
    assert len(await consumer.receive_entries(1)) == 1

    await consumer.flow(10_000)
    await consumer.receive_entries(16)
    expected = [f"{b}-{i}".encode() for b in range(20) for i in range(100)]
    assert messages_of(consumer.entries) == expected


@pytest.mark.parametrize("sub_type", SUB_TYPES)
async def test_single_message_entries_match_permits_exactly(
    channel: grpc.aio.Channel, consumer_on: OpenConsumer, sub_type: str
) -> None:
    topic = f"flow-single-{sub_type.lower()}"
    await produce_batches(channel, topic, batches=30, size=1)
    consumer = await consumer_on(topic, sub_type)

    await consumer.flow(7)
    got = await consumer.receive_entries(7)
    assert messages_of(got) == [f"{b}-0".encode() for b in range(7)]
    await consumer.flow(3)
    got = await consumer.receive_entries(3)
    assert messages_of(got) == [f"{b}-0".encode() for b in range(7, 10)]


# ---------------------------------------------------------------------------- slow consumer


MESSAGES = 1_000_000
BATCH = 1000
PAYLOAD = 100
WINDOW = 32  # produce requests in flight before reading receipts
MAX_GROWTH_MB = 64


def rss_mb(pid: int) -> float:
    return float(psutil.Process(pid).memory_info().rss) / 2**20


def topic_stats(http_url: str, topic: str) -> dict[str, object]:
    url = f"{http_url}/admin/v2/persistent/public/default/{topic}/stats"
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


async def test_memory_stays_flat_while_a_slow_consumer_lags_a_million_messages(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    """A consumer with receiver_queue_size=10 that never receives holds 1M messages of backlog;
    the broker keeps them in storage, not in memory: its RSS grows by less than
    ``MAX_GROWTH_MB`` between 100k and 1M messages stored (entry cache bounded at 16 MB).
    Then the consumer still gets its messages, in order."""
    started = time.monotonic()
    broker = standalone_factory(None, "--set", "managedLedgerCacheSizeMB=16")
    assert broker.proc is not None
    pid = broker.proc.pid
    topic = "slow-consumer"
    pad = b"x" * (PAYLOAD - 8)

    def request(b: int) -> pb.ProduceRequest:
        messages = [pb.MessageData(payload=b"%07d|" % (b * BATCH + i) + pad) for i in range(BATCH)]
        return pb.ProduceRequest(sequence_id=b * BATCH, messages=messages)

    template = pb.ProduceRequest(messages=[pb.MessageData(payload=b"z" * PAYLOAD)] * BATCH)

    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(topic, "slow", receiver_queue_size=10)
        async with grpc.aio.insecure_channel(broker.grpc_address) as ch:
            call = stub(ch).Produce(metadata=(("x-pulsar-topic", topic),))
            assert (await call.read()).HasField("ready")
            producing = time.monotonic()

            async def produce(first: int, last: int) -> None:
                """Batches first..last-1, ``WINDOW`` requests in flight."""
                sent = received = first
                while received < last:
                    while sent < last and sent - received < WINDOW:
                        if sent < 2:  # the batches the consumer reads back are distinct
                            req = request(sent)
                        else:
                            req = pb.ProduceRequest()
                            req.CopyFrom(template)
                            req.sequence_id = sent * BATCH
                        await call.write(req)
                        sent += 1
                    response = await call.read()
                    assert response.HasField("receipt"), response
                    received += 1

            await produce(0, MESSAGES // BATCH // 10)
            rss_100k = rss_mb(pid)
            await produce(MESSAGES // BATCH // 10, MESSAGES // BATCH)
            rss_1m = rss_mb(pid)
            produced = time.monotonic()
            call.cancel()

        stats = await asyncio.to_thread(topic_stats, broker.http_url, topic)
        assert stats["msgInCounter"] == MESSAGES
        slow = stats["subscriptions"]["slow"]  # type: ignore[index]
        assert stats["storageSize"] >= MESSAGES * PAYLOAD
        # msgBacklog counts entries (as Pulsar's): all 1000, none acked; one is delivered.
        assert slow["msgBacklog"] == MESSAGES // BATCH, slow  # type: ignore[index]
        growth = rss_1m - rss_100k
        print(
            f"\nRSS {rss_100k:.0f} MB after 100k, {rss_1m:.0f} MB after 1M (+{growth:.1f} MB); "
            f"1M messages produced in {produced - producing:.1f} s"
        )
        assert growth < MAX_GROWTH_MB, f"broker RSS grew {growth:.0f} MB with a lagging consumer"

        first = [(await consumer.receive(timeout_ms=10_000)).data() for _ in range(2 * BATCH)]
        assert first == [b"%07d|" % i + pad for i in range(2 * BATCH)]
    print(f"total {time.monotonic() - started:.1f} s")


async def test_unacked_limit_stops_shared_consumers_but_not_readers(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    """maxUnackedMessagesPerConsumer holds back a Shared consumer that does not ack (Pulsar
    applies it to Shared and Key_Shared only); a reader, which never acks, reads on."""
    broker = broker_factory(maxUnackedMessagesPerConsumer=100)
    topic = "persistent://public/default/unacked-limit"
    async with Client(broker.service_url) as client:
        shared = await client.subscribe(
            topic, "s", "Shared", initial_position="earliest", receiver_queue_size=20
        )
        producer = await client.create_producer(topic, batching_max_messages=10)
        for i in range(500):
            await producer.enqueue(b"m%d" % i)
        await producer.flush()

        got = []
        with pytest.raises(Timeout):
            while True:
                got.append(await shared.receive(timeout_ms=500))  # bounded: the limit stops it
        assert 100 <= len(got) < 130, len(got)  # whole batches of 10: at most one over
        for m in got:
            await shared.acknowledge(m)
        more = await shared.receive(timeout_ms=5000)  # acks free room: delivery resumes
        assert more.data() not in {m.data() for m in got}

        reader = await client.create_reader(topic, "earliest", receiver_queue_size=20)
        read = [await reader.read_next(timeout_ms=5000) for _ in range(500)]
        assert [m.data() for m in read] == [b"m%d" % i for i in range(500)]
