"""kill -9 of one of three broker processes under steady produce and consume load.

A partitioned topic whose partitions are owned by all three brokers; several SDK producers send
without pause and a Shared consumer receives and acks, each through a broker that survives. One
broker owning some partitions is killed: ZooKeeper expires its session (the fixture's short
session timeout), lookups give its bundles to the others, and the clients carry on. Every
message that got a receipt is consumed; with deduplication on, no message is stored twice (each
payload has one message id: the receipt's), without it a resend may be stored again, as
at-least-once allows. The time each client was blocked is printed (pytest -s).
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from pulsar_grpc.broker.cluster.load_report import LOADBALANCE_BROKERS_ROOT
from pulsar_grpc.broker.metadata import ZooKeeperMetadataStore
from pulsar_grpc.client import Client, ConsumerType, Producer
from pulsar_grpc.client.exceptions import Timeout
from tests.cluster import (
    BROKERS,
    SESSION_TIMEOUT_MS,
    Cluster,
    cluster_factory,
    grpc_lookup,
    place,
    topic_over_every_bundle,
)
from tests.postgres import postgres_server, postgres_url
from tests.waiting import eventually
from tests.zookeeper import zk_chroot, zookeeper

__all__ = ["cluster_factory", "postgres_server", "postgres_url", "zk_chroot", "zookeeper"]

PARTITIONS = 6
PRODUCERS = 3
# Receipts each producer must have before the kill, and again after it, before the load stops.
RECEIPTS_BEFORE = 50
RECEIPTS_AFTER = 50
LOAD_TIMEOUT_S = 40  # the whole produce phase, kill and recovery included
DRAIN_TIMEOUT_S = 30
RECOVERY_BOUND_S = SESSION_TIMEOUT_MS / 1000 + 15
# How a message id reads when its receipt answered a duplicate (ledger and entry -1).
DUPLICATE_RECEIPT = "-1:-1:"


@dataclass
class Sent:
    """One producer's record: what got a receipt (payload -> message id) and the longest
    wait between two receipts (while a broker it sends to is dead, its sends stall)."""

    receipts: dict[bytes, str] = field(default_factory=dict)
    longest_gap_s: float = 0.0
    after_kill: int = 0


async def produce(
    producer: Producer, k: int, sent: Sent, killed: asyncio.Event, stop: asyncio.Event
) -> None:
    """Send p<k>-0, p<k>-1, ... one at a time, each awaited to its receipt, until `stop`."""
    last = time.monotonic()
    i = 0
    while not stop.is_set():
        payload = f"p{k}-{i}".encode()
        message_id = await producer.send(payload)  # a failed send fails the test
        sent.receipts[payload] = str(message_id)
        now = time.monotonic()
        sent.longest_gap_s = max(sent.longest_gap_s, now - last)
        last = now
        if killed.is_set():
            sent.after_kill += 1
        i += 1


@pytest.mark.timeout(180)
@pytest.mark.parametrize("dedup", [True, False], ids=["dedup", "no-dedup"])
async def test_kill_9_of_a_broker_under_load_loses_no_receipted_message(
    cluster_factory: Callable[..., Cluster], dedup: bool
) -> None:
    cluster = cluster_factory(brokerDeduplicationEnabled=str(dedup).lower())
    members = cluster.members
    topic = topic_over_every_bundle("kill9", PARTITIONS)
    request = urllib.request.Request(
        f"{members[0].http_url()}/admin/v2/{topic.rest_path}/partitions",
        data=str(PARTITIONS).encode(),
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    await asyncio.to_thread(urllib.request.urlopen, request, timeout=30)
    # The leader spreads the 4 bundles over the 3 brokers: every broker owns partitions.
    owners = [
        await place(members, members[0].service_url(), topic.get_partition(p))
        for p in range(PARTITIONS)
    ]
    victim = owners[2]
    producing_via, consuming_via = [m for m in members if m is not victim]
    victims_partitions = [p for p, owner in enumerate(owners) if owner is victim]

    consumed: dict[bytes, set[str]] = defaultdict(set)
    sent = [Sent() for _ in range(PRODUCERS)]
    killed, stop_producing, stop_consuming = asyncio.Event(), asyncio.Event(), asyncio.Event()
    consumer_gap = {"longest_s": 0.0}

    async with (
        Client(producing_via.service_url()) as producer_client,
        Client(consuming_via.service_url()) as consumer_client,
    ):
        consumer = await consumer_client.subscribe(
            topic.full_name,
            "load",
            consumer_type=ConsumerType.Shared,
            initial_position="Earliest",
        )

        async def consume() -> None:
            last = time.monotonic()
            while not stop_consuming.is_set():
                try:
                    message = await consumer.receive(timeout_millis=200)
                except Timeout:
                    continue
                consumed[message.data()].add(str(message.message_id()))
                await consumer.acknowledge(message)
                now = time.monotonic()
                if not stop_producing.is_set():
                    consumer_gap["longest_s"] = max(consumer_gap["longest_s"], now - last)
                last = now

        producers = [
            await producer_client.create_producer(
                topic.full_name, batching_enabled=False, send_timeout_millis=30_000
            )
            for _ in range(PRODUCERS)
        ]
        consuming = asyncio.create_task(consume())
        producing = [
            asyncio.create_task(produce(p, k, sent[k], killed, stop_producing))
            for k, p in enumerate(producers)
        ]
        try:
            async with asyncio.timeout(LOAD_TIMEOUT_S):
                await eventually(
                    lambda: all(len(s.receipts) >= RECEIPTS_BEFORE for s in sent), timeout=30
                )
                victim.process.kill9()
                killed_at = time.monotonic()
                killed.set()
                # The clients carry on: every producer gets receipts again, from every
                # partition (round robin), the dead broker's included.
                while not all(s.after_kill >= RECEIPTS_AFTER for s in sent):
                    assert not any(task.done() for task in producing), "a producer stopped"
                    await asyncio.sleep(0.05)
                recovered_s = time.monotonic() - killed_at
        finally:
            stop_producing.set()
            await asyncio.gather(*producing)
        receipted = {payload: mid for s in sent for payload, mid in s.receipts.items()}

        def all_consumed() -> None:
            missing = sorted((mid, p.decode()) for p, mid in receipted.items() if p not in consumed)
            assert not missing, f"{len(missing)} receipted, not consumed: {missing[:10]}"

        await eventually(all_consumed, timeout=DRAIN_TIMEOUT_S)
        stop_consuming.set()
        await consuming

    print(
        f"\nkill -9 of {victim.name} (owner of partitions {victims_partitions}), "
        f"deduplication {'on' if dedup else 'off'}: every producer had receipts again "
        f"{recovered_s:.2f} s after the kill; longest wait between receipts per producer "
        f"{[round(s.longest_gap_s, 2) for s in sent]} s; longest gap between deliveries "
        f"{consumer_gap['longest_s']:.2f} s; {len(receipted)} messages receipted"
    )
    # Within the fixture's session timeout and some, not Pulsar's default of 30 s: the
    # brokers took metadataStoreSessionTimeoutMillis.
    assert recovered_s < RECOVERY_BOUND_S
    # The dead broker's bundles moved to the living, and its load report is gone.
    for p in victims_partitions:
        answer = await grpc_lookup(producing_via.address(), topic.get_partition(p))
        assert answer["grpc_url"] in {m.service_url() for m in members if m is not victim}
    store = await ZooKeeperMetadataStore.connect(cluster.zookeeper.hosts, cluster.chroot)
    try:
        live = await store.get_children(LOADBALANCE_BROKERS_ROOT)
        assert victim.broker_id not in live and len(live) == BROKERS - 1, live
    finally:
        await store.close()
    if dedup:  # stored once each
        stored_twice = {p.decode(): sorted(ids) for p, ids in consumed.items() if len(ids) > 1}
        assert not stored_twice, stored_twice
        # The one message id consumed is the receipt's, or the receipt says "a duplicate":
        # -1:-1, as Pulsar answers a resend it had already stored.
        other_ids = {
            p.decode(): (mid, consumed[p])
            for p, mid in receipted.items()
            if consumed[p] != {mid} and not mid.startswith(DUPLICATE_RECEIPT)
        }
        assert not other_ids, other_ids
