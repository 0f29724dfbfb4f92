"""Network faults between a broker and its stores, in a three-broker cluster on ZooKeeper and
PostgreSQL: nothing receipted is lost, and the clients move on.

Each member reaches ZooKeeper and PostgreSQL through fault proxies of its own
(``cluster_factory(proxied=True)``). SDK producers send without pause to a partitioned topic
whose partitions every broker owns; a Shared consumer receives and acks; an ``audit``
subscription, created before the first send, is read only at the end. Then one broker's link
to a store fails, as a real deployment's does, and at the end every message that got a receipt
is delivered to the audit subscription.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from pulsar_grpc.client import Client, ConsumerType
from tests.cluster import (
    SESSION_TIMEOUT_MS,
    Cluster,
    cluster_factory,
    place,
    topic_over_every_bundle,
)
from tests.cluster_load import Load, audit, create_partitioned, produce
from tests.postgres import postgres_server, postgres_url
from tests.waiting import eventually
from tests.zookeeper import zk_chroot, zookeeper

__all__ = ["cluster_factory", "postgres_server", "postgres_url", "zk_chroot", "zookeeper"]

PARTITIONS = 16
PRODUCERS = 4


@pytest.mark.timeout(240)
@pytest.mark.parametrize("fault", ["reset", "silent"])
async def test_a_postgres_cut_then_kill_9_while_cut_loses_no_receipted_message(
    cluster_factory: Callable[..., Cluster], fault: str
) -> None:
    """The owner of some partitions loses PostgreSQL for 12 s (``reset``: its connections are
    reset and new ones refused, so commits fail at once; ``silent``: nothing answers, so
    commits time out), gets it back, loses it again and is killed with kill -9 while cut. The
    new owners deliver every message any broker receipted.

    While the store is gone no new ledger can start (ledger ids come from the store): once an
    add failed, the managed ledger must refuse adds rather than write past the hole."""
    cluster = cluster_factory(proxied=True)
    members = cluster.members
    topic = topic_over_every_bundle("pgcut", PARTITIONS)
    await asyncio.to_thread(create_partitioned, members[0], topic, PARTITIONS)
    owners = [
        await place(members, members[0].service_url(), topic.get_partition(p))
        for p in range(PARTITIONS)
    ]
    victim = max(members, key=owners.count)
    theirs = {p for p, owner in enumerate(owners) if owner is victim}
    via = next(m for m in members if m is not victim)
    load = Load()
    async with Client(via.service_url()) as client:
        # The audit subscription exists before the first send; it is read only at the end.
        await (
            await client.subscribe(topic.full_name, "audit", consumer_type=ConsumerType.Shared)
        ).close()
        producers = [await client.create_producer(topic.full_name) for _ in range(PRODUCERS)]
        tasks = [asyncio.create_task(produce(p, k, load)) for k, p in enumerate(producers)]
        try:
            await eventually(lambda: load.receipted_from(theirs) >= 400, timeout=60)
            assert victim.links is not None
            cut = (
                victim.links.postgres.refuse
                if fault == "reset"
                else victim.links.postgres.blackhole
            )
            cut()
            await asyncio.sleep(12)  # the fault's length: past the store's 10 s deadline
            victim.links.postgres.heal()
            before = load.receipted_from(theirs)
            await eventually(lambda: load.receipted_from(theirs) >= before + 200, timeout=60)
            cut()
            await asyncio.sleep(2)  # sends reach the victim and stay unanswered
            victim.process.kill9()
            killed_at = time.monotonic()
            before = load.receipted_from(theirs)
            await eventually(lambda: load.receipted_from(theirs) >= before + 200, timeout=60)
            recovered_s = time.monotonic() - killed_at
        finally:
            load.stop.set()
            await asyncio.gather(*tasks)
        await audit(client, topic, load)
    print(
        f"\n{len(load.receipts)} receipted, {len(load.failures)} sends failed; the victim's "
        f"partitions took receipts again {recovered_s:.1f} s after the kill "
        f"(session timeout {SESSION_TIMEOUT_MS / 1000:g} s)"
    )
