"""ZooKeeper faults in a three-broker cluster on ZooKeeper and PostgreSQL: a broker cut off from
ZooKeeper past its session stops serving, its bundles are placed again on the next lookup, the
clients move, and nothing receipted is lost; a broker told to stop while a store is gone stops
within its shutdown timeout.

Each member reaches ZooKeeper and PostgreSQL through fault proxies of its own
(``cluster_factory(proxied=True)``). SDK producers send without pause to a 16-partition topic
whose partitions every broker owns, through a broker that stays healthy; an ``audit``
subscription, created before the first send, is read at the end: every message that got a
receipt is there. How long the victim's partitions went without receipts after the fault
ended is printed (pytest -s), not asserted: the machine is shared.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from datetime import datetime

import pytest

from pulsar_grpc.broker.naming import TopicName
from pulsar_grpc.client import Client, ConsumerType
from tests.cluster import (
    SESSION_TIMEOUT_MS,
    Cluster,
    Member,
    cluster_factory,
    place,
    topic_over_every_bundle,
)
from tests.cluster_load import Load, audit, create_partitioned, leader_id, produce
from tests.postgres import postgres_server, postgres_url
from tests.waiting import eventually
from tests.zookeeper import zk_chroot, zookeeper

__all__ = ["cluster_factory", "postgres_server", "postgres_url", "zk_chroot", "zookeeper"]

PARTITIONS = 16
PRODUCERS = 4
SESSION_S = SESSION_TIMEOUT_MS / 1000
# Long past the session: ZooKeeper has expired the victim's session, and the victim has
# presumed it lost, before the link comes back.
BLACKHOLE_S = 3 * SESSION_S
RESUMED = 100  # receipts each of the victim's partitions must take after the fault
SHUTDOWN_TIMEOUT_MS = 8000


async def spread(cluster: Cluster, prefix: str) -> tuple[TopicName, list[Member]]:
    """A 16-partition topic placed over all three brokers; the topic and each partition's
    owner."""
    members = cluster.members
    topic = topic_over_every_bundle(prefix, PARTITIONS)
    await asyncio.to_thread(create_partitioned, members[0], topic, PARTITIONS)
    owners = [
        await place(members, members[0].service_url(), topic.get_partition(p))
        for p in range(PARTITIONS)
    ]
    return topic, owners


def logged_at(member: Member, pattern: str) -> list[datetime]:
    """When ``member`` logged a line matching ``pattern`` (the log's asctime)."""
    text = member.process.log.read_text(errors="replace")
    return [
        datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
        for m in re.finditer(rf"^(\S+ \S+) .*{pattern}", text, re.MULTILINE)
    ]


def blip(member: Member) -> int:
    """Reset ``member``'s ZooKeeper connections: it reconnects at once, within its session
    (as a loaded machine's late ping does). ZooKeeper drops a connection's watches with it."""
    assert member.links is not None
    before = len(logged_at(member, "session event: Reconnected"))
    member.links.zookeeper.cut()
    return before


@pytest.mark.timeout(180)
@pytest.mark.parametrize("victim_role", ["follower", "leader"])
async def test_a_broker_cut_off_from_zookeeper_past_its_session_loses_no_receipted_message(
    cluster_factory: Callable[..., Cluster], victim_role: str
) -> None:
    """The victim (``follower``: the non-leader owning most partitions; ``leader``: the leader)
    is blackholed from ZooKeeper for three session timeouts under load, then healed. Just
    before, the other brokers' ZooKeeper connections are reset once (they reconnect within
    their sessions): what they had read must not outlive the watches that connection held.

    Its session expires, so its ownership nodes go: the next lookup of each of its bundles
    must place it on a live broker, and no lookup may answer a broker that then refuses the
    producer (the SDK would time out instead of moving). A partitioned leader's place is taken
    by another broker while it is away; healed, it follows: one leader, named alike by all."""
    cluster = cluster_factory(proxied=True)
    members = cluster.members
    topic, owners = await spread(cluster, f"zk{victim_role}")
    leader = next(m for m in members if m.broker_id == leader_id(members[0]))
    if victim_role == "leader":
        victim = leader
    else:
        victim = max((m for m in members if m is not leader), key=owners.count)
    theirs = {p for p, owner in enumerate(owners) if owner is victim}
    assert theirs, f"the {victim_role} owns no partition: nothing would move"
    via = next(m for m in members if m is not victim)
    load = Load()
    async with Client(via.service_url()) as client:
        await (
            await client.subscribe(topic.full_name, "audit", consumer_type=ConsumerType.Shared)
        ).close()
        producers = [await client.create_producer(topic.full_name) for _ in range(PRODUCERS)]
        tasks = [asyncio.create_task(produce(p, k, load)) for k, p in enumerate(producers)]
        try:
            await eventually(lambda: load.receipted_from(theirs) >= 200, timeout=60)
            survivors = [m for m in members if m is not victim]
            for m in survivors:
                before = blip(m)
                await eventually(
                    lambda m=m, n=before: len(logged_at(m, "session event: Reconnected")) > n,
                    timeout=30,
                )
            assert victim.links is not None
            victim.links.zookeeper.blackhole()
            await asyncio.sleep(BLACKHOLE_S)  # the fault's length
            if victim_role == "leader":  # another broker leads while the old one is away
                await eventually(lambda: leader_id(survivors[0]) != victim.broker_id, timeout=30)
            victim.links.zookeeper.heal()
            healed_at = time.monotonic()
            for p in sorted(theirs):
                await eventually(
                    lambda p=p: load.receipted_since(p, healed_at) >= RESUMED, timeout=60
                )
        finally:
            load.stop.set()
            await asyncio.gather(*tasks)
        # One leader, the same on every broker, and not the healed one if it was the leader.
        await eventually(lambda: len({leader_id(m) for m in members}) == 1, timeout=30)
        if victim_role == "leader":
            assert leader_id(victim) != victim.broker_id
            new = next(m for m in members if m.broker_id == leader_id(victim))
            (stepped_down,) = logged_at(victim, "is no longer the leader")
            took_over = logged_at(new, "is the leader")[-1]
            assert stepped_down < took_over, "two brokers acted as leader at once"
        await audit(client, topic, load)
    print(
        f"\n{victim_role} victim: {len(load.receipts)} receipted, {len(load.failures)} sends "
        f"failed; its partitions went without receipts {load.blocked_after(theirs, healed_at):.1f}"
        f" s after the heal (longest gap {load.longest_gap(theirs):.1f} s, blackhole "
        f"{BLACKHOLE_S:g} s, session timeout {SESSION_S:g} s)"
    )


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "store,fault", [("zookeeper", "blackhole"), ("zookeeper", "refuse"), ("postgres", "blackhole")]
)
async def test_a_broker_whose_store_is_gone_stops_within_its_shutdown_timeout(
    cluster_factory: Callable[..., Cluster], store: str, fault: str
) -> None:
    """The victim's link to one store fails (``blackhole``: nothing answers; ``refuse``: every
    connection is reset), then it gets SIGTERM while owning partitions under load: it must
    exit by itself, with 0, within brokerShutdownTimeoutMs, with one clear line for what it
    could not release and no traceback; the other brokers take its partitions, and nothing
    receipted is lost."""
    cluster = cluster_factory(proxied=True, brokerShutdownTimeoutMs=str(SHUTDOWN_TIMEOUT_MS))
    members = cluster.members
    topic, owners = await spread(cluster, f"stop{store}{fault}")
    victim = max(members, key=owners.count)
    theirs = {p for p, owner in enumerate(owners) if owner is victim}
    via = next(m for m in members if m is not victim)
    load = Load()
    async with Client(via.service_url()) as client:
        await (
            await client.subscribe(topic.full_name, "audit", consumer_type=ConsumerType.Shared)
        ).close()
        producers = [await client.create_producer(topic.full_name) for _ in range(PRODUCERS)]
        tasks = [asyncio.create_task(produce(p, k, load)) for k, p in enumerate(producers)]
        try:
            await eventually(lambda: load.receipted_from(theirs) >= 200, timeout=60)
            assert victim.links is not None
            link = getattr(victim.links, store)
            getattr(link, fault)()
            await asyncio.sleep(1)  # sends reach the victim and stay unanswered
            started = time.monotonic()
            # Past the timeout, stop() sends SIGKILL: the exit code says which happened.
            code = await asyncio.to_thread(
                victim.process.stop, grace_s=SHUTDOWN_TIMEOUT_MS / 1000 + 10
            )
            stopped_s = time.monotonic() - started
            stopped_at = time.monotonic()
            assert code == 0, f"the broker did not stop by itself (exit code {code})"
            for p in sorted(theirs):
                await eventually(
                    lambda p=p: load.receipted_since(p, stopped_at) >= RESUMED, timeout=60
                )
        finally:
            load.stop.set()
            await asyncio.gather(*tasks)
        await audit(client, topic, load)
    shutdown = victim.process.log.read_text(errors="replace").partition("shutting down")[2]
    assert "Traceback" not in shutdown
    warned = [line for line in shutdown.splitlines() if " WARNING " in line]
    print("\n".join(["", f"{victim.name}'s warnings while stopping:", *warned]))
    print(
        f"{store} {fault}: stopped in {stopped_s:.1f} s (timeout {SHUTDOWN_TIMEOUT_MS} ms); "
        f"{len(load.receipts)} receipted, {len(load.failures)} sends failed; its partitions "
        f"went without receipts {load.blocked_after(theirs, stopped_at):.1f} s after it exited"
    )
