"""Producer access modes across a topic move in a cluster (PIP-68, issue 26): the topic epoch
is kept with the managed ledger (ZooKeeper metadata, PostgreSQL entries), so when the owner
stops and another broker takes the topic, the exclusive producer reconnects there with its
epoch and keeps the topic, an Exclusive newcomer is still refused, and ExclusiveWithFencing
takes the topic with the next epoch, on the new owner as on the old."""

from __future__ import annotations

import pytest

import pulsar_grpc as pulsar
from pulsar_grpc.client import Client, ProducerAccessMode
from tests.cluster import BrokerMember, one_topic_per_bundle, place, zk_postgres_cluster
from tests.postgres import postgres_server, postgres_url
from tests.zookeeper import zk_chroot, zookeeper

__all__ = [  # fixtures
    "postgres_server",
    "postgres_url",
    "zk_chroot",
    "zk_postgres_cluster",
    "zookeeper",
]


@pytest.mark.timeout(120)
async def test_the_exclusive_producer_keeps_the_topic_when_it_moves(
    zk_postgres_cluster: list[BrokerMember],
) -> None:
    cluster = zk_postgres_cluster
    topic = one_topic_per_bundle("access-move")[0]
    owner = await place(cluster, cluster[0].service_url, topic)
    via = next(m for m in cluster if m is not owner)
    async with Client(via.service_url) as client, Client(via.service_url) as other:
        # Made first: a topic keeps no message that no subscription still needs (Pulsar's
        # retention default), so the audit at the end needs it to see every receipted one.
        audit = await other.subscribe(topic.full_name, "audit", initial_position="Earliest")
        holder = await client.create_producer(
            topic.full_name, access_mode=ProducerAccessMode.Exclusive, batching_enabled=False
        )
        await holder.send(b"on-the-first-owner")
        assert holder._partitions[0].topic_epoch == 0
        await owner.broker.call(owner.service.close())  # the owner stops: the topic moves

        await holder.send(b"on-the-next-owner")  # reconnected there, with its epoch
        assert await place(cluster, via.service_url, topic) is not owner
        with pytest.raises(pulsar.ProducerFenced):
            await other.create_producer(topic.full_name, access_mode=ProducerAccessMode.Exclusive)

        fencer = await other.create_producer(
            topic.full_name, access_mode=ProducerAccessMode.ExclusiveWithFencing
        )
        await fencer.send(b"fencer")
        assert fencer._partitions[0].topic_epoch == 1  # the epoch the first owner stored, + 1
        with pytest.raises(pulsar.ProducerFenced):
            await holder.send(b"fenced")

        got = [(await audit.receive(timeout_millis=10_000)).data() for _ in range(3)]
        assert got == [b"on-the-first-owner", b"on-the-next-owner", b"fencer"]
