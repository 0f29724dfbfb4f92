"""The HTTP side of a real broker: Prometheus /metrics, topic stats and the admin API's errors."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pulsar_grpc.broker.topics.topic import PersistentTopic
from pulsar_grpc.client import Client, PulsarError, TopicNotFound
from tests.support import BrokerThread
from tests.waiting import eventually

CLUSTER = "standalone"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def http(broker: BrokerThread) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(
        base_url=broker.http_url, timeout=aiohttp.ClientTimeout(total=30)
    ) as session:
        yield session


@pytest.fixture
async def pulsar(broker: BrokerThread) -> AsyncIterator[Client]:
    async with Client(broker.service_url) as client:
        yield client


# ------------------------------------------------------------------------------- /metrics

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(http: aiohttp.ClientSession) -> tuple[str, Samples]:
    async with http.get("/metrics") as resp:
        assert resp.status == 200
        content_type = resp.headers["Content-Type"]
        text = await resp.text()
    assert content_type.startswith("text/plain"), content_type
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return text, samples


def topic_labels(topic: str, **extra: str) -> frozenset[tuple[str, str]]:
    return frozenset(
        {"cluster": CLUSTER, "namespace": "public/default", "topic": topic, **extra}.items()
    )


async def test_metrics_count_messages_storage_and_backlog_per_subscription(
    http: aiohttp.ClientSession, pulsar: Client
) -> None:
    topic = f"persistent://public/default/{unique('metrics')}"
    # Both subscriptions exist before the messages are produced.
    acking = await pulsar.subscribe(topic, "acking", initial_position="earliest")
    idle = await pulsar.subscribe(topic, "idle", initial_position="earliest")
    producer = await pulsar.create_producer(topic)
    for i in range(6):
        await producer.send(f"message-{i}".encode())  # one entry each: backlog counts entries
    received = [await acking.receive(timeout_ms=10_000) for _ in range(6)]
    assert [m.data() for m in received] == [f"message-{i}".encode() for i in range(6)]
    for message in received[:2]:
        await acking.acknowledge(message, wait=True)

    text, samples = await scrape(http)
    labels = topic_labels(topic)
    for family in ("pulsar_rate_in", "pulsar_storage_size", "pulsar_msg_backlog"):
        assert f"# TYPE {family} gauge" in text
    assert "# TYPE pulsar_in_messages_total counter" in text  # the counter's exposed name
    assert samples[("pulsar_in_messages_total", labels)] == 6
    assert samples[("pulsar_rate_in", labels)] >= 0
    assert samples[("pulsar_storage_size", labels)] >= sum(len(m.data()) for m in received)
    assert (
        samples[("pulsar_subscription_back_log", topic_labels(topic, subscription="acking"))] == 4
    )
    assert samples[("pulsar_subscription_back_log", topic_labels(topic, subscription="idle"))] == 6
    assert samples[("pulsar_msg_backlog", labels)] == 4 + 6
    assert samples[("pulsar_producers_count", labels)] == 1
    assert samples[("pulsar_subscriptions_count", labels)] == 2

    for message in received[2:]:
        await acking.acknowledge(message, wait=True)
    _, samples = await scrape(http)
    assert (
        samples[("pulsar_subscription_back_log", topic_labels(topic, subscription="acking"))] == 0
    )
    assert samples[("pulsar_msg_backlog", labels)] == 6

    # The rate moves once a stats interval (1 s in tests) with the message in it has ended.
    async def rate_is_positive() -> None:
        _, later = await scrape(http)
        assert later[("pulsar_rate_in", labels)] > 0

    await producer.send(b"one more")
    await eventually(rate_is_positive, timeout=5, interval=0.25)
    await producer.close()
    await acking.close()
    await idle.close()


async def test_backlog_after_acking_a_batch_message_by_message(
    http: aiohttp.ClientSession, pulsar: Client
) -> None:
    """One entry holding a batch of 3, acked one message per ack request: the entry is done."""
    topic = f"persistent://public/default/{unique('batch')}"
    consumer = await pulsar.subscribe(topic, "sub", initial_position="earliest")
    producer = await pulsar.create_producer(topic, batching_max_publish_delay_ms=1000)
    futures = [await producer.enqueue(f"m{i}".encode()) for i in range(3)]
    await producer.flush()
    ids = await asyncio.gather(*futures)
    assert {(i.ledger_id(), i.entry_id()) for i in ids} == {(ids[0].ledger_id(), ids[0].entry_id())}
    for _ in range(3):
        await consumer.acknowledge(await consumer.receive(timeout_ms=10_000), wait=True)

    _, samples = await scrape(http)
    sub_labels = topic_labels(topic, subscription="sub")
    assert samples[("pulsar_subscription_back_log", sub_labels)] == 0
    assert samples[("pulsar_msg_backlog", topic_labels(topic))] == 0
    assert samples[("pulsar_subscription_unacked_messages", sub_labels)] == 0
    await producer.close()
    await consumer.close()


# ------------------------------------------------------------------------------- stats


async def test_topic_stats_json_has_counters_publishers_and_subscriptions(
    http: aiohttp.ClientSession, pulsar: Client
) -> None:
    name = unique("stats")
    topic = f"persistent://public/default/{name}"
    consumer = await pulsar.subscribe(
        topic, "sub", "Shared", initial_position="earliest", receiver_queue_size=50
    )
    producer = await pulsar.create_producer(topic, producer_name="stats-producer")
    for i in range(3):
        await producer.send(f"m{i}".encode())
    first = await consumer.receive(timeout_ms=10_000)
    await consumer.acknowledge(first, wait=True)

    async def stats_settled() -> dict[str, Any]:
        async with http.get(f"/admin/v2/persistent/public/default/{name}/stats") as resp:
            assert resp.status == 200
            stats: dict[str, Any] = await resp.json()
        # The other two messages are dispatched to the consumer's queue without being asked.
        assert stats["subscriptions"]["sub"]["msgOutCounter"] == 3, stats
        return stats

    stats = await eventually(stats_settled)
    assert stats["msgInCounter"] == 3
    assert stats["bytesInCounter"] >= len(b"m0m1m2")  # as in Pulsar: with message metadata
    assert stats["storageSize"] > 0
    assert [p["producerName"] for p in stats["publishers"]] == ["stats-producer"]
    assert stats["publishers"][0]["msgInCounter"] == 3
    sub = stats["subscriptions"]["sub"]
    assert sub["type"] == "Shared"
    assert sub["msgBacklog"] == 2  # three entries, one acked
    assert sub["unackedMessages"] == 2
    [consumer_stats] = sub["consumers"]
    # 50 permits granted at subscribe, 3 messages dispatched; the client grants more only
    # after the application took half the queue (25).
    assert consumer_stats["availablePermits"] == 47
    assert consumer_stats["msgOutCounter"] == 3
    assert consumer_stats["unackedMessages"] == 2
    await producer.close()
    await consumer.close()


# ------------------------------------------------------------------------------- partitioned


async def test_partitioned_topic_creation_partitions_and_stats(
    http: aiohttp.ClientSession, pulsar: Client
) -> None:
    name = unique("orders")
    base = f"/admin/v2/persistent/public/default/{name}"
    async with http.put(f"{base}/partitions", data="4") as resp:
        assert resp.status == 204, await resp.text()
    async with http.get(f"{base}/partitions") as resp:
        assert resp.status == 200
        assert await resp.json() == {"partitions": 4}
    async with http.get("/admin/v2/persistent/public/default") as resp:
        assert f"persistent://public/default/{name}" in await resp.json()

    assert await pulsar.get_partitions_for_topic(name) == [
        f"persistent://public/default/{name}-partition-{i}" for i in range(4)
    ]
    consumer = await pulsar.subscribe(name, "agg", initial_position="earliest")
    producer = await pulsar.create_producer(name)
    for i in range(8):
        await producer.send(f"m{i}".encode())
    stats: dict[str, Any] = {}

    async def rates_aggregated() -> None:
        nonlocal stats
        async with http.get(f"{base}/stats") as resp:
            assert resp.status == 200
            stats = await resp.json()
        assert stats["msgRateIn"] > 0  # once a stats interval (1 s in tests) has ended

    await eventually(rates_aggregated, timeout=10, interval=0.2)
    await producer.close()
    assert stats["metadata"] == {"partitions": 4}
    parts = stats["partitions"]
    assert sorted(parts) == [f"persistent://public/default/{name}-partition-{i}" for i in range(4)]
    # The topic's own fields sum its partitions' (Pulsar's PartitionedTopicStats).
    assert stats["msgInCounter"] == sum(p["msgInCounter"] for p in parts.values()) == 8
    assert stats["storageSize"] == sum(p["storageSize"] for p in parts.values()) > 0
    assert stats["msgRateIn"] == pytest.approx(sum(p["msgRateIn"] for p in parts.values()))
    assert len(stats["publishers"]) == 4  # one producer per partition
    agg = stats["subscriptions"]["agg"]
    assert len(agg["consumers"]) == 4
    assert agg["msgOutCounter"] == sum(
        p["subscriptions"]["agg"]["msgOutCounter"] for p in parts.values()
    )
    await consumer.close()


async def test_non_partitioned_topic_reports_zero_partitions(http: aiohttp.ClientSession) -> None:
    name = unique("plain")
    base = f"/admin/v2/persistent/public/default/{name}"
    async with http.put(base) as resp:
        assert resp.status == 204, await resp.text()
    async with http.get(f"{base}/partitions") as resp:
        assert await resp.json() == {"partitions": 0}
    # A partitioned topic cannot take the name of an existing non-partitioned one.
    async with http.put(f"{base}/partitions", data="2") as resp:
        assert resp.status == 409
        assert "already exists" in (await resp.json())["reason"]


# ------------------------------------------------------------------------------- errors


async def reason(resp: aiohttp.ClientResponse) -> str:
    assert resp.content_type == "application/json", await resp.text()
    body = await resp.json()
    assert isinstance(body, dict) and set(body) == {"reason"}, body
    assert isinstance(body["reason"], str) and body["reason"]
    return body["reason"]


async def test_creating_an_existing_partitioned_topic_is_409(http: aiohttp.ClientSession) -> None:
    name = unique("twice")
    url = f"/admin/v2/persistent/public/default/{name}/partitions"
    async with http.put(url, data="2") as resp:
        assert resp.status == 204
    async with http.put(url, data="3") as resp:
        assert resp.status == 409
        assert name in await reason(resp)
    async with http.put(f"/admin/v2/persistent/public/default/{name}") as resp:
        assert resp.status == 409  # nor as a non-partitioned topic
        assert name in await reason(resp)
    async with http.get(url) as resp:
        assert await resp.json() == {"partitions": 2}  # unchanged


async def test_stats_of_an_absent_topic_is_404(http: aiohttp.ClientSession) -> None:
    name = unique("absent")
    async with http.get(f"/admin/v2/persistent/public/default/{name}/stats") as resp:
        assert resp.status == 404
        assert name in await reason(resp)
    # Asking did not create it.
    async with http.get("/admin/v2/persistent/public/default") as resp:
        assert f"persistent://public/default/{name}" not in await resp.json()


async def test_deleting_an_absent_topic_is_404(http: aiohttp.ClientSession) -> None:
    async with http.delete(f"/admin/v2/persistent/public/default/{unique('gone')}") as resp:
        assert resp.status == 404
        await reason(resp)


async def test_a_topic_deleted_while_it_loads_is_closed_not_left_loaded(
    broker: BrokerThread,
) -> None:
    """A delete that comes while the topic is still loading waits for the load and closes the
    topic: no topic is left serving on the deleted ledger."""
    assert broker.service is not None
    topics = broker.service.topics
    name = f"persistent://public/default/{unique('racing')}"

    async def load_and_delete() -> PersistentTopic:
        loading = asyncio.ensure_future(topics.get_topic(name))
        await asyncio.sleep(0)  # let the load register itself and start
        assert not loading.done()
        await topics.delete_topic(name)
        return await loading

    topic = await broker.call(load_and_delete())
    assert topic._closed
    assert name not in {t.name for t in topics.loaded_topics()}


@pytest.mark.parametrize(
    ("body", "status"),
    # A count below 1 is Pulsar's 406 NOT_ACCEPTABLE; a body that is no count, 400.
    [("abc", 400), ("", 400), ("0", 406), ("-1", 406), ('{"partitions": 2}', 400), ("1.5x", 400)],
)
async def test_bad_partitions_body_is_refused(
    http: aiohttp.ClientSession, body: str, status: int
) -> None:
    name = unique("badbody")
    url = f"/admin/v2/persistent/public/default/{name}/partitions"
    async with http.put(url, data=body) as resp:
        assert resp.status == status, (body, resp.status, await resp.text())
        await reason(resp)
    async with http.get(url) as resp:
        assert await resp.json() == {"partitions": 0}  # nothing was created


async def test_tenant_and_namespace_creation_then_produce(
    http: aiohttp.ClientSession, pulsar: Client
) -> None:
    async with http.put("/admin/v2/tenants/acme") as resp:
        assert resp.status == 204, await resp.text()
    async with http.put("/admin/v2/tenants/acme") as resp:
        assert resp.status == 409
        assert "acme" in await reason(resp)
    async with http.put("/admin/v2/namespaces/acme/ns") as resp:
        assert resp.status == 204, await resp.text()
    async with http.put("/admin/v2/namespaces/acme/ns") as resp:
        assert resp.status == 409
        await reason(resp)
    async with http.get("/admin/v2/namespaces/acme") as resp:
        assert await resp.json() == ["acme/ns"]

    producer = await pulsar.create_producer("persistent://acme/ns/t")
    message_id = await producer.send(b"hello acme")
    assert message_id.ledger_id() >= 0
    await producer.close()
    async with http.get("/admin/v2/persistent/acme/ns") as resp:
        assert await resp.json() == ["persistent://acme/ns/t"]
    async with http.get("/admin/v2/persistent/acme/ns/t/stats") as resp:
        assert (await resp.json())["msgInCounter"] == 1


async def test_namespace_in_absent_tenant_is_404(http: aiohttp.ClientSession) -> None:
    async with http.put("/admin/v2/namespaces/nope/ns") as resp:
        assert resp.status == 404
        assert "nope" in await reason(resp)


async def test_list_topics_of_absent_namespace_is_404(http: aiohttp.ClientSession) -> None:
    async with http.get("/admin/v2/persistent/nope/ns") as resp:
        assert resp.status == 404
        assert "nope/ns" in await reason(resp)


async def test_producing_to_an_absent_namespace_is_topic_not_found(
    broker: BrokerThread, pulsar: Client
) -> None:
    with pytest.raises(PulsarError) as err:
        await pulsar.create_producer("persistent://nope/ns/t")
    assert isinstance(err.value, TopicNotFound), repr(err.value)
    assert err.value.code == 11
    assert "nope/ns" in err.value.message
    # Nothing was created on the way, and the broker still serves.
    assert "persistent://nope/ns/t" not in broker.run(
        broker.service.list_topics("public/default")  # type: ignore[union-attr]
    )
    with pytest.raises(TopicNotFound):
        await pulsar.subscribe("persistent://nope/ns/t", "sub")
    producer = await pulsar.create_producer(unique("still-up"))
    await producer.send(b"ok")
    await producer.close()
