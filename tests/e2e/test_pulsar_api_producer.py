"""The producer side of pulsar-client's API against a real broker, written as a pulsar-client
user writes it: the blocking client with send / send_async(callback) / flush, the asyncio
client's awaited send, create_producer's Pulsar parameter names, and PulsarException's tree.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

import pulsar_grpc as pulsar
from pulsar_grpc.client import exceptions
from tests.e2e.messaging import receive_n
from tests.support import BrokerThread
from tests.waiting import eventually, eventually_sync


def test_blocking_send_and_send_async_with_a_callback(broker: BrokerThread) -> None:
    """pulsar-client's producer example, ported by changing the import and the URL."""
    client = pulsar.SyncClient(broker.service_url)
    producer = client.create_producer(
        "my-topic",
        producer_name="ported",
        block_if_queue_full=True,
        batching_enabled=True,
        batching_max_publish_delay_ms=10,
    )
    assert producer.producer_name() == "ported"
    assert producer.topic() == "persistent://public/default/my-topic"
    assert producer.last_sequence_id() == -1
    first = producer.send(
        b"Hello-0", properties={"a": "1"}, partition_key="k", event_timestamp=1_700_000_000_000
    )
    done = threading.Event()
    results: list[tuple[pulsar.Result, pulsar.MessageId | None]] = []

    def callback(res: pulsar.Result, msg_id: pulsar.MessageId | None) -> None:
        results.append((res, msg_id))
        if len(results) == 9:
            done.set()

    for i in range(1, 10):
        producer.send_async(f"Hello-{i}".encode(), callback)
    producer.flush()
    assert done.wait(10)
    assert [r for r, _ in results] == [pulsar.Result.Ok] * 9
    ids = [first] + [m for _, m in results if m is not None]
    assert ids == sorted(ids) and len(set(ids)) == 10
    assert producer.last_sequence_id() == 9

    assert client.get_topic_partitions("my-topic") == ["persistent://public/default/my-topic"]
    consumer = client.subscribe("my-topic", "sub", initial_position="Earliest")
    msg = consumer.receive(timeout_ms=5000)
    assert (msg.data(), msg.properties(), msg.partition_key()) == (b"Hello-0", {"a": "1"}, "k")
    assert msg.event_timestamp() == 1_700_000_000_000 and msg.message_id() == first
    client.close()


def test_a_full_queue_fails_at_once_unless_block_if_queue_full(broker: BrokerThread) -> None:
    """Pulsar's default block_if_queue_full=False: the send beyond max_pending_messages gets
    ProducerQueueIsFull at once (send raises it, send_async's callback gets its Result);
    with True, send_async blocks the caller until a receipt makes room."""
    with pulsar.SyncClient(broker.service_url) as client:
        producer = client.create_producer(
            "full", max_pending_messages=2, batching_max_publish_delay_ms=60_000
        )
        results: list[pulsar.Result] = []
        for i in range(3):
            producer.send_async(b"m%d" % i, lambda res, _id: results.append(res))
        with pytest.raises(pulsar.ProducerQueueIsFull) as info:
            producer.send(b"one too many")
        assert isinstance(info.value, pulsar.PulsarException)
        assert results == [pulsar.Result.ProducerQueueIsFull]  # at once: nothing was sent yet
        producer.flush()
        assert sorted(results) == sorted(
            [pulsar.Result.ProducerQueueIsFull, *[pulsar.Result.Ok] * 2]
        )

        blocking = client.create_producer(
            "full", max_pending_messages=1, block_if_queue_full=True, batching_enabled=False
        )
        ids: list[pulsar.MessageId | None] = []
        for i in range(20):  # each call waits for the previous receipt
            blocking.send_async(b"b%d" % i, lambda res, msg_id: ids.append(msg_id))
        blocking.flush()
        eventually_sync(lambda: len(ids) == 20)
        assert None not in ids
        entries = [(i.ledger_id(), i.entry_id()) for i in ids if i is not None]
        assert entries == sorted(entries) and len(set(entries)) == 20  # batching disabled


async def test_asyncio_send_with_pulsar_keywords(broker: BrokerThread) -> None:
    async with pulsar.Client(broker.service_url) as client:
        consumer = await client.subscribe("kw", "sub", "Key_Shared", initial_position="Earliest")
        producer = await client.create_producer(
            "kw",
            send_timeout_millis=10_000,
            compression_type=pulsar.CompressionType.ZSTD,
            batching_max_messages=10,
            batching_max_allowed_size_in_bytes=64 * 1024,
            batching_type=pulsar.BatchingType.KeyBased,
        )
        msg_id = await producer.send(
            b"payload",
            properties={"p": "v"},
            partition_key="pk",
            ordering_key="ok",
            event_timestamp=42,
        )
        (msg,) = await receive_n(consumer, 1)
        assert msg.message_id() == msg_id
        assert (msg.partition_key(), msg.ordering_key(), msg.event_timestamp()) == ("pk", "ok", 42)
        assert msg.properties() == {"p": "v"} and msg.producer_name() == producer.producer_name()
        assert producer.is_connected()
        await producer.close()
        assert not producer.is_connected()
        with pytest.raises(pulsar.AlreadyClosed):
            await producer.send(b"late")
        calls: list[pulsar.Result] = []
        producer.send_async(b"late", lambda res, _id: calls.append(res))
        await eventually(lambda: calls == [pulsar.Result.AlreadyClosed])


async def test_a_producer_without_a_schema_refuses_text_as_pulsar_clients_bytes_schema(
    broker: BrokerThread,
) -> None:
    """pulsar-client's producer without a schema is a BytesSchema one: ``send("text")`` raises
    its TypeError naming the type it got and the type it wants, by every way of sending,
    and nothing reaches the topic."""
    wording = "Invalid record obj of type <class 'str'> - expected type is <class 'bytes'>"
    async with pulsar.Client(broker.service_url) as client:
        consumer = await client.subscribe("untyped", "sub", initial_position="Earliest")
        producer = await client.create_producer("untyped")
        with pytest.raises(TypeError, match=wording):
            await producer.send("text")
        with pytest.raises(TypeError, match=wording):
            await producer.enqueue("text")
        with pytest.raises(TypeError, match=wording):
            producer.send_async("text", lambda res, _id: None)
        await producer.send(b"bytes")
        (msg,) = await receive_n(consumer, 1)
        assert msg.data() == b"bytes"


async def test_custom_sequence_ids_deduplicate(broker_factory: Callable[..., BrokerThread]) -> None:
    """sequence_id= with deduplication on: a resend under the same name and ids is dropped
    (its ids are -1), and last_sequence_id() says where the producer stands."""
    broker = broker_factory(brokerDeduplicationEnabled=True)
    async with pulsar.Client(broker.service_url) as client:
        producer = await client.create_producer("dedup-ids", "app-1", batching_enabled=False)
        stored = [await producer.send(b"m%d" % i, sequence_id=10 + i) for i in range(3)]
        assert all(i.ledger_id() >= 0 for i in stored) and producer.last_sequence_id() == 12
        await producer.close()
        again = await client.create_producer("dedup-ids", "app-1", batching_enabled=False)
        assert again.last_sequence_id() == 12
        assert await again.send(b"m1", sequence_id=11) == pulsar.MessageId(-1, -1, -1, -1)
        assert (await again.send(b"m3", sequence_id=13)).ledger_id() >= 0


async def test_broker_errors_arrive_as_pulsar_client_exceptions(broker: BrokerThread) -> None:
    async with pulsar.Client(broker.service_url) as client:
        await client.create_producer("busy", "only-one")
        with pytest.raises(exceptions.ProducerBusy) as busy:
            await client.create_producer("busy", "only-one")
        assert busy.value.result() is pulsar.Result.ProducerBusy
        with pytest.raises(pulsar.InvalidTopicName):
            await client.create_producer("persistent://a/b/c/d/e")
        with pytest.raises(pulsar.PulsarException):  # the base catches them all
            await client.create_producer("busy", "only-one")


async def test_a_message_router_chooses_each_messages_partition(broker: BrokerThread) -> None:
    """pulsar-client's custom router: called with the outgoing message and the partition count
    for every send (keyed or not, send, send_async), its answer is the partition; an index the
    topic does not have is refused."""
    topic = "persistent://public/default/routed"
    await broker.call(broker.service.resources.create_partitioned_topic(topic, 3))
    asked: list[tuple[str, int]] = []

    def by_property(message: Any, num_partitions: int) -> int:
        asked.append((message.partition_key(), num_partitions))
        return int(message.properties()["to"])

    async with pulsar.Client(broker.service_url) as client:
        consumer = await client.subscribe(topic, "s", initial_position="Earliest")
        producer = await client.create_producer(topic, message_router=by_property)
        for i, to in enumerate([2, 0, 2, 1]):
            await producer.send(f"m{i}".encode(), properties={"to": str(to)}, partition_key="k")
        done: list[object] = []
        producer.send_async(b"m4", lambda result, _: done.append(result), properties={"to": "1"})
        await producer.flush()
        await eventually(lambda: done == [pulsar.Result.Ok])
        got = {m.data(): m.message_id().partition() for m in await receive_n(consumer, 5)}
        assert got == {b"m0": 2, b"m1": 0, b"m2": 2, b"m3": 1, b"m4": 1}
        assert asked[:4] == [("k", 3)] * 4
        with pytest.raises(ValueError, match="message_router returned 3"):
            await producer.send(b"nowhere", properties={"to": "3"})
        with pytest.raises(ValueError, match="message_router must be a function"):
            await client.create_producer(topic, message_router="by_property")  # type: ignore[arg-type]


async def test_producer_and_consumer_properties_show_in_the_topics_stats(
    broker: BrokerThread,
) -> None:
    """pulsar-client's ``properties=`` of create_producer and subscribe: the broker keeps them
    as Pulsar's metadata and shows them in the stats; a value that is not a string is refused
    before any call, as pulsar-client refuses it."""
    topic = "persistent://public/default/with-properties"
    async with pulsar.Client(broker.service_url) as client:
        await client.create_producer(topic, properties={"app": "orders", "ver": "2"})
        await client.subscribe(topic, "s", properties={"team": "billing"})
        assert broker.service is not None
        stats = (await broker.call(broker.service.topics.get_topic(topic))).stats()
        (publisher,) = stats["publishers"]
        assert publisher["metadata"] == {"app": "orders", "ver": "2"}
        (consumer,) = stats["subscriptions"]["s"]["consumers"]
        assert consumer["metadata"] == {"team": "billing"}
        with pytest.raises(ValueError, match="properties must be a dict of str to str"):
            await client.create_producer(topic, properties={"n": 1})  # type: ignore[dict-item]
