"""Subscription types, initial position and unsubscribe, end to end through the SDK.

A real broker on loopback, real gRPC, the Python SDK; Apache Pulsar is the reference for what
a user sees. "Nothing else arrives" is checked with a short bounded receive (``NOTHING_MS``):
the broker pushes whatever it has as soon as permits allow, so a message that was going to
arrive would arrive well within it on loopback.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest

from pulsar_grpc.client import (
    Client,
    Consumer,
    ConsumerBusy,
    Message,
    NotAllowed,
    Producer,
    PulsarError,
    Timeout,
)
from tests.e2e.messaging import NOTHING_MS, RECEIVE_MS, assert_nothing_more, receive_n
from tests.support import BrokerThread
from tests.waiting import eventually


@pytest.fixture
async def client(broker: BrokerThread) -> AsyncIterator[Client]:
    async with Client(broker.service_url) as c:
        yield c


async def send_all(producer: Producer, payloads: Sequence[bytes], key: str | None = None) -> None:
    futures = [await producer.enqueue(p, partition_key=key) for p in payloads]
    await asyncio.gather(*futures)


async def drain(consumers: Sequence[Consumer], total: int) -> dict[str, list[Message]]:
    """Receive from all consumers at once until ``total`` messages arrived in all, then make
    sure none has more (``NOTHING_MS``). Fails if they don't add up within ``RECEIVE_MS``."""
    got: dict[str, list[Message]] = {c.consumer_name(): [] for c in consumers}
    done = asyncio.Event()

    async def pump(consumer: Consumer) -> None:
        while not done.is_set():
            try:
                message = await consumer.receive(timeout_ms=100)
            except Timeout:
                continue
            got[consumer.consumer_name()].append(message)
            if sum(map(len, got.values())) >= total:
                done.set()

    tasks = [asyncio.create_task(pump(c)) for c in consumers]
    try:
        await asyncio.wait_for(done.wait(), RECEIVE_MS / 1000)
    except TimeoutError:
        counts = {name: len(ms) for name, ms in got.items()}
        pytest.fail(f"expected {total} messages in all, got {counts}")
    finally:
        await asyncio.gather(*tasks)
    for consumer in consumers:
        await assert_nothing_more(consumer)
    return got


async def wait_active(consumers: dict[str, Consumer], expected: dict[str, bool]) -> None:
    """Polls a client-side state the SDK updates from broker pushes (no event to await)."""

    def active_as_expected() -> None:
        actual = {n: c.is_active for n, c in consumers.items()}
        assert actual == expected, f"is_active should become {expected}, is {actual}"

    await eventually(active_as_expected, timeout=5)


def payloads(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(n)]


def data(messages: Sequence[Message]) -> list[bytes]:
    return [m.data() for m in messages]


async def subscription_stats(broker: BrokerThread, topic: str) -> dict[str, dict[str, object]]:
    assert broker.service is not None
    t = await broker.call(broker.service.get_topic(topic))
    return t.stats()["subscriptions"]  # type: ignore[return-value]


# ---------------------------------------------------------------------------- Exclusive


async def test_exclusive_second_consumer_is_busy_and_takes_over_unacked_after_close(
    client: Client,
) -> None:
    topic = "excl-takeover"
    first = await client.subscribe(
        topic, "sub", "Exclusive", consumer_name="first", initial_position="earliest"
    )
    with pytest.raises(ConsumerBusy):
        await client.subscribe(topic, "sub", "Exclusive", consumer_name="second")
    for other_type in ("Failover", "Shared", "Key_Shared"):
        with pytest.raises(ConsumerBusy):
            await client.subscribe(topic, "sub", other_type, consumer_name=f"other-{other_type}")

    producer = await client.create_producer(topic)
    await send_all(producer, payloads("m", 10))
    received = await receive_n(first, 10)
    assert data(received) == payloads("m", 10)
    for message in received[:4]:
        await first.acknowledge(message, wait=True)
    await first.close()

    # The subscription exists: its position wins over initial_position (Latest by default).
    second = await client.subscribe(topic, "sub", "Exclusive", consumer_name="second")
    assert data(await receive_n(second, 6)) == payloads("m", 10)[4:]
    await assert_nothing_more(second)


@pytest.mark.parametrize("existing", ["Shared", "Failover", "Key_Shared"])
async def test_other_type_on_subscription_with_consumers_is_consumer_busy(
    client: Client, existing: str
) -> None:
    topic = f"type-clash-{existing.lower()}"
    holder = await client.subscribe(topic, "sub", existing, consumer_name="holder")
    for other in {"Exclusive", "Shared", "Failover", "Key_Shared"} - {existing}:
        with pytest.raises(ConsumerBusy) as err:
            await client.subscribe(topic, "sub", other, consumer_name=f"c-{other}")
        assert existing in str(err.value), str(err.value)
    # The same type is welcome, and the holder was not disturbed.
    peer = await client.subscribe(topic, "sub", existing, consumer_name="peer")
    await peer.close()
    producer = await client.create_producer(topic)
    await producer.send(b"still-here")
    assert (await holder.receive(timeout_ms=RECEIVE_MS)).data() == b"still-here"


# ---------------------------------------------------------------------------- Failover


async def test_failover_active_by_priority_then_name_and_handover_keeps_order(
    client: Client,
) -> None:
    topic = "failover-handover"

    async def join(name: str, priority: int) -> Consumer:
        return await client.subscribe(
            topic,
            "sub",
            "Failover",
            consumer_name=name,
            priority_level=priority,
            initial_position="earliest",
        )

    # Joined in this order on purpose: the active one is neither the first nor the last.
    a = await join("a", 1)
    b = await join("b", 0)
    c = await join("c", 0)
    producer = await client.create_producer(topic)
    await send_all(producer, payloads("m", 20))

    received = await receive_n(b, 20)
    assert data(received) == payloads("m", 20)
    await assert_nothing_more(a)
    await assert_nothing_more(c)
    for message in received[:8]:
        await b.acknowledge(message, wait=True)
    await b.close()

    # c (priority 0) beats a (priority 1); it gets everything b left unacked, in order.
    assert data(await receive_n(c, 12)) == payloads("m", 20)[8:]
    await assert_nothing_more(c)
    await assert_nothing_more(a)
    await send_all(producer, [b"later"])
    assert (await c.receive(timeout_ms=RECEIVE_MS)).data() == b"later"
    await assert_nothing_more(a)


async def test_failover_consumers_learn_whether_they_are_active(client: Client) -> None:
    """Pulsar sends ActiveConsumerChange to every consumer that joins a Failover subscription
    (and to all of them when the active one changes), so each knows its role."""
    topic = "failover-notify"
    consumers: dict[str, Consumer] = {}
    for name, priority in (("b", 0), ("a", 1), ("c", 0)):
        consumers[name] = await client.subscribe(
            topic, "sub", "Failover", consumer_name=name, priority_level=priority
        )
    await wait_active(consumers, {"b": True, "a": False, "c": False})

    await consumers.pop("b").close()
    await wait_active(consumers, {"a": False, "c": True})

    # A consumer joining with a better name at the same priority takes over.
    consumers["0"] = await client.subscribe(
        topic, "sub", "Failover", consumer_name="0", priority_level=0
    )
    await wait_active(consumers, {"a": False, "c": False, "0": True})


# ---------------------------------------------------------------------------- Shared


async def test_shared_spreads_messages_round_robin(client: Client) -> None:
    topic = "shared-spread"
    c1 = await client.subscribe(topic, "sub", "Shared", consumer_name="c1")
    c2 = await client.subscribe(topic, "sub", "Shared", consumer_name="c2")
    producer = await client.create_producer(topic, batching_max_messages=1)
    sent = payloads("m", 1000)
    await send_all(producer, sent)

    got = await drain([c1, c2], 1000)
    n1, n2 = len(got["c1"]), len(got["c2"])
    assert n1 + n2 == 1000
    # Round robin over 1000 one-message entries: each gets a substantial share.
    assert n1 >= 300 and n2 >= 300, (n1, n2)
    everything = data(got["c1"]) + data(got["c2"])
    assert len(set(everything)) == 1000 and set(everything) == set(sent)
    # Each consumer sees its share in publish order.
    for messages in got.values():
        ids = [m.message_id() for m in messages]
        assert ids == sorted(ids)


async def test_shared_unacked_messages_of_a_closed_consumer_go_to_the_others(
    client: Client,
) -> None:
    """As in Pulsar, a consumer closing is not a redelivery the broker counts: the messages it
    held come back with redelivery_count 0, while a negative ack does count."""
    topic = "shared-close"
    c1 = await client.subscribe(topic, "sub", "Shared", consumer_name="c1")
    c2 = await client.subscribe(
        topic, "sub", "Shared", consumer_name="c2", negative_ack_redelivery_delay_ms=0
    )
    producer = await client.create_producer(topic, batching_max_messages=1)
    sent = payloads("m", 20)
    await send_all(producer, sent)

    got = await drain([c1, c2], 20)
    held_by_c1 = data(got["c1"])
    assert held_by_c1 and got["c2"], {k: len(v) for k, v in got.items()}
    for message in got["c2"]:
        await c2.acknowledge(message, wait=True)
    await c1.close()  # without acking

    redelivered = await receive_n(c2, len(held_by_c1))
    assert sorted(data(redelivered)) == sorted(held_by_c1)
    assert [m.redelivery_count() for m in redelivered] == [0] * len(redelivered)
    await assert_nothing_more(c2)

    # A negative ack is a counted redelivery.
    await c2.negative_acknowledge(redelivered[0])
    again = await c2.receive(timeout_ms=RECEIVE_MS)
    assert again.data() == redelivered[0].data()
    assert again.redelivery_count() == 1
    for message in (again, *redelivered[1:]):
        await c2.acknowledge(message, wait=True)
    await assert_nothing_more(c2)


# ---------------------------------------------------------------------------- Key_Shared


async def test_key_shared_keeps_each_key_on_one_consumer_in_order(client: Client) -> None:
    """One produce batch is one entry, and Key_Shared routes an entry by the key of its first
    message (Pulsar's key-based batching: a batch holds one key). So the producer flushes after
    each key's messages: every batch then holds a single key, as Pulsar's KEY_BASED batcher
    would make it. Several rounds over the 30 keys check that the assignment is stable."""
    topic = "key-shared"
    consumers = [
        await client.subscribe(topic, "sub", "Key_Shared", consumer_name=f"c{i}") for i in range(3)
    ]
    producer = await client.create_producer(topic)
    keys = [f"key-{k}" for k in range(30)]
    rounds, per_batch = 4, 3
    for r in range(rounds):
        for key in keys:
            for i in range(per_batch):
                await producer.enqueue(f"{key}|{r * per_batch + i}".encode(), partition_key=key)
            await producer.flush()
    total = rounds * len(keys) * per_batch

    got = await drain(consumers, total)
    owners: dict[str, set[str]] = {key: set() for key in keys}
    sequence: dict[str, list[int]] = {key: [] for key in keys}
    for name, messages in got.items():
        for message in messages:
            key, index = message.data().decode().split("|")
            assert message.partition_key() == key
            owners[key].add(name)
            sequence[key].append(int(index))
    shared_keys = {key: names for key, names in owners.items() if len(names) != 1}
    assert not shared_keys, f"keys seen by more or fewer than one consumer: {shared_keys}"
    for key in keys:
        assert sequence[key] == list(range(rounds * per_batch)), (key, sequence[key])
    # 30 keys over three hash ranges: every consumer owns some (checked for these keys).
    assert all(got[c.consumer_name()] for c in consumers), {n: len(m) for n, m in got.items()}


async def test_key_shared_newcomer_never_overtakes_unacked_messages_of_its_keys(
    client: Client,
) -> None:
    """Pulsar's recently-joined-consumer rule: c2 joins and takes half of c1's keys while c1
    still holds unacked messages of them; c2 gets no later message until c1 has acked what it
    was given before the join, so no key is ever processed out of order."""
    topic = "key-shared-join"
    c1 = await client.subscribe(topic, "sub", "Key_Shared", consumer_name="c1")
    producer = await client.create_producer(topic)
    keys = [f"key-{k}" for k in range(20)]

    async def send_round(round_: int) -> None:
        for key in keys:  # one key per batch (see the test above)
            await producer.enqueue(f"{key}|{round_}".encode(), partition_key=key)
            await producer.flush()

    await send_round(0)
    first = await receive_n(c1, len(keys))  # held, not acked yet
    c2 = await client.subscribe(topic, "sub", "Key_Shared", consumer_name="c2")
    await send_round(1)
    # c1 keeps getting round 1 for the keys it still owns; c2 must wait for c1's acks.
    c1_round1 = []
    with pytest.raises(Timeout):
        while True:
            c1_round1.append(await c1.receive(timeout_ms=NOTHING_MS))  # bounded: nothing more
    await assert_nothing_more(c2)
    moved = {m.data().decode().split("|")[0] for m in first} - {
        m.data().decode().split("|")[0] for m in c1_round1
    }
    assert moved, "the new consumer took no key: the test proves nothing"

    for message in first:
        await c1.acknowledge(message)
    c2_round1 = await receive_n(c2, len(moved))
    assert {m.data().decode() for m in c2_round1} == {f"{key}|1" for key in moved}


# ---------------------------------------------------------------------------- initial position


async def test_initial_position_earliest_latest_and_resume(client: Client) -> None:
    topic = "initial-position"
    producer = await client.create_producer(topic)
    before, after = payloads("before", 5), payloads("after", 5)
    await send_all(producer, before)

    early = await client.subscribe(topic, "early", initial_position="earliest")
    late = await client.subscribe(topic, "late", initial_position="latest")
    await send_all(producer, after)

    early_got = await receive_n(early, 10)
    assert data(early_got) == before + after
    await assert_nothing_more(early)
    assert data(await receive_n(late, 5)) == after
    await assert_nothing_more(late)

    for message in early_got[:3]:
        await early.acknowledge(message, wait=True)
    await early.close()
    await late.close()

    # Existing durable subscriptions resume where they were, whatever initial position says.
    early = await client.subscribe(topic, "early", initial_position="latest")
    assert data(await receive_n(early, 7)) == (before + after)[3:]
    await assert_nothing_more(early)
    late = await client.subscribe(topic, "late", initial_position="earliest")
    assert data(await receive_n(late, 5)) == after
    await assert_nothing_more(late)


# ---------------------------------------------------------------------------- unsubscribe


async def test_unsubscribe_deletes_the_subscription(client: Client, broker: BrokerThread) -> None:
    topic = "persistent://public/default/unsub"
    # One message per entry, so that msgBacklog (which counts entries, as Pulsar's) is messages.
    producer = await client.create_producer(topic, batching_max_messages=1)
    consumer = await client.subscribe(topic, "sub", initial_position="earliest")
    keep = await client.subscribe(topic, "keep", initial_position="earliest")
    await send_all(producer, payloads("old", 5))
    assert data(await receive_n(consumer, 5)) == payloads("old", 5)  # received, never acked
    assert set(await subscription_stats(broker, topic)) == {"sub", "keep"}

    await consumer.unsubscribe()
    assert set(await subscription_stats(broker, topic)) == {"keep"}

    # Same name, Latest: a new subscription, not the old one with its 5 unacked messages.
    fresh = await client.subscribe(topic, "sub", initial_position="latest")
    await assert_nothing_more(fresh)
    await send_all(producer, [b"new"])
    assert data(await receive_n(fresh, 1)) == [b"new"]
    await assert_nothing_more(fresh)
    stats = await subscription_stats(broker, topic)
    assert stats["sub"]["msgBacklog"] == 1
    assert stats["keep"]["msgBacklog"] == 6
    # The other subscription never noticed.
    assert data(await receive_n(keep, 6)) == [*payloads("old", 5), b"new"]


async def test_unsubscribe_shared_with_other_consumers_fails_clearly(
    client: Client, broker: BrokerThread
) -> None:
    """Pulsar refuses to unsubscribe while other consumers are connected, with an error that
    says why; the subscription and the other consumers are untouched."""
    topic = "persistent://public/default/unsub-shared"
    c1 = await client.subscribe(topic, "sub", "Shared", consumer_name="c1")
    c2 = await client.subscribe(topic, "sub", "Shared", consumer_name="c2")

    with pytest.raises(PulsarError) as err:
        await c1.unsubscribe()
    assert isinstance(err.value, NotAllowed), repr(err.value)
    assert "consumers" in str(err.value), str(err.value)

    assert "sub" in await subscription_stats(broker, topic)
    producer = await client.create_producer(topic, batching_max_messages=1)
    await send_all(producer, payloads("m", 10))
    await c1.close()  # whatever c1 held goes to c2, after c2's own share
    assert sorted(data(await receive_n(c2, 10))) == sorted(payloads("m", 10))


async def test_consumer_stays_connected_after_a_refused_unsubscribe(
    client: Client, broker: BrokerThread
) -> None:
    """In Pulsar a refused unsubscribe is a CommandError for that request only: the consumer
    that asked keeps consuming (round robin still reaches it)."""
    topic = "persistent://public/default/unsub-refused"
    c1 = await client.subscribe(topic, "sub", "Shared", consumer_name="c1")
    c2 = await client.subscribe(topic, "sub", "Shared", consumer_name="c2")
    with pytest.raises(NotAllowed):
        await c1.unsubscribe()

    producer = await client.create_producer(topic, batching_max_messages=1)
    await send_all(producer, payloads("m", 10))
    got = await drain([c1, c2], 10)
    assert got["c1"] and got["c2"], {k: len(v) for k, v in got.items()}
    stats = await subscription_stats(broker, topic)
    consumers = stats["sub"]["consumers"]
    assert {c["consumerName"] for c in consumers} == {"c1", "c2"}  # type: ignore[union-attr,index]
