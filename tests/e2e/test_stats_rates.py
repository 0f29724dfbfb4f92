"""TopicStats rates over a stats interval (statsUpdateFrequencyInSecs), as Pulsar computes them:
the broker's stats task turns the counters into the interval's rates once per interval, and
the admin stats and /metrics read those last computed values, so reading changes nothing.

The first tests run a broker whose interval never ends on its own (an hour) and end it by hand
(the task's tick), so what the interval held is known exactly; the last one lets the task run
every second as the other tests' brokers do.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pulsar_grpc.client import Client
from tests.e2e.messaging import receive_n
from tests.support import BrokerThread
from tests.waiting import eventually

RATE_FIELDS = ("msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut")


def get_json(broker: BrokerThread, path: str) -> Any:
    with urllib.request.urlopen(f"{broker.http_url}{path}", timeout=10) as resp:
        return json.loads(resp.read())


def topic_stats(broker: BrokerThread, topic: str) -> dict[str, Any]:
    stats: dict[str, Any] = get_json(broker, f"/admin/v2/persistent/public/default/{topic}/stats")
    return stats


def metric_samples(broker: BrokerThread) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(f"{broker.http_url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def tick(broker: BrokerThread) -> None:
    """End the stats interval now (what the stats task does every interval)."""

    async def update() -> None:
        assert broker.service is not None and broker.service.stats_task is not None
        broker.service.stats_task.update()

    await asyncio.to_thread(broker.run, update())


async def test_stats_report_the_last_interval_and_reading_them_changes_nothing(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    broker = broker_factory(statsUpdateFrequencyInSecs=3600)
    topic = f"rates-{uuid.uuid4().hex[:8]}"
    began_ms = int(time.time() * 1000)
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(topic, "sub", initial_position="earliest")
        idle = await client.subscribe(topic, "idle", initial_position="earliest")
        producer = await client.create_producer(topic, batching_enabled=False)
        for i in range(20):
            await producer.send(b"%03d" % i + b"x" * 97)  # 100-byte payloads
        for message in await receive_n(consumer, 20):
            await consumer.acknowledge(message, wait=True)
        before = await asyncio.to_thread(topic_stats, broker, topic)
        assert [before[k] for k in RATE_FIELDS] == [0, 0, 0, 0]  # no interval ended yet
        assert before["msgInCounter"] == 20  # the counters move at once

        await tick(broker)
        stats = await asyncio.to_thread(topic_stats, broker, topic)
        assert stats["msgRateIn"] > 0 and stats["msgThroughputIn"] > stats["msgRateIn"] * 100
        # Two subscriptions were each sent the 20 messages.
        assert stats["msgRateOut"] > stats["msgRateIn"]
        entry_size = stats["msgThroughputIn"] / stats["msgRateIn"]
        assert stats["averageMsgSize"] == entry_size
        # "idle" acked nothing: its backlog is every entry stored; "sub" has none.
        assert stats["backlogSize"] == stats["storageSize"] > 2000
        # Each meter's first interval began when it was made (the producer's after the
        # topic's): the rates differ, the sizes do not.
        (publisher,) = stats["publishers"]
        assert publisher["msgRateIn"] >= stats["msgRateIn"]
        assert publisher["averageMsgSize"] == pytest.approx(entry_size)
        assert publisher["clientVersion"].startswith("pulsar-grpc-python/")
        assert publisher["address"] and publisher["connectedSince"]
        sub = stats["subscriptions"]["sub"]
        assert sub["msgRateOut"] > 0 and sub["msgThroughputOut"] > sub["msgRateOut"] * 100
        assert sub["backlogSize"] == 0
        assert sub["lastConsumedTimestamp"] >= began_ms
        assert sub["lastAckedTimestamp"] >= sub["lastConsumedTimestamp"]
        assert stats["subscriptions"]["idle"]["lastAckedTimestamp"] == 0
        (sub_consumer,) = sub["consumers"]
        assert sub_consumer["msgRateOut"] >= sub["msgRateOut"]
        assert sub_consumer["msgThroughputOut"] / sub_consumer["msgRateOut"] == pytest.approx(
            sub["msgThroughputOut"] / sub["msgRateOut"]
        )
        assert sub_consumer["lastAckedTimestamp"] == sub["lastAckedTimestamp"]
        assert sub_consumer["clientVersion"].startswith("pulsar-grpc-python/")

        # Reading again (stats and /metrics, twice) finds the same rates: nothing is reset.
        again = await asyncio.to_thread(topic_stats, broker, topic)
        assert [again[k] for k in RATE_FIELDS] == [stats[k] for k in RATE_FIELDS]
        labels = frozenset(
            {
                "cluster": broker.config.clusterName,
                "namespace": "public/default",
                "topic": f"persistent://public/default/{topic}",
            }.items()
        )
        first = await asyncio.to_thread(metric_samples, broker)
        second = await asyncio.to_thread(metric_samples, broker)
        assert first[("pulsar_rate_in", labels)] == stats["msgRateIn"]
        assert second[("pulsar_rate_in", labels)] == stats["msgRateIn"]
        assert second[("pulsar_throughput_out", labels)] == stats["msgThroughputOut"]

        # Redelivered messages count in the next interval; an idle interval reads zero.
        await receive_n(idle, 5)
        await idle.redeliver_unacknowledged_messages()
        await tick(broker)
        stats = await asyncio.to_thread(topic_stats, broker, topic)
        assert stats["msgRateIn"] == 0
        redelivering = stats["subscriptions"]["idle"]
        assert redelivering["msgRateRedeliver"] > 0
        assert redelivering["consumers"][0]["msgRateRedeliver"] > 0
        await producer.close()
        await consumer.close()
        await idle.close()


async def test_the_stats_task_ends_an_interval_every_stats_update_frequency(
    broker: BrokerThread,
) -> None:
    """statsUpdateFrequencyInSecs=1 here (tests/support.py): the rates appear on their own."""
    topic = f"ticking-{uuid.uuid4().hex[:8]}"
    async with Client(broker.service_url) as client:
        producer = await client.create_producer(topic)
        await producer.send(b"hello")

        async def rate_shown() -> None:
            stats = await asyncio.to_thread(topic_stats, broker, topic)
            assert stats["msgRateIn"] > 0

        await eventually(rate_shown, timeout=10, interval=0.2)
        await producer.close()
