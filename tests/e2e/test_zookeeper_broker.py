"""A broker whose metadataStoreUrl names a real ZooKeeper: it serves produce and consume end to
end, its metadata (policies, managed ledgers, cursors) lies under the URL's chroot, and a
restart on that metadata carries on where it stopped."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pulsar_grpc.broker.metadata import ZooKeeperMetadataStore
from pulsar_grpc.client import Client
from tests.e2e.messaging import assert_nothing_more, receive_n
from tests.support import BrokerThread
from tests.zookeeper import ZooKeeperServer, zk_chroot, zookeeper

__all__ = ["zk_chroot", "zookeeper"]  # fixtures, imported to be found


async def test_broker_on_zookeeper_produces_and_consumes(
    broker_factory: Callable[..., BrokerThread],
    zookeeper: ZooKeeperServer,
    zk_chroot: str,
    tmp_path: Path,
) -> None:
    url = f"zk:{zookeeper.hosts}{zk_chroot}"
    data = tmp_path / "broker-data"
    topic = "zk-e2e"
    payloads = [f"m{i}".encode() for i in range(10)]
    broker = broker_factory(metadataStoreUrl=url, data_dir=data)
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(topic, "sub", initial_position="Earliest")
        producer = await client.create_producer(topic, batching_max_messages=1)
        for payload in payloads:
            await producer.send(payload)
        received = await receive_n(consumer, 10)
        assert [m.data() for m in received] == payloads
        for m in received[:5]:
            await consumer.acknowledge(m)
        await consumer.close()
    assert broker.service is not None
    await broker.call(broker.service.close())  # the fixture ends its thread after the test
    assert not (data / "metadata.db").exists()  # nothing went to the embedded store

    outside = await ZooKeeperMetadataStore.connect(zookeeper.hosts)
    try:
        policies = await outside.get(f"{zk_chroot}/admin/policies/public/default")
        assert policies is not None
        ledgers = f"{zk_chroot}/managed-ledgers/public/default/persistent"
        assert await outside.get_children(ledgers) == [topic]
        assert await outside.get_children(f"{ledgers}/{topic}") == ["sub"]
    finally:
        await outside.close()

    again = broker_factory(metadataStoreUrl=url, data_dir=data)
    async with Client(again.service_url) as client:
        consumer = await client.subscribe(topic, "sub", initial_position="Earliest")
        rest = await receive_n(consumer, 5)
        assert [m.data() for m in rest] == payloads[5:]
        await assert_nothing_more(consumer)
