"""pulsar-client's lifecycle and id calls on a real broker (issue 26): a second close()
raises AlreadyClosed, Consumer.get_last_message_id(), Client.shutdown(), ids that round-trip
through pulsar-client's own serialization, and topic() as the full name."""

from __future__ import annotations

import asyncio
import uuid

import pulsar
import pytest

from pulsar_grpc import AlreadyClosed, Client, MessageId, OperationNotSupported, SyncClient
from tests.e2e.messaging import RECEIVE_MS, receive_n
from tests.e2e.test_partitioned_and_dedup import create_partitioned
from tests.support import BrokerThread

NS = "persistent://public/default"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def test_a_second_close_raises_already_closed(broker: BrokerThread) -> None:
    topic = unique("close-twice")
    client = Client(broker.service_url)
    producer = await client.create_producer(topic)
    consumer = await client.subscribe(topic, "sub")
    reader = await client.create_reader(topic, MessageId.earliest)
    for handle in (producer, consumer, reader):
        await handle.close()
        with pytest.raises(AlreadyClosed):
            await handle.close()
    await client.close()
    with pytest.raises(AlreadyClosed):
        await client.close()
    # Leaving `async with` after an explicit close is no second close.
    async with Client(broker.service_url) as other:
        async with await other.create_producer(topic) as p:
            await p.close()
        await other.close()


def test_a_second_close_raises_already_closed_sync(broker: BrokerThread) -> None:
    topic = unique("close-twice-sync")
    client = SyncClient(broker.service_url)
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "sub")
    reader = client.create_reader(topic, MessageId.earliest)
    for handle in (producer, consumer, reader):
        handle.close()
        with pytest.raises(AlreadyClosed):
            handle.close()
    client.close()
    with pytest.raises(AlreadyClosed):
        client.close()
    with SyncClient(broker.service_url) as other, other.subscribe(topic, "s2") as c:
        c.close()


async def test_consumer_get_last_message_id(broker: BrokerThread) -> None:
    topic = unique("last-id")
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(topic, "sub")
        assert consumer.topic() == f"{NS}/{topic}"
        assert await consumer.get_last_message_id() == MessageId.earliest  # empty
        producer = await client.create_producer(topic, batching_enabled=False)
        ids = [await producer.send(b"m%d" % i) for i in range(3)]
        last = await consumer.get_last_message_id()
        assert last == ids[-1] and isinstance(last, MessageId)
        await create_partitioned(broker.http_url, f"{topic}-p", 2)
        partitioned = await client.subscribe(f"{topic}-p", "sub")
        with pytest.raises(OperationNotSupported):
            await partitioned.get_last_message_id()
        both = await client.subscribe([topic, f"{topic}-other"], "sub2")
        with pytest.raises(OperationNotSupported):
            await both.get_last_message_id()
        await consumer.close()
        with pytest.raises(AlreadyClosed):
            await consumer.get_last_message_id()


def test_sync_consumer_get_last_message_id_and_shutdown(broker: BrokerThread) -> None:
    topic = unique("last-id-sync")
    client = SyncClient(broker.service_url)
    consumer = client.subscribe(topic, "sub")
    sent = client.create_producer(topic).send(b"x")
    assert consumer.get_last_message_id() == sent
    client.shutdown()
    with pytest.raises(AlreadyClosed):
        consumer.receive(timeout_millis=100)


async def test_shutdown_refuses_new_calls_at_once_and_closes(broker: BrokerThread) -> None:
    topic = unique("shutdown")
    client = Client(broker.service_url)
    consumer = await client.subscribe(topic, "sub")
    client.shutdown()  # not awaited, as pulsar.asyncio's
    with pytest.raises(AlreadyClosed):
        await client.create_producer(topic)
    await client.close()  # waits for the shutdown, raises nothing
    with pytest.raises(AlreadyClosed):
        await consumer.receive(timeout_ms=100)


async def test_ids_round_trip_through_pulsar_clients_serialization(broker: BrokerThread) -> None:
    """An id a pulsar-client application saved (its bytes) seeks and acks here, and the
    received message's id serializes to what pulsar-client would load."""
    topic = unique("serialized")
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(topic, "sub", initial_position="earliest")
        producer = await client.create_producer(topic, batching_max_messages=3)
        await asyncio.gather(*[producer.send(b"m%d" % i) for i in range(6)])
        got = await receive_n(consumer, 6)
        third = got[2].message_id()
        theirs = pulsar.MessageId(
            third.partition(), third.ledger_id(), third.entry_id(), third.batch_index()
        )
        saved = theirs.serialize()
        assert third.serialize() == saved
        loaded = MessageId.deserialize(saved)
        assert loaded == third
        back = pulsar.MessageId.deserialize(third.serialize())
        assert (back.ledger_id(), back.entry_id(), back.batch_index()) == (
            third.ledger_id(),
            third.entry_id(),
            third.batch_index(),
        )
        reader = await client.create_reader(topic, loaded)  # exclusive: after the third
        assert [m.data() for m in await receive_n(reader, 3)] == [b"m3", b"m4", b"m5"]
        assert reader.topic() == f"{NS}/{topic}"
        await consumer.acknowledge(loaded)
        await consumer.seek(loaded)
        msg = await consumer.receive(timeout_ms=RECEIVE_MS)
        assert msg.topic_name() == f"{NS}/{topic}"
        assert msg.ordering_key() == "" and isinstance(msg.schema_version(), str)


async def test_arguments_of_a_wrong_type_raise_value_error(broker: BrokerThread) -> None:
    """As pulsar-client's _check_type: ValueError naming the argument."""
    with pytest.raises(ValueError, match="service_url"):
        Client(42)  # type: ignore[arg-type]
    async with Client(broker.service_url) as client:
        calls = [
            (client.create_producer, (b"t",), "topic"),
            (client.create_producer, ("t", 7), "producer_name"),
            (client.subscribe, (3, "s"), "topic"),
            (client.subscribe, ("t", None), "subscription_name"),
            (client.create_reader, ("t", 5), "start_message_id"),
        ]
        for call, args, name in calls:
            with pytest.raises(ValueError, match=f"Argument {name} is expected"):
                await call(*args)
