"""The retry letter topic (Java's ``retryEnable`` and ``reconsumeLater``): a consumer with
``retry_enable=True`` also subscribes to ``<topic>-<subscription>-RETRY``; reconsuming a
message publishes a copy there with Pulsar's properties (RECONSUMETIMES, DELAY_TIME,
REAL_TOPIC, ORIGIN_MESSAGE_ID, the original's properties and key) and the delivery time in
the request's ``deliver_at_time``, and acks the original; past ``max_redeliver_count``
reconsumes the copy goes to the dead-letter topic instead.

Real broker, real gRPC. That the broker holds a copy until its time is delayed delivery's
to test (another part of issue 28); here the copy's ``deliver_at_time`` is read as stored.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from pulsar_grpc.client import Client, Consumer, DeadLetterPolicy, InvalidConfiguration, SyncClient
from tests.e2e.messaging import RECEIVE_MS
from tests.e2e.test_ack_correctness import OpenConsumer, consumer_on, service_stats
from tests.support import BrokerThread

__all__ = ["consumer_on"]  # the fixture, imported for this module's tests

PREFIX = "persistent://public/default/"


async def _retrying(client: Client, topic: str, max_reconsumes: int) -> Consumer:
    """A Shared consumer of subscription "sub" with its retry letter topic."""
    return await client.subscribe(
        topic,
        "sub",
        "Shared",
        initial_position="Earliest",
        retry_enable=True,
        dead_letter_policy=DeadLetterPolicy(max_redeliver_count=max_reconsumes),
    )


async def test_reconsumed_copies_carry_pulsars_properties_and_counts(
    broker: BrokerThread,
) -> None:
    topic = "retry-props"
    async with Client(broker.service_url) as client:
        consumer = await _retrying(client, topic, max_reconsumes=3)
        producer = await client.create_producer(topic)
        origin_id = await producer.send(b"job", {"app": "orders"}, partition_key="k1")
        original = await consumer.receive(RECEIVE_MS)
        await consumer.reconsume_later(original, timedelta(milliseconds=500))
        first = await consumer.receive(RECEIVE_MS)
        await consumer.reconsume_later(first, 200, properties={"attempt": "second"})
        second = await consumer.receive(RECEIVE_MS)
        await consumer.acknowledge(second, wait=True)

        assert first.topic_name() == f"{PREFIX}{topic}-sub-RETRY"
        assert (first.data(), first.partition_key()) == (b"job", "k1")
        assert first.properties() == {
            "app": "orders",
            "REAL_TOPIC": f"{PREFIX}{topic}",
            "ORIGIN_MESSAGE_ID": str(origin_id),
            "RECONSUMETIMES": "1",
            "DELAY_TIME": "500",
        }
        assert second.properties() == {
            **first.properties(),
            "attempt": "second",
            "RECONSUMETIMES": "2",
            "DELAY_TIME": "200",
        }
        # Each reconsumed message was acked: nothing is left in either topic.
        assert service_stats(broker, topic)["msgBacklog"] == 0
        assert service_stats(broker, f"{topic}-sub-RETRY")["msgBacklog"] == 0


async def test_the_copy_carries_its_delivery_time(
    broker: BrokerThread, consumer_on: OpenConsumer
) -> None:
    """ProduceRequest.deliver_at_time (field 16), as stored and delivered: now + the delay.
    Read by an Exclusive raw consumer, which Pulsar's delayed delivery never holds back."""
    topic = "retry-deliver-at"
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(
            topic, "sub", initial_position="Earliest", retry_enable=True
        )
        await (await client.create_producer(topic)).send(b"later")
        before_ms = time.time_ns() // 1_000_000
        await consumer.reconsume_later(await consumer.receive(RECEIVE_MS), timedelta(minutes=1))
        after_ms = time.time_ns() // 1_000_000
    raw = await consumer_on(f"{topic}-sub-RETRY")
    await raw.flow(1)
    [entry] = await raw.entries(1)
    assert before_ms + 60_000 <= entry.deliver_at_time <= after_ms + 60_000


async def test_past_max_reconsumes_the_message_goes_to_the_dead_letter_topic(
    broker: BrokerThread,
) -> None:
    topic = "retry-dlq"
    async with Client(broker.service_url) as client:
        dlq = await client.subscribe(f"{topic}-sub-DLQ", "audit", initial_position="Earliest")
        consumer = await _retrying(client, topic, max_reconsumes=2)
        await (await client.create_producer(topic)).send(b"poison")
        for _ in range(3):  # reconsumes 1 and 2 go to the retry topic, the third is dead
            await consumer.reconsume_later(await consumer.receive(RECEIVE_MS), 0)
        dead = await dlq.receive(RECEIVE_MS)
        assert dead.data() == b"poison"
        assert dead.properties()["RECONSUMETIMES"] == "3"
        assert dead.properties()["REAL_TOPIC"] == f"{PREFIX}{topic}"
        assert service_stats(broker, f"{topic}-sub-RETRY")["msgBacklog"] == 0


def test_blocking_client_reconsumes_and_refuses_without_retry_enable(
    broker: BrokerThread,
) -> None:
    topic = "retry-sync"
    with SyncClient(broker.service_url) as client:
        plain = client.subscribe(topic, "plain", initial_position="Earliest")
        consumer = client.subscribe(
            topic,
            "sub",
            initial_position="Earliest",
            retry_enable=True,
            dead_letter_policy=DeadLetterPolicy(
                max_redeliver_count=5, retry_letter_topic=f"{topic}-retries"
            ),
        )
        client.create_producer(topic).send(b"job")
        with pytest.raises(InvalidConfiguration, match="retry_enable=True"):
            plain.reconsume_later(plain.receive(RECEIVE_MS), 10)
        consumer.reconsume_later(consumer.receive(RECEIVE_MS), 10)
        again = consumer.receive(RECEIVE_MS)
        assert again.topic_name() == f"{PREFIX}{topic}-retries"
        assert again.properties()["RECONSUMETIMES"] == "1"
        consumer.acknowledge(again)
