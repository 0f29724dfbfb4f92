"""Fencing: a broker cannot add to a topic whose managed ledger another owner opened since.

First on one in-process broker, fenced by hand (another owner takes the managed ledger's epoch
in its store): the topic stops serving as an unload does, and clients carry on. Then across real
broker processes: a broker whose ZooKeeper session expired while it was paused (SIGSTOP past the
session timeout) cannot add to a topic another broker took over.

Two broker processes share one real ZooKeeper and one real PostgreSQL. Broker A owns a topic
and has receipted messages; it is paused long enough for ZooKeeper to expire its session, and
broker B takes the topic over (a client looks it up there and produces). A's connection to
ZooKeeper goes through a FaultProxy that stays silent while A is paused and for a while after,
so that A resumes still believing it owns the topic: the window in which only fencing stands
between A and the shared store. A Produce request that reached A during the pause is then
handled by A's old managed ledger, deterministically, and must be refused (retryable, no
receipt), and nothing of it may be in the store. Every message that did get a receipt, from A
before the pause and from B after, is consumed.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from pulsar_grpc.broker.ledger.info import decode_ledgers, ledger_path
from pulsar_grpc.broker.ledger.postgres_store import PostgresLedgerStore
from pulsar_grpc.broker.ledger.storage_url import parse_ledger_storage_url
from pulsar_grpc.broker.ledger.store import EntrySpan
from pulsar_grpc.broker.metadata import ZooKeeperMetadataStore
from pulsar_grpc.broker.naming import DEFAULT_NAMESPACE, NamespaceBundles, TopicName
from pulsar_grpc.cli.cluster import MemberPorts, broker_properties, write_broker
from pulsar_grpc.client import Client
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.messaging import receive_n
from tests.e2e.wire import batch, error_code, stub
from tests.faultproxy import FaultProxy
from tests.postgres import postgres_server, postgres_url
from tests.support import BrokerThread
from tests.waiting import eventually
from tests.zookeeper import ZooKeeperServer, zk_chroot, zookeeper

__all__ = ["postgres_server", "postgres_url", "zk_chroot", "zookeeper"]  # fixtures

# Short, so the test waits little for the expiry; long enough that A, once resumed, takes a
# while to conclude its session is gone (it presumes so one session timeout after losing
# ZooKeeper), which is when the request it received meanwhile reaches its ledger.
SESSION_TIMEOUT_MS = 3000
WAIT_S = 60  # the bound on every wait of this test
TOPIC = TopicName.get("fenced")
STALE = b"stale write reaching the old owner"


async def test_a_fenced_topic_stops_serving_and_its_clients_carry_on_after_a_reload(
    broker: BrokerThread,
) -> None:
    service = broker.service
    assert service is not None
    async with (
        Client(broker.service_url) as client,
        grpc.aio.insecure_channel(broker.grpc_address) as channel,
    ):
        consumer = await client.subscribe(TOPIC.full_name, "sub", initial_position="Earliest")
        producer = await client.create_producer(TOPIC.full_name, batching_enabled=False)
        await producer.send(b"before")
        raw = stub(channel).Consume(
            metadata=(
                ("x-pulsar-topic", TOPIC.full_name),
                ("x-pulsar-subscription", "raw"),
                ("x-pulsar-initial-position", "Earliest"),
            )
        )
        assert (await asyncio.wait_for(raw.read(), WAIT_S)).HasField("subscribed")
        fenced = await broker.call(service.get_topic(TOPIC))
        ledger = fenced.ledger
        await broker.call(ledger.store.fence(ledger.name))  # another owner opened it

        # The next write finds the ledger fenced: the producer's stream ends (retryable, no
        # receipt), the SDK looks the topic up again, the topic is loaded afresh (and its
        # ledger opened anew, fencing the other owner in turn), and the message is stored.
        await asyncio.wait_for(producer.send(b"after"), WAIT_S)
        assert fenced.ledger.fenced.done()
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            async with asyncio.timeout(WAIT_S):
                while await raw.read() is not grpc.aio.EOF:
                    pass
        assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
        assert error_code(ended.value) == 6  # ServiceNotReady: consumers come back too
        reloaded = await broker.call(service.get_topic(TOPIC))
        assert reloaded is not fenced
        got = [m.data() for m in await receive_n(consumer, 2)]
        assert got == [b"before", b"after"]


class Broker:
    """A cluster member's process (make cluster's broker.conf on free ports), started and
    stopped off the test's event loop: the FaultProxy on that loop carries A's ZooKeeper
    connection, which must not stall while a broker starts."""

    def __init__(self, workdir: Path, name: str, metadata_url: str, ledger_url: str) -> None:
        self.ports = MemberPorts.free()
        properties = broker_properties(
            self.ports, workdir / name / "data", metadata_url, ledger_url
        )
        properties["metadataStoreSessionTimeoutMillis"] = str(SESSION_TIMEOUT_MS)
        self.process = write_broker(workdir, name, properties)

    @property
    def service_url(self) -> str:
        return self.ports.url("grpc", "internal")

    @property
    def grpc_address(self) -> str:
        return self.service_url.removeprefix("grpc://")


@pytest.fixture
async def zk_proxy(zookeeper: ZooKeeperServer) -> AsyncIterator[FaultProxy]:
    async with FaultProxy(zookeeper.port) as proxy:
        yield proxy


@pytest.fixture
async def brokers(
    zookeeper: ZooKeeperServer,
    zk_chroot: str,
    postgres_url: str,
    zk_proxy: FaultProxy,
    tmp_path: Path,
) -> AsyncIterator[tuple[Broker, Broker]]:
    """Broker A (reaching ZooKeeper through the proxy), started, and broker B, not yet: the
    test starts it once A owns the topic (A, alone, leads and places the bundle on itself)."""
    a = Broker(tmp_path, "a", f"zk:{zk_proxy.address}{zk_chroot}", postgres_url)
    b = Broker(tmp_path, "b", f"zk:{zookeeper.hosts}{zk_chroot}", postgres_url)
    try:
        await asyncio.to_thread(a.process.start, WAIT_S)
        yield a, b
    finally:
        for broker in (a, b):
            if broker.process.running:
                broker.process.send_signal(signal.SIGCONT)  # a paused broker cannot stop
            await asyncio.to_thread(broker.process.stop)


async def lookup(address: str) -> str:
    async with grpc.aio.insecure_channel(address) as channel:
        r = await stub(channel).Lookup(pb.LookupRequest(topic=TOPIC.full_name), timeout=WAIT_S)
    assert r.response == pb.LookupResponse.Connect
    return r.grpc_url


async def bundle_released(store: ZooKeeperMetadataStore) -> None:
    """Until ZooKeeper has expired the owner's session (its ephemeral ownership node goes)."""
    bundle = NamespaceBundles.with_count(DEFAULT_NAMESPACE, 4).bundle_for(TOPIC)
    path = f"/namespace/public/default/{bundle.range_str}"

    async def gone() -> None:
        assert await store.get(path) is None, "the paused broker's ownership node is still there"

    await eventually(gone, timeout=WAIT_S, interval=0.1)


async def stored_payloads_and_gaps(postgres_url: str, metadata: ZooKeeperMetadataStore) -> bytes:
    """Every stored entry of the topic, concatenated; asserts that each ledger the metadata
    counted holds exactly the entries counted (none added after the count was taken)."""
    got = await metadata.get(ledger_path(TOPIC.persistence_naming_encoding))
    assert got is not None
    ledgers = decode_ledgers(got.value)
    store = PostgresLedgerStore(postgres_url, parse_ledger_storage_url(postgres_url).where)
    try:
        stored = b""
        for info in ledgers:
            stats = await store.ledger_stats(info.ledger_id)
            if info is not ledgers[-1]:
                assert stats.entries == info.entries, (info, stats)
            spans = [EntrySpan(info.ledger_id, 0, max(stats.entries - 1, 0))]
            stored += b"".join(data for _, _, data in await store.read_entries(spans))
        return stored
    finally:
        await store.close()


async def test_a_broker_whose_session_expired_is_fenced_and_nothing_receipted_is_lost(
    brokers: tuple[Broker, Broker],
    zk_proxy: FaultProxy,
    zookeeper: ZooKeeperServer,
    zk_chroot: str,
    postgres_url: str,
) -> None:
    a, b = brokers
    assert await lookup(a.grpc_address) == a.service_url  # A owns the topic
    await asyncio.to_thread(b.process.start, WAIT_S)
    receipted: list[bytes] = []
    async with Client(a.service_url) as client:
        consumer = await client.subscribe(TOPIC.full_name, "sub", initial_position="Earliest")
        await consumer.close()  # the subscription keeps every entry from here on
        producer = await client.create_producer(TOPIC.full_name, batching_enabled=False)
        for i in range(10):
            await producer.send(b"from A %d" % i)
            receipted.append(b"from A %d" % i)
        await producer.close()

    metadata = await ZooKeeperMetadataStore.connect(zookeeper.hosts, zk_chroot)
    async with grpc.aio.insecure_channel(a.grpc_address) as channel:
        # A raw producer on A, opened (and receipted once) before the pause.
        call = stub(channel).Produce(metadata=(("x-pulsar-topic", TOPIC.full_name),))
        assert (await asyncio.wait_for(call.read(), WAIT_S)).HasField("ready")
        await call.write(batch(0, [b"raw on A"]))
        assert (await asyncio.wait_for(call.read(), WAIT_S)).HasField("receipt")
        receipted.append(b"raw on A")

        # A is paused and cut off from ZooKeeper: its session expires, B takes the topic.
        zk_proxy.blackhole()
        a.process.send_signal(signal.SIGSTOP)
        try:
            await bundle_released(metadata)
            assert await lookup(b.grpc_address) == b.service_url
            async with Client(b.service_url) as client:
                producer = await client.create_producer(TOPIC.full_name, batching_enabled=False)
                for i in range(10):
                    await producer.send(b"from B %d" % i)
                    receipted.append(b"from B %d" % i)
                await producer.close()
            # Reaches A while it is paused: A reads it first thing when it resumes, still
            # believing it owns the topic (it hears nothing from ZooKeeper).
            await call.write(batch(1, [STALE]))
        finally:
            a.process.send_signal(signal.SIGCONT)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            async with asyncio.timeout(WAIT_S):
                while True:
                    answer = await call.read()
                    assert not answer.HasField("receipt"), "the old owner receipted a write"
    error = refused.value
    assert error.code() == grpc.StatusCode.UNAVAILABLE, error
    assert error_code(error) == 6  # ServiceNotReady: the client looks the topic up again
    assert "another owner" in (error.details() or ""), error  # the fence refused it

    zk_proxy.heal()  # A learns that its session is gone
    try:
        stored = await stored_payloads_and_gaps(postgres_url, metadata)
    finally:
        await metadata.close()
    assert STALE not in stored

    async with Client(b.service_url) as client:
        consumer = await client.subscribe(TOPIC.full_name, "sub", initial_position="Earliest")
        received = [m.data() for m in await receive_n(consumer, len(receipted))]
        await consumer.close()
    assert sorted(received) == sorted(receipted)
