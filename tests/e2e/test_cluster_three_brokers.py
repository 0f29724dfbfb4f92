"""Three broker processes as `make cluster` runs them (tests/cluster.py: one ZooKeeper, one
PostgreSQL, listeners ``internal`` on 127.0.0.1 and ``external`` on 127.0.0.2): topics spread
over bundles owned by all three; a lookup through each broker and each listener, over gRPC (the
raw RPC and the SDK) and over HTTP, answers the same owner with that listener's addresses (HTTP:
a 307 to the owner's URL of that listener, listenerName kept); what is produced through one
broker is consumed through another; every load-report node carries the gRPC protocol data."""

from __future__ import annotations

import json
from collections.abc import Callable

import aiohttp
import yarl

from pulsar_grpc.broker.cluster.load_report import LOADBALANCE_BROKERS_ROOT
from pulsar_grpc.broker.metadata import ZooKeeperMetadataStore
from pulsar_grpc.broker.naming import TopicName
from pulsar_grpc.client import Client
from tests.cluster import (
    BROKERS,
    LISTENERS,
    Cluster,
    Member,
    cluster_factory,
    grpc_lookup,
    lookup_path,
    one_topic_per_bundle,
    place,
)
from tests.e2e.messaging import receive_n
from tests.postgres import postgres_server, postgres_url
from tests.zookeeper import zk_chroot, zookeeper

__all__ = ["cluster_factory", "postgres_server", "postgres_url", "zk_chroot", "zookeeper"]


def other(listener: str) -> str:
    (found,) = [name for name in LISTENERS if name != listener]
    return found


async def http_lookup(
    http: aiohttp.ClientSession, member: Member, listener: str, topic: TopicName, named: str
) -> tuple[int, str]:
    """An HTTP lookup through `member`'s `listener` address naming listener `named`: (status,
    Location) for a redirect, else (200, the answered brokerUrl)."""
    query = {} if named == listener else {"listenerName": named}
    url = member.http_url(listener) + lookup_path(topic)
    async with http.get(url, params=query, allow_redirects=False) as response:
        if response.status == 307:
            return 307, response.headers["Location"]
        assert response.status == 200, await response.text()
        return 200, (await response.json())["brokerUrl"]


async def check_http(
    http: aiohttp.ClientSession, member: Member, owner: Member, topic: TopicName, listener: str
) -> None:
    """Through `member`'s `listener` address, for the listener the request came through and
    for the other one named in the query: the owner answers; any other broker redirects to
    the owner's HTTP URL of that listener, which answers when followed."""
    for named in (listener, other(listener)):
        status, answer = await http_lookup(http, member, listener, topic, named)
        if member is owner:
            assert (status, answer) == (200, owner.service_url(named))
            continue
        assert status == 307, (member.name, listener, named)
        location = yarl.URL(answer)
        assert str(location.origin()) == owner.http_url(named)
        assert location.path == lookup_path(topic)
        assert dict(location.query) == {"authoritative": "true", "listenerName": named}
        async with http.get(answer, allow_redirects=False) as followed:  # both hosts are local
            assert followed.status == 200
            assert (await followed.json())["brokerUrl"] == owner.service_url(named)


async def test_lookups_through_every_broker_and_listener_answer_the_same_owner(
    cluster_factory: Callable[..., Cluster],
) -> None:
    cluster = cluster_factory()
    topics = one_topic_per_bundle("three")
    owners: dict[TopicName, Member] = {}
    for i, topic in enumerate(topics):  # the leader spreads the 4 bundles over the 3 brokers
        owners[topic] = await place(
            cluster.members, cluster.members[i % BROKERS].service_url(), topic
        )
    assert {owner.name for owner in owners.values()} == {m.name for m in cluster.members}

    async with aiohttp.ClientSession() as http:
        for topic, owner in owners.items():
            for member in cluster.members:
                for listener in LISTENERS:
                    where = (topic.local_name, member.name, listener)
                    # gRPC, the raw RPC: the listener come through, then the other one named
                    answer = await grpc_lookup(member.address(listener), topic)
                    assert answer == owner.answer(listener), where
                    named = await grpc_lookup(member.address(listener), topic, other(listener))
                    assert named == owner.answer(other(listener)), where
                    # gRPC, the SDK
                    async with Client(member.service_url(listener)) as client:
                        found = await client.lookup(topic.full_name)
                    assert (found.grpc_url, found.http_url, found.listener_name) == (
                        owner.service_url(listener),
                        owner.http_url(listener),
                        listener,
                    ), where
                    await check_http(http, member, owner, topic, listener)

    # Produced through one broker, consumed through another's external address: each client
    # is sent on to the owner at its own listener's addresses.
    topic = topics[0]
    payloads = [f"m{i}".encode() for i in range(10)]
    async with (
        Client(cluster.members[1].service_url()) as producing,
        Client(cluster.members[2].service_url("external")) as consuming,
    ):
        consumer = await consuming.subscribe(topic.full_name, "s", initial_position="Earliest")
        producer = await producing.create_producer(topic.full_name)
        for payload in payloads:
            await producer.send(payload)
        assert [m.data() for m in await receive_n(consumer, len(payloads))] == payloads


async def test_every_load_report_carries_the_grpc_protocol_data(
    cluster_factory: Callable[..., Cluster],
) -> None:
    cluster = cluster_factory()
    store = await ZooKeeperMetadataStore.connect(cluster.zookeeper.hosts, cluster.chroot)
    try:
        names = await store.get_children(LOADBALANCE_BROKERS_ROOT)
        assert sorted(names) == sorted(m.broker_id for m in cluster.members)
        for member in cluster.members:
            node = await store.get(f"{LOADBALANCE_BROKERS_ROOT}/{member.broker_id}")
            assert node is not None
            report = json.loads(node.value)
            assert report["pulsarServiceUrl"] == member.service_url()
            assert report["webServiceUrl"] == member.http_url()
            assert report["advertisedListeners"] == {
                listener: {
                    "brokerServiceUrl": member.service_url(listener),
                    "brokerHttpUrl": member.http_url(listener),
                }
                for listener in LISTENERS
            }
            assert report["protocols"].keys() == {"grpc"}
            assert json.loads(report["protocols"]["grpc"]) == {
                listener: {"grpc": member.service_url(listener)} for listener in LISTENERS
            }
    finally:
        await store.close()
