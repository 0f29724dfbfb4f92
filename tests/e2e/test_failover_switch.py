"""The switch of a Failover subscription's active consumer (Pulsar's
activeConsumerFailoverDelayTimeMillis), end to end through the SDK.

When a consumer higher in the order joins, the previous active consumer may still be
acking what it holds. The broker tells both at once who is active, but redelivers what is
unacked to the new one only after the delay, so an ack receipted during the delay is never
delivered again; with a delay of 0 the new consumer is served at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pulsar_grpc.client import Client, Consumer, Producer
from tests.e2e.messaging import NOTHING_MS, RECEIVE_MS, assert_nothing_more, receive_n
from tests.support import BrokerThread
from tests.waiting import eventually

TOPIC = "failover-switch"
# Roomy: the test acks inside it, on a loaded machine.
DELAY_MS = 3000


async def one_batch_of_ten(client: Client) -> tuple[Producer, list[bytes]]:
    """Ten messages in one entry, so the ack of the first one is a batch-index ack."""
    producer = await client.create_producer(TOPIC, batching_max_publish_delay_ms=200)
    payloads = [b"m%d" % i for i in range(10)]
    for future in [await producer.enqueue(p) for p in payloads]:
        await future
    return producer, payloads


async def join(client: Client, name: str) -> Consumer:
    return await client.subscribe(
        TOPIC, "s", "Failover", consumer_name=name, initial_position="earliest"
    )


async def test_ack_receipted_during_the_delay_is_not_delivered_to_the_new_active_consumer(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    broker = broker_factory(activeConsumerFailoverDelayTimeMillis=DELAY_MS)
    async with Client(broker.service_url) as client:
        later = await join(client, "c-b")
        producer, payloads = await one_batch_of_ten(client)
        held = await later.receive(timeout_ms=RECEIVE_MS)  # c-b queued the other nine
        assert held.data() == b"m0"

        first = await join(client, "c-a")  # higher in the order: active at once
        switched_at = time.monotonic()
        await eventually(lambda: first.is_active is True and later.is_active is False)
        # Within the delay nothing goes to c-a, and c-b's SDK dropped what it had queued.
        await assert_nothing_more(first)
        await assert_nothing_more(later)
        await later.acknowledge(held, wait=True)  # receipted
        assert time.monotonic() - switched_at < DELAY_MS / 1000, "acked after the delay"

        rest = await receive_n(first, 9, timeout_ms=DELAY_MS + RECEIVE_MS)
        assert [m.data() for m in rest] == payloads[1:]
        await assert_nothing_more(first)
        await assert_nothing_more(later)
        await producer.close()


async def test_with_no_delay_the_new_active_consumer_gets_everything_unacked_at_once(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    broker = broker_factory(activeConsumerFailoverDelayTimeMillis=0)
    async with Client(broker.service_url) as client:
        later = await join(client, "c-b")
        producer, payloads = await one_batch_of_ten(client)
        assert (await later.receive(timeout_ms=RECEIVE_MS)).data() == b"m0"

        first = await join(client, "c-a")
        # Unacked, m0 goes to c-a too, well before a delay would have let it.
        again = await receive_n(first, 10, timeout_ms=NOTHING_MS)
        assert [m.data() for m in again] == payloads
        await assert_nothing_more(later)
        await producer.close()


async def test_the_delay_also_applies_when_the_active_consumer_leaves(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    """As in Pulsar, a departure waits out the delay too; what the departed consumer left
    unacked then goes to the next one, in order."""
    broker = broker_factory(activeConsumerFailoverDelayTimeMillis=DELAY_MS)
    async with Client(broker.service_url) as client:
        first = await join(client, "c-a")
        later = await join(client, "c-b")
        producer, payloads = await one_batch_of_ten(client)
        received = await receive_n(first, 10)
        for message in received[:4]:
            await first.acknowledge(message, wait=True)
        await first.close()
        await eventually(lambda: later.is_active is True)
        await assert_nothing_more(later)
        rest = await receive_n(later, 6, timeout_ms=DELAY_MS + RECEIVE_MS)
        assert [m.data() for m in rest] == payloads[4:]
        await producer.close()
