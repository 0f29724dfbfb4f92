"""The PIP-1 proxy when things move or die under traffic: two broker PROCESSES on ZooKeeper
and one PostgreSQL ledger store (tests/cluster.py), deduplication on, and a proxy process in
front of them that every client goes through.

Each test runs SteadyLoad (a producer and a consumer per topic, one topic in each bundle)
through the proxy, then moves or kills something: every namespace bundle unloaded, a broker
killed with SIGKILL, the proxy restarted on its port (stopped, or killed), a second proxy
killed while the first one serves. The streams that lose their broker end with a retryable
status (a raw stream through the proxy shows it), the SDK reconnects through the proxy, and
every message that got a receipt is consumed, once, in each producer's order.

One cluster serves the module (each test has topics of its own); a test that kills a broker
starts it again before it ends.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import grpc
import pytest

from pulsar_grpc.client import Client
from pulsar_grpc.client._errors import error_from_rpc, is_retryable
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.cluster import Cluster, Member, one_topic_per_bundle, print_logs, start_cluster
from tests.e2e.steady_load import SteadyLoad
from tests.e2e.test_outbound_bound import consume_metadata
from tests.e2e.wire import stub
from tests.postgres import PostgresServer, postgres_server
from tests.proxy_support import ProxyProcess, metric, scrape
from tests.zookeeper import ZooKeeperServer, zookeeper

__all__ = ["postgres_server", "zookeeper"]  # fixtures, imported to be found

TIMEOUT_S = 30
# Receipts wanted before the event and again after it, across the test's topics.
RECEIPTS = 300
NAMESPACE = "/admin/v2/namespaces/public/default"


@dataclass
class ProxiedCluster:
    cluster: Cluster
    proxy: ProxyProcess
    store_url: str
    workdir: Path

    def client(self, service_url: str | None = None) -> Client:
        return Client(service_url or self.proxy.service_url, operation_timeout_ms=TIMEOUT_S * 1000)

    def member(self, broker_url: str) -> Member:
        (member,) = [m for m in self.cluster.members if m.service_url() == broker_url]
        return member


def streams_opened(web_url: str) -> tuple[float, float]:
    """The proxy's count of Produce and Consume streams opened so far (its /metrics)."""
    text = scrape(web_url + "/metrics")
    return tuple(  # type: ignore[return-value]
        metric(text, "pulsar_proxy_new_streams_total", f'method="{m}"')
        for m in ("Produce", "Consume")
    )


@pytest.fixture(scope="module")
def proxied(
    zookeeper: ZooKeeperServer,
    postgres_server: PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ProxiedCluster]:
    workdir = tmp_path_factory.mktemp("proxy-resilience")
    chroot = f"/proxy-resilience-{uuid.uuid4().hex[:8]}"
    ledgers = postgres_server.create_database(f"proxy_resilience_{uuid.uuid4().hex[:8]}")
    dedup = {"brokerDeduplicationEnabled": "true"}
    cluster = start_cluster(zookeeper, chroot, ledgers, workdir, dedup, brokers=2)
    store_url = f"zk:{zookeeper.hosts}{chroot}"
    try:
        proxy = ProxyProcess(workdir / "proxy.conf", metadataStoreUrl=store_url).start()
        try:
            yield ProxiedCluster(cluster, proxy, store_url, workdir)
        finally:
            proxy.stop()
    finally:
        cluster.stop()
        print_logs(cluster)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def lookup(proxy_url: str, topic: str) -> str:
    """The owner broker's URL, as the proxy's own lookup answers it."""
    async with grpc.aio.insecure_channel(proxy_url.removeprefix("grpc://")) as channel:
        answer = await stub(channel).Lookup(pb.LookupRequest(topic=topic), timeout=TIMEOUT_S)
    assert answer.proxy_through_service_url
    return str(answer.proxy_to_broker_url)


class RawConsumer:
    """A raw Consume stream through the proxy: how its end reads to the client."""

    def __init__(self, proxy_url: str, topic: str) -> None:
        self._channel = grpc.aio.insecure_channel(proxy_url.removeprefix("grpc://"))
        self._call = stub(self._channel).Consume(metadata=consume_metadata(topic))

    async def subscribed(self) -> RawConsumer:
        first = await asyncio.wait_for(self._call.read(), TIMEOUT_S)
        assert first.HasField("subscribed")
        return self

    async def ended_retryable(self) -> None:
        """The stream ends (nothing is published on its topic) with an error the SDK retries."""
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            async with asyncio.timeout(TIMEOUT_S):
                while True:
                    await self._call.read()
        error = error_from_rpc(ended.value)
        assert is_retryable(error), f"{ended.value.code()}: {error!r}"
        await self._channel.close()


async def finish(load: SteadyLoad) -> None:
    """Every receipted message consumed, once each (SteadyLoad), in each producer's order."""
    await load.finish()
    assert load.out_of_order() == {}


@pytest.mark.timeout(180)
async def test_a_bundle_unload_under_traffic_through_the_proxy_loses_nothing(
    proxied: ProxiedCluster, http: aiohttp.ClientSession
) -> None:
    topics = [t.full_name for t in one_topic_per_bundle("proxy-unload")]
    watched = await RawConsumer(proxied.proxy.service_url, topics[0]).subscribed()
    async with proxied.client() as client:
        load = await SteadyLoad(client, topics).start()
        await load.receipts(RECEIPTS)
        # The whole namespace, asked of one broker: every bundle unloaded on its owner.
        broker = proxied.cluster.members[0]
        async with http.put(broker.http_url() + f"{NAMESPACE}/unload") as response:
            assert response.status == 204, await response.text()
        await watched.ended_retryable()
        await load.receipts(RECEIPTS)
        await finish(load)
    print(f"\nunload through the proxy: producers blocked at most {load.longest_send_s:.2f} s")


@pytest.mark.timeout(180)
async def test_a_broker_killed_under_traffic_through_the_proxy_loses_nothing(
    proxied: ProxiedCluster,
) -> None:
    topics = [t.full_name for t in one_topic_per_bundle("proxy-kill9")]
    owners = [await lookup(proxied.proxy.service_url, t) for t in topics]
    victim = proxied.member(owners[0])
    watched = await RawConsumer(proxied.proxy.service_url, topics[0]).subscribed()
    try:
        async with proxied.client() as client:
            load = await SteadyLoad(client, topics).start()
            await load.receipts(RECEIPTS)
            victim.process.kill9()
            # Lookups through the proxy are answered all along, though the dead broker's
            # load report (which the proxy asks in turn) lives until its session expires.
            for topic in topics:
                await lookup(proxied.proxy.service_url, topic)
            await watched.ended_retryable()
            # The victim's bundles move once its ZooKeeper session expires; the clients find
            # them through the proxy again.
            await load.receipts(RECEIPTS, within_s=60)
            await finish(load)
        survivor = next(m for m in proxied.cluster.members if m is not victim)
        assert {await lookup(proxied.proxy.service_url, t) for t in topics} == {
            survivor.service_url()
        }
    finally:
        victim.process.kill9()  # nothing if it is down already
        victim.process.start()
    print(f"\nkill -9 behind the proxy: producers blocked at most {load.longest_send_s:.2f} s")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("how", ["stop", "kill-9"])
async def test_a_proxy_restarted_under_traffic_loses_nothing(
    proxied: ProxiedCluster, how: str
) -> None:
    """The proxy goes away (SIGTERM, or SIGKILL as a crash) and a new one starts on its port:
    the clients reconnect to the address they have."""
    topics = [t.full_name for t in one_topic_per_bundle(f"proxy-restart-{how}")]
    proxy = proxied.proxy
    async with proxied.client() as client:
        load = await SteadyLoad(client, topics).start()
        await load.receipts(RECEIPTS)
        watched = await RawConsumer(proxy.service_url, topics[0]).subscribed()
        if how == "stop":
            proxy.stop()
        else:
            proxy.kill9()
        await watched.ended_retryable()
        proxy.start()
        await load.receipts(RECEIPTS)
        await finish(load)
    print(f"\nproxy {how} and restart: producers blocked at most {load.longest_send_s:.2f} s")


@pytest.mark.timeout(180)
async def test_when_one_of_two_proxies_dies_the_other_serves_on(
    proxied: ProxiedCluster, tmp_path: Path
) -> None:
    """Stateless proxies side by side: traffic through the first goes on undisturbed while
    the second is killed, and a subscription whose consumer was on the second is taken up
    through the first, with every receipted message the dead proxy's consumer had not acked."""
    second = ProxyProcess(tmp_path / "second.conf", metadataStoreUrl=proxied.store_url).start()
    topics = [t.full_name for t in one_topic_per_bundle("proxy-pair-dies")]
    moved = topics[0]
    acked: set[bytes] = set()
    try:
        async with proxied.client() as client:
            load = await SteadyLoad(client, topics).start()
            stranded = proxied.client(second.service_url)  # closed below, its proxy dead
            consumer = await stranded.subscribe(moved, "moved", initial_position="Earliest")
            while len(acked) < 20:
                message = await consumer.receive(TIMEOUT_S * 1000)
                await consumer.acknowledge(message)
                acked.add(message.data())
            await load.receipts(RECEIPTS)
            opened = await asyncio.to_thread(streams_opened, proxied.proxy.web_url)
            second.kill9()
            await load.receipts(RECEIPTS)
            # Untouched: no stream through the first proxy was reopened (no client of it
            # reconnected), while its traffic went on.
            assert await asyncio.to_thread(streams_opened, proxied.proxy.web_url) == opened
            async with asyncio.timeout(TIMEOUT_S):
                await stranded.close()
            async with proxied.client() as taking_over:
                consumer = await taking_over.subscribe(moved, "moved", initial_position="Earliest")
                await finish(load)
                wanted = {p for p in load.receipted if p.decode().startswith(moved + "|")} - acked
                while wanted:
                    message = await consumer.receive(TIMEOUT_S * 1000)
                    wanted.discard(message.data())
                    await consumer.acknowledge(message)
    finally:
        second.stop()
