"""Three brokers on one real ZooKeeper and one real PostgreSQL: bundles are owned through
ephemeral /namespace nodes by the broker the leader placed them on, every broker answers a
lookup (gRPC and HTTP, each listener) with the owner's addresses, the SDK given a non-owner's
URL works through the owner, and a broker whose ZooKeeper session is lost stops serving while
the bundle is placed again with nothing receipted lost."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import grpc
import pytest

from pulsar_grpc.broker.metadata import ZooKeeperMetadataStore
from pulsar_grpc.broker.naming import DEFAULT_NAMESPACE, NamespaceBundles
from pulsar_grpc.broker.service import BrokerService
from pulsar_grpc.client import Client
from tests.cluster import (
    EXTERNAL_GRPC_TLS,
    BrokerMember,
    grpc_lookup,
    lookup_path,
    one_topic_per_bundle,
    place,
    zk_postgres_cluster,
)
from tests.e2e.messaging import receive_n
from tests.e2e.wire import stub
from tests.postgres import postgres_server, postgres_url
from tests.waiting import eventually
from tests.zookeeper import ZooKeeperServer, end_session, zk_chroot, zookeeper

__all__ = [  # fixtures
    "postgres_server",
    "postgres_url",
    "zk_chroot",
    "zk_postgres_cluster",
    "zookeeper",
]


@pytest.fixture
def cluster(zk_postgres_cluster: list[BrokerMember]) -> list[BrokerMember]:
    return zk_postgres_cluster


def loaded(service: BrokerService) -> set[str]:
    """The topics ``service`` serves now."""
    return {t.name for t in service.topics.loaded_topics()}


async def test_bundles_placed_by_the_leader_and_every_broker_answers_the_owner(
    cluster: list[BrokerMember], zookeeper: ZooKeeperServer, zk_chroot: str
) -> None:
    topics = one_topic_per_bundle()
    owners = {}
    for i, topic in enumerate(topics):
        owners[topic] = await place(cluster, cluster[i % len(cluster)].service_url, topic)
    # 4 bundles on 3 idle brokers: each broker got at least one.
    assert {id(owner) for owner in owners.values()} == {id(member) for member in cluster}

    async with aiohttp.ClientSession() as http:
        for topic, owner in owners.items():
            for member in cluster:
                for listener in ("internal", "external"):
                    # gRPC: every broker, through each listener, names the same owner
                    answer = await grpc_lookup(member.grpc(listener), topic)
                    assert answer == owner.answer(listener), (topic, member.ports, listener)
                    # HTTP: the owner answers; the others send the client to the owner
                    url = member.http(listener) + lookup_path(topic)
                    async with http.get(url, allow_redirects=False) as response:
                        if member is owner:
                            assert response.status == 200
                            body = await response.json()
                            assert body["brokerUrl"] == owner.answer(listener)["grpc_url"]
                            continue
                        assert response.status == 307
                        location = response.headers["Location"]
                    assert location == (
                        owner.answer(listener)["http_url"]
                        + lookup_path(topic)
                        + f"?authoritative=true&listenerName={listener}"
                    )
                    if listener == "internal":  # reachable from here: follow it
                        async with http.get(location, allow_redirects=False) as response:
                            assert response.status == 200
                            body = await response.json()
                        assert body["brokerUrl"] == owner.answer(listener)["grpc_url"]

    outside = await ZooKeeperMetadataStore.connect(zookeeper.hosts, zk_chroot)
    try:
        bundles = NamespaceBundles.with_count(DEFAULT_NAMESPACE, 4)
        policies = await outside.get("/admin/policies/public/default")
        assert policies is not None
        assert json.loads(policies.value)["bundles"] == {
            "boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"],
            "numBundles": 4,
        }
        assert await outside.get_children("/namespace/public/default") == [
            b.range_str for b in bundles
        ]
        for topic, owner in owners.items():
            node = await outside.get(
                f"/namespace/public/default/{bundles.bundle_for(topic).range_str}"
            )
            assert node is not None
            data = json.loads(node.value)
            assert data["nativeUrl"] == owner.answer("internal")["grpc_url"]
            assert data["httpUrl"] == owner.answer("internal")["http_url"]
            assert data["disabled"] is False
            assert data["advertisedListeners"]["external"]["brokerServiceUrlTls"] == (
                EXTERNAL_GRPC_TLS
            )
    finally:
        await outside.close()


async def test_sdk_given_a_non_owner_produces_and_consumes_through_the_owner(
    cluster: list[BrokerMember],
) -> None:
    topic = one_topic_per_bundle()[0]
    owner = await place(cluster, cluster[0].service_url, topic)
    other = next(member for member in cluster if member is not owner)

    # A Produce reaching a broker that does not own the topic: retryable, names the owner.
    async with grpc.aio.insecure_channel(other.grpc("internal")) as channel:
        call = stub(channel).Produce(metadata=(("x-pulsar-topic", topic.full_name),))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call.read()
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    trailers = dict(refused.value.trailing_metadata() or ())
    assert trailers["pulsar-error-code"] == "6"  # ServiceNotReady
    assert trailers["pulsar-owner-url"] == owner.answer("internal")["grpc_url"]

    payloads = [f"m{i}".encode() for i in range(20)]
    async with Client(other.service_url) as client:
        consumer = await client.subscribe(topic.full_name, "sub", initial_position="Earliest")
        producer = await client.create_producer(topic.full_name, batching_max_messages=5)
        for payload in payloads:
            producer.send_async(payload, lambda *_: None)
        await producer.flush()
        received = await receive_n(consumer, len(payloads))
        assert [m.data() for m in received] == payloads
    assert topic.full_name in loaded(owner.service)
    assert topic.full_name not in loaded(other.service)


async def test_lost_session_stops_serving_and_the_bundle_is_placed_again(
    cluster: list[BrokerMember], zookeeper: ZooKeeperServer
) -> None:
    topic = one_topic_per_bundle()[0]
    doomed = await place(cluster, cluster[0].service_url, topic)
    survivor = next(member for member in cluster if member is not doomed)
    service = doomed.service
    assert service.namespaces.ownership is not None

    async with Client(survivor.service_url) as client:
        consumer = await client.subscribe(topic.full_name, "sub", initial_position="Earliest")
        producer = await client.create_producer(topic.full_name, batching_max_messages=1)
        receipted = []
        for i in range(10):
            await producer.send(f"before-{i}".encode())
            receipted.append(f"before-{i}".encode())
        assert topic.full_name in loaded(service)

        store = service.store
        assert isinstance(store, ZooKeeperMetadataStore)
        client_id = store.client_id
        assert client_id is not None
        await asyncio.to_thread(end_session, zookeeper.hosts, client_id)

        # The doomed broker stops serving at once: its topic is unloaded, its bundle let go.
        await eventually(lambda: topic.full_name not in loaded(service), timeout=30)
        assert service.namespaces.owned_bundles() == []

        # Clients carry on through the broker the bundle is placed on now (the leader may
        # choose the doomed broker again: it works on in a new session).
        for i in range(10):
            await producer.send(f"after-{i}".encode())
            receipted.append(f"after-{i}".encode())
        seen: set[bytes] = set()
        async with asyncio.timeout(60):
            while not set(receipted) <= seen:
                message = await consumer.receive()
                seen.add(message.data())
                await consumer.acknowledge(message)
        owner = await place(cluster, survivor.service_url, topic)
        for member in cluster:
            assert await grpc_lookup(member.grpc("internal"), topic) == owner.answer("internal")
