"""The SDK survives the broker going away: a real broker killed with kill -9 and restarted on
its data directory and port, and a TCP fault proxy that cuts every connection mid-stream or
delays traffic, while an application produces and consumes through the SDK.

What the application must see: delays, never an exception; every message whose send
resolved is stored and delivered; with deduplication, stored once. A broker that never comes
back fails pending sends with Timeout after send_timeout_ms.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from client import Client, Consumer, HandleState, MessageId, Producer, Timeout
from tests.e2e.messaging import receive_n
from tests.e2e.test_partitioned_and_dedup import create_partitioned
from tests.faultproxy import FaultProxy, free_port
from tests.support import BrokerThread, StandaloneProcess

TOTAL = 600


def fast_client(service_url: str) -> Client:
    """Quick reconnects keep the tests short; the defaults (100 ms to 60 s) are unit-tested."""
    return Client(service_url, initial_backoff_interval_ms=50, max_backoff_interval_ms=500)


async def produce_all(
    producer: Producer, total: int, progress: asyncio.Event, half: int
) -> list[MessageId]:
    """Send m0..m<total-1> as an application would (a bounded window of pending sends)."""
    futures = []
    for i in range(total):
        futures.append(await producer.send_async(b"m%d" % i))
        if i == half:
            await asyncio.gather(*futures)
            progress.set()
        if i % 5 == 4:
            await asyncio.sleep(0.005)  # a steady flow over a second or so, not one burst
    return list(await asyncio.gather(*futures))


async def consume_until(consumer: Consumer, wanted: set[bytes]) -> list[bytes]:
    """Receive and ack until every wanted payload arrived; what arrived, in order."""
    seen: list[bytes] = []
    while not wanted <= set(seen):
        msg = await consumer.receive(timeout_ms=60_000)
        seen.append(msg.data())
        await consumer.acknowledge(msg)
    return seen


async def read_all(client: Client, topic: str, n: int) -> list[bytes]:
    """What the topic stores, from a fresh reader: exactly n messages, then nothing."""
    reader = await client.create_reader(topic, MessageId.earliest)
    try:
        stored = [m.data() for m in await receive_n(reader, n, timeout_ms=10_000)]
        assert not await reader.has_message_available()
        return stored
    finally:
        await reader.close()


def expected(total: int) -> list[bytes]:
    return [b"m%d" % i for i in range(total)]


async def test_kill_9_and_restart_mid_produce_and_consume(
    standalone_factory: Callable[..., StandaloneProcess], tmp_path: Path
) -> None:
    broker = standalone_factory(tmp_path / "data", "--set", "brokerDeduplicationEnabled=true")
    topic = "persistent://public/default/kill9-reconnect"
    async with fast_client(broker.service_url) as client:
        consumer = await client.subscribe(topic, "sub", initial_position="earliest")
        producer = await client.create_producer(topic, batching_max_publish_delay_ms=5)
        progress = asyncio.Event()
        producing = asyncio.ensure_future(produce_all(producer, TOTAL, progress, TOTAL // 3))
        consuming = asyncio.ensure_future(consume_until(consumer, set(expected(TOTAL))))
        await asyncio.wait_for(progress.wait(), 30)
        await asyncio.to_thread(broker.kill9)
        await asyncio.sleep(0.3)  # the application keeps going while the broker is gone
        assert not producing.done() and producer._partitions[0].pending > 0
        await asyncio.to_thread(broker.start)  # same data directory, same port
        ids = await asyncio.wait_for(producing, 60)  # no exception: only a delay
        received = await asyncio.wait_for(consuming, 60)
        # Every send resolved; the ones stored before the crash and resent resolve as
        # duplicates (ledger -1), as in Pulsar.
        assert len(ids) == TOTAL
        assert set(received) == set(expected(TOTAL))
        # Stored exactly once each, in the order sent.
        assert await read_all(client, topic, TOTAL) == expected(TOTAL)
        assert producer._partitions[0].connection.reconnects >= 1
        assert consumer._partitions[-1].connection.reconnects >= 1


async def test_broker_that_never_comes_back_fails_sends_with_timeout(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    broker = standalone_factory()
    async with fast_client(broker.service_url) as client:
        producer = await client.create_producer("gone", send_timeout_ms=1500)
        await producer.send(b"before")
        await asyncio.to_thread(broker.kill9)
        started = asyncio.get_running_loop().time()
        futures = [await producer.send_async(b"after-%d" % i) for i in range(5)]
        for future in futures:
            with pytest.raises(Timeout, match="send_timeout_ms=1500"):
                await asyncio.wait_for(future, 10)
        elapsed = asyncio.get_running_loop().time() - started
        assert 1.2 < elapsed < 8
        with pytest.raises(Timeout):
            await producer.send(b"still-gone")
        assert producer._partitions[0].state is HandleState.CONNECTING
        await asyncio.wait_for(producer.close(), 10)


# ---------------------------------------------------------------- through a fault proxy


@pytest.fixture
async def proxied(
    broker_factory: Callable[..., BrokerThread],
) -> AsyncIterator[tuple[BrokerThread, FaultProxy]]:
    """A broker that advertises the address of a fault proxy in front of it."""
    broker_port = free_port()
    async with FaultProxy(broker_port, port=free_port()) as proxy:
        broker = broker_factory(
            grpcServicePort=broker_port,
            advertisedListeners=f"internal:grpc://{proxy.address}",
            brokerDeduplicationEnabled=True,
        )
        yield broker, proxy


async def cut_repeatedly(proxy: FaultProxy, times: int, every_s: float) -> int:
    cut = 0
    for _ in range(times):
        await asyncio.sleep(every_s)
        cut += proxy.cut()
    return cut


async def test_connections_cut_during_produce_lose_and_duplicate_nothing(
    proxied: tuple[BrokerThread, FaultProxy],
) -> None:
    _, proxy = proxied
    topic = "persistent://public/default/cut-produce"
    async with fast_client(f"grpc://{proxy.address}") as client:
        producer = await client.create_producer(topic, batching_max_publish_delay_ms=5)
        progress = asyncio.Event()
        producing = asyncio.ensure_future(produce_all(producer, TOTAL, progress, 50))
        await asyncio.wait_for(progress.wait(), 30)
        cut = await cut_repeatedly(proxy, 3, 0.15)
        ids = await asyncio.wait_for(producing, 60)
        assert cut >= 3 and len(ids) == TOTAL
        assert producer._partitions[0].connection.reconnects >= 1
        assert await read_all(client, topic, TOTAL) == expected(TOTAL)


async def test_connections_cut_during_consume_the_receive_loop_sees_no_error(
    proxied: tuple[BrokerThread, FaultProxy],
) -> None:
    _, proxy = proxied
    topic = "persistent://public/default/cut-consume"
    async with fast_client(f"grpc://{proxy.address}") as client:
        producer = await client.create_producer(topic)
        await asyncio.gather(*[await producer.send_async(p) for p in expected(TOTAL)])
        consumer = await client.subscribe(
            topic, "sub", initial_position="earliest", receiver_queue_size=50
        )
        consuming = asyncio.ensure_future(consume_until(consumer, set(expected(TOTAL))))
        cut = await cut_repeatedly(proxy, 3, 0.1)
        received = await asyncio.wait_for(consuming, 60)
        assert cut >= 3 and set(received) == set(expected(TOTAL))
        assert consumer._partitions[-1].connection.reconnects >= 1


async def test_delayed_then_cut_traffic_only_slows_the_application(
    proxied: tuple[BrokerThread, FaultProxy],
) -> None:
    _, proxy = proxied
    topic = "persistent://public/default/delayed"
    async with fast_client(f"grpc://{proxy.address}") as client:
        consumer = await client.subscribe(topic, "sub", "Shared", initial_position="earliest")
        producer = await client.create_producer(topic, batching_max_publish_delay_ms=5)
        proxy.delay_s = 0.05
        progress = asyncio.Event()
        producing = asyncio.ensure_future(produce_all(producer, 200, progress, 50))
        consuming = asyncio.ensure_future(consume_until(consumer, set(expected(200))))
        await asyncio.wait_for(progress.wait(), 30)
        proxy.cut()
        proxy.delay_s = 0
        await asyncio.wait_for(producing, 60)
        assert set(await asyncio.wait_for(consuming, 60)) == set(expected(200))


async def test_partitioned_reader_and_consumer_reconnect_per_partition(
    proxied: tuple[BrokerThread, FaultProxy],
) -> None:
    broker, proxy = proxied
    topic = "persistent://public/default/cut-partitioned"
    assert broker.service is not None
    await broker.call(broker.service.create_partitioned_topic(topic, 3))
    async with fast_client(f"grpc://{proxy.address}") as client:
        producer = await client.create_producer(topic)
        reader = await client.create_reader(topic, MessageId.earliest)
        first = expected(60)
        await asyncio.gather(*[await producer.send_async(p, key=p.decode()) for p in first])
        got = [m.data() for m in await receive_n(reader, 30, timeout_ms=10_000)]
        proxy.cut()
        more = [b"n%d" % i for i in range(30)]
        await asyncio.gather(*[await producer.send_async(p, key=p.decode()) for p in more])
        got += [m.data() for m in await receive_n(reader, 60, timeout_ms=30_000)]
        # A reader resumes after what it read on each partition: everything once.
        assert sorted(got) == sorted(first + more)
        partitions = reader._consumer._partitions.values()
        assert len(partitions) == 3 and all(p.connection.reconnects >= 1 for p in partitions)
        await reader.close()


async def test_graceful_broker_restart_unloads_topics_and_clients_resubscribe(
    broker_factory: Callable[..., BrokerThread], tmp_path: Path
) -> None:
    """A broker shutting down unloads its topics: consumers' streams end with ServiceNotReady,
    producers' with the server going away; both come back on the broker started next."""
    port, data = free_port(), tmp_path / "shared-data"
    config = {"grpcServicePort": port, "brokerDeduplicationEnabled": True, "data_dir": data}
    first = broker_factory(**config)
    topic = "persistent://public/default/graceful"
    async with fast_client(first.service_url) as client:
        consumer = await client.subscribe(topic, "sub", "Shared", initial_position="earliest")
        producer = await client.create_producer(topic, batching_max_publish_delay_ms=5)
        progress = asyncio.Event()
        producing = asyncio.ensure_future(produce_all(producer, TOTAL, progress, 100))
        consuming = asyncio.ensure_future(consume_until(consumer, set(expected(TOTAL))))
        await asyncio.wait_for(progress.wait(), 30)
        assert first.service is not None
        await first.call(first.service.close())
        first.service = None  # closed here; the fixture only stops its thread
        await asyncio.to_thread(broker_factory, **config)
        await asyncio.wait_for(producing, 60)
        assert set(await asyncio.wait_for(consuming, 60)) == set(expected(TOTAL))
        assert await read_all(client, topic, TOTAL) == expected(TOTAL)


async def test_two_kill_9_cycles_on_a_partitioned_topic(
    standalone_factory: Callable[..., StandaloneProcess], tmp_path: Path
) -> None:
    broker = standalone_factory(tmp_path / "data", "--set", "brokerDeduplicationEnabled=true")
    topic = "kill9-partitioned"
    async with fast_client(broker.service_url) as client:
        await create_partitioned(broker.http_url, topic, 3)
        consumer = await client.subscribe(topic, "sub", "Shared", initial_position="earliest")
        producer = await client.create_producer(topic, batching_max_publish_delay_ms=5)
        progress = asyncio.Event()
        producing = asyncio.ensure_future(produce_all(producer, 2 * TOTAL, progress, TOTAL // 3))
        consuming = asyncio.ensure_future(consume_until(consumer, set(expected(2 * TOTAL))))
        await asyncio.wait_for(progress.wait(), 30)
        for _ in range(2):
            await asyncio.to_thread(broker.kill9)
            await asyncio.sleep(0.2)
            await asyncio.to_thread(broker.start)
            await asyncio.sleep(0.3)
        await asyncio.wait_for(producing, 60)
        assert set(await asyncio.wait_for(consuming, 60)) == set(expected(2 * TOTAL))
        stored = await read_all(client, topic, 2 * TOTAL)
        assert sorted(stored) == sorted(expected(2 * TOTAL))  # each once
        for partition in producer._partitions:
            assert partition.connection.reconnects >= 1
