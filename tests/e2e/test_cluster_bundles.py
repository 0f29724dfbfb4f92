"""Unload and split of bundles on three brokers (a shared memory: metadata store, one real
PostgreSQL ledger store; one test on a real ZooKeeper), under steady SDK produce/consume load
with deduplication on: the clients carry on, every receipted message is consumed and none is
stored twice; the namespace's policies show the new boundaries on every broker; admin sent to a
non-owner is redirected to the owner; the refusals Pulsar answers 412."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable

import aiohttp
import grpc
import pytest

from pulsar_grpc.broker.naming import (
    DEFAULT_NAMESPACE,
    NamespaceBundle,
    NamespaceBundles,
    TopicName,
)
from pulsar_grpc.broker.service import BrokerService
from pulsar_grpc.broker.topics import PersistentTopic
from pulsar_grpc.client import Client
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.cluster import one_topic_per_bundle, owner_url
from tests.e2e.steady_load import SteadyLoad
from tests.e2e.test_cli import cli
from tests.e2e.wire import stub
from tests.postgres import postgres_server, postgres_url
from tests.support import BrokerThread
from tests.waiting import eventually
from tests.zookeeper import ZooKeeperServer, zk_chroot, zookeeper

__all__ = ["postgres_server", "postgres_url", "zk_chroot", "zookeeper"]  # fixtures

NS = "/admin/v2/namespaces/public/default"
FIRST = NamespaceBundles.with_count(DEFAULT_NAMESPACE, 4).bundles[0]  # 0x00000000_0x40000000


@pytest.fixture
def cluster(broker_factory: Callable[..., BrokerThread], postgres_url: str) -> list[BrokerThread]:
    store = f"memory:bundles-{uuid.uuid4().hex[:8]}"
    return [
        broker_factory(
            metadataStoreUrl=store,
            ledgerStorageUrl=postgres_url,
            brokerDeduplicationEnabled=True,
            loadBalancerNamespaceMaximumBundles=8,
            forceDeleteNamespaceAllowed=True,  # test_admin_cluster force-deletes one
            # The brokers share this machine's CPU: never count one as overloaded.
            loadBalancerBrokerOverloadedThresholdPercentage=100,
        )
        for _ in range(3)
    ]


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def service(broker: BrokerThread) -> BrokerService:
    assert broker.service is not None
    return broker.service


def owner_of(cluster: list[BrokerThread], bundle: NamespaceBundle) -> BrokerThread | None:
    owners = [b for b in cluster if bundle in service(b).namespaces.owned_bundles()]
    assert len(owners) <= 1
    return owners[0] if owners else None


def loaded_topic(cluster: list[BrokerThread], name: str) -> PersistentTopic | None:
    found = [t for b in cluster for t in service(b).topics.loaded_topics() if t.name == name]
    return found[0] if found else None


async def reloaded(cluster: list[BrokerThread], name: str, was: PersistentTopic | None) -> None:
    """Wait until ``name`` is loaded again, afresh (wherever the clients' lookups placed it)."""
    await eventually(lambda: loaded_topic(cluster, name) not in (None, was), timeout=30)


async def placed(cluster: list[BrokerThread], topic: TopicName) -> BrokerThread:
    """Look ``topic`` up as the SDK does (the leader places an unowned bundle): its owner."""
    url = await owner_url(cluster[0].service_url, topic)
    (owner,) = [b for b in cluster if b.service_url == url]
    return owner


def other_than(cluster: list[BrokerThread], broker: BrokerThread) -> BrokerThread:
    return next(b for b in cluster if b is not broker)


def topics_in(bundle: NamespaceBundle, n: int) -> list[str]:
    found: list[str] = []
    i = 0
    while len(found) < n:
        name = f"persistent://public/default/hot-{i}"
        if bundle.includes(TopicName.get(name)):
            found.append(name)
        i += 1
    return found


async def test_unload_under_load_clients_carry_on(
    cluster: list[BrokerThread], http: aiohttp.ClientSession
) -> None:
    topics = one_topic_per_bundle()
    for topic in topics:  # the leader spreads the bundles over the brokers
        await placed(cluster, topic)
    bundle = NamespaceBundles.with_count(DEFAULT_NAMESPACE, 4).bundles[1]
    owner = owner_of(cluster, bundle)
    assert owner is not None
    async with Client(cluster[0].service_url) as client:
        load = await SteadyLoad(client, [t.full_name for t in topics]).start()
        await load.receipts(100)
        before = loaded_topic(cluster, topics[1].full_name)
        assert before is not None

        # Sent to a broker that does not own it: 307 to the owner, same path.
        path = f"{NS}/{bundle.range_str}/unload"
        non_owner = other_than(cluster, owner)
        async with http.put(non_owner.http_url + path, allow_redirects=False) as response:
            assert response.status == 307
            location = response.headers["Location"]
        assert location == owner.http_url + path
        load.longest_send_s = 0.0
        async with http.put(location) as response:
            assert response.status == 204, await response.text()
        # The clients look the topic up again: it is loaded afresh (wherever it was placed).
        await reloaded(cluster, topics[1].full_name, before)
        await load.receipts(100)
        print(f"\nbundle unload: producers blocked at most {load.longest_send_s * 1000:.0f} ms")

        # The whole namespace, asked of one broker: every bundle unloaded on its owner.
        loaded = {t.full_name: loaded_topic(cluster, t.full_name) for t in topics}
        load.longest_send_s = 0.0
        async with http.put(cluster[2].http_url + f"{NS}/unload") as response:
            assert response.status == 204, await response.text()
        for name, was in loaded.items():
            await reloaded(cluster, name, was)
        await load.receipts(100)
        print(f"namespace unload: producers blocked at most {load.longest_send_s * 1000:.0f} ms")
        await load.finish()


@pytest.mark.parametrize("unload", [False, True], ids=["split", "split-and-unload"])
async def test_split_under_load(
    cluster: list[BrokerThread], http: aiohttp.ClientSession, unload: bool
) -> None:
    names = topics_in(FIRST, 4)
    owner = await placed(cluster, TopicName.get(names[0]))
    assert owner_of(cluster, FIRST) is owner
    async with Client(cluster[0].service_url) as client:
        load = await SteadyLoad(client, names).start()
        await load.receipts(100)
        before = {n: loaded_topic(cluster, n) for n in names}
        assert all(
            t is not None and t in service(owner).topics.loaded_topics() for t in before.values()
        )

        # Asked of a non-owner: the redirect to the owner is followed (the method kept).
        url = (
            f"{other_than(cluster, owner).http_url}{NS}/{FIRST.range_str}/split"
            f"?unload={str(unload).lower()}&splitAlgorithmName=topic_count_equally_divide"
        )
        async with http.put(url) as response:
            assert response.status == 204, await response.text()
            assert str(response.url).startswith(owner.http_url)

        expected: list[str] = []
        for broker in cluster:  # every broker reads the new boundaries
            async with http.get(f"{broker.http_url}{NS}/bundles") as response:
                body = await response.json()
            assert body["numBundles"] == 5
            expected = expected or body["boundaries"]
            assert body["boundaries"] == expected
        boundary = int(expected[1], 16)
        halves = [
            NamespaceBundle(DEFAULT_NAMESPACE, FIRST.lower, boundary),
            NamespaceBundle(DEFAULT_NAMESPACE, boundary, FIRST.upper),
        ]
        # topic_count_equally_divide: two of the four topics in each half
        assert sorted(sum(h.includes(TopicName.get(n)) for n in names) for h in halves) == [2, 2]

        if not unload:
            # The owner owns both halves, its topics stayed loaded (the same objects).
            assert owner_of(cluster, halves[0]) is owner
            assert owner_of(cluster, halves[1]) is owner
            assert owner_of(cluster, FIRST) is None
            assert {n: loaded_topic(cluster, n) for n in names} == before
            owned_url = (
                f"{owner.http_url}/admin/v2/brokers/standalone/"
                f"{service(owner).load_reporter.broker_id}/ownedNamespaces"  # type: ignore[union-attr]
            )
            async with http.get(owned_url) as response:
                owned = await response.json()
            for half in halves:
                assert owned[str(half)] == {
                    "broker_assignment": "primary",
                    "is_controlled": False,
                    "is_active": True,
                }
            assert str(FIRST) not in owned
        else:
            for name, was in before.items():
                await reloaded(cluster, name, was)
        await load.receipts(100)
        blocked_ms = load.longest_send_s * 1000
        print(f"\nsplit (unload={unload}): producers blocked at most {blocked_ms:.0f} ms")
        await load.finish()


async def test_refusals_and_brokers(
    cluster: list[BrokerThread], http: aiohttp.ClientSession
) -> None:
    base = cluster[0].http_url
    # An unowned bundle: its unload does nothing.
    async with http.put(f"{base}{NS}/{FIRST.range_str}/unload") as response:
        assert response.status == 204
    assert owner_of(cluster, FIRST) is None

    async def refused(path: str, status: int, reason: str) -> None:
        async with http.put(base + path) as response:
            assert response.status == status, await response.text()
            assert reason in (await response.json())["reason"]

    await refused(f"{NS}/0x00000000_0x30000000/split", 412, "Invalid bundle range")
    await refused(
        f"{NS}/{FIRST.range_str}/split?splitAlgorithmName=flow_or_qps_equally_divide",
        412,
        "range_equally_divide",
    )
    await refused(
        f"{NS}/{FIRST.range_str}/split?splitAlgorithmName=topic_count_equally_divide",
        412,
        "needs at least 2",
    )
    await refused(
        f"{NS}/{FIRST.range_str}/split?splitAlgorithmName=specified_positions_divide",
        412,
        "splitBoundaries must not be empty",
    )
    async with http.put(
        f"{base}{NS}/{FIRST.range_str}/split?splitAlgorithmName=specified_positions_divide",
        json=[1],
    ) as response:
        assert response.status == 204, await response.text()
    # 0x00000000_0x00000001 holds one hash: it cannot be split.
    await refused(f"{NS}/0x00000000_0x00000001/split", 412, "can't be split further")
    # 5 bundles now; up to 8 allowed: 3 more, then refused.
    for bundle in ("0x00000001_0x40000000", "0x40000000_0x80000000", "0x80000000_0xc0000000"):
        async with http.put(f"{base}{NS}/{bundle}/split") as response:
            assert response.status == 204, await response.text()
    await refused(f"{NS}/0xc0000000_0xffffffff/split", 412, "loadBalancerNamespaceMaximumBundles=8")
    async with http.get(f"{cluster[2].http_url}{NS}/bundles") as response:
        assert (await response.json())["numBundles"] == 8

    # The cluster's brokers, each as advertisedAddress:webServicePort.
    ids = sorted(service(b).load_reporter.broker_id for b in cluster)  # type: ignore[union-attr]
    async with http.get(f"{base}/admin/v2/brokers/standalone") as response:
        assert await response.json() == ids
    async with http.get(f"{base}/admin/v2/brokers/elsewhere") as response:
        assert response.status == 404
    # ownedNamespaces of another broker: redirected to it.
    other = service(cluster[1]).load_reporter.broker_id  # type: ignore[union-attr]
    path = f"/admin/v2/brokers/standalone/{other}/ownedNamespaces"
    async with http.get(base + path, allow_redirects=False) as response:
        assert response.status == 307
        assert response.headers["Location"] == f"http://{other}{path}"
    # The bundle a topic belongs to.
    topic = one_topic_per_bundle()[3]
    async with http.get(
        f"{base}/lookup/v2/topic/persistent/public/default/{topic.local_name}/bundle"
    ) as response:
        assert await response.text() == "0xc0000000_0xffffffff"


async def test_while_a_bundle_is_unloaded_lookups_answer_service_not_ready(
    cluster: list[BrokerThread], http: aiohttp.ClientSession
) -> None:
    """Between the node marked disabled and its deletion (the topics closing), every broker's
    lookup answers ServiceNotReady, which clients retry; once released, the next lookup places
    the bundle again."""
    topic = one_topic_per_bundle()[0]
    owner = await placed(cluster, topic)
    ownership = service(owner).namespaces.ownership
    assert ownership is not None
    await owner.call(ownership.disable(FIRST))
    lookup = f"/lookup/v2/topic/persistent/public/default/{topic.local_name}"
    for broker in cluster:
        async with grpc.aio.insecure_channel(broker.grpc_address) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub(channel).Lookup(pb.LookupRequest(topic=topic.full_name), timeout=30)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert dict(refused.value.trailing_metadata() or ())["pulsar-error-code"] == "6"
        assert "being unloaded" in (refused.value.details() or "")
        async with http.get(broker.http_url + lookup) as response:
            assert response.status == 503
    await owner.call(ownership.release(FIRST))
    assert owner_of(cluster, FIRST) is None
    placed_again = await placed(cluster, topic)
    assert owner_of(cluster, FIRST) is placed_again


async def test_cli_follows_the_redirect_to_the_owner(cluster: list[BrokerThread]) -> None:
    owner = await placed(cluster, one_topic_per_bundle()[0])
    assert owner_of(cluster, FIRST) is owner
    admin = ("admin", "--admin-url", other_than(cluster, owner).http_url, "namespaces")
    split = await asyncio.to_thread(
        cli, *admin, "split-bundle", "public/default", "-b", FIRST.range_str
    )
    assert split.returncode == 0, split.stderr
    halves = NamespaceBundles.with_count(DEFAULT_NAMESPACE, 8).bundles[:2]
    assert [owner_of(cluster, half) for half in halves] == [owner, owner]
    unload = await asyncio.to_thread(
        cli, *admin, "unload", "public/default", "-b", halves[0].range_str
    )
    assert unload.returncode == 0, unload.stderr
    assert owner_of(cluster, halves[0]) is None
    assert owner_of(cluster, halves[1]) is owner


async def test_on_zookeeper_unload_and_split_under_load(
    broker_factory: Callable[..., BrokerThread],
    zookeeper: ZooKeeperServer,
    zk_chroot: str,
    postgres_url: str,
    http: aiohttp.ClientSession,
) -> None:
    """The same guarantee on a real ZooKeeper (its watches, not the memory store's broadcast,
    tell the other brokers of the disabled node, the deletion and the new policies)."""
    cluster = [
        broker_factory(
            metadataStoreUrl=f"zk:{zookeeper.hosts}{zk_chroot}",
            ledgerStorageUrl=postgres_url,
            brokerDeduplicationEnabled=True,
        )
        for _ in range(2)
    ]
    names = topics_in(FIRST, 4)
    await placed(cluster, TopicName.get(names[0]))
    async with Client(cluster[0].service_url) as client:
        load = await SteadyLoad(client, names).start()
        await load.receipts(100)
        before = {n: loaded_topic(cluster, n) for n in names}
        async with http.put(f"{cluster[0].http_url}{NS}/{FIRST.range_str}/unload") as response:
            assert response.status == 204, await response.text()
        for name, was in before.items():
            await reloaded(cluster, name, was)
        await load.receipts(100)
        owner = owner_of(cluster, FIRST)
        assert owner is not None
        before = {n: loaded_topic(cluster, n) for n in names}
        split = f"{NS}/{FIRST.range_str}/split?unload=true"
        async with http.put(cluster[0].http_url + split) as response:
            assert response.status == 204, await response.text()
        for broker in cluster:
            async with http.get(f"{broker.http_url}{NS}/bundles") as response:
                assert (await response.json())["boundaries"][:3] == [
                    "0x00000000",
                    "0x20000000",
                    "0x40000000",
                ]
        for name, was in before.items():
            await reloaded(cluster, name, was)
        await load.receipts(100)
        print(f"\nZooKeeper: producers blocked at most {load.longest_send_s * 1000:.0f} ms")
        await load.finish()
