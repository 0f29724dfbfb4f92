"""The consumer side of Pulsar's Python API, exercised as a ``pulsar-client`` user writes it.

Real broker, real gRPC, the SDK: ``subscribe`` to a topic, a list of topics or a pattern with
``consumer_type=`` and pulsar-client's option names, ``receive(timeout_millis=)``,
``batch_receive``, ``Message.value()``/``data()`` as methods, acks of a message, an id or a
list of ids, a ``message_listener`` with pause/resume, ``seek`` of one partition, zero-queue
consumers, ``create_reader``/``read_next``, and consumers the application drops.
"""

from __future__ import annotations

import asyncio
import gc
import os
import re
import subprocess
import sys
import textwrap
import threading
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from pulsar_grpc import (
    Client,
    ConsumerBatchReceivePolicy,
    ConsumerType,
    InitialPosition,
    InvalidConfiguration,
    MessageId,
    SyncClient,
    Timeout,
    TopicMessageId,
    TopicNotFound,
)
from pulsargrpc.v1 import pulsar_pb2 as pb
from pulsargrpc.v1 import pulsar_pb2_grpc as pb_grpc
from tests.e2e.messaging import RECEIVE_MS, assert_nothing_more, receive_n
from tests.support import BrokerThread
from tests.waiting import eventually, eventually_sync

ROOT = Path(__file__).resolve().parents[2]
NS = "persistent://public/default"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_message_accessors_are_methods_as_in_pulsar_client(broker: BrokerThread) -> None:
    topic = unique("api-message")
    with SyncClient(broker.service_url) as client:
        consumer = client.subscribe(
            topic,
            "sub",
            consumer_type=ConsumerType.Shared,
            initial_position=InitialPosition.Earliest,
        )
        producer = client.create_producer(topic)
        producer.send(b"hello", properties={"k": "v"})
        msg = consumer.receive(timeout_millis=RECEIVE_MS)
        assert msg.value() == msg.data() == b"hello"
        assert msg.properties() == {"k": "v"}
        assert msg.topic_name() == f"{NS}/{topic}"
        assert msg.redelivery_count() == 0
        assert msg.publish_timestamp() > 0
        assert isinstance(msg.message_id(), MessageId)
        consumer.acknowledge(msg)
        assert (consumer.topic(), consumer.subscription_name()) == (f"{NS}/{topic}", "sub")
        assert (msg.ordering_key(), msg.schema_version(), msg.has_null_value()) == ("", "", False)
        assert consumer.get_last_message_id() == msg.message_id()
        assert consumer.consumer_name()
        with pytest.raises(Timeout):
            consumer.receive(timeout_millis=100)


async def test_batch_receive_follows_the_policy_and_a_list_of_ids_is_acked(
    broker: BrokerThread,
) -> None:
    topic = unique("api-batch-receive")
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(
            topic,
            "sub",
            initial_position=InitialPosition.Earliest,
            batch_receive_policy=ConsumerBatchReceivePolicy(5, -1, 300),
        )
        producer = await client.create_producer(topic)
        for i in range(7):
            await producer.send(f"m{i}".encode())
        await eventually(lambda: consumer.queued() == 7)
        first = await consumer.batch_receive()  # the count limit
        second = await consumer.batch_receive()  # the timeout, with what is left
        assert [m.data() for m in first + second] == [f"m{i}".encode() for i in range(7)]
        assert (len(first), len(second)) == (5, 2)
        assert await consumer.batch_receive() == []  # nothing within the timeout
        await consumer.acknowledge([m.message_id() for m in first + second])
        await consumer.close()

        by_bytes = await client.subscribe(
            topic,
            "bytes",
            initial_position=InitialPosition.Earliest,
            batch_receive_policy=ConsumerBatchReceivePolicy(-1, 5, 1000),
        )
        await eventually(lambda: by_bytes.queued() == 7)
        assert [m.data() for m in await by_bytes.batch_receive()] == [b"m0", b"m1"]  # 4 + 2 > 5

        again = await client.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
        await assert_nothing_more(again)


async def test_multi_topic_consumer_routes_acks_and_nacks_to_each_topic(
    broker: BrokerThread,
) -> None:
    a, b = unique("api-multi-a"), unique("api-multi-b")
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(
            [a, b, f"{NS}/{a}"],  # a topic named twice is subscribed once
            "sub",
            consumer_type=ConsumerType.Shared,
            initial_position=InitialPosition.Earliest,
            negative_ack_redelivery_delay_ms=100,
        )
        for topic in (a, b):
            producer = await client.create_producer(topic)
            for i in range(2):
                await producer.send(f"{topic}/{i}".encode())
        got = await receive_n(consumer, 4)
        # Each message says where it came from, and so does its id.
        for msg in got:
            assert msg.data().decode().startswith(msg.topic_name().removeprefix(f"{NS}/"))
            message_id = msg.message_id()
            assert isinstance(message_id, TopicMessageId)
            assert message_id.topic_name() == msg.topic_name()
        retry = next(m for m in got if m.data() == f"{b}/1".encode())
        for msg in got:
            if msg is not retry:
                await consumer.acknowledge(msg.message_id())
        await consumer.negative_acknowledge(retry)
        back = await consumer.receive(timeout_millis=RECEIVE_MS)
        assert (back.data(), back.topic_name(), back.redelivery_count()) == (
            f"{b}/1".encode(),
            f"{NS}/{b}",
            1,
        )
        with pytest.raises(ValueError, match="multi-topic"):
            await consumer.acknowledge(
                MessageId(ledger_id=0, entry_id=0)
            )  # an id that names no topic
        await consumer.acknowledge(back)
        await consumer.close()
        again = await client.subscribe([a, b], "sub", initial_position=InitialPosition.Earliest)
        await assert_nothing_more(again)


async def test_multi_topic_consumer_goes_on_when_one_topic_is_deleted(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    """As Pulsar's multi-topics consumer: a topic deleted under it (not created again, as
    auto-creation is off) is dropped; receiving from the other topics goes on."""
    broker = broker_factory(allowAutoTopicCreation=False)
    a, b = unique("api-deleted-a"), unique("api-deleted-b")
    for topic in (a, b):
        await broker.call(broker.service.topics.get_topic(f"{NS}/{topic}", explicit=True))
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe([a, b], "sub")
        await broker.call(broker.service.topics.delete_topic(f"{NS}/{a}"))
        await eventually(lambda: consumer.is_connected() and len(consumer.subscribed_topics()) == 1)
        producer = await client.create_producer(b)
        await producer.send(b"still here")
        msg = await consumer.receive(timeout_millis=RECEIVE_MS)
        assert (msg.data(), msg.topic_name()) == (b"still here", f"{NS}/{b}")


async def test_pattern_consumer_subscribes_to_topics_created_later(broker: BrokerThread) -> None:
    prefix = unique("api-pattern")
    async with Client(broker.service_url) as client:
        await (await client.create_producer(f"{prefix}-one")).send(b"one")
        await (await client.create_producer(f"other-{prefix}")).send(b"no match")
        consumer = await client.subscribe(
            re.compile(f"{NS}/{prefix}-.*"),
            "sub",
            initial_position=InitialPosition.Earliest,
            pattern_auto_discovery_period=1,
        )
        first = await consumer.receive(timeout_millis=RECEIVE_MS)
        assert (first.data(), first.topic_name()) == (b"one", f"{NS}/{prefix}-one")

        # A partitioned topic created after subscribing: found at the next check, every
        # partition subscribed, acks go to the partition each message came from.
        two = f"{prefix}-two"
        await broker.call(broker.service.resources.create_partitioned_topic(f"{NS}/{two}", 2))
        for p in range(2):
            await (await client.create_producer(f"{two}-partition-{p}")).send(f"p{p}".encode())
        later = await receive_n(consumer, 2, timeout_ms=10_000)
        assert sorted((m.data(), m.topic_name()) for m in later) == [
            (b"p0", f"{NS}/{two}-partition-0"),
            (b"p1", f"{NS}/{two}-partition-1"),
        ]
        await consumer.acknowledge([first.message_id()] + [m.message_id() for m in later])
        await assert_nothing_more(consumer)  # the topic that does not match stays unread
        await consumer.close()

        again = await client.subscribe(
            re.compile(f"{NS}/{prefix}-.*"), "sub", initial_position=InitialPosition.Earliest
        )
        await assert_nothing_more(again)


async def test_topics_of_namespace_are_listed_over_grpc(broker: BrokerThread) -> None:
    topic = unique("api-listed")
    async with Client(broker.service_url) as client:
        await (await client.create_producer(topic)).send(b"x")
        assert f"{NS}/{topic}" in await client.get_topics_of_namespace("public/default")
        with pytest.raises(TopicNotFound):
            await client.get_topics_of_namespace("public/no-such-namespace")


@pytest.mark.parametrize("namespace", ["", "public", "a/b/c", "pub lic/x"])
async def test_listing_a_malformed_namespace_is_invalid_argument(
    channel: grpc.aio.Channel, namespace: str
) -> None:
    request = pb.GetTopicsOfNamespaceRequest(namespace=namespace)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await pb_grpc.PulsarServiceStub(channel).GetTopicsOfNamespace(request, timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "namespace" in (err.value.details() or "")


async def test_an_undecodable_listing_request_is_invalid_argument(
    channel: grpc.aio.Channel,
) -> None:
    rpc = channel.unary_unary(
        "/pulsargrpc.v1.PulsarService/GetTopicsOfNamespace",
        request_serializer=bytes,
        response_deserializer=bytes,
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await rpc(b"\xff\xff\xff", timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_seek_to_a_message_of_one_partition_moves_only_that_partition(
    broker: BrokerThread,
) -> None:
    topic = unique("api-seek-one-of-two")
    await broker.call(broker.service.resources.create_partitioned_topic(f"{NS}/{topic}", 2))
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
        for p in range(2):
            producer = await client.create_producer(f"{topic}-partition-{p}")
            for i in range(3):
                await producer.send(f"p{p}-{i}".encode())
        got = await receive_n(consumer, 6)
        await consumer.acknowledge([m.message_id() for m in got], wait=True)
        start = next(m for m in got if m.data() == b"p0-0")
        assert start.message_id().partition() == 0
        await consumer.seek(start.message_id())  # the message after it comes next
        again = await receive_n(consumer, 2)
        assert [m.data() for m in again] == [b"p0-1", b"p0-2"]
        await assert_nothing_more(consumer)  # partition 1 stayed where it was


def test_a_reader_listener_gets_every_message_in_order_until_the_reader_closes(
    broker: BrokerThread,
) -> None:
    """pulsar-client's create_reader(reader_listener=): called with (reader, message) on the
    client's listener thread, in order; one that raises is logged and the next one comes."""
    topic = unique("api-reader-listener")
    seen: list[bytes] = []
    threads: set[str] = set()

    def listener(reader, msg):
        threads.add(threading.current_thread().name)
        seen.append(msg.data())
        assert reader.topic() == f"{NS}/{topic}"
        if msg.data() == b"m1":
            raise RuntimeError("the application's own failure")

    with SyncClient(broker.service_url) as client:
        producer = client.create_producer(topic)
        producer.send(b"m0")
        reader = client.create_reader(topic, MessageId.earliest, reader_listener=listener)
        for i in range(1, 4):
            producer.send(f"m{i}".encode())
        eventually_sync(lambda: seen == [b"m0", b"m1", b"m2", b"m3"])
        assert threads and threading.current_thread().name not in threads
        reader.close()
        producer.send(b"after-close")
        with pytest.raises(AssertionError):  # closed: not called again, however long we wait
            eventually_sync(lambda: len(seen) > 4, timeout=0.5)


def test_message_listener_is_called_and_can_be_paused(broker: BrokerThread) -> None:
    topic = unique("api-listener")
    received: list[bytes] = []
    threads: set[str] = set()

    def listener(consumer, msg):  # as pulsar-client users write it: untyped
        threads.add(threading.current_thread().name)
        received.append(msg.data())
        consumer.acknowledge(msg)

    with SyncClient(broker.service_url) as client:
        consumer = client.subscribe(
            topic, "sub", message_listener=listener, initial_position=InitialPosition.Earliest
        )
        with pytest.raises(InvalidConfiguration):
            consumer.receive(timeout_millis=10)
        producer = client.create_producer(topic)
        producer.send(b"m0")
        eventually_sync(lambda: received == [b"m0"])
        consumer.pause_message_listener()
        producer.send(b"m1")
        with pytest.raises(AssertionError):  # paused: not called, however long we wait
            eventually_sync(lambda: len(received) > 1, timeout=0.5)
        consumer.resume_message_listener()
        eventually_sync(lambda: received == [b"m0", b"m1"])
        assert threads and threading.current_thread().name not in threads
        consumer.close()
        again = client.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
        with pytest.raises(Timeout):  # the listener's acks stuck
            again.receive(timeout_millis=400)


async def test_async_listener_gets_every_message_in_order(broker: BrokerThread) -> None:
    topic = unique("api-async-listener")
    received: list[bytes] = []

    async def listener(consumer, msg):
        received.append(msg.data())
        await consumer.acknowledge(msg)

    async with Client(broker.service_url) as client:
        await client.subscribe(topic, "sub", message_listener=listener)
        producer = await client.create_producer(topic)
        for i in range(20):
            await producer.send(f"m{i}".encode())
        await eventually(lambda: received == [f"m{i}".encode() for i in range(20)])


async def test_zero_queue_consumer_prefetches_nothing(broker: BrokerThread) -> None:
    """Shared: a zero-queue consumer takes one message per receive(); the rest stay with
    the broker for the subscription's other consumer instead of waiting in its queue."""
    topic = unique("api-zero-queue")
    async with Client(broker.service_url) as client:
        zero = await client.subscribe(
            topic,
            "sub",
            ConsumerType.Shared,
            receiver_queue_size=0,
            initial_position=InitialPosition.Earliest,
        )
        producer = await client.create_producer(topic)
        for i in range(4):
            await producer.send(f"m{i}".encode())
        first = await asyncio.wait_for(zero.receive(), RECEIVE_MS / 1000)
        assert first.data() == b"m0" and zero.queued() == 0
        other = await client.subscribe(topic, "sub", ConsumerType.Shared)
        rest = await receive_n(other, 3)
        assert [m.data() for m in rest] == [b"m1", b"m2", b"m3"]
        with pytest.raises(InvalidConfiguration):
            await zero.receive(timeout_millis=100)  # as Pulsar's: no timeout without a queue
        partitioned = unique("api-zero-partitioned")
        resources = broker.service.resources
        await broker.call(resources.create_partitioned_topic(f"{NS}/{partitioned}", 2))
        with pytest.raises(InvalidConfiguration):
            await client.subscribe(partitioned, "sub", receiver_queue_size=0)


@pytest.mark.parametrize("name", ["", "  "])
def test_a_blank_subscription_name_is_refused_as_pulsars(broker: BrokerThread, name: str) -> None:
    """As Pulsar's client (InvalidConfiguration "Empty subscription name"), before any call:
    not an UnknownError from the broker's answer to a call without the parameter."""
    with SyncClient(broker.service_url) as client:
        with pytest.raises(InvalidConfiguration, match="Empty subscription name"):
            client.subscribe(unique("api-blank-sub"), name)


async def test_zero_queue_consumer_feeds_a_listener_one_message_at_a_time(
    broker: BrokerThread,
) -> None:
    """As Pulsar's ZeroQueueConsumerImpl: a listener works without a queue; while it handles
    a message the broker holds the next one for the subscription's other consumers."""
    topic = unique("api-zero-listener")
    received: list[bytes] = []
    release = asyncio.Event()

    async def listener(consumer, msg):
        received.append(msg.data())
        await consumer.acknowledge(msg)
        await release.wait()  # busy with the first message

    async with Client(broker.service_url) as client:
        await client.subscribe(
            topic,
            "sub",
            ConsumerType.Shared,
            receiver_queue_size=0,
            message_listener=listener,
            initial_position=InitialPosition.Earliest,
        )
        producer = await client.create_producer(topic)
        for i in range(3):
            await producer.send(f"m{i}".encode())
        await eventually(lambda: received == [b"m0"])
        other = await client.subscribe(topic, "sub", ConsumerType.Shared)
        assert [m.data() for m in await receive_n(other, 2)] == [b"m1", b"m2"]
        release.set()


@pytest.mark.parametrize("form", ["topic", "list", "pattern"])
async def test_a_dropped_consumer_is_closed_and_its_messages_go_to_the_others(
    broker: BrokerThread, form: str
) -> None:
    topic = unique("api-dropped")
    subscribed_as = {
        "topic": topic,
        "list": [topic],
        "pattern": re.compile(f"{NS}/{topic}"),
    }[form]
    async with Client(broker.service_url) as client:
        await (await client.create_producer(topic)).send(b"first")
        dropped = [
            await client.subscribe(
                subscribed_as,
                "sub",
                ConsumerType.Shared,
                initial_position=InitialPosition.Earliest,
            )
        ]
        producer = await client.create_producer(topic)
        for i in range(5):
            await producer.send(f"m{i}".encode())
        await eventually(lambda: dropped[0].queued() == 6)  # all prefetched by it
        dropped.clear()  # the application lets go of it, without closing it
        gc.collect()
        other = await client.subscribe(topic, "sub", ConsumerType.Shared)
        got = await receive_n(other, 6)
        assert sorted(m.data() for m in got) == [b"first"] + [f"m{i}".encode() for i in range(5)]


DROPPING_SCRIPT = """
import asyncio, gc, re, sys
from pulsar_grpc import Client, MessageId, SyncClient

url, mode = sys.argv[1], sys.argv[2]
pattern = re.compile("persistent://public/default/dropped-.*")
if mode == "sync":
    client = SyncClient(url)
    consumer = client.subscribe("dropped-script", "sub")
    reader = client.create_reader("dropped-script", MessageId.earliest)
    every = client.subscribe(pattern, "every", pattern_auto_discovery_period=1)
    client.subscribe("dropped-script", "listening", message_listener=lambda c, m: None)
    del consumer, reader, every
    gc.collect()
    client.close()
else:
    async def main():
        client = Client(url)
        consumer = await client.subscribe("dropped-script", "sub")
        reader = await client.create_reader("dropped-script", MessageId.earliest)
        every = await client.subscribe(pattern, "every", pattern_auto_discovery_period=1)
        await client.subscribe("dropped-script", "listening", message_listener=print)
        del consumer, reader, every
        gc.collect()
        if mode == "async-close":
            await client.close()
        # "async-loop-ends": nothing closed, the loop ends under them

    asyncio.run(main())
gc.collect()
print("exited")
"""


@pytest.mark.parametrize("mode", ["sync", "async-close", "async-loop-ends"])
def test_dropping_consumers_and_readers_leaves_nothing_on_stderr(
    broker: BrokerThread, mode: str, tmp_path: Path
) -> None:
    script = tmp_path / "dropping.py"
    script.write_text(textwrap.dedent(DROPPING_SCRIPT))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "protos")])}
    done = subprocess.run(
        [sys.executable, "-X", "dev", str(script), broker.service_url, mode],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "exited", "")


def test_blocking_consumer_batch_receives_acks_a_list_redelivers_and_seeks(
    broker: BrokerThread,
) -> None:
    topic = unique("api-sync-consumer")
    with SyncClient(broker.service_url) as client:
        consumer = client.subscribe(
            topic,
            "sub",
            ConsumerType.Failover,
            initial_position=InitialPosition.Earliest,
            batch_receive_policy=ConsumerBatchReceivePolicy(4, -1, 2000),
        )
        producer = client.create_producer(topic)
        for i in range(6):
            producer.send(f"m{i}".encode())
        first = consumer.batch_receive()
        assert [m.data() for m in first] == [b"m0", b"m1", b"m2", b"m3"]
        consumer.acknowledge([m.message_id() for m in first[:2]])
        consumer.redeliver_unacknowledged_messages()  # m2.. again, in order
        again = [consumer.receive(timeout_millis=RECEIVE_MS) for _ in range(4)]
        assert [m.data() for m in again] == [b"m2", b"m3", b"m4", b"m5"]
        consumer.acknowledge_cumulative(again[-1])
        consumer.seek(0)  # publish time 0: everything again
        assert consumer.receive(timeout_millis=RECEIVE_MS).data() == b"m0"


def test_reader_uses_pulsar_client_names(broker: BrokerThread) -> None:
    topic = unique("api-reader")
    with SyncClient(broker.service_url) as client:
        producer = client.create_producer(topic)
        producer.send(b"r0")
        producer.send(b"r1")
        reader = client.create_reader(topic, MessageId.earliest)
        assert reader.topic() == f"{NS}/{topic}"
        assert reader.has_message_available()
        assert [reader.read_next(timeout_millis=RECEIVE_MS).data() for _ in range(2)] == [
            b"r0",
            b"r1",
        ]
        assert not reader.has_message_available()
        with pytest.raises(Timeout):
            reader.read_next(timeout_millis=100)


async def test_a_nack_not_awaited_still_redelivers_and_warns_of_nothing(
    broker: BrokerThread,
) -> None:
    """pulsar.asyncio's negative_acknowledge is a coroutine; an application that forgets the
    ``await`` must not lose the nack (nor see "coroutine was never awaited")."""
    topic = unique("api-nack-unawaited")
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(
            topic,
            "sub",
            consumer_type=ConsumerType.Shared,
            negative_ack_redelivery_delay_ms=100,
        )
        producer = await client.create_producer(topic)
        await producer.send(b"again")
        first = await consumer.receive(timeout_millis=RECEIVE_MS)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            consumer.negative_acknowledge(first)  # no await
            gc.collect()
        again = await consumer.receive(timeout_millis=RECEIVE_MS)
        assert (again.data(), again.redelivery_count()) == (b"again", 1)
        await consumer.negative_acknowledge(again)  # awaiting it works as before
        assert (await consumer.receive(timeout_millis=RECEIVE_MS)).redelivery_count() == 2
