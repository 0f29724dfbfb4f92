"""Redelivery enforced by the broker: negative acks, ack timeout, dead-letter topic, and
redeliver-unacknowledged, observed through the SDK over real gRPC.

Timing is measured, never slept: the nack test records when each consumer received what and
compares. "Nothing else arrives" is a short bounded receive timeout, stated at each use.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from pulsar_grpc.client import (
    Client,
    ConsumerDeadLetterPolicy,
    DeadLetterPolicy,
    Message,
    MessageId,
    PulsarException,
)
from tests.e2e.messaging import (
    RECEIVE_MS,
    LivePublisher,
    assert_nothing_more,
    dead_letter_pair,
    receive_n,
)
from tests.e2e.test_authorization import http
from tests.support import BrokerThread
from tests.waiting import eventually

SLACK_S = 0.05  # scheduling slack allowed below a broker-side delay


async def test_nacked_messages_go_to_the_other_consumer_after_the_delay(
    broker: BrokerThread,
) -> None:
    """Pulsar's shape: on one Shared subscription A nacks everything, B acks everything."""
    topic = "nack-shared"
    delay_ms = 1000
    n = 10
    async with Client(broker.service_url) as client:
        a = await client.subscribe(
            topic, "sub", "Shared", consumer_name="A", negative_ack_redelivery_delay_ms=delay_ms
        )
        b = await client.subscribe(
            topic, "sub", "Shared", consumer_name="B", negative_ack_redelivery_delay_ms=delay_ms
        )
        producer = await client.create_producer(topic, batching_max_messages=1)
        ids = [await producer.send(f"n{i}".encode()) for i in range(n)]

        a_times: dict[MessageId, list[float]] = {}
        b_got: list[tuple[float, Message]] = []
        all_in_b = asyncio.Event()

        async def run_a() -> None:
            while True:
                m = await a.receive()
                a_times.setdefault(m.message_id(), []).append(time.monotonic())
                await a.negative_acknowledge(m)

        async def run_b() -> None:
            while len(b_got) < n:
                m = await b.receive()
                b_got.append((time.monotonic(), m))
                await b.acknowledge(m)
            all_in_b.set()

        tasks = [asyncio.create_task(run_a()), asyncio.create_task(run_b())]
        try:
            await asyncio.wait_for(all_in_b.wait(), 15)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        received = [m.message_id() for _, m in b_got]
        assert sorted(received) == ids, "B must get every message exactly once"
        assert a_times, "A got nothing: the Shared subscription did not spread messages"

        for t_b, m in b_got:
            seen_by_a = a_times.get(m.message_id(), [])
            # Each time A nacked it the broker redelivered it once more.
            assert m.redelivery_count() == len(seen_by_a), (m.message_id(), seen_by_a)
            if seen_by_a:
                waited = t_b - max(seen_by_a)
                assert waited >= delay_ms / 1000 - SLACK_S, (
                    f"{m.message_id()} reached B {waited:.3f}s after A nacked it"
                )

        # Redeliveries of one round (same redelivery count) reach B in message-id order.
        for count in {m.redelivery_count() for _, m in b_got if m.redelivery_count()}:
            wave = [m.message_id() for _, m in b_got if m.redelivery_count() == count]
            assert wave == sorted(wave), f"redelivery round {count} out of order: {wave}"

        # And B's own first deliveries came in publish order too.
        fresh = [m.message_id() for _, m in b_got if m.redelivery_count() == 0]
        assert fresh == sorted(fresh)


async def test_unacked_messages_come_back_after_the_ack_timeout(broker: BrokerThread) -> None:
    topic = "ack-timeout"
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(
            topic, "sub", "Shared", initial_position="Earliest", ack_timeout_ms=1000
        )
        producer = await client.create_producer(topic, batching_max_messages=1)
        ids = [await producer.send(f"t{i}".encode()) for i in range(3)]
        first = await receive_n(consumer, 3)
        got_at = time.monotonic()
        assert [m.message_id() for m in first] == ids
        assert [m.redelivery_count() for m in first] == [0, 0, 0]

        again = await receive_n(consumer, 3)
        waited = time.monotonic() - got_at
        assert [m.message_id() for m in again] == ids
        assert [m.redelivery_count() for m in again] == [1, 1, 1]
        assert waited >= 1.0 - SLACK_S, f"redelivered after {waited:.3f}s, before the timeout"

        for m in again:
            await consumer.acknowledge(m, wait=True)
        # Acked now: nothing comes back within 1.5 ack timeouts (bounded wait).
        await assert_nothing_more(consumer, 1500)


async def test_message_goes_to_dead_letter_topic_after_max_redeliveries(
    broker: BrokerThread,
) -> None:
    topic = "dlq-source"
    full = f"persistent://public/default/{topic}"
    dlq_topic = f"{full}-sub-DLQ"
    async with Client(broker.service_url) as client:
        dlq = await client.subscribe(dlq_topic, "dlq-reader", initial_position="Earliest")
        consumer = await client.subscribe(
            topic,
            "sub",
            "Shared",
            initial_position="Earliest",
            negative_ack_redelivery_delay_ms=100,
            dead_letter_policy=DeadLetterPolicy(max_redeliver_count=2),
        )
        producer = await client.create_producer(topic, batching_max_messages=1)
        msg_id = await producer.send(b"poison", properties={"k": "v"})

        counts = []
        for _ in range(3):
            m = await consumer.receive(RECEIVE_MS)
            assert m.message_id() == msg_id
            counts.append(m.redelivery_count())
            await consumer.negative_acknowledge(m)
        assert counts == [0, 1, 2]

        dead = await dlq.receive(RECEIVE_MS)
        assert dead.data() == b"poison"
        props = dead.properties()
        assert props["k"] == "v"
        assert props["REAL_TOPIC"] == full
        assert MessageId.parse(props["ORIGIN_MESSAGE_ID"]) == msg_id, props["ORIGIN_MESSAGE_ID"]
        await dlq.acknowledge(dead, wait=True)

        # Gone from the original subscription: nothing within 5 nack delays (bounded wait),
        # and not after a reconnect either.
        await assert_nothing_more(consumer, 500)
        await consumer.close()
        again = await client.subscribe(topic, "sub", "Shared", initial_position="Earliest")
        await assert_nothing_more(again, 300)
        await assert_nothing_more(dlq, 100)


async def test_the_dead_letter_initial_subscription_is_made_before_the_first_dead_letter(
    broker: BrokerThread,
) -> None:
    """pulsar-client's ConsumerDeadLetterPolicy(max_redeliver_count, dead_letter_topic,
    initial_subscription_name): the dead-letter topic gets that subscription before anything
    is written to it, so a consumer subscribing later (from latest) still gets every dead
    letter; an invalid name is refused at subscribe."""
    topic = "dlq-initial-sub"
    dlq_topic = "persistent://public/default/dlq-initial-sub-dead"
    async with Client(broker.service_url) as client:
        with pytest.raises(PulsarException, match="initial subscription"):
            await client.subscribe(
                topic,
                "sub",
                dead_letter_policy=ConsumerDeadLetterPolicy(1, dlq_topic, "pulsar.dedup"),
            )
        consumer = await client.subscribe(
            topic,
            "sub",
            "Shared",
            initial_position="Earliest",
            negative_ack_redelivery_delay_ms=100,
            dead_letter_policy=ConsumerDeadLetterPolicy(1, dlq_topic, "dlq-init"),
        )
        producer = await client.create_producer(topic, batching_max_messages=1)
        for payload in (b"poison-1", b"poison-2"):
            await producer.send(payload)
        for _ in range(4):  # each delivered twice: the second nack sends it to the DLQ
            await consumer.negative_acknowledge(await consumer.receive(RECEIVE_MS))

        async def both_written() -> bool:
            path = "/admin/v2/persistent/public/default/dlq-initial-sub-dead/stats"
            status, stats = await asyncio.to_thread(http, broker, "GET", path, None)
            return status == 200 and stats["msgInCounter"] >= 2

        await eventually(both_written, timeout=20)
        # Subscribed only now, at the default position (latest): the subscription was there
        # before the first dead letter, so it holds both.
        late = await client.subscribe(dlq_topic, "dlq-init")
        got = sorted([(await late.receive(RECEIVE_MS)).data() for _ in range(2)])
        assert got == [b"poison-1", b"poison-2"]
        await assert_nothing_more(late, 100)


async def test_redeliver_unacknowledged_messages_redelivers_everything_unacked(
    broker: BrokerThread,
) -> None:
    topic = "redeliver-unacked"
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(topic, "sub", "Shared", initial_position="Earliest")
        producer = await client.create_producer(topic, batching_max_messages=1)
        ids = [await producer.send(f"r{i}".encode()) for i in range(6)]
        first = await receive_n(consumer, 6)
        for m in first[:2]:
            await consumer.acknowledge(m, wait=True)

        await consumer.redeliver_unacknowledged_messages()
        again = await receive_n(consumer, 4)
        assert [m.message_id() for m in again] == ids[2:]
        assert [m.redelivery_count() for m in again] == [1, 1, 1, 1]
        await assert_nothing_more(consumer, 300)


async def test_dead_letter_of_a_partly_acked_batch_carries_only_the_unacked_messages(
    broker: BrokerThread,
) -> None:
    topic = "dlq-batch"
    async with Client(broker.service_url) as client:
        dlq, consumer = await dead_letter_pair(client, topic)
        producer = await client.create_producer(
            topic, batching_max_messages=3, batching_max_publish_delay_ms=10_000
        )
        futures = [await producer.enqueue(f"p{i}".encode()) for i in range(3)]
        await producer.flush()
        ids = list(await asyncio.gather(*futures))

        first = await receive_n(consumer, 3)
        await consumer.acknowledge(first[1], wait=True)
        for m in (first[0], first[2]):
            await consumer.negative_acknowledge(m)
        second = await receive_n(consumer, 2)
        assert [m.message_id() for m in second] == [ids[0], ids[2]]
        assert [m.redelivery_count() for m in second] == [1, 1]
        for m in second:
            await consumer.negative_acknowledge(m)

        dead = await receive_n(dlq, 2)
        assert [m.data() for m in dead] == [b"p0", b"p2"]
        assert [MessageId.parse(m.properties()["ORIGIN_MESSAGE_ID"]) for m in dead] == [
            ids[0],
            ids[2],
        ]
        await assert_nothing_more(dlq, 200)
        await assert_nothing_more(consumer, 300)


async def test_redeliver_unacknowledged_on_exclusive_restarts_in_order_without_duplicates(
    broker: BrokerThread,
) -> None:
    """While messages are still flowing, redeliver_unacknowledged_messages() on an Exclusive
    subscription must restart the stream at the first unacked message: the application sees
    every message once, in order (Pulsar guarantees this with the consumer epoch).

    A producer keeps publishing throughout, so the broker is dispatching when each of the
    five redelivery requests arrives."""
    topic = "redeliver-exclusive-live"
    first_five = [f"x{i}" for i in range(5)]
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(topic, "sub", "Exclusive", initial_position="Earliest")
        producer = await client.create_producer(topic, batching_max_messages=1)
        async with LivePublisher(producer) as live:
            heads = []
            for _ in range(6):
                heads.append([m.data().decode() for m in await receive_n(consumer, 5)])
                await consumer.redeliver_unacknowledged_messages()
        total = live.sent

        # After each redelivery request the stream restarts at x0.
        assert heads == [first_five] * 6, f"first five after each redelivery: {heads}"

        after: list[Message] = []
        while len({m.message_id() for m in after}) < total:
            after.append(await consumer.receive(RECEIVE_MS))
        await assert_nothing_more(consumer, 200)
        seen = [m.data().decode() for m in after]
        assert seen == [f"x{i}" for i in range(total)], f"first after redeliver: {seen[:10]}"
