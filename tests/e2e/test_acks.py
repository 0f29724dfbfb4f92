"""Acknowledgements as a user sees them: acked messages stay acked across reconnects.

Real broker, real gRPC, the SDK. "Nothing else arrives" is checked with a short bounded
receive timeout (``NOTHING_MS``): long enough for the broker to dispatch a backlog on loopback.
"""

from __future__ import annotations

import asyncio

from pulsar_grpc.client import Client, MessageId, Producer
from tests.e2e.messaging import RECEIVE_MS, assert_nothing_more, receive_n
from tests.support import BrokerThread


async def send_each_alone(producer: Producer, payloads: list[bytes]) -> list[MessageId]:
    """One entry per message (the producer must have batching_max_messages=1)."""
    return [await producer.send(p) for p in payloads]


async def send_one_batch(producer: Producer, payloads: list[bytes]) -> list[MessageId]:
    """All payloads in one batch, i.e. one entry."""
    futures = [await producer.enqueue(p) for p in payloads]
    await producer.flush()
    ids = list(await asyncio.gather(*futures))
    assert len({(i.ledger_id(), i.entry_id()) for i in ids}) == 1, f"not one entry: {ids}"
    assert [i.batch_index() for i in ids] == list(range(len(payloads)))
    return ids


async def test_individually_acked_messages_never_come_back(broker: BrokerThread) -> None:
    topic = "acks-individual"
    payloads = [f"m{i}".encode() for i in range(10)]
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(topic, "sub", initial_position="Earliest")
        producer = await client.create_producer(topic, batching_max_messages=1)
        await send_each_alone(producer, payloads)
        first = await receive_n(consumer, 10)
        assert [m.data() for m in first] == payloads
        for m in first[::2]:
            await consumer.acknowledge(m)
        await consumer.close()  # flushes the grouped acks

        again = await client.subscribe(topic, "sub", initial_position="Earliest")
        back = await receive_n(again, 5)
        assert [m.data() for m in back] == payloads[1::2]
        assert [m.message_id() for m in back] == [m.message_id() for m in first[1::2]]
        await assert_nothing_more(again)


async def test_acking_part_of_a_batch_redelivers_only_the_rest(broker: BrokerThread) -> None:
    topic = "acks-batch-indexes"
    payloads = [f"b{i}".encode() for i in range(10)]
    acked = {0, 2, 3, 7}
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(topic, "sub", initial_position="Earliest")
        producer = await client.create_producer(
            topic, batching_max_messages=10, batching_max_publish_delay_ms=10_000
        )
        ids = await send_one_batch(producer, payloads)
        first = await receive_n(consumer, 10)
        assert [m.message_id() for m in first] == ids
        for i in sorted(acked):
            await consumer.acknowledge(first[i], wait=True)
        await consumer.close()

        again = await client.subscribe(topic, "sub", initial_position="Earliest")
        rest = [i for i in range(10) if i not in acked]
        back = await receive_n(again, len(rest))
        assert [m.data() for m in back] == [payloads[i] for i in rest]
        assert [m.message_id() for m in back] == [ids[i] for i in rest]
        await assert_nothing_more(again)

        # Acking the rest completes the entry: a third consumer gets nothing.
        for m in back:
            await again.acknowledge(m, wait=True)
        await again.close()
        third = await client.subscribe(topic, "sub", initial_position="Earliest")
        await assert_nothing_more(third)


async def test_cumulative_ack_on_exclusive_acks_everything_up_to_it(broker: BrokerThread) -> None:
    topic = "acks-cumulative"
    payloads = [f"c{i}".encode() for i in range(10)]
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(topic, "sub", "Exclusive", initial_position="Earliest")
        producer = await client.create_producer(topic, batching_max_messages=1)
        await send_each_alone(producer, payloads)
        first = await receive_n(consumer, 10)
        await consumer.acknowledge_cumulative(first[5])
        await consumer.close()

        again = await client.subscribe(topic, "sub", "Exclusive", initial_position="Earliest")
        back = await receive_n(again, 4)
        assert [m.data() for m in back] == payloads[6:]
        await assert_nothing_more(again)


async def test_cumulative_ack_inside_a_batch_acks_up_to_that_index(broker: BrokerThread) -> None:
    topic = "acks-cumulative-batch"
    before = [b"x0", b"x1"]
    payloads = [f"c{i}".encode() for i in range(6)]
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(topic, "sub", "Exclusive", initial_position="Earliest")
        producer = await client.create_producer(
            topic, batching_max_messages=6, batching_max_publish_delay_ms=10_000
        )
        await send_one_batch(producer, before)
        await send_one_batch(producer, payloads)
        first = await receive_n(consumer, 8)
        await consumer.acknowledge_cumulative(first[2 + 2], wait=True)  # c2 of the 2nd batch
        await consumer.close()

        again = await client.subscribe(topic, "sub", "Exclusive", initial_position="Earliest")
        back = await receive_n(again, 3)
        assert [m.data() for m in back] == payloads[3:]
        await assert_nothing_more(again)


async def test_acknowledge_with_wait_returns_once_the_broker_recorded_it(
    broker: BrokerThread,
) -> None:
    topic = "acks-wait"
    full = f"persistent://public/default/{topic}"
    async with Client(broker.service_url) as client:
        # A huge group time: without wait=True the ack would sit in the client for a minute.
        consumer = await client.subscribe(
            topic, "sub", initial_position="Earliest", ack_group_time_ms=60_000
        )
        producer = await client.create_producer(topic, batching_max_messages=1)
        await send_each_alone(producer, [b"a", b"b", b"c"])
        msgs = await receive_n(consumer, 3)

        async def backlog() -> int:
            t = await broker.call(broker.service.get_topic(full))
            return t.stats()["subscriptions"]["sub"]["msgBacklog"]

        assert await backlog() == 3
        await consumer.acknowledge(msgs[0], wait=True)
        # No polling: the receipt means the broker's cursor already moved.
        assert await backlog() == 2
        await consumer.acknowledge(msgs[2], wait=True)
        assert await backlog() == 1

        # And it is the broker's state: a fresh consumer of the subscription sees only "b".
        await consumer.close()
        again = await client.subscribe(topic, "sub", initial_position="Earliest")
        got = await again.receive(RECEIVE_MS)
        assert got.data() == b"b"
        await assert_nothing_more(again)
