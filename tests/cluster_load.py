"""What the cluster fault scenarios share: SDK producers sending without pause to a partitioned
topic, a record of every receipt (and when it came, per partition), and the final audit that
every receipted payload reaches a subscription created before the first send; :func:`under_load`
runs a scenario's faults inside that frame.

Used by tests/e2e/test_cluster_store_faults.py (PostgreSQL faults) and
tests/e2e/test_cluster_zk_faults.py (ZooKeeper faults, shutdown with a store gone).
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from pulsar_grpc.broker.naming import TopicName
from pulsar_grpc.client import Client, ConsumerType, MessageId, Producer
from pulsar_grpc.client.exceptions import PulsarException, Timeout
from tests.cluster import Cluster, Member, StoreLinks, place, topic_over_every_bundle
from tests.waiting import eventually

__all__ = [
    "DRAIN_TIMEOUT_S",
    "Load",
    "Scene",
    "audit",
    "create_partitioned",
    "leader_id",
    "most_partitions",
    "produce",
    "spread",
    "under_load",
]

DRAIN_TIMEOUT_S = 60
PARTITIONS = 16
PRODUCERS = 4


@dataclass
class Load:
    """What the producers were told: payload -> receipt, when each partition's receipts came
    (monotonic seconds), and which sends failed."""

    receipts: dict[bytes, MessageId] = field(default_factory=dict)
    times: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    failures: list[str] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    def receipted_from(self, partitions: set[int]) -> int:
        return sum(1 for mid in self.receipts.values() if mid.partition() in partitions)

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
        load.times[receipt.partition()].append(time.monotonic())

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


@dataclass
class Scene:
    """A running load on a proxied cluster: the victim owns ``theirs`` partitions."""

    members: list[Member]
    victim: Member
    theirs: set[int]
    load: Load

    @property
    def links(self) -> StoreLinks:
        assert self.victim.links is not None
        return self.victim.links

    @property
    def survivors(self) -> list[Member]:
        return [m for m in self.members if m is not self.victim]

    async def receipts_grow(self, by: int = 200) -> None:
        """Wait until the victim's partitions have ``by`` more receipts (from whoever owns
        them now)."""
        before = self.load.receipted_from(self.theirs)
        await eventually(lambda: self.load.receipted_from(self.theirs) >= before + by, timeout=60)

    async def each_resumed(self, since: float, receipts: int) -> None:
        """Wait until each of the victim's partitions has had ``receipts`` receipts since
        ``since`` (monotonic seconds)."""
        for p in sorted(self.theirs):
            await eventually(
                lambda p=p: self.load.receipted_since(p, since) >= receipts, timeout=60
            )


VictimChoice = Callable[[list[Member], list[Member]], Member]


def most_partitions(members: list[Member], owners: list[Member]) -> Member:
    """The broker owning the most partitions (``owners``: each partition's)."""
    return max(members, key=owners.count)


async def under_load(
    cluster: Cluster,
    prefix: str,
    faults: Callable[[Scene], Awaitable[None]],
    victim: VictimChoice = most_partitions,
    warm_up: int = 400,
) -> Scene:
    """Produce to a 16-partition topic through a broker that is not the victim, run
    ``faults`` once the victim's partitions have ``warm_up`` receipts, stop producing, and
    check that the audit subscription gets every receipted message."""
    members = cluster.members
    topic, owners = await spread(cluster, prefix)
    chosen = victim(members, owners)
    theirs = {p for p, owner in enumerate(owners) if owner is chosen}
    assert theirs, f"{chosen.name} owns no partition: nothing would move"
    scene = Scene(members, chosen, theirs, Load())
    via = scene.survivors[0]
    async with Client(via.service_url()) as client:
        # The audit subscription exists before the first send; it is read only at the end.
        await (
            await client.subscribe(topic.full_name, "audit", consumer_type=ConsumerType.Shared)
        ).close()
        producers = [await client.create_producer(topic.full_name) for _ in range(PRODUCERS)]
        load = scene.load
        tasks = [asyncio.create_task(produce(p, k, load)) for k, p in enumerate(producers)]
        try:
            await eventually(lambda: load.receipted_from(theirs) >= warm_up, timeout=60)
            await faults(scene)
        finally:
            load.stop.set()
            await asyncio.gather(*tasks)
        await audit(client, topic, load)
    return scene
