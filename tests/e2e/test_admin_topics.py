"""Tenants, namespaces and topics at Pulsar's admin paths, with its bodies and status codes:
deleting a tenant or a namespace that is not empty (409), a namespace's policies and bundles,
partitioned topics listed, grown (never shrunk) and deleted with every partition, which no
reconnecting client brings back, and a plain topic deleted only once its clients are gone
(412) unless forced."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pulsar_grpc.client import Client, PulsarError
from tests.e2e.admin_support import call, shared_broker, unique
from tests.support import BrokerThread

__all__ = ["shared_broker"]  # a fixture

BASE = "/admin/v2/persistent/public/default"


async def test_a_tenant_with_namespaces_is_not_deleted(shared_broker: BrokerThread) -> None:
    b = shared_broker
    tenant = unique("tenant")
    assert await call(b, "PUT", f"/admin/v2/tenants/{tenant}") == (204, None)
    assert await call(b, "PUT", f"/admin/v2/namespaces/{tenant}/ns") == (204, None)
    assert await call(b, "DELETE", f"/admin/v2/tenants/{tenant}") == (
        409,
        {"reason": "The tenant still has active namespaces"},
    )
    assert await call(b, "DELETE", f"/admin/v2/tenants/{tenant}?force=true") == (
        405,
        {"reason": "Broker doesn't allow forced deletion of tenants"},
    )
    assert await call(b, "DELETE", f"/admin/v2/namespaces/{tenant}/ns") == (204, None)
    assert await call(b, "DELETE", f"/admin/v2/tenants/{tenant}") == (204, None)
    assert (await call(b, "GET", f"/admin/v2/tenants/{tenant}"))[0] == 404
    assert tenant not in (await call(b, "GET", "/admin/v2/tenants"))[1]
    assert (await call(b, "DELETE", f"/admin/v2/tenants/{tenant}"))[0] == 404


async def test_a_namespace_is_created_with_its_bundles_and_shows_its_policies(
    shared_broker: BrokerThread,
) -> None:
    b = shared_broker
    ns = f"public/{unique('ns')}"
    path = f"/admin/v2/namespaces/{ns}"
    assert await call(b, "PUT", path, {"bundles": {"numBundles": 8}}) == (204, None)
    status, bundles = await call(b, "GET", f"{path}/bundles")
    assert status == 200 and bundles["numBundles"] == 8 and len(bundles["boundaries"]) == 9
    status, policies = await call(b, "GET", path)
    assert status == 200
    assert policies["bundles"] == bundles
    assert policies["replication_clusters"] == ["standalone"]
    assert policies["auth_policies"]["namespace_auth"] == {}
    assert ns in (await call(b, "GET", "/admin/v2/namespaces/public"))[1]

    assert (await call(b, "PUT", path))[0] == 409
    assert (await call(b, "GET", f"/admin/v2/namespaces/public/{unique('absent')}"))[0] == 404
    assert (await call(b, "PUT", f"/admin/v2/namespaces/{unique('nobody')}/ns"))[0] == 404
    for bad in ({"numBundles": 0}, {"boundaries": ["0x00000000", "0x80000000"]}):
        fresh = f"/admin/v2/namespaces/public/{unique('b')}"
        status, answer = await call(b, "PUT", fresh, {"bundles": bad})
        assert status == 412, answer
        assert "Invalid bundles" in answer["reason"]
    given = {"bundles": {"boundaries": ["0x00000000", "0x10000000", "0xffffffff"]}}
    other = f"/admin/v2/namespaces/public/{unique('ns')}"
    assert await call(b, "PUT", other, given) == (204, None)
    assert (await call(b, "GET", f"{other}/bundles"))[1]["numBundles"] == 2
    elsewhere = {"replication_clusters": ["elsewhere"]}
    fresh = f"/admin/v2/namespaces/public/{unique('c')}"
    assert (await call(b, "PUT", fresh, elsewhere))[0] == 412
    # A bare string is not a list of names (not read letter by letter).
    assert (await call(b, "PUT", fresh, {"replication_clusters": "standalone"}))[0] == 400


async def test_forced_deletes_only_where_broker_conf_allows_them(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    """forceDeleteNamespaceAllowed and forceDeleteTenantAllowed, false by default as in
    Pulsar: a forced delete is refused 405 and deletes nothing; allowed, a tenant's forced
    delete takes its namespaces and their topics with it."""
    refusing = broker_factory()
    ns = f"public/{unique('ns')}"
    assert await call(refusing, "PUT", f"/admin/v2/namespaces/{ns}") == (204, None)
    assert await call(refusing, "DELETE", f"/admin/v2/namespaces/{ns}?force=true") == (
        405,
        {"reason": "Broker doesn't allow forced deletion of namespaces"},
    )
    assert (await call(refusing, "GET", f"/admin/v2/namespaces/{ns}"))[0] == 200

    allowing = broker_factory(forceDeleteNamespaceAllowed=True, forceDeleteTenantAllowed=True)
    tenant = unique("tenant")
    assert await call(allowing, "PUT", f"/admin/v2/tenants/{tenant}") == (204, None)
    assert await call(allowing, "PUT", f"/admin/v2/namespaces/{tenant}/ns") == (204, None)
    topic = f"/admin/v2/persistent/{tenant}/ns/t"
    assert await call(allowing, "PUT", topic) == (204, None)
    assert await call(allowing, "DELETE", f"/admin/v2/tenants/{tenant}?force=true") == (204, None)
    assert (await call(allowing, "GET", f"/admin/v2/tenants/{tenant}"))[0] == 404
    assert (await call(allowing, "GET", f"/admin/v2/namespaces/{tenant}/ns"))[0] == 404
    assert (await call(allowing, "GET", f"{topic}/stats"))[0] == 404


async def test_a_namespace_with_topics_is_deleted_only_by_force(
    shared_broker: BrokerThread,
) -> None:
    b = shared_broker
    ns = f"public/{unique('ns')}"
    assert await call(b, "PUT", f"/admin/v2/namespaces/{ns}") == (204, None)
    assert await call(b, "PUT", f"/admin/v2/persistent/{ns}/plain") == (204, None)
    assert await call(b, "PUT", f"/admin/v2/persistent/{ns}/parted/partitions", 2) == (204, None)
    assert await call(b, "DELETE", f"/admin/v2/namespaces/{ns}") == (
        409,
        {"reason": "Cannot delete non empty namespace"},
    )
    assert await call(b, "DELETE", f"/admin/v2/namespaces/{ns}?force=true") == (204, None)
    assert (await call(b, "GET", f"/admin/v2/namespaces/{ns}"))[0] == 404
    assert ns not in (await call(b, "GET", "/admin/v2/namespaces/public"))[1]
    # Made again, it starts empty: its topics went with it.
    assert await call(b, "PUT", f"/admin/v2/namespaces/{ns}") == (204, None)
    assert await call(b, "GET", f"/admin/v2/persistent/{ns}") == (200, [])
    assert await call(b, "GET", f"/admin/v2/persistent/{ns}/partitioned") == (200, [])


async def test_partitions_grow_and_never_shrink(shared_broker: BrokerThread) -> None:
    b = shared_broker
    parted, plain = unique("parted"), unique("plain")
    assert await call(b, "PUT", f"{BASE}/{parted}/partitions", 2) == (204, None)
    assert await call(b, "PUT", f"{BASE}/{plain}") == (204, None)
    status, listed = await call(b, "GET", f"{BASE}/partitioned")
    assert status == 200
    assert f"persistent://public/default/{parted}" in listed
    assert f"persistent://public/default/{plain}" not in listed

    assert await call(b, "POST", f"{BASE}/{parted}/partitions", 4) == (204, None)
    assert await call(b, "GET", f"{BASE}/{parted}/partitions") == (200, {"partitions": 4})
    assert await call(b, "POST", f"{BASE}/{parted}/partitions", 3) == (
        409,
        {"reason": "number of partitions must be more than existing 4"},
    )
    assert (await call(b, "POST", f"{BASE}/{parted}/partitions", 0))[0] == 406  # Pulsar's
    status, answer = await call(b, "POST", f"{BASE}/{plain}/partitions", 8)
    assert status == 409 and "not partitioned" in answer["reason"]


async def test_a_deleted_partitioned_topic_stays_deleted(shared_broker: BrokerThread) -> None:
    b = shared_broker
    parted = unique("parted")
    topic = f"persistent://public/default/{parted}"
    assert await call(b, "PUT", f"{BASE}/{parted}/partitions", 3) == (204, None)
    async with Client(b.service_url) as client:
        producer = await client.create_producer(topic, send_timeout_millis=3000)
        for i in range(6):
            await producer.send(f"m{i}".encode())
        status, answer = await call(b, "DELETE", f"{BASE}/{parted}/partitions")
        assert (status, answer) == (412, {"reason": "Topic has active producers/subscriptions"})

        assert await call(b, "DELETE", f"{BASE}/{parted}/partitions?force=true") == (204, None)
        # The producer's partitions reconnect and are refused: nothing is created again.
        with pytest.raises(PulsarError):
            await producer.send(b"after")
        with pytest.raises(PulsarError):
            await client.create_producer(f"{topic}-partition-0")
    _, names = await call(b, "GET", BASE)
    assert not [n for n in names if n.startswith(topic)], names
    assert topic not in (await call(b, "GET", f"{BASE}/partitioned"))[1]
    assert (await call(b, "DELETE", f"{BASE}/{parted}/partitions"))[0] == 404


async def test_a_partitioned_delete_that_stopped_midway_is_finished_by_a_retry(
    shared_broker: BrokerThread,
) -> None:
    """The metadata is marked deleted first and goes last: after a delete that stopped once
    partition 0 was gone (its owner failed on partition 1, say), the topic is still listed,
    no partition loads or comes back meanwhile, and a retry deletes the rest."""
    b = shared_broker
    assert b.service is not None
    resources, topics = b.service.resources, b.service.topics
    parted = unique("midway")
    topic = f"persistent://public/default/{parted}"
    assert await call(b, "PUT", f"{BASE}/{parted}/partitions", 2) == (204, None)
    async with Client(b.service_url) as client:
        producer = await client.create_producer(topic)
        for i in range(4):
            await producer.send(f"m{i}".encode())
        await producer.close()
        # Where a delete that failed on partition 1 stops.
        await b.call(resources.mark_partitioned_deleted(topic))
        await b.call(topics.delete_topic(f"{topic}-partition-0"))
        assert await call(b, "GET", f"{BASE}/{parted}/partitions") == (200, {"partitions": 2})
        with pytest.raises(PulsarError):
            await client.create_producer(f"{topic}-partition-0", send_timeout_millis=3000)

    assert await call(b, "DELETE", f"{BASE}/{parted}/partitions?force=true") == (204, None)
    _, names = await call(b, "GET", BASE)
    assert not [n for n in names if n.startswith(topic)], names
    assert (await call(b, "DELETE", f"{BASE}/{parted}/partitions"))[0] == 404


async def test_a_topic_with_clients_is_deleted_only_by_force(shared_broker: BrokerThread) -> None:
    b = shared_broker
    first, second = unique("plain"), unique("plain")
    async with Client(b.service_url) as client:
        producer = await client.create_producer(f"persistent://public/default/{first}")
        await producer.send(b"x")
        assert await call(b, "DELETE", f"{BASE}/{first}") == (
            412,
            {"reason": "Topic has active producers/subscriptions"},
        )
        await producer.close()
        assert await call(b, "DELETE", f"{BASE}/{first}") == (204, None)

        consumer = await client.subscribe(f"persistent://public/default/{second}", "sub")
        assert (await call(b, "DELETE", f"{BASE}/{second}"))[0] == 412
        assert await call(b, "DELETE", f"{BASE}/{second}?force=true") == (204, None)
        await consumer.close()
    _, names = await call(b, "GET", BASE)
    assert f"persistent://public/default/{first}" not in names
    assert (await call(b, "DELETE", f"{BASE}/{first}"))[0] == 404
