"""kill -9 of a topic's owner among three broker processes: a producer and a consumer whose
reconnect backoff is a minute are back once ZooKeeper expires the dead owner's session (the
fixture's 3 s), because the ownership watch told them, through a broker that survived, that the
bundle was left unowned. The timer alone would have kept them away for the whole minute, so the
assertions are on the mechanism (the reconnects followed an event, before the timer could fire),
not on how many seconds it took (printed with pytest -s)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from pulsar_grpc.broker.naming import TopicName
from pulsar_grpc.client import Client
from tests.cluster import Cluster, cluster_factory, place
from tests.postgres import postgres_server, postgres_url
from tests.waiting import eventually
from tests.zookeeper import zk_chroot, zookeeper

__all__ = ["cluster_factory", "postgres_server", "postgres_url", "zk_chroot", "zookeeper"]

BACKOFF_MS = 60_000  # the first reconnect attempt's wait: longer than the test may take


@pytest.mark.timeout(120)
async def test_after_kill_9_of_the_owner_clients_move_on_the_watch_event(
    cluster_factory: Callable[..., Cluster],
) -> None:
    cluster = cluster_factory()
    members = cluster.members
    topic = TopicName.get("failover-watch")
    owner = await place(members, members[0].service_url(), topic)
    via = next(m for m in members if m is not owner)
    async with Client(
        via.service_url(),
        initial_backoff_interval_ms=BACKOFF_MS,
        max_backoff_interval_ms=BACKOFF_MS,
    ) as client:
        consumer = await client.subscribe(topic.full_name, "s", initial_position="earliest")
        producer = await client.create_producer(topic.full_name, batching_enabled=False)
        await producer.send(b"before")
        message = await consumer.receive(timeout_millis=30_000)
        await consumer.acknowledge(message)
        watch = client.ownership_watch
        await eventually(lambda: watch.events >= 1, timeout=30)  # watching

        owner.process.kill9()
        killed_at = time.monotonic()
        async with asyncio.timeout(BACKOFF_MS / 1000 * 0.9):  # before the timer's first try
            await producer.send(b"after")
            while (await consumer.receive()).data() != b"after":
                pass
        back_s = time.monotonic() - killed_at
        (produce,) = producer._partitions
        (consume,) = consumer._streams.values()
        assert produce.connection.reconnects_on_event == 1
        assert consume.connection.reconnects_on_event == 1
        assert watch.woken >= 2
    print(f"\nkill -9 of the owner: producer and consumer back {back_s:.1f} s after the kill")
