"""What the cluster fault scenarios share: SDK producers sending without pause to a partitioned
topic, a record of every receipt (and when it came, per partition), and the final audit that
every receipted payload reaches a subscription created before the first send.

Used by tests/e2e/test_cluster_store_faults.py (PostgreSQL faults) and
tests/e2e/test_cluster_zk_faults.py (ZooKeeper faults, shutdown with a store gone).
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field

from pulsar_grpc.broker.naming import TopicName
from pulsar_grpc.client import Client, ConsumerType, MessageId, Producer
from pulsar_grpc.client.exceptions import PulsarException, Timeout
from tests.cluster import Member
from tests.waiting import eventually

__all__ = ["DRAIN_TIMEOUT_S", "Load", "audit", "create_partitioned", "leader_id", "produce"]

DRAIN_TIMEOUT_S = 60


@dataclass
class Load:
    """What the producers were told: payload -> receipt, when each partition's receipts came
    (monotonic seconds), and which sends failed."""

    receipts: dict[bytes, MessageId] = field(default_factory=dict)
    times: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    failures: list[str] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    def receipted_from(self, partitions: set[int]) -> int:
        return sum(1 for mid in self.receipts.values() if mid.partition in partitions)

    def receipted_since(self, partition: int, since: float) -> int:
        return sum(1 for t in self.times[partition] if t >= since)

    def blocked_after(self, partitions: set[int], fault_end: float) -> float:
        """How long past ``fault_end`` the slowest of ``partitions`` went without a receipt:
        the end of its longest gap between receipts, counted from ``fault_end`` (0 when its
        receipts resumed before the fault ended)."""
        worst = 0.0
        for p in partitions:
            times = sorted(self.times[p])
            after = [t for t in times if t >= fault_end]
            if after:
                worst = max(worst, after[0] - fault_end)
        return worst

    def longest_gap(self, partitions: set[int]) -> float:
        """The longest time any of ``partitions`` went without a receipt."""
        gaps = [
            b - a
            for p in partitions
            for a, b in zip(sorted(self.times[p]), sorted(self.times[p])[1:], strict=False)
        ]
        return max(gaps, default=0.0)


async def produce(producer: Producer, k: int, load: Load) -> None:
    """Send p<k>-0, p<k>-1, ... (16 in flight) until stopped; a failed send is recorded and
    the payload is not sent again (it has no receipt: nothing is promised of it)."""
    i = 0
    in_flight: set[asyncio.Task[None]] = set()

    async def one(payload: bytes) -> None:
        try:
            receipt = await producer.send(payload)
        except PulsarException as e:
            load.failures.append(f"{payload.decode()}: {type(e).__name__}")
            return
        load.receipts[payload] = receipt
        load.times[receipt.partition].append(time.monotonic())

    while not load.stop.is_set():
        if len(in_flight) >= 16:
            await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            continue
        task = asyncio.create_task(one(f"p{k}-{i}".encode()))
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)
        i += 1
        await asyncio.sleep(0.005)
    await asyncio.gather(*in_flight)


def create_partitioned(member: Member, topic: TopicName, partitions: int) -> None:
    request = urllib.request.Request(
        f"{member.http_url()}/admin/v2/{topic.rest_path}/partitions",
        data=str(partitions).encode(),
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(request, timeout=30)


def leader_id(member: Member) -> str:
    """The leader's broker id as ``member`` knows it (GET /admin/v2/brokers/leaderBroker)."""
    url = f"{member.http_url()}/admin/v2/brokers/leaderBroker"
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(json.load(response)["brokerId"])


async def audit(client: Client, topic: TopicName, load: Load) -> None:
    """Every receipted payload reaches the audit subscription (read from where it began)."""
    consumer = await client.subscribe(topic.full_name, "audit", consumer_type=ConsumerType.Shared)
    seen: set[bytes] = set()

    async def missing() -> None:
        while True:
            try:
                message = await consumer.receive(timeout_millis=100)
            except Timeout:
                break
            seen.add(message.data())
            await consumer.acknowledge(message)
        lost = sorted((str(mid), p.decode()) for p, mid in load.receipts.items() if p not in seen)
        assert not lost, f"{len(lost)} receipted messages never delivered: {lost[:20]}"

    await eventually(missing, timeout=DRAIN_TIMEOUT_S)
