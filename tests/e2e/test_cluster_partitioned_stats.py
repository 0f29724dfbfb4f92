"""A partitioned topic's stats on three brokers (a shared memory: metadata store, one real
PostgreSQL ledger store): whichever broker is asked, every partition's stats come from its owner,
the same answer from each; partitions nobody owns yet are placed as a client's lookup places
them; the CLI prints them."""

from __future__ import annotations

import json
import uuid
from typing import Any

import aiohttp

from pulsar_grpc.broker.naming import NamespaceName, TopicName
from pulsar_grpc.client import Client
from tests.cluster import topic_over_every_bundle
from tests.e2e.test_cli import cli
from tests.e2e.test_cluster_bundles import cluster, http, placed, service
from tests.postgres import postgres_server, postgres_url
from tests.support import BrokerThread

__all__ = ["cluster", "http", "postgres_server", "postgres_url"]  # fixtures

PARTITIONS = 4


async def create_partitioned(
    http: aiohttp.ClientSession, broker: BrokerThread, topic: TopicName
) -> None:
    url = f"{broker.http_url}/admin/v2/{topic.rest_path}/partitions"
    async with http.put(url, data=str(PARTITIONS)) as response:
        assert response.status == 204, await response.text()


async def stats_from(
    http: aiohttp.ClientSession, broker: BrokerThread, topic: TopicName
) -> dict[str, Any]:
    async with http.get(f"{broker.http_url}/admin/v2/{topic.rest_path}/stats") as response:
        body = await response.text()
        assert response.status == 200, body
    stats: dict[str, Any] = json.loads(body)
    return stats


def msg_in(stats: dict[str, Any]) -> dict[str, int]:
    return {name: p["msgInCounter"] for name, p in stats["partitions"].items()}


async def test_partitioned_stats_gathered_from_every_owner(
    cluster: list[BrokerThread], http: aiohttp.ClientSession
) -> None:
    topic = topic_over_every_bundle(f"pstats-{uuid.uuid4().hex[:6]}", PARTITIONS)
    await create_partitioned(http, cluster[0], topic)
    partitions = [topic.get_partition(i) for i in range(PARTITIONS)]
    owners = [await placed(cluster, p) for p in partitions]
    assert len({id(o) for o in owners}) >= 2, "placement put every partition on one broker"

    # Partition i gets i + 1 messages, each through its owner (the client looks it up).
    expected = {str(p): i + 1 for i, p in enumerate(partitions)}
    async with Client(cluster[0].service_url) as client:
        for partition in partitions:
            async with await client.create_producer(partition.full_name) as producer:
                for n in range(expected[str(partition)]):
                    await producer.send(f"m{n}".encode())

    for broker in cluster:  # each one owns some partitions and asks the others for the rest
        stats = await stats_from(http, broker, topic)
        assert stats["metadata"] == {"partitions": PARTITIONS}
        assert msg_in(stats) == expected, f"asked {broker.http_url}"
        # Each partition stays loaded on its owner only: the stats did not load it elsewhere.
        for b in cluster:
            here = {t.name for t in service(b).topics.loaded_topics()} & set(expected)
            assert here == {str(p) for p, o in zip(partitions, owners, strict=True) if o is b}

    # The CLI, pointed at any broker, prints the same counters.
    done = cli("topics", "--admin-url", cluster[2].http_url, "stats", topic.full_name)
    assert done.returncode == 0, done.stderr
    assert msg_in(json.loads(done.stdout)) == expected

    # One owner's web service goes away (its bundles stay owned): asked of another broker, the
    # stats fail with 503 and a reason naming exactly that owner's partitions.
    gone = owners[0]
    web = service(gone).web
    assert web is not None
    await gone.call(web.close())
    asker = next(b for b in cluster if b is not gone)
    async with http.get(f"{asker.http_url}/admin/v2/{topic.rest_path}/stats") as response:
        assert response.status == 503
        reason = (await response.json())["reason"]
    named = {str(p) for p in partitions if f"{p}:" in reason}
    assert named == {str(p) for p, o in zip(partitions, owners, strict=True) if o is gone}, reason


async def test_unowned_partitions_are_placed_like_a_lookup(
    cluster: list[BrokerThread], http: aiohttp.ClientSession
) -> None:
    # A namespace of its own: no bundle of it is owned before the stats request.
    ns = NamespaceName.get(f"public/pstats-{uuid.uuid4().hex[:6]}")
    async with http.put(f"{cluster[0].http_url}/admin/v2/namespaces/{ns}") as response:
        assert response.status == 204, await response.text()
    topic = TopicName.get(f"persistent://{ns}/idle")
    await create_partitioned(http, cluster[1], topic)
    assert not any(
        b.namespace == ns for c in cluster for b in service(c).namespaces.owned_bundles()
    )

    asked = next(b for b in cluster if not service(b).namespaces.role.election.is_leader)  # type: ignore[union-attr]
    stats = await stats_from(http, asked, topic)
    assert msg_in(stats) == {str(topic.get_partition(i)): 0 for i in range(PARTITIONS)}
    # Every partition's bundle now has an owner, and the others answer the same.
    for i in range(PARTITIONS):
        partition = topic.get_partition(i)
        owners = [
            c
            for c in cluster
            if partition.full_name in {t.name for t in service(c).topics.loaded_topics()}
        ]
        assert len(owners) == 1, f"{partition} loaded on {len(owners)} brokers"
    for broker in cluster:
        assert msg_in(await stats_from(http, broker, topic)) == msg_in(stats)
