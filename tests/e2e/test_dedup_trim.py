"""Deduplication must not hold consumed ledgers forever (brokerDeduplicationEnabled).

The ``pulsar.dedup`` cursor only moves when deduplication takes a snapshot, and the slowest
cursor holds the ledgers; a kill -9 soak found that with snapshots only every 1,000 entries, a
topic restarted more often than that never freed a ledger. Snapshots now also run on a timer
(``brokerDeduplicationSnapshotFrequencyInSeconds``) and at topic close. These tests check what a
user sees: a reader from earliest and the topic's ``storageSize`` — and that deduplication still
refuses an old sequence id once the entries that carried it are gone.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import aiohttp
import grpc

from pulsar_grpc.client import Client, Timeout
from tests.e2e.messaging import receive_n
from tests.e2e.test_partitioned_and_dedup import raw_producer, send
from tests.e2e.wire import batch
from tests.support import BrokerThread, StandaloneProcess
from tests.waiting import eventually

DEDUP = ("--set", "brokerDeduplicationEnabled=true")
PER_LEDGER = 10
WAIT_S = 20.0  # a timer of 1 s plus a trim, on a loaded 2-core machine


async def publish_and_consume(service_url: str, topic: str, payloads: list[bytes]) -> None:
    """Send with the producer name "p", then receive and ack all with receipt on "sub"."""
    async with Client(service_url) as client:
        consumer = await client.subscribe(topic, "sub", initial_position="Earliest")
        producer = await client.create_producer(topic, "p", batching_max_messages=1)
        for payload in payloads:
            await producer.send(payload)
        got = await receive_n(consumer, len(payloads))
        assert [m.data() for m in got] == payloads
        await consumer.acknowledge_cumulative(got[-1], wait=True)


async def read_all(service_url: str, topic: str) -> list[bytes]:
    """Everything a reader from earliest gets (stopping at the first quiet second)."""
    async with Client(service_url) as client:
        reader = await client.create_reader(topic, "earliest")
        seen = []
        while True:
            try:
                seen.append((await reader.read_next(1000)).data())
            except Timeout:
                return seen


async def storage_size(http_url: str, topic: str) -> int:
    url = f"{http_url}/admin/v2/persistent/public/default/{topic}/stats"
    async with aiohttp.ClientSession() as session, session.get(url) as r:
        assert r.status == 200, await r.text()
        stats: dict[str, Any] = await r.json()
    return int(stats["storageSize"])


async def eventually_at_most(http_url: str, topic: str, limit: int) -> int:
    """Poll storageSize until it is at most ``limit`` bytes (or WAIT_S runs out: then the
    caller's assertion reports the size)."""
    sizes: list[int] = []

    async def small_enough() -> bool:
        sizes.append(await storage_size(http_url, topic))
        return sizes[-1] <= limit

    with contextlib.suppress(AssertionError):
        await eventually(small_enough, timeout=WAIT_S, interval=0.2)
    return sizes[-1]


def payloads(first: int, count: int) -> list[bytes]:
    return [f"m{i:04d}-{'x' * 200}".encode() for i in range(first, first + count)]


async def test_timer_snapshot_frees_consumed_ledgers_without_a_restart(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    """35 entries (far below the 1,000-entry interval) over 4 ledgers, all acked: the timer
    snapshot moves the dedup cursor and the 3 full ledgers are trimmed."""
    broker = broker_factory(
        brokerDeduplicationEnabled=True,
        brokerDeduplicationSnapshotFrequencyInSeconds=1,
        managedLedgerMaxEntriesPerLedger=PER_LEDGER,
    )
    topic = "dedup-timer"
    sent = payloads(0, 35)
    await publish_and_consume(broker.service_url, topic, sent)
    full = await storage_size(broker.http_url, topic)
    assert full >= sum(map(len, sent))
    # Only the ledger being written (5 entries) may stay.
    size = await eventually_at_most(broker.http_url, topic, full * 6 // 35)
    assert size <= full * 6 // 35, f"consumed ledgers were kept: storageSize {size} of {full}"
    assert await read_all(broker.service_url, topic) == sent[30:]


async def test_without_the_timer_the_dedup_cursor_holds_the_ledgers(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    """The counter-check: with the timer off and fewer entries than the interval, nothing is
    trimmed while the topic stays loaded (the state the soak found)."""
    broker = broker_factory(
        brokerDeduplicationEnabled=True,
        brokerDeduplicationSnapshotFrequencyInSeconds=0,
        managedLedgerMaxEntriesPerLedger=PER_LEDGER,
    )
    topic = "dedup-no-timer"
    sent = payloads(0, 35)
    await publish_and_consume(broker.service_url, topic, sent)
    await asyncio.sleep(2)  # what the timer test needs: nothing may happen here
    assert await read_all(broker.service_url, topic) == sent


async def test_kill_9_rounds_trim_and_an_old_sequence_id_stays_a_duplicate(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    """The soak's reproduction, smaller: rounds of entries all acked, kill -9 after each. The
    consumed ledgers go, and a resend of a sequence id whose entry was trimmed is still
    refused across another kill -9 (the snapshot carries it), so nothing is stored twice."""
    args = (*DEDUP, "--set", "brokerDeduplicationSnapshotFrequencyInSeconds=1")
    args += ("--set", f"managedLedgerMaxEntriesPerLedger={PER_LEDGER}")
    topic = "dedup-rounds"
    full = f"persistent://public/default/{topic}"
    process = standalone_factory(None, *args)
    rounds, per_round = 4, 15
    for r in range(rounds):
        await publish_and_consume(process.service_url, topic, payloads(r * per_round, per_round))
        process.kill9()
        process = standalone_factory(process.data_dir, *args)

    total = rounds * per_round
    size = await eventually_at_most(process.http_url, topic, 0)
    assert size == 0, f"consumed ledgers were kept: storageSize {size}"
    assert await read_all(process.service_url, topic) == []

    async with grpc.aio.insecure_channel(process.grpc_address) as ch:
        call, ready = await raw_producer(ch, topic, "p")
        assert ready.last_sequence_id == total - 1
        assert (await send(call, batch(3, [b"old"]))).duplicate
        call.cancel()
    process.kill9()
    process = standalone_factory(process.data_dir, *args)
    async with grpc.aio.insecure_channel(process.grpc_address) as ch:
        call, ready = await raw_producer(ch, topic, "p")
        assert ready.last_sequence_id == total - 1
        assert (await send(call, batch(total - 1, [b"old again"]))).duplicate
        assert not (await send(call, batch(total, [b"new"]))).duplicate
        call.cancel()
    assert await read_all(process.service_url, full) == [b"new"]


async def test_graceful_close_takes_the_snapshot(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    """Timer off, fewer entries than the interval: only the snapshot taken when the broker
    shuts down (and the topic closes) moves the dedup cursor, so the ledgers consumed before
    the shutdown are trimmed after the restart — and the sequence ids are still known."""
    args = (*DEDUP, "--set", "brokerDeduplicationSnapshotFrequencyInSeconds=0")
    topic = "dedup-close"
    first = standalone_factory(None, *args)
    sent = payloads(0, 25)
    await publish_and_consume(first.service_url, topic, sent)
    assert first.stop() == 0

    again = standalone_factory(first.data_dir, *args)
    size = await eventually_at_most(again.http_url, topic, 0)
    assert size == 0, f"the close did not snapshot: storageSize {size}"
    async with grpc.aio.insecure_channel(again.grpc_address) as ch:
        call, ready = await raw_producer(ch, topic, "p")
        assert ready.last_sequence_id == 24
        assert (await send(call, batch(10, [b"old"]))).duplicate
        call.cancel()
    assert await read_all(again.service_url, topic) == []
