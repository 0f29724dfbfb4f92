"""The leader and the lookup protocol across three real brokers.

On one real ZooKeeper: exactly one broker leads (its LeaderBroker JSON at /loadbalance/leader,
the admin API's leaderBroker on every broker) and stopping it elects another. On the shared
in-memory store, where the placement logic is the point: a lookup of an unowned bundle through a
non-leader is redirected to the leader, then (authoritative) to the broker the leader chose,
each hop on the addresses of the listener the client came through, over gRPC and HTTP; eight
bundles on three idle brokers are spread; the SDK works on a partitioned topic through a
non-leader.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable

import aiohttp
import grpc
import pytest
from yarl import URL

from pulsar_grpc.broker.cluster.leader import LEADER_PATH
from pulsar_grpc.broker.metadata import SessionEvent, ZooKeeperMetadataStore
from pulsar_grpc.broker.naming import TopicName
from pulsar_grpc.client import Client
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.cluster import BrokerMember, addresses, one_topic_per_bundle, start_brokers
from tests.e2e.messaging import receive_n
from tests.e2e.wire import stub
from tests.support import BrokerThread
from tests.waiting import eventually
from tests.zookeeper import ZooKeeperServer, end_session, zk_chroot, zookeeper

__all__ = ["zk_chroot", "zookeeper"]  # fixtures

BUNDLES = 8
_TREES = itertools.count()

CONNECT = pb.LookupResponse.Connect
REDIRECT = pb.LookupResponse.Redirect


@pytest.fixture
def cluster(broker_factory: Callable[..., BrokerThread]) -> list[BrokerMember]:
    return start_brokers(
        broker_factory, f"memory:leader-{next(_TREES)}", defaultNumberOfNamespaceBundles=BUNDLES
    )


async def the_leader(cluster: list[BrokerMember]) -> BrokerMember:
    """Wait until exactly one member leads and every member knows it."""

    def check() -> BrokerMember:
        leaders = [m for m in cluster if m.leads]
        assert len(leaders) == 1, [m.leads for m in cluster]
        election = leaders[0].service.election
        assert election is not None
        for member in cluster:
            assert member.service.namespaces.leader() == election.me
        return leaders[0]

    result: BrokerMember = await eventually(check, timeout=30)
    return result


def member_at(cluster: list[BrokerMember], grpc_url: str, listener: str) -> BrokerMember:
    (found,) = [m for m in cluster if m.answer(listener)["grpc_url"] == grpc_url]
    return found


def grpc_part(answer: dict[str, str]) -> tuple[str, str]:
    """The gRPC addresses of a BrokerMember.answer: (grpc_url, grpc_url_tls)."""
    return answer["grpc_url"], answer["grpc_url_tls"]


def owned(member: BrokerMember) -> set[str]:
    return {str(b) for b in member.service.namespaces.owned_bundles()}


async def grpc_hop(address: str, topic: TopicName, authoritative: bool) -> pb.LookupResponse:
    async with grpc.aio.insecure_channel(address) as channel:
        request = pb.LookupRequest(topic=topic.full_name, authoritative=authoritative)
        response: pb.LookupResponse = await stub(channel).Lookup(request, timeout=30)
    return response


@pytest.mark.parametrize("listener", ["internal", "external"])
async def test_grpc_lookup_goes_to_the_leader_then_to_the_chosen_broker(
    cluster: list[BrokerMember], listener: str
) -> None:
    leader = await the_leader(cluster)
    asked = next(m for m in cluster if m is not leader)
    chosen_brokers = set()
    for topic in one_topic_per_bundle(f"grpc-{listener}", BUNDLES):
        # 1. A non-leader does not place the bundle: it sends the client to the leader, on
        # the leader's addresses of the listener the client came through.
        first = await grpc_hop(asked.grpc(listener), topic, authoritative=False)
        assert first.response == REDIRECT and not first.authoritative
        assert addresses(first) == leader.answer(listener)
        assert first.listener_name == listener
        # 2. The leader places it: on itself (Connect), or on another broker (Redirect there,
        # authoritative: that broker must take the bundle rather than ask the leader again).
        second = await grpc_hop(leader.grpc(listener), topic, authoritative=False)
        if second.response == CONNECT:
            assert second.authoritative
            assert (second.grpc_url, second.grpc_url_tls) == grpc_part(leader.answer(listener))
            chosen_brokers.add(id(leader))
            continue
        assert second.response == REDIRECT and second.authoritative
        chosen = member_at(cluster, second.grpc_url, listener)
        assert chosen is not leader
        assert addresses(second) == chosen.answer(listener)
        # 3. The chosen broker takes the bundle and answers Connect with its own addresses.
        third = await grpc_hop(chosen.grpc(listener), topic, authoritative=True)
        assert third.response == CONNECT and third.authoritative
        assert addresses(third) == chosen.answer(listener)
        chosen_brokers.add(id(chosen))
        # Owned now: any broker answers Connect with the owner's addresses.
        again = await grpc_hop(asked.grpc(listener), topic, authoritative=False)
        assert again.response == CONNECT
        assert (again.grpc_url, again.grpc_url_tls) == grpc_part(chosen.answer(listener))
    assert chosen_brokers == {id(m) for m in cluster}  # both kinds of answer were seen
    # Eight bundles on three idle brokers: spread, every broker owns at least two.
    assert sorted(len(owned(m)) for m in cluster) == [2, 3, 3]


@pytest.mark.parametrize("listener", ["internal", "external"])
async def test_http_lookup_redirects_to_the_leader_then_to_the_chosen_broker(
    cluster: list[BrokerMember], listener: str
) -> None:
    leader = await the_leader(cluster)
    asked = next(m for m in cluster if m is not leader)
    seen_chain_lengths = set()
    async with aiohttp.ClientSession() as http:
        for topic in one_topic_per_bundle(f"http-{listener}", BUNDLES):
            path = f"/lookup/v2/topic/persistent/public/default/{topic.local_name}"
            url = URL(asked.http(listener) + path)
            hops = []
            for _ in range(3):
                async with http.get(url, allow_redirects=False) as response:
                    if response.status == 200:
                        body = await response.json()
                        break
                    assert response.status == 307, await response.text()
                    location = URL(response.headers["Location"])
                hops.append(location)
                # Follow it where this listener's advertised address is bound (the external
                # one advertises a name only its gateway resolves).
                to = next(
                    m for m in cluster if URL(m.advertised_http(listener)).port == location.port
                )
                url = URL(to.http(listener)).with_path(location.path).with_query(location.query)
            else:
                raise AssertionError(f"no answer after {hops}")
            seen_chain_lengths.add(len(hops))
            # The first hop sends the client to the leader, not authoritative, on the chosen
            # listener's address, carrying listenerName along (PIP-338).
            assert str(hops[0].with_path("").with_query({})) == leader.advertised_http(listener)
            assert hops[0].path == path
            assert dict(hops[0].query) == {"authoritative": "false", "listenerName": listener}
            owner = member_at(cluster, body["brokerUrl"], listener)
            if len(hops) == 2:  # the leader chose another broker: authoritative to it
                assert owner is not leader
                assert str(hops[1].with_path("").with_query({})) == owner.advertised_http(listener)
                assert dict(hops[1].query) == {"authoritative": "true", "listenerName": listener}
            else:
                assert owner is leader
            assert body["brokerUrlTls"] == (owner.answer(listener)["grpc_url_tls"] or None)
            assert body["httpUrl"] == owner.advertised_http(listener)
    assert seen_chain_lengths == {1, 2}


async def test_sdk_produces_and_consumes_on_a_partitioned_topic_through_a_non_leader(
    cluster: list[BrokerMember],
) -> None:
    leader = await the_leader(cluster)
    asked = next(m for m in cluster if m is not leader)
    topic = "persistent://public/default/spread-orders"
    async with aiohttp.ClientSession() as http:
        url = (
            f"{asked.http('internal')}/admin/v2/persistent/public/default/spread-orders/partitions"
        )
        async with http.put(url, data="8") as response:
            assert response.status == 204, await response.text()
    payloads = [f"m{i}".encode() for i in range(40)]
    async with Client(asked.service_url) as client:
        consumer = await client.subscribe(topic, "sub", initial_position="Earliest")
        producer = await client.create_producer(topic, batching_enabled=False)
        for payload in payloads:
            await producer.send(payload)
        received = await receive_n(consumer, len(payloads))
        assert sorted(m.data() for m in received) == sorted(payloads)
    # Every partition is served by exactly one broker: the owner of its bundle.
    served = {
        m.broker.service_url: {t.name for t in m.service.topics.loaded_topics()} for m in cluster
    }
    for i in range(8):
        partition = f"{topic}-partition-{i}"
        assert sum(partition in names for names in served.values()) == 1, served
    assert sum(1 for names in served.values() if names) >= 2  # placed on several brokers


async def test_a_produce_on_an_unowned_bundle_is_refused_without_taking_it(
    cluster: list[BrokerMember],
) -> None:
    leader = await the_leader(cluster)
    topic = one_topic_per_bundle("unowned", BUNDLES)[0]
    async with grpc.aio.insecure_channel(leader.grpc("internal")) as channel:
        call = stub(channel).Produce(metadata=(("x-pulsar-topic", topic.full_name),))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call.read()
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "not owned by any broker: look the topic up" in (refused.value.details() or "")
    trailers = dict(refused.value.trailing_metadata() or ())
    assert trailers["pulsar-error-code"] == "6"  # ServiceNotReady
    assert "pulsar-owner-url" not in trailers
    assert all(owned(m) == set() for m in cluster)


async def test_admin_names_the_leader_and_the_active_brokers(cluster: list[BrokerMember]) -> None:
    leader = await the_leader(cluster)
    ids = sorted(m.service.broker_id() for m in cluster)
    async with aiohttp.ClientSession() as http:
        for member in cluster:
            base = member.http("internal")
            async with http.get(f"{base}/admin/v2/brokers/leaderBroker") as response:
                assert response.status == 200
                assert await response.json() == {
                    "brokerId": leader.service.broker_id(),
                    "serviceUrl": leader.advertised_http("internal"),
                }
            async with http.get(f"{base}/admin/v2/brokers/standalone") as response:
                assert response.status == 200
                assert sorted(await response.json()) == ids
            async with http.get(f"{base}/admin/v2/brokers/elsewhere") as response:
                assert response.status == 404


async def test_without_a_leader_a_broker_places_the_bundle_itself(
    cluster: list[BrokerMember],
) -> None:
    await the_leader(cluster)
    for member in cluster:  # every broker leaves the election: nobody leads
        election = member.service.election
        assert election is not None
        await member.broker.call(election.close())
    assert all(m.service.namespaces.leader() is None for m in cluster)
    asked = cluster[0]
    for topic in one_topic_per_bundle("no-leader", BUNDLES):
        first = await grpc_hop(asked.grpc("internal"), topic, authoritative=False)
        if first.response == REDIRECT:  # it chose another broker: authoritative, no leader
            assert first.authoritative
            chosen = member_at(cluster, first.grpc_url, "internal")
            second = await grpc_hop(chosen.grpc("internal"), topic, authoritative=True)
            assert second.response == CONNECT
            assert second.grpc_url == chosen.answer("internal")["grpc_url"]
        else:
            assert first.grpc_url == asked.answer("internal")["grpc_url"]
    assert sorted(len(owned(m)) for m in cluster) == [2, 3, 3]


async def test_admin_topic_calls_are_sent_to_the_broker_that_serves_the_topic(
    cluster: list[BrokerMember],
) -> None:
    leader = await the_leader(cluster)
    asked = next(m for m in cluster if m is not leader)
    topics = one_topic_per_bundle("admin", BUNDLES)
    async with aiohttp.ClientSession() as http:
        for topic in topics:
            url = f"{asked.http('internal')}/admin/v2/persistent/public/default/{topic.local_name}"
            async with http.put(url) as response:  # redirects followed (307 keeps the method)
                assert response.status == 204, await response.text()
            async with http.get(f"{url}/stats") as response:
                assert response.status == 200, await response.text()
                assert (await response.json())["publishers"] == []
    # Each topic was created where its bundle was placed, and nowhere else.
    for topic in topics:
        holders = [
            m
            for m in cluster
            if topic.full_name in {t.name for t in m.service.topics.loaded_topics()}
        ]
        assert len(holders) == 1
    assert all(len(owned(m)) >= 2 for m in cluster)


async def test_one_leader_on_zookeeper_and_another_when_it_stops(
    broker_factory: Callable[..., BrokerThread], zookeeper: ZooKeeperServer, zk_chroot: str
) -> None:
    cluster = start_brokers(
        broker_factory,
        f"zk:{zookeeper.hosts}{zk_chroot}",
        defaultNumberOfNamespaceBundles=BUNDLES,
    )
    first = await the_leader(cluster)
    outside = await ZooKeeperMetadataStore.connect(zookeeper.hosts, zk_chroot)
    try:
        node = await outside.get(LEADER_PATH)
        assert node is not None
        assert json.loads(node.value) == {
            "brokerId": first.service.broker_id(),
            "serviceUrl": first.advertised_http("internal"),
        }
        await first.broker.call(first.service.close())  # gives leadership up at once
        rest = [m for m in cluster if m is not first]
        async with asyncio.timeout(30):
            second = await the_leader(rest)
        node = await outside.get(LEADER_PATH)
        assert node is not None
        assert json.loads(node.value)["brokerId"] == second.service.broker_id()
        # The new leader places bundles: a lookup through the other broker works.
        other = next(m for m in rest if m is not second)
        async with Client(other.service_url) as client:
            answer = await client.lookup("after-failover")
        assert answer.grpc_url in {m.answer("internal")["grpc_url"] for m in rest}
        # A leader whose ZooKeeper session ends stops leading; a leader is elected again.
        store = second.service.store
        assert isinstance(store, ZooKeeperMetadataStore) and store.client_id is not None
        # What it is when the lost session is told (the election's listener has run by then).
        seen: list[tuple[SessionEvent, bool]] = []
        store.register_session_listener(lambda event: seen.append((event, second.leads)))
        await asyncio.to_thread(end_session, zookeeper.hosts, store.client_id)
        await eventually(lambda: (SessionEvent.SESSION_LOST, False) in seen, timeout=30)
        await the_leader(rest)
    finally:
        await outside.close()
