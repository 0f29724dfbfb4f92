"""Dispatch rules ported from Apache Pulsar's own broker tests.

- Failover on a partitioned topic (PersistentDispatcherFailoverConsumerTest): partition ``p``
  is served by consumer ``p % n`` of the ``n`` highest-priority consumers sorted by name, and
  every consumer is told (ActiveConsumerChange) whether it is the active one.
- Shared with priority levels (SimpleProducerConsumerTest's priority tests): the highest
  priority (lowest ``priority_level``) takes everything its permits allow, round robin, and a
  lower level only gets what those consumers cannot take.
- Key_Shared without keys (KeySharedSubscriptionTest's non-key tests): keyless messages are
  spread over the consumers, while keyed messages keep their per-key consumer and order.

"Nothing else arrives" is a short bounded receive (``NOTHING_MS``).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

import grpc
import pytest

from pulsar_grpc.client import Client, Consumer, Message, Timeout
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.messaging import NOTHING_MS, RECEIVE_MS, assert_nothing_more, receive_n
from tests.e2e.test_partitioned_and_dedup import create_partitioned
from tests.e2e.wire import stub
from tests.support import BrokerThread
from tests.waiting import eventually

PARTITIONS = 4
PER_PARTITION = 3


@pytest.fixture
async def client(broker: BrokerThread) -> AsyncIterator[Client]:
    async with Client(broker.service_url) as c:
        yield c


def partition_of(message: Message) -> int:
    return message.message_id().partition()


# ---------------------------------------------------------------- Failover, partitioned topic


async def produce_to_every_partition(client: Client, topic: str, tag: str) -> None:
    """``PER_PARTITION`` messages to each partition, through a producer of that partition."""
    for p in range(PARTITIONS):
        producer = await client.create_producer(f"{topic}-partition-{p}")
        for i in range(PER_PARTITION):
            await producer.send(f"{tag}-p{p}-{i}".encode())
        await producer.close()


async def expect_partitions(
    consumers: dict[str, Consumer], owners: dict[int, str], tag: str, ack: bool = True
) -> dict[str, list[Message]]:
    """Each partition's messages of round ``tag`` arrive, in order, at the consumer ``owners``
    names for it, and nowhere else. Acks them (durably) unless ``ack`` is false."""
    got: dict[str, list[Message]] = {}
    for name, consumer in consumers.items():
        mine = sorted(p for p, owner in owners.items() if owner == name)
        messages = await receive_n(consumer, PER_PARTITION * len(mine))
        by_partition = {
            p: [m.data().decode() for m in messages if partition_of(m) == p] for p in mine
        }
        assert sorted({partition_of(m) for m in messages}) == mine, (name, by_partition)
        for p in mine:
            assert by_partition[p] == [f"{tag}-p{p}-{i}" for i in range(PER_PARTITION)], name
        if ack:
            for message in messages:
                await consumer.acknowledge(message, wait=True)
        got[name] = messages
    for consumer in consumers.values():
        await assert_nothing_more(consumer)
    return got


async def test_failover_spreads_partitions_over_consumers_and_moves_them_when_one_leaves(
    client: Client, broker: BrokerThread
) -> None:
    topic = "failover-spread"
    await create_partitioned(broker.http_url, topic, PARTITIONS)

    async def join(name: str) -> Consumer:
        return await client.subscribe(
            topic, "sub", "Failover", consumer_name=name, initial_position="earliest"
        )

    # Joined out of name order on purpose: the rule sorts by name, not by arrival.
    consumers = {"b": await join("b"), "a": await join("a")}
    await produce_to_every_partition(client, topic, "r1")
    await expect_partitions(consumers, {0: "a", 1: "b", 2: "a", 3: "b"}, "r1")

    # Four consumers for four partitions: one each.
    consumers["d"] = await join("d")
    consumers["c"] = await join("c")
    await produce_to_every_partition(client, topic, "r2")
    await expect_partitions(consumers, {0: "a", 1: "b", 2: "c", 3: "d"}, "r2")

    # b leaves with partition 1's messages unacked: [a, c, d] now share the partitions
    # (p % 3), and c, the new owner of partition 1, gets what b held, then what follows.
    await produce_to_every_partition(client, topic, "r3")
    held = await expect_partitions(consumers, {0: "a", 1: "b", 2: "c", 3: "d"}, "r3", ack=False)
    for name in ("a", "c", "d"):
        for message in held[name]:
            await consumers[name].acknowledge(message, wait=True)
    await consumers.pop("b").close()
    redelivered = await receive_n(consumers["c"], PER_PARTITION)
    assert [m.data() for m in redelivered] == [m.data() for m in held["b"]]
    for message in redelivered:
        await consumers["c"].acknowledge(message, wait=True)
    await produce_to_every_partition(client, topic, "r4")
    await expect_partitions(consumers, {0: "a", 1: "c", 2: "d", 3: "a"}, "r4")


async def test_failover_partitions_go_to_the_highest_priority_consumers_only(
    client: Client, broker: BrokerThread
) -> None:
    """Pulsar spreads partitions over the consumers of the highest priority level only; a
    lower-priority consumer (even with the first name) is a standby until they are gone."""
    topic = "failover-priority"
    await create_partitioned(broker.http_url, topic, PARTITIONS)
    consumers: dict[str, Consumer] = {}
    for name, priority in (("0-standby", 1), ("b", 0), ("a", 0)):
        consumers[name] = await client.subscribe(
            topic,
            "sub",
            "Failover",
            consumer_name=name,
            priority_level=priority,
            initial_position="earliest",
        )
    await produce_to_every_partition(client, topic, "r1")
    await expect_partitions(consumers, {0: "a", 1: "b", 2: "a", 3: "b"}, "r1")

    await consumers.pop("a").close()
    await consumers.pop("b").close()
    await produce_to_every_partition(client, topic, "r2")
    await expect_partitions(consumers, dict.fromkeys(range(PARTITIONS), "0-standby"), "r2")


class RawFailoverConsumer:
    """A Failover consumer of one partition over a raw stream, recording every
    ActiveConsumerChange it is sent."""

    def __init__(self, channel: grpc.aio.Channel, topic: str, partition: int, name: str) -> None:
        self.name = name
        self.partition = partition
        self.notices: list[bool] = []
        self.call = stub(channel).Consume(
            metadata=(
                ("x-pulsar-topic", f"{topic}-partition-{partition}"),
                ("x-pulsar-subscription", "sub"),
                ("x-pulsar-subscription-type", "Failover"),
                ("x-pulsar-consumer-name", name),
            )
        )
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        first = await self.call.read()
        assert isinstance(first, pb.ConsumeResponse) and first.HasField("subscribed")
        self._task = asyncio.get_running_loop().create_task(self._pump())

    async def _pump(self) -> None:
        try:
            while (response := await self.call.read()) is not grpc.aio.EOF:
                assert isinstance(response, pb.ConsumeResponse)
                if response.HasField("active_consumer_change"):
                    self.notices.append(response.active_consumer_change.is_active)
        except (asyncio.CancelledError, grpc.aio.AioRpcError) as err:
            if isinstance(err, grpc.aio.AioRpcError) and err.code() != grpc.StatusCode.CANCELLED:
                raise

    async def close(self) -> None:
        self.call.cancel()
        if self._task is not None:
            await self._task


async def test_failover_active_change_notices_follow_the_partition_rule(
    broker: BrokerThread,
) -> None:
    """Every consumer of every partition is told whether it is active: all of them when the
    partition's active consumer changes, only the newcomer (a standby) when it does not."""
    topic = "persistent://public/default/failover-notices"
    await create_partitioned(broker.http_url, "failover-notices", PARTITIONS)
    T, F = True, False
    # After each step, the notices every (consumer, partition) stream has received so far.
    steps: list[tuple[str, str, dict[str, list[list[bool]]]]] = [
        ("join", "a", {"a": [[T], [T], [T], [T]]}),
        # [a, b]: partitions 1 and 3 move to b.
        ("join", "b", {"a": [[T], [T, F], [T], [T, F]], "b": [[F], [T], [F], [T]]}),
        # [a, b, c]: partition 2 moves to c, partition 3 back to a (3 % 3 = 0).
        (
            "join",
            "c",
            {
                "a": [[T], [T, F], [T, F], [T, F, T]],
                "b": [[F], [T], [F, F], [T, F]],
                "c": [[F], [F], [T], [F]],
            },
        ),
        # [a, b, c, d]: partition 3 moves to d.
        (
            "join",
            "d",
            {
                "a": [[T], [T, F], [T, F], [T, F, T, F]],
                "b": [[F], [T], [F, F], [T, F, F]],
                "c": [[F], [F], [T], [F, F]],
                "d": [[F], [F], [F], [T]],
            },
        ),
        # b leaves, [a, c, d]: partition 1 goes to c, 2 to d, 3 to a; partition 0 stays quiet.
        (
            "leave",
            "b",
            {
                "a": [[T], [T, F, F], [T, F, F], [T, F, T, F, T]],
                "c": [[F], [F, T], [T, F], [F, F, F]],
                "d": [[F], [F, F], [F, T], [T, F]],
            },
        ),
    ]
    streams: dict[str, list[RawFailoverConsumer]] = {}
    async with grpc.aio.insecure_channel(broker.grpc_address) as channel:
        try:
            for action, name, expected in steps:
                if action == "join":
                    streams[name] = [
                        RawFailoverConsumer(channel, topic, p, name) for p in range(PARTITIONS)
                    ]
                    for s in streams[name]:
                        await s.start()
                else:
                    for s in streams.pop(name):
                        await s.close()

                def seen() -> dict[str, list[list[bool]]]:
                    return {n: [s.notices for s in ss] for n, ss in streams.items()}

                await eventually(lambda want=expected: seen() == want, timeout=RECEIVE_MS / 1000)
                await asyncio.sleep(NOTHING_MS / 1000)  # and nothing more arrives
                assert seen() == expected, f"after {action} {name}"
        finally:
            for ss in streams.values():
                for s in ss:
                    await s.close()


# ---------------------------------------------------------------- Shared, priority levels


async def test_shared_serves_the_highest_priority_first_and_lower_only_beyond_its_permits(
    client: Client,
) -> None:
    """Two priority-0 consumers with 5 permits each and one priority-1 consumer: the first 10
    messages go round robin to the priority-0 pair, only the rest to the priority-1 one."""
    topic = "shared-priority"
    c1 = await client.subscribe(topic, "sub", "Shared", consumer_name="c1", receiver_queue_size=5)
    c2 = await client.subscribe(topic, "sub", "Shared", consumer_name="c2", receiver_queue_size=5)
    low = await client.subscribe(
        topic, "sub", "Shared", consumer_name="low", receiver_queue_size=100, priority_level=1
    )
    producer = await client.create_producer(topic, batching_max_messages=1)
    for i in range(20):
        await producer.send(f"m{i}".encode())

    # low is read first so that c1 and c2 grant no more permits meanwhile.
    assert [m.data() for m in await receive_n(low, 10)] == [f"m{i}".encode() for i in range(10, 20)]
    await assert_nothing_more(low)
    assert [m.data() for m in await receive_n(c1, 5)] == [f"m{i}".encode() for i in range(0, 10, 2)]
    assert [m.data() for m in await receive_n(c2, 5)] == [f"m{i}".encode() for i in range(1, 10, 2)]

    # With permits again, the priority-0 consumers take everything new.
    for i in range(20, 26):
        await producer.send(f"m{i}".encode())
    got = await receive_n(c1, 3) + await receive_n(c2, 3)
    assert sorted(m.data() for m in got) == sorted(f"m{i}".encode() for i in range(20, 26))
    await assert_nothing_more(low)


async def test_shared_lower_priority_takes_over_when_the_higher_ones_leave(
    client: Client,
) -> None:
    topic = "shared-priority-leave"
    high = await client.subscribe(
        topic, "sub", "Shared", consumer_name="high", initial_position="earliest"
    )
    low = await client.subscribe(topic, "sub", "Shared", consumer_name="low", priority_level=2)
    producer = await client.create_producer(topic, batching_max_messages=1)
    for i in range(10):
        await producer.send(f"m{i}".encode())
    held = await receive_n(high, 10)
    await assert_nothing_more(low)
    await high.close()  # unacked: they go to the only consumer left
    assert sorted(m.data() for m in await receive_n(low, 10)) == sorted(m.data() for m in held)


# ---------------------------------------------------------------- Key_Shared without keys


async def test_key_shared_spreads_keyless_messages_and_keeps_keyed_ones_in_order(
    client: Client,
) -> None:
    topic = "key-shared-keyless"
    consumers = [
        await client.subscribe(topic, "sub", "Key_Shared", consumer_name=f"c{i}") for i in range(2)
    ]
    producer = await client.create_producer(topic, batching_max_messages=1)
    keys = [f"k{i}" for i in range(10)]
    total = 0
    for i in range(100):
        await producer.enqueue(f"none|{i}".encode())
        key = keys[i % len(keys)]
        await producer.enqueue(f"{key}|{i}".encode(), partition_key=key)
        total += 2
    await producer.flush()

    got: dict[str, list[Message]] = {c.consumer_name(): [] for c in consumers}
    async with asyncio.timeout(RECEIVE_MS / 1000):
        while sum(map(len, got.values())) < total:
            for c in consumers:
                try:
                    got[c.consumer_name()].append(await c.receive(timeout_ms=50))
                except Timeout:
                    continue
    for c in consumers:
        await assert_nothing_more(c)

    keyless = Counter(name for name, ms in got.items() for m in ms if m.data().startswith(b"none|"))
    assert sum(keyless.values()) == 100
    assert len(keyless) == 2 and min(keyless.values()) >= 10, f"keyless spread: {keyless}"
    for key in keys:
        owners = {name for name, ms in got.items() for m in ms if m.partition_key() == key}
        assert len(owners) == 1, (key, owners)
        (owner,) = owners
        order = [int(m.data().split(b"|")[1]) for m in got[owner] if m.partition_key() == key]
        assert order == sorted(order) and len(order) == 10, (key, order)
