"""Seek (by message id, by publish time) and readers (earliest, latest, a message id,
exclusive or inclusive), and that a reader leaves no durable subscription behind.

Producers use batching_max_messages=1 (one message per entry) unless a test is about entries.
"Nothing else arrives" is a short bounded receive timeout (``NOTHING_MS``).
"""

from __future__ import annotations

import asyncio
import time

from pulsar_grpc.client import Client, Message, MessageId, Producer
from tests.e2e.messaging import (
    RECEIVE_MS,
    LivePublisher,
    assert_nothing_more,
    receive_n,
)
from tests.support import BrokerThread
from tests.waiting import eventually


async def produce(client: Client, topic: str, payloads: list[bytes]) -> list[MessageId]:
    producer = await client.create_producer(topic, batching_max_messages=1)
    ids = [await producer.send(p) for p in payloads]
    await producer.close()
    return ids


def payloads(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(n)]


async def test_seek_by_message_id_delivers_the_next_message_as_pulsar(
    broker: BrokerThread,
) -> None:
    """pulsar-client's test_seek and test_seek_inclusive: seek(id) on a consumer delivers the
    message after ``id``; with start_message_id_inclusive=True, ``id`` itself."""
    topic = "seek-id"
    data = payloads("s", 10)
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(topic, "sub", initial_position="Earliest")
        inclusive = await client.subscribe(
            topic, "sub-incl", initial_position="Earliest", start_message_id_inclusive=True
        )
        ids = await produce(client, topic, data)
        for c in (consumer, inclusive):
            for m in await receive_n(c, 10):
                await c.acknowledge(m, wait=True)

        await consumer.seek(ids[4])
        again = await receive_n(consumer, 5)
        assert [m.message_id() for m in again] == ids[5:]
        assert [m.data() for m in again] == data[5:]
        await assert_nothing_more(consumer)

        await inclusive.seek(ids[4])
        again = await receive_n(inclusive, 6)
        assert [m.data() for m in again] == data[4:]
        await assert_nothing_more(inclusive)

        await consumer.seek(MessageId.earliest)
        assert [m.data() for m in await receive_n(consumer, 10)] == data


async def test_seek_by_publish_time_delivers_messages_published_at_or_after_it(
    broker: BrokerThread,
) -> None:
    topic = "seek-time"
    early, late = payloads("early", 5), payloads("late", 5)
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(topic, "sub", initial_position="Earliest")
        await produce(client, topic, early)
        first = await receive_n(consumer, 5)
        # Let the clock pass the last early publish time (a few ms at most) so every later
        # message is published strictly after the early ones.
        last_early = max(m.publish_timestamp() for m in first)
        await eventually(lambda: time.time() * 1000 >= last_early + 2)
        await produce(client, topic, late)
        second = await receive_n(consumer, 5)
        assert [m.data() for m in second] == late
        for m in first + second:
            await consumer.acknowledge(m, wait=True)

        split = min(m.publish_timestamp() for m in second)
        assert split > last_early
        await consumer.seek(split)
        again = await receive_n(consumer, 5)
        assert [m.data() for m in again] == late
        await assert_nothing_more(consumer)

        # A time before everything rewinds to the start; one after everything to the end.
        await consumer.seek(last_early - 60_000)
        assert [m.data() for m in await receive_n(consumer, 10)] == early + late
        await consumer.seek(int(time.time() * 1000) + 60_000)
        await assert_nothing_more(consumer)


async def test_reader_from_earliest_and_latest(broker: BrokerThread) -> None:
    topic = "reader-ends"
    before, after = payloads("before", 3), payloads("after", 2)
    async with Client(broker.service_url) as client:
        await produce(client, topic, before)
        from_earliest = await client.create_reader(topic, MessageId.earliest)
        from_latest = await client.create_reader(topic, "latest")
        assert [m.data() for m in await receive_n(from_earliest, 3)] == before
        await assert_nothing_more(from_latest)

        await produce(client, topic, after)
        assert [m.data() for m in await receive_n(from_latest, 2)] == after
        assert [m.data() for m in await receive_n(from_earliest, 2)] == after
        await assert_nothing_more(from_earliest, 100)
        await assert_nothing_more(from_latest, 100)


async def test_reader_from_a_message_id_is_exclusive_unless_inclusive(
    broker: BrokerThread,
) -> None:
    topic = "reader-id"
    data = payloads("r", 6)
    async with Client(broker.service_url) as client:
        ids = await produce(client, topic, data)

        exclusive = await client.create_reader(topic, ids[2])
        got = await receive_n(exclusive, 3)
        assert [m.message_id() for m in got] == ids[3:]
        await assert_nothing_more(exclusive)

        inclusive = await client.create_reader(topic, ids[2], start_message_id_inclusive=True)
        got = await receive_n(inclusive, 4)
        assert [m.message_id() for m in got] == ids[2:]
        await assert_nothing_more(inclusive)

        # The string form works as well (x-pulsar-start-message-id on the wire).
        by_text = await client.create_reader(topic, str(ids[4]), start_message_id_inclusive=True)
        assert [m.data() for m in await receive_n(by_text, 2)] == data[4:]


async def test_reader_from_an_entry_id_has_entry_granularity(broker: BrokerThread) -> None:
    """batch_index -1 names a whole entry: inclusive starts at its first message, exclusive
    at the next entry."""
    topic = "reader-entry"
    async with Client(broker.service_url) as client:
        producer = await client.create_producer(
            topic, batching_max_messages=3, batching_max_publish_delay_ms=10_000
        )
        entries: list[list[MessageId]] = []
        for e in range(3):
            futures = [await producer.enqueue(f"e{e}m{i}".encode()) for i in range(3)]
            await producer.flush()
            entries.append(list(await asyncio.gather(*futures)))
        assert len({(ids[0].ledger_id(), ids[0].entry_id()) for ids in entries}) == 3
        middle = MessageId(
            ledger_id=entries[1][0].ledger_id(), entry_id=entries[1][0].entry_id()
        )  # batch_index -1

        inclusive = await client.create_reader(topic, middle, start_message_id_inclusive=True)
        got = await receive_n(inclusive, 6)
        assert [m.message_id() for m in got] == entries[1] + entries[2]
        await assert_nothing_more(inclusive)

        exclusive = await client.create_reader(topic, middle)
        got = await receive_n(exclusive, 3)
        assert [m.message_id() for m in got] == entries[2]
        await assert_nothing_more(exclusive)


async def test_reader_from_a_batch_index_starts_inside_the_batch(broker: BrokerThread) -> None:
    """A batch message id: exclusive starts after that message, inclusive at it."""
    topic = "reader-batch-index"
    async with Client(broker.service_url) as client:
        producer = await client.create_producer(
            topic, batching_max_messages=4, batching_max_publish_delay_ms=10_000
        )
        futures = [await producer.enqueue(f"b{i}".encode()) for i in range(4)]
        await producer.flush()
        ids = list(await asyncio.gather(*futures))
        after_last = await client.create_reader(topic, ids[3])
        await assert_nothing_more(after_last)

        exclusive = await client.create_reader(topic, ids[1])
        assert [m.message_id() for m in await receive_n(exclusive, 2)] == ids[2:]
        await assert_nothing_more(exclusive)

        inclusive = await client.create_reader(topic, ids[1], start_message_id_inclusive=True)
        assert [m.message_id() for m in await receive_n(inclusive, 3)] == ids[1:]
        await assert_nothing_more(inclusive)


async def test_reader_seek_by_message_id_as_pulsar(broker: BrokerThread) -> None:
    """pulsar-client's test_seek for readers: seek(id) reads the message after ``id`` next;
    a reader made with start_message_id_inclusive=True reads ``id`` itself; has_message_available
    agrees with both."""
    topic = "reader-seek-id"
    data = payloads("q", 8)
    async with Client(broker.service_url) as client:
        ids = await produce(client, topic, data)
        reader = await client.create_reader(topic, MessageId.latest)
        await assert_nothing_more(reader)
        await reader.seek(MessageId.earliest)
        assert [m.data() for m in await receive_n(reader, 2)] == data[:2]

        await reader.seek(ids[3])
        assert [m.data() for m in await receive_n(reader, 2)] == data[4:6]
        await reader.seek(ids[7])
        assert not await reader.has_message_available()
        await assert_nothing_more(reader)

        inclusive = await client.create_reader(
            topic, MessageId.latest, start_message_id_inclusive=True
        )
        await inclusive.seek(ids[3])
        assert await inclusive.has_message_available()
        assert [m.data() for m in await receive_n(inclusive, 2)] == data[3:5]


async def test_a_seek_inside_a_batch_is_exclusive_unless_inclusive(broker: BrokerThread) -> None:
    topic = "seek-batch-index"
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(topic, "sub", initial_position="Earliest")
        inclusive = await client.subscribe(
            topic, "incl", initial_position="Earliest", start_message_id_inclusive=True
        )
        producer = await client.create_producer(
            topic, batching_max_messages=4, batching_max_publish_delay_ms=10_000
        )
        futures = [await producer.enqueue(f"b{i}".encode()) for i in range(4)]
        await producer.flush()
        ids = list(await asyncio.gather(*futures))
        for c in (consumer, inclusive):
            await receive_n(c, 4)
            await c.seek(ids[1])
        assert [m.message_id() for m in await receive_n(consumer, 2)] == ids[2:]
        await assert_nothing_more(consumer)
        assert [m.message_id() for m in await receive_n(inclusive, 3)] == ids[1:]
        await assert_nothing_more(inclusive)


async def test_a_reader_at_latest_inclusive_reads_the_last_message(broker: BrokerThread) -> None:
    """Pulsar's reader at MessageId.latest with start_message_id_inclusive=True: the last
    message first (of a batch, only its last message), then what is published after."""
    topic = "reader-latest-inclusive"
    async with Client(broker.service_url) as client:
        empty = await client.create_reader(
            "reader-latest-inclusive-empty", MessageId.latest, start_message_id_inclusive=True
        )
        assert not await empty.has_message_available()
        await assert_nothing_more(empty)

        ids = await produce(client, topic, payloads("l", 3))
        reader = await client.create_reader(
            topic, MessageId.latest, start_message_id_inclusive=True
        )
        assert await reader.has_message_available()
        got = await reader.read_next(RECEIVE_MS)
        assert (got.message_id(), got.data()) == (ids[2], b"l2")
        assert not await reader.has_message_available()
        exclusive = await client.create_reader(topic, MessageId.latest)
        await assert_nothing_more(exclusive)

        producer = await client.create_producer(
            topic, batching_max_messages=3, batching_max_publish_delay_ms=10_000
        )
        futures = [await producer.enqueue(f"b{i}".encode()) for i in range(3)]
        await producer.flush()
        batch_ids = list(await asyncio.gather(*futures))
        of_batch = await client.create_reader(
            topic, MessageId.latest, start_message_id_inclusive=True
        )
        assert [m.message_id() for m in await receive_n(of_batch, 1)] == batch_ids[2:]
        await assert_nothing_more(of_batch)
        await producer.send(b"after")
        assert (await of_batch.read_next(RECEIVE_MS)).data() == b"after"


async def test_reader_leaves_no_durable_subscription(broker: BrokerThread) -> None:
    topic = "reader-non-durable"
    full = f"persistent://public/default/{topic}"
    async with Client(broker.service_url) as client:
        await produce(client, topic, payloads("x", 3))
        reader = await client.create_reader(topic, MessageId.earliest)
        assert len(await receive_n(reader, 3)) == 3

        async def subscriptions() -> dict[str, dict[str, object]]:
            t = await broker.call(broker.service.get_topic(full))
            return t.stats()["subscriptions"]

        while_open = await subscriptions()
        assert len(while_open) == 1
        assert [s["isDurable"] for s in while_open.values()] == [False]

        # close() returns once the broker ended the stream, after it dropped the subscription.
        await reader.close()
        assert await subscriptions() == {}
        topic_obj = await broker.call(broker.service.get_topic(full))
        assert list(topic_obj.ledger.cursors) == [], "the reader left a durable cursor"

        # Nothing was retained for the reader: a new reader from latest gets nothing old,
        # and a new durable subscription starting at Latest has an empty backlog.
        consumer = await client.subscribe(topic, "durable-one")
        assert (await subscriptions())["durable-one"]["msgBacklog"] == 0
        await assert_nothing_more(consumer, 100)


async def test_reader_of_a_producer_publishing_concurrently_reads_in_order(
    broker: BrokerThread,
) -> None:
    topic = "reader-live"
    data = payloads("live", 50)
    async with Client(broker.service_url) as client:
        reader = await client.create_reader(topic, MessageId.earliest)
        producer: Producer = await client.create_producer(topic)
        futures = [await producer.enqueue(p) for p in data]
        ids = list(await asyncio.gather(*futures))
        got = await receive_n(reader, 50)
        assert [m.message_id() for m in got] == ids
        assert [m.data() for m in got] == data


async def test_seek_while_messages_flow_restarts_cleanly(broker: BrokerThread) -> None:
    """Seek while the broker is still dispatching: after seek() returns the application sees
    the stream from the target, once and in order (nothing read before the seek leaks in,
    nothing read after it is lost). A producer keeps publishing throughout."""
    topic = "seek-live"
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(topic, "sub", initial_position="Earliest")
        producer = await client.create_producer(topic, batching_max_messages=1)
        async with LivePublisher(producer) as live:
            head = await receive_n(consumer, 5)
            assert [m.data() for m in head] == [f"x{i}".encode() for i in range(5)]
            heads = []
            for _ in range(5):
                await consumer.seek(head[1].message_id())  # the one after it comes next
                heads.append([m.data().decode() for m in await receive_n(consumer, 3)])
        total = live.sent
        assert heads == [["x2", "x3", "x4"]] * 5, f"first three after each seek: {heads}"

        after: list[Message] = []
        while len({m.message_id() for m in after}) < total - 5:
            after.append(await consumer.receive(RECEIVE_MS))
        await assert_nothing_more(consumer, 200)
        assert [m.data().decode() for m in after] == [f"x{i}" for i in range(5, total)]


async def test_last_message_id_and_has_message_available(broker: BrokerThread) -> None:
    """Pulsar's getLastMessageId / hasMessageAvailable: a reader can tell when it has read
    everything without waiting on a timeout."""
    topic = "persistent://public/default/last-id"
    async with Client(broker.service_url) as client:
        producer = await client.create_producer(topic, batching_max_messages=10)
        assert await client.get_last_message_id(topic) is None
        futures = [await producer.enqueue(b"m%d" % i) for i in range(25)]
        await producer.flush()
        ids = [f.result() for f in futures]
        assert await client.get_last_message_id(topic) == ids[-1]  # (ledger, entry 2, index 4)

        reader = await client.create_reader(topic, "earliest")
        read = []
        while await reader.has_message_available():
            read.append((await reader.read_next(timeout_ms=5000)).data())
        assert read == [b"m%d" % i for i in range(25)]

        latest = await client.create_reader(topic, "latest")
        assert not await latest.has_message_available()
        await producer.send(b"new")
        assert await latest.has_message_available()
        assert (await latest.read_next(timeout_ms=5000)).data() == b"new"
        assert not await latest.has_message_available()

        from_id = await client.create_reader(topic, ids[24])
        assert await from_id.has_message_available()  # "new" comes after ids[24]
        at_last = await client.create_reader(topic, ids[-1], start_message_id_inclusive=True)
        assert await at_last.has_message_available()
