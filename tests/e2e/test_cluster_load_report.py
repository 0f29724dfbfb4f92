"""Cluster members on a real ZooKeeper: each keeps its load report (Pulsar's LocalBrokerData
at /loadbalance/brokers/<advertisedAddress>:<webServicePort>) with the gRPC handler's advertised
data, rewrites it as its load moves, and removes it when it stops; producers without a name get
names unique across the brokers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from pulsar_grpc.broker.cluster.load_report import LOADBALANCE_BROKERS_ROOT
from pulsar_grpc.broker.metadata import ZooKeeperMetadataStore
from pulsar_grpc.broker.naming import TopicName
from pulsar_grpc.client import Client
from tests.support import BrokerThread
from tests.waiting import eventually
from tests.zookeeper import ZooKeeperServer, zk_chroot, zookeeper

__all__ = ["zk_chroot", "zookeeper"]  # fixtures, imported to be found

# Pulsar's LocalBrokerData fields that the issue names, and ResourceUsage's shape.
FIELDS = {
    "webServiceUrl",
    "webServiceUrlTls",
    "pulsarServiceUrl",
    "pulsarServiceUrlTls",
    "advertisedListeners",
    "cpu",
    "memory",
    "directMemory",
    "bandwidthIn",
    "bandwidthOut",
    "msgRateIn",
    "msgRateOut",
    "msgThroughputIn",
    "msgThroughputOut",
    "numTopics",
    "numBundles",
    "numProducers",
    "numConsumers",
    "bundles",
    "lastUpdate",
    "brokerVersionString",
    "protocols",
}
RESOURCES = ("cpu", "memory", "directMemory", "bandwidthIn", "bandwidthOut")


@pytest.fixture
async def outside(zookeeper: ZooKeeperServer, zk_chroot: str) -> AsyncIterator[Any]:
    """A ZooKeeper client of the test's own, under the brokers' chroot."""
    store = await ZooKeeperMetadataStore.connect(zookeeper.hosts, zk_chroot)
    yield store
    await store.close()


async def report_of(store: Any, broker: BrokerThread) -> dict[str, Any] | None:
    assert broker.service is not None and broker.service.load_reporter is not None
    found = await store.get(broker.service.load_reporter.path)
    return None if found is None else json.loads(found.value)


async def test_two_brokers_write_their_load_reports_and_remove_them_on_stop(
    broker_factory: Callable[..., BrokerThread],
    zookeeper: ZooKeeperServer,
    zk_chroot: str,
    outside: Any,
) -> None:
    url = f"zk:{zookeeper.hosts}{zk_chroot}"
    # Threshold 0: any movement of the load rewrites the report at the next check (200 ms).
    brokers = [
        broker_factory(
            metadataStoreUrl=url,
            loadBalancerReportUpdateMinIntervalMillis=200,
            loadBalancerReportUpdateThresholdPercentage=0,
        )
        for _ in range(2)
    ]
    names = set()
    for broker in brokers:
        assert broker.service is not None and broker.service.web is not None
        port = broker.http_url.rsplit(":", 1)[1]
        assert broker.service.load_reporter is not None
        assert broker.service.load_reporter.broker_id == f"127.0.0.1:{port}"
        names.add(broker.service.load_reporter.broker_id)
        report = await report_of(outside, broker)
        assert report is not None
        assert FIELDS <= report.keys()
        for resource in RESOURCES:
            assert report[resource].keys() == {"usage", "limit"}
        assert report["memory"]["usage"] > 0
        (grpc,) = broker.service.handlers
        assert report["protocols"] == {"grpc": grpc.protocol_data_to_advertise()}
        assert report["pulsarServiceUrl"] == broker.service_url
        assert report["webServiceUrl"] == broker.http_url
        assert report["advertisedListeners"]["internal"] == {
            "brokerServiceUrl": broker.service_url,
            "brokerHttpUrl": broker.http_url,
        }
    assert sorted(await outside.get_children(LOADBALANCE_BROKERS_ROOT)) == sorted(names)

    # Load on the first broker: its report is rewritten with the topic, producer and rates.
    first, second = brokers
    before = await report_of(outside, first)
    assert before is not None
    # The first broker takes the topic's bundle (placement would pick either idle broker).
    assert first.service is not None and first.service.namespaces.ownership is not None
    ownership = first.service.namespaces.ownership
    bundle = await first.call(ownership.bundle_of(TopicName.get("load-report")))
    assert await first.call(ownership.acquire(bundle)) is ownership.me
    async with Client(first.service_url) as client:
        producer = await client.create_producer("load-report")
        for i in range(20):
            await producer.send(f"m{i}".encode())

        async def rewritten_with_load() -> bool:
            now = await report_of(outside, first)
            assert now is not None
            return (
                now["lastUpdate"] > before["lastUpdate"]
                and now["numTopics"] == 1
                and now["numProducers"] == 1
                and now["msgRateIn"] > 0
            )

        await eventually(rewritten_with_load, timeout=30)

    assert first.service is not None and second.service is not None
    await first.call(first.service.close())  # the fixture ends its thread after the test
    assert second.service.load_reporter is not None
    assert await outside.get_children(LOADBALANCE_BROKERS_ROOT) == [
        second.service.load_reporter.broker_id
    ]


async def test_producers_without_names_get_names_unique_across_brokers(
    broker_factory: Callable[..., BrokerThread],
    zookeeper: ZooKeeperServer,
    zk_chroot: str,
) -> None:
    url = f"zk:{zookeeper.hosts}{zk_chroot}"
    brokers = [broker_factory(metadataStoreUrl=url, clusterName="c1") for _ in range(2)]
    names = []
    for broker in brokers:
        # Topics whose bundles no other broker owns yet, so each broker serves (and names)
        # its producers itself instead of sending the client to an owner.
        assert broker.service is not None and broker.service.namespaces.ownership is not None
        ownership = broker.service.namespaces.ownership
        topics: list[str] = []
        for i in range(100):
            bundle = await broker.call(ownership.bundle_of(TopicName.get(f"t{i}")))
            owner = await broker.call(ownership.acquire(bundle))
            if owner is ownership.me:
                topics.append(f"t{i}")
            if len(topics) == 2:
                break
        async with Client(broker.service_url) as client:
            for topic in topics:
                producer = await client.create_producer(topic)
                names.append(producer.producer_name())
    assert len(set(names)) == len(names), names
    # <clusterName>-<instance>-<counter>, the instance unique to each broker.
    assert {name.rsplit("-", 1)[0] for name in names} == {"c1-0", "c1-1"}, names
