"""A partitioned topic's subscription and delete admin calls on three brokers (a shared memory:
metadata store, one real PostgreSQL ledger store): whichever broker is asked, each partition is
changed on its owner; a delete refused for a client on a partition another broker serves, and
a forced one leaves no partition anywhere."""

from __future__ import annotations

import json
import uuid
from typing import Any

import aiohttp

from pulsar_grpc.broker.naming import TopicName
from pulsar_grpc.client import Client
from tests.cluster import topic_over_every_bundle
from tests.e2e.test_cluster_bundles import cluster, http, placed, service
from tests.postgres import postgres_server, postgres_url
from tests.support import BrokerThread

__all__ = ["cluster", "http", "postgres_server", "postgres_url"]  # fixtures

PARTITIONS = 4


async def call(
    http: aiohttp.ClientSession, broker: BrokerThread, method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body)
    async with http.request(method, f"{broker.http_url}{path}", data=data) as response:
        text = await response.text()
    return response.status, json.loads(text) if text else None


async def test_partitioned_subscriptions_and_delete_reach_every_owner(
    cluster: list[BrokerThread], http: aiohttp.ClientSession
) -> None:
    topic = topic_over_every_bundle(f"padmin-{uuid.uuid4().hex[:6]}", PARTITIONS)
    base = f"/admin/v2/{topic.rest_path}"
    assert await call(http, cluster[0], "PUT", f"{base}/partitions", PARTITIONS) == (204, None)
    partitions = [topic.get_partition(i) for i in range(PARTITIONS)]
    owners = [await placed(cluster, p) for p in partitions]
    assert len({id(o) for o in owners}) >= 2, "placement put every partition on one broker"

    earliest = {"ledgerId": -1, "entryId": -1}
    assert await call(http, cluster[1], "PUT", f"{base}/subscription/s", earliest) == (204, None)
    for partition, owner in zip(partitions, owners, strict=True):
        [loaded] = [t for t in service(owner).topics.loaded_topics() if t.name == str(partition)]
        assert "s" in loaded.subscriptions, f"{partition} on {owner.http_url}"
    for broker in cluster:
        assert await call(http, broker, "GET", f"{base}/subscriptions") == (200, ["s"])

    async with Client(cluster[0].service_url) as client:
        producer = await client.create_producer(topic.full_name, batching_enabled=False)
        for i in range(2 * PARTITIONS):
            await producer.send(f"m{i}".encode())
        status, stats = await call(http, cluster[2], "GET", f"{base}/partitioned-stats")
        assert status == 200 and stats["subscriptions"]["s"]["msgBacklog"] == 2 * PARTITIONS
        assert stats["msgInCounter"] == 2 * PARTITIONS
        assert await call(http, cluster[2], "POST", f"{base}/subscription/s/skip_all") == (
            204,
            None,
        )
        _, stats = await call(http, cluster[0], "GET", f"{base}/partitioned-stats")
        assert stats["subscriptions"]["s"]["msgBacklog"] == 0
        assert await call(http, cluster[1], "POST", f"{base}/subscription/s/resetcursor/0") == (
            204,
            None,
        )
        _, stats = await call(http, cluster[0], "GET", f"{base}/partitioned-stats")
        assert stats["subscriptions"]["s"]["msgBacklog"] == 2 * PARTITIONS
        assert await call(http, cluster[0], "DELETE", f"{base}/subscription/s") == (204, None)
        assert await call(http, cluster[2], "GET", f"{base}/subscriptions") == (200, [])

        # The producer is on every partition, most of them on other brokers than the one asked.
        assert await call(http, cluster[0], "DELETE", f"{base}/partitions") == (
            412,
            {"reason": "Topic has active producers/subscriptions"},
        )
        status, _ = await call(http, cluster[1], "DELETE", f"{base}/partitions?force=true")
        assert status == 204
    for partition in partitions:
        for broker in cluster:
            assert str(partition) not in {t.name for t in service(broker).topics.loaded_topics()}
        exists = service(cluster[0]).ledgers.exists(partition.persistence_naming_encoding)
        assert not await cluster[0].call(exists), partition


async def test_a_namespace_is_deleted_on_every_broker(
    cluster: list[BrokerThread], http: aiohttp.ClientSession
) -> None:
    ns = f"public/{uuid.uuid4().hex[:8]}"
    assert await call(http, cluster[0], "PUT", f"/admin/v2/namespaces/{ns}") == (204, None)
    topics = [TopicName.get(f"persistent://{ns}/t-{i}") for i in range(8)]
    owners = [await placed(cluster, t) for t in topics]
    assert len({id(o) for o in owners}) >= 2, "placement put every topic on one broker"
    async with Client(cluster[0].service_url) as client:
        for topic in topics:
            async with await client.create_producer(topic.full_name) as producer:
                await producer.send(b"x")
    assert await call(http, cluster[1], "DELETE", f"/admin/v2/namespaces/{ns}") == (
        409,
        {"reason": "Cannot delete non empty namespace"},
    )
    path = f"/admin/v2/namespaces/{ns}?force=true"
    assert await call(http, cluster[1], "DELETE", path) == (204, None)
    for broker in cluster:
        assert not [t for t in service(broker).topics.loaded_topics() if ns in t.name]
        assert not [b for b in service(broker).namespaces.owned_bundles() if ns in str(b)]
    for topic in topics:
        exists = service(cluster[0]).ledgers.exists(topic.persistence_naming_encoding)
        assert not await cluster[0].call(exists), topic
    assert (await call(http, cluster[2], "GET", f"/admin/v2/namespaces/{ns}"))[0] == 404
