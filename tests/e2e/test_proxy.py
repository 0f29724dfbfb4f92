"""The PIP-1 proxy in front of two brokers on ZooKeeper: clients reach only the proxy, which
answers lookups itself (its own address, proxy_through_service_url, the owner broker's URL) and
forwards each stream byte for byte to the broker owning the topic. The SDK produces and consumes
through it (topics on both brokers, a partitioned topic), a raw client with no proxy header
works, a forged broker URL is refused, two proxies serve one cluster, a consumer that reads
nothing costs the proxy bounded memory, the metrics move."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import psutil
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pulsar_grpc.broker.naming import DEFAULT_NAMESPACE, NamespaceBundles
from pulsar_grpc.client import Client
from pulsar_grpc.proxy.metrics import Route
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.cluster import one_topic_per_bundle
from tests.e2e.messaging import receive_n
from tests.e2e.steady_load import SteadyLoad
from tests.e2e.test_outbound_bound import (
    ENTRY_MESSAGES,
    MAX_PERMITS,
    consume_metadata,
    msg_out,
    produce_backlog,
    read_all,
    settled,
)
from tests.e2e.test_partitioned_and_dedup import create_partitioned
from tests.e2e.wire import batch, error_code, stub
from tests.postgres import PostgresServer, postgres_server
from tests.proxy_support import (
    ProxyProcess,
    ProxyThread,
    metric,
    proxy_config,
    proxy_factory,
    scrape,
)
from tests.support import BrokerThread, broker_config
from tests.waiting import eventually
from tests.zookeeper import ZooKeeperServer, zookeeper

__all__ = ["postgres_server", "proxy_factory", "zookeeper"]  # fixtures, imported to be found

TIMEOUT_S = 30


@dataclass
class ProxiedCluster:
    brokers: list[BrokerThread]
    proxy: ProxyThread
    store_url: str

    def owner_of(self, url: str) -> BrokerThread:
        (owner,) = [b for b in self.brokers if b.service_url == url]
        return owner


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperServer,
    postgres_server: PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ProxiedCluster]:
    """Two brokers on one ZooKeeper chroot and one PostgreSQL database (so a bundle can move
    between them), and a proxy discovering them in ZooKeeper; shared by the module's tests
    (each uses topics of its own)."""
    store_url = f"zk:{zookeeper.hosts}/proxy-{id(tmp_path_factory)}"
    ledgers = postgres_server.create_database(f"proxy_{id(tmp_path_factory)}")
    brokers: list[BrokerThread] = []
    proxy: ProxyThread | None = None
    try:
        for i in range(2):
            data = tmp_path_factory.mktemp(f"proxied-broker-{i}")
            config = broker_config(
                data,
                metadataStoreUrl=store_url,
                ledgerStorageUrl=ledgers,
                loadBalancerBrokerOverloadedThresholdPercentage=100,
            )
            brokers.append(BrokerThread(config).start())
        proxy = ProxyThread(proxy_config(metadataStoreUrl=store_url)).start()
        yield ProxiedCluster(brokers, proxy, store_url)
    finally:
        if proxy is not None:
            proxy.stop()
        for broker in brokers:
            broker.stop()


async def raw_lookup(address: str, topic: str) -> pb.LookupResponse:
    async with grpc.aio.insecure_channel(address) as channel:
        response: pb.LookupResponse = await stub(channel).Lookup(
            pb.LookupRequest(topic=topic), timeout=TIMEOUT_S
        )
        return response


async def test_a_lookup_through_the_proxy_answers_the_proxy_and_the_owner(
    cluster: ProxiedCluster,
) -> None:
    topics = one_topic_per_bundle("proxy-lookup")
    owners = set()
    for topic in topics:
        answer = await raw_lookup(cluster.proxy.grpc_address, topic.full_name)
        assert answer.response == pb.LookupResponse.Connect
        assert answer.grpc_url == cluster.proxy.service_url
        assert answer.proxy_through_service_url
        owners.add(cluster.owner_of(answer.proxy_to_broker_url).service_url)
        # The broker's own answer names the same owner.
        direct = await raw_lookup(cluster.brokers[0].grpc_address, topic.full_name)
        assert not direct.proxy_through_service_url
        if direct.response == pb.LookupResponse.Connect:
            assert direct.grpc_url == answer.proxy_to_broker_url
    assert owners == {b.service_url for b in cluster.brokers}, "4 bundles on 2 idle brokers"


async def test_the_sdk_produces_and_consumes_through_the_proxy_on_both_brokers(
    cluster: ProxiedCluster,
) -> None:
    topics = one_topic_per_bundle("proxy-sdk")
    routes = cluster.proxy.proxy.stats.routes
    named, looked_up = routes[Route.NAMED], routes[Route.LOOKED_UP]
    async with Client(cluster.proxy.service_url, operation_timeout_ms=TIMEOUT_S * 1000) as client:
        for topic in topics:
            consumer = await client.subscribe(topic.full_name, "s", initial_position="earliest")
            producer = await client.create_producer(topic.full_name)
            sent = [f"{topic.local_name}-{i}".encode() for i in range(20)]
            await asyncio.gather(*(producer.send(payload) for payload in sent))
            received = await receive_n(consumer, len(sent))
            assert [m.data() for m in received] == sent
            for message in received:
                await consumer.acknowledge(message)
            assert (await client.get_last_message_id(topic.full_name)) is not None
        # Every stream went to the proxy: the client opened no channel to a broker. It named
        # the broker on each call, so the proxy looked nothing up for it.
        assert {target for target, _ in client._calls.pool.addresses} == {
            cluster.proxy.grpc_address
        }
    assert routes[Route.NAMED] - named == 3 * len(topics)  # producer, consumer, last id
    assert routes[Route.LOOKED_UP] == looked_up
    served = {
        b.service_url: {t.name for t in b.service.topics.loaded_topics()}  # type: ignore[union-attr]
        for b in cluster.brokers
    }
    assert all(any(t.full_name in names for t in topics) for names in served.values())


async def test_a_partitioned_topic_through_the_proxy(cluster: ProxiedCluster) -> None:
    topic = "proxy-partitioned"
    await create_partitioned(cluster.brokers[0].http_url, topic, 4)
    async with Client(cluster.proxy.service_url, operation_timeout_ms=TIMEOUT_S * 1000) as client:
        assert len(await client.get_partitions_for_topic(topic)) == 4
        consumer = await client.subscribe(topic, "s", initial_position="earliest")
        producer = await client.create_producer(topic)
        sent = {f"m-{i}".encode() for i in range(40)}
        await asyncio.gather(*(producer.send(p, partition_key=p.decode()) for p in sent))
        received = await receive_n(consumer, len(sent))
        assert {m.data() for m in received} == sent


async def test_a_client_without_the_proxy_header_is_routed_by_the_proxy(
    cluster: ProxiedCluster,
) -> None:
    """A raw client that connects to the proxy and produces, as to a standalone broker: the
    proxy looks the topic up itself."""
    topics = one_topic_per_bundle("proxy-naive")
    routes = cluster.proxy.proxy.stats.routes
    looked_up = routes[Route.LOOKED_UP]
    async with grpc.aio.insecure_channel(cluster.proxy.grpc_address) as channel:
        for topic in topics:
            call = stub(channel).Produce(metadata=(("x-pulsar-topic", topic.full_name),))
            ready = await asyncio.wait_for(call.read(), TIMEOUT_S)
            assert ready.HasField("ready")
            await call.write(batch(0, [b"a", b"b"]))
            receipt = await asyncio.wait_for(call.read(), TIMEOUT_S)
            assert receipt.receipt.batch_size == 2
            await call.done_writing()
            assert await call.code() == grpc.StatusCode.OK
            last = await stub(channel).GetLastMessageId(
                pb.GetLastMessageIdRequest(topic=topic.full_name), timeout=TIMEOUT_S
            )
            assert last.last_message_id.entry_id == receipt.receipt.entry_id
    assert routes[Route.LOOKED_UP] - looked_up == 2 * len(topics)


async def test_a_forged_broker_url_is_refused(cluster: ProxiedCluster) -> None:
    async with grpc.aio.insecure_channel(cluster.proxy.grpc_address) as channel:
        for forged in ("grpc://127.0.0.1:1", "grpc://example.com:443", "not a url"):
            metadata = (
                ("x-pulsar-topic", "proxy-forged"),
                ("x-pulsar-proxy-to-broker-url", forged),
            )
            call = stub(channel).Produce(metadata=metadata)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await asyncio.wait_for(call.read(), TIMEOUT_S)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "is not a broker of this cluster" in (refused.value.details() or "")
        # A request that does not parse is the client's error, said as such.
        for method in ("Lookup", "GetLastMessageId"):
            call = channel.unary_unary(f"/pulsargrpc.v1.PulsarService/{method}")
            with pytest.raises(grpc.aio.AioRpcError) as garbled:
                await call(b"\xff\xff\xff", timeout=TIMEOUT_S)
            assert garbled.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
        # A live broker's URL is forwarded to. The owner serves the producer; the other broker
        # refuses, and its status, message and trailers reach the client unchanged.
        topic = "proxy-forged"
        owner = (await raw_lookup(cluster.proxy.grpc_address, topic)).proxy_to_broker_url
        (other,) = [b.service_url for b in cluster.brokers if b.service_url != owner]

        def produce(url: str) -> grpc.aio.StreamStreamCall:
            metadata = (("x-pulsar-topic", topic), ("x-pulsar-proxy-to-broker-url", url))
            return stub(channel).Produce(metadata=metadata)

        served = produce(owner)
        assert (await asyncio.wait_for(served.read(), TIMEOUT_S)).HasField("ready")
        served.cancel()
        with pytest.raises(grpc.aio.AioRpcError) as moved:
            await asyncio.wait_for(produce(other).read(), TIMEOUT_S)
        assert moved.value.code() == grpc.StatusCode.UNAVAILABLE
        assert f"is owned by {owner}" in (moved.value.details() or "")
        assert error_code(moved.value) == pb.ServiceNotReady
        assert ("pulsar-owner-url", owner) in tuple(moved.value.trailing_metadata() or ())


async def test_metrics_move_and_health_answers(cluster: ProxiedCluster) -> None:
    web = cluster.proxy.web_url
    assert (await asyncio.to_thread(scrape, web + "/status.html")) == "OK"
    async with grpc.aio.insecure_channel(cluster.proxy.grpc_address) as channel:
        for service in ("", "pulsargrpc.v1.PulsarService"):
            health = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=TIMEOUT_S
            )
            assert health.status == health_pb2.HealthCheckResponse.SERVING
    before = await asyncio.to_thread(scrape, web + "/metrics")
    async with Client(cluster.proxy.service_url, operation_timeout_ms=TIMEOUT_S * 1000) as client:
        producer = await client.create_producer("proxy-metrics")
        for _ in range(10):
            await producer.send(b"x" * 1000)
        during = await asyncio.to_thread(scrape, web + "/metrics")
        assert metric(during, "pulsar_proxy_active_streams", 'method="Produce"') >= 1
        assert metric(during, "pulsar_proxy_active_connections") >= 1
    after = await asyncio.to_thread(scrape, web + "/metrics")
    up = 'direction="client_to_broker"'
    grown = metric(after, "pulsar_proxy_binary_bytes_total", up) - metric(
        before, "pulsar_proxy_binary_bytes_total", up
    )
    assert grown >= 10 * 1000
    assert metric(after, "pulsar_proxy_lookup_requests_total", 'kind="lookup"') > metric(
        before, "pulsar_proxy_lookup_requests_total", 'kind="lookup"'
    )
    await eventually(
        lambda: (
            metric(scrape(web + "/metrics"), "pulsar_proxy_active_streams", 'method="Produce"') == 0
        ),
        timeout=TIMEOUT_S,
    )


async def test_two_proxies_serve_the_same_cluster(
    cluster: ProxiedCluster, proxy_factory: Callable[..., ProxyThread]
) -> None:
    """Stateless: what one proxy's client produced, another proxy's client consumes."""
    second = proxy_factory(metadataStoreUrl=cluster.store_url)
    topics = one_topic_per_bundle("proxy-pair")
    timeout_ms = TIMEOUT_S * 1000
    async with (
        Client(cluster.proxy.service_url, operation_timeout_ms=timeout_ms) as first_client,
        Client(second.service_url, operation_timeout_ms=timeout_ms) as second_client,
    ):
        for topic in topics:
            name = topic.full_name
            consumer = await second_client.subscribe(name, "s", initial_position="earliest")
            producer = await first_client.create_producer(name)
            await asyncio.gather(*(producer.send(b"%d" % i) for i in range(10)))
            received = await receive_n(consumer, 10)
            assert [m.data() for m in received] == [b"%d" % i for i in range(10)]
            lookups = [await raw_lookup(p.grpc_address, name) for p in (cluster.proxy, second)]
            assert lookups[0].proxy_to_broker_url == lookups[1].proxy_to_broker_url
            assert [r.grpc_url for r in lookups] == [cluster.proxy.service_url, second.service_url]


async def test_a_consumer_that_reads_nothing_costs_the_proxy_bounded_memory(
    broker_factory: Callable[..., BrokerThread], tmp_path: Path
) -> None:
    """The broker pushes an 80 MB backlog to a consumer that grants every permit and does not
    read: the proxy (a process of its own, measured) holds only what flow control lets through,
    and once the consumer reads, every message arrives in order through it."""
    broker = broker_factory(managedLedgerCacheSizeMB=16)
    proxy = ProxyProcess(tmp_path / "proxy.conf", brokerServiceURL=broker.service_url).start()
    try:
        assert proxy.proc is not None
        process = psutil.Process(proxy.proc.pid)
        address = proxy.service_url.removeprefix("grpc://")
        topic = "proxy-stalled-reader"
        entries = 800  # 100 KB each
        await produce_backlog(address, topic, entries)  # through the proxy too
        rss_before = process.memory_info().rss / 2**20
        async with grpc.aio.insecure_channel(address) as channel:
            call = stub(channel).Consume(metadata=consume_metadata(topic))
            assert (await call.read()).HasField("subscribed")
            await call.write(pb.ConsumeRequest(flow=pb.Flow(permits=MAX_PERMITS)))
            dispatched = await settled(lambda: msg_out(broker.http_url, topic))
            growth = process.memory_info().rss / 2**20 - rss_before
            total = entries * ENTRY_MESSAGES
            print(f"\n{dispatched} of {total} messages dispatched; proxy +{growth:.0f} MB")
            assert dispatched < total // 2, "the broker's dispatch did not wait for the client"
            assert growth < 40, f"proxy RSS grew {growth:.0f} MB for a consumer reading nothing"
            assert await read_all(call, total) == list(range(total))
            call.cancel()
    finally:
        assert proxy.stop() == 0


async def test_an_unloaded_bundle_loses_nothing_through_the_proxy(cluster: ProxiedCluster) -> None:
    """The owner closes the bundle's topics: their streams end UNAVAILABLE at the broker, the
    proxy passes that on, and the SDK looks the topics up again through the proxy and carries
    on; every receipted message is consumed."""
    topics = one_topic_per_bundle("proxy-unload")
    async with Client(cluster.proxy.service_url, operation_timeout_ms=TIMEOUT_S * 1000) as client:
        load = await SteadyLoad(client, [t.full_name for t in topics]).start()
        await load.receipts(100)
        answer = await raw_lookup(cluster.proxy.grpc_address, topics[1].full_name)
        owner = cluster.owner_of(answer.proxy_to_broker_url)
        bundle = NamespaceBundles.with_count(DEFAULT_NAMESPACE, 4).bundles[1]
        assert bundle.includes(topics[1])
        path = f"/admin/v2/namespaces/public/default/{bundle.range_str}/unload"
        request = urllib.request.Request(owner.http_url + path, method="PUT")
        with await asyncio.to_thread(urllib.request.urlopen, request, timeout=TIMEOUT_S) as done:
            assert done.status == 204
        streams = cluster.proxy.proxy.stats.streams.total()
        await load.receipts(200)
        assert cluster.proxy.proxy.stats.streams.total() > streams, "no stream was reopened"
        await load.finish()


async def test_lookups_over_the_limit_are_refused_as_retryable(
    cluster: ProxiedCluster, proxy_factory: Callable[..., ProxyThread]
) -> None:
    """maxConcurrentLookupRequests: what is over it ends UNAVAILABLE with Pulsar's
    TooManyRequests (the SDK retries it), and is counted."""
    narrow = proxy_factory(metadataStoreUrl=cluster.store_url, maxConcurrentLookupRequests=1)
    async with grpc.aio.insecure_channel(narrow.grpc_address) as channel:
        lookups = [
            stub(channel).Lookup(pb.LookupRequest(topic=f"proxy-many-{i}"), timeout=TIMEOUT_S)
            for i in range(100)
        ]
        results = await asyncio.gather(*lookups, return_exceptions=True)
    refused = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
    assert refused, "100 lookups at once, none over a limit of 1"
    assert len(refused) < len(results)
    for error in refused:
        assert error.code() == grpc.StatusCode.UNAVAILABLE, error
        assert error_code(error) == pb.TooManyRequests
    assert narrow.proxy.stats.rejected_lookups == len(refused)
    # The lookups the proxy makes itself for calls that name no broker are bounded alike.
    async with grpc.aio.insecure_channel(narrow.grpc_address) as channel:
        calls = [
            stub(channel).GetLastMessageId(
                pb.GetLastMessageIdRequest(topic=f"proxy-routed-{i}"), timeout=TIMEOUT_S
            )
            for i in range(100)
        ]
        routed = await asyncio.gather(*calls, return_exceptions=True)
    assert any(
        isinstance(r, grpc.aio.AioRpcError) and error_code(r) == pb.TooManyRequests for r in routed
    ), "100 routed calls at once, none over a limit of 1"
