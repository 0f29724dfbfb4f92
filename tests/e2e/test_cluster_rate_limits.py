"""Rate limits in a cluster: a rate set through any broker's admin API reaches the producer
stream open on the topic's owner within a second (every broker watches the namespace's
Policies node in ZooKeeper)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from pulsar_grpc.broker.naming import TopicName
from tests.cluster import BrokerMember, place, zk_postgres_cluster
from tests.e2e.ratelimit_support import Flood, within
from tests.e2e.test_authorization import http
from tests.postgres import postgres_server, postgres_url
from tests.zookeeper import zk_chroot, zookeeper

__all__ = [
    "postgres_server",
    "postgres_url",
    "zk_chroot",
    "zk_postgres_cluster",
    "zookeeper",
]  # fixtures

RATE_PATH = "/admin/v2/namespaces/public/default/publishRate"


@pytest.fixture
def cluster(zk_postgres_cluster: list[BrokerMember]) -> list[BrokerMember]:
    return zk_postgres_cluster


async def set_rate(member: BrokerMember, messages: int) -> None:
    body = {"publishThrottlingRateInMsg": messages}
    status, answer = await asyncio.to_thread(http, member.broker, "POST", RATE_PATH, None, body)
    assert status == 204, answer


async def test_a_rate_set_on_another_broker_reaches_the_owners_open_stream(
    cluster: list[BrokerMember],
) -> None:
    topic = TopicName.get("rated")
    owner = await place(cluster, cluster[0].service_url, topic)
    others = [m for m in cluster if m is not owner]
    await set_rate(others[0], 500)
    async with grpc.aio.insecure_channel(owner.grpc("internal")) as channel:
        flood = await Flood(channel, topic.full_name, per_request=10, size=400).start()
        await flood.receipts.wait_until(2.5)
        before = flood.receipts.rate(1.5, 2.5)
        await set_rate(others[1], 2000)
        await flood.receipts.wait_until(4.5)
        after = flood.receipts.rate(3.5, 4.5)
        await flood.stop()
    assert within(before, 500), before
    assert within(after, 2000), after


async def test_a_dynamic_config_change_made_on_one_broker_applies_on_the_owner(
    cluster: list[BrokerMember],
) -> None:
    """Pulsar's dynamic configuration: /admin/configuration in ZooKeeper, watched by every
    broker; the owner of the topic applies a per-topic default changed through another."""
    topic = TopicName.get("dynamic-rated")
    owner = await place(cluster, cluster[0].service_url, topic)
    other = next(m for m in cluster if m is not owner)
    config = "/admin/v2/brokers/configuration/maxPublishRatePerTopicInMessages"
    async with grpc.aio.insecure_channel(owner.grpc("internal")) as channel:
        flood = await Flood(channel, topic.full_name, per_request=10, size=400).start()
        await flood.receipts.wait_until(1.0)
        free = flood.receipts.rate(0.5, 1.0)
        status, answer = await asyncio.to_thread(http, other.broker, "POST", f"{config}/500", None)
        assert status == 204, answer
        await flood.receipts.wait_until(3.5)
        held = flood.receipts.rate(2.0, 3.5)
        await flood.stop()
    assert free > 2000, free
    assert within(held, 500), held
    status, runtime = await asyncio.to_thread(
        http, owner.broker, "GET", "/admin/v2/brokers/configuration/runtime", None
    )
    assert status == 200 and runtime["maxPublishRatePerTopicInMessages"] == "500"
