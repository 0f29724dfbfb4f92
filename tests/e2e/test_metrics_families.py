"""/metrics carries Pulsar's families with Pulsar's names and labels, filled from one stats
interval that the test ends by hand (a broker whose own interval is an hour): the topic's
counters and gauges, the write latency and entry size buckets, the namespace's pulsar_ml_*
figures, and the process' own (process_*, python_gc_*)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import pytest

from pulsar_grpc.broker.web.metrics import ENTRY_SIZE_NAMES, WRITE_LATENCY_NAMES
from pulsar_grpc.client import Client
from tests.e2e.messaging import receive_n
from tests.e2e.test_stats_rates import metric_samples, tick, topic_stats
from tests.support import BrokerThread

ENTRIES = 12


async def test_topic_namespace_and_process_families(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    broker = broker_factory(statsUpdateFrequencyInSecs=3600)
    topic = f"families-{uuid.uuid4().hex[:8]}"
    full = f"persistent://public/default/{topic}"
    cluster = broker.config.clusterName
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(topic, "sub", initial_position="earliest")
        producer = await client.create_producer(topic, batching_enabled=False)
        for i in range(ENTRIES):
            await producer.send(b"m%02d" % i)  # small entries: the first size bucket
        for message in await receive_n(consumer, ENTRIES):
            await consumer.acknowledge(message, wait=True)
        await tick(broker)
        samples = await asyncio.to_thread(metric_samples, broker)
        stats = await asyncio.to_thread(topic_stats, broker, topic)
        await producer.close()
        await consumer.close()

    def value(name: str, **labels: str) -> float:
        return samples[(name, frozenset(labels.items()))]

    t = {"cluster": cluster, "namespace": "public/default", "topic": full}
    assert value("pulsar_in_messages_total", **t) == ENTRIES
    assert value("pulsar_in_bytes_total", **t) == stats["bytesInCounter"]
    assert value("pulsar_out_messages_total", **t) == ENTRIES
    assert value("pulsar_out_bytes_total", **t) == stats["bytesOutCounter"]
    assert value("pulsar_consumers_count", **t) == 1
    assert value("pulsar_storage_backlog_size", **t) == stats["backlogSize"] == 0
    assert value("pulsar_subscription_msg_throughput_out", **t, subscription="sub") > 0
    assert value("pulsar_storage_write_rate", **t) > 0
    # Every entry written in the interval sits in one write-latency bucket and one size bucket.
    latency = [value(n, **t) for n in WRITE_LATENCY_NAMES]
    assert sum(latency) == value("pulsar_storage_write_latency_count", **t) == ENTRIES
    assert value("pulsar_storage_write_latency_sum", **t) > 0
    sizes = [value(n, **t) for n in ENTRY_SIZE_NAMES]
    assert sizes[0] == value("pulsar_entry_size_count", **t) == ENTRIES
    assert value("pulsar_entry_size_sum", **t) == stats["storageSize"]

    ns = {"cluster": cluster, "namespace": "public/default"}
    assert value("pulsar_topics_count", **ns) == 1
    assert value("pulsar_ml_AddEntrySucceed", **ns) == ENTRIES
    assert value("pulsar_ml_AddEntryErrors", **ns) == 0
    assert value("pulsar_ml_AddEntryBytesRate", **ns) > 0
    assert value("pulsar_ml_StoredMessagesSize", **ns) == stats["storageSize"]
    assert value("pulsar_ml_ReadEntriesSucceeded", **ns) >= ENTRIES
    assert value("pulsar_ml_MarkDeleteRate", **ns) > 0
    # Pulsar's bucket families: per second over the interval, a quantile label per bucket.
    period = 3600
    latency_quantiles = [
        "0.0_0.5",
        "0.5_1.0",
        "1.0_5.0",
        "5.0_10.0",
        "10.0_20.0",
        "20.0_50.0",
        "50.0_100.0",
        "100.0_200.0",
        "200.0_1000.0",
    ]
    per_second = sum(
        value("pulsar_ml_AddEntryLatencyBuckets", **ns, quantile=q) for q in latency_quantiles
    ) + value("pulsar_ml_AddEntryLatencyBuckets_OVERFLOW", **ns)
    assert per_second * period == pytest.approx(ENTRIES)
    assert value("pulsar_ml_EntrySizeBuckets", **ns, quantile="0.0_128.0") * period == (
        pytest.approx(ENTRIES)
    )
    assert value("pulsar_ml_EntrySizeBuckets_OVERFLOW", **ns) == 0

    assert value("process_cpu_seconds_total") > 0
    assert ("python_gc_objects_collected_total", frozenset({("generation", "0")})) in samples
    # The event loop's stalls (broker/stalls.py): GC pauses per generation and the loop's lag.
    assert ("python_gc_pause_seconds_count", frozenset({("generation", "2")})) in samples
    assert value("pulsar_broker_event_loop_lag_seconds_count") > 0
    assert ("pulsar_broker_event_loop_lag_seconds_max", frozenset()) in samples
