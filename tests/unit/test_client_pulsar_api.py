"""Pieces of the Pulsar consumer API that need no broker: patterns, topic message ids, the
batch receive policy, and the zero-queue consumer's permits on a fake stream."""

from __future__ import annotations

import asyncio
import re

import pytest

from pulsar_grpc import client
from pulsar_grpc.client import ConsumerBatchReceivePolicy, MessageId, TopicMessageId
from pulsar_grpc.client._consumer import Consumer
from pulsar_grpc.client._flow import PermitTracker
from pulsar_grpc.client._multi_consumer import PatternWatcher, TopicsPattern
from pulsar_grpc.client._partition_consumer import ConsumerConfig, MessageQueue
from tests.unit.fake_stream import FakeDialer
from tests.unit.test_client_flow import batch, settle, subscribed

NS = "persistent://public/default"


@pytest.mark.parametrize(
    ("given", "namespace", "regex"),
    [
        ("persistent://t/n/orders-.*", "t/n", "t/n/orders-.*"),
        ("t/n/orders-.*", "t/n", "t/n/orders-.*"),
        ("orders-.*", "public/default", "public/default/orders-.*"),
    ],
)
def test_pattern_forms_name_one_namespace(given: str, namespace: str, regex: str) -> None:
    pattern = TopicsPattern.of(re.compile(given, re.IGNORECASE))
    assert (pattern.namespace, pattern.regex.pattern) == (namespace, regex)
    assert pattern.regex.flags & re.IGNORECASE


@pytest.mark.parametrize("given", ["non-persistent://t/n/x.*", "t/.*/x", "t/n.*/x"])
def test_pattern_refuses_other_domains_and_a_regex_namespace(given: str) -> None:
    with pytest.raises(client.InvalidTopicName):
        TopicsPattern.of(re.compile(given))


def test_pattern_matches_whole_names_and_partitioned_topics_once() -> None:
    pattern = TopicsPattern.of(re.compile(f"{NS}/orders-.*"))
    listed = [
        f"{NS}/orders-eu",
        f"{NS}/orders-us",
        f"{NS}/orders-us-partition-0",
        f"{NS}/orders-us-partition-1",
        f"{NS}/old-orders-eu",
        "non-persistent://public/default/orders-x",
    ]
    assert pattern.matching(listed) == [f"{NS}/orders-eu", f"{NS}/orders-us"]


async def test_pattern_watcher_subscribes_to_new_topics_and_lets_go_of_gone_ones() -> None:
    listed = [f"{NS}/a-1", f"{NS}/a-2-partition-0", f"{NS}/a-2-partition-1"]
    subscribed_to: set[str] = {f"{NS}/a-1"}
    calls: list[list[str]] = []
    forgotten: list[list[str]] = []

    async def list_topics(namespace: str) -> list[str]:
        assert namespace == "public/default"
        return listed

    async def subscribe(topics: list[str]) -> None:
        calls.append(topics)
        subscribed_to.update(f"{t}-partition-{i}" for t in topics for i in range(2))

    async def forget(topics: list[str]) -> None:
        forgotten.append(topics)
        subscribed_to.difference_update(topics)

    watcher = PatternWatcher(
        TopicsPattern.of(re.compile("a-.*")),
        60,
        list_topics,
        subscribe,
        lambda: subscribed_to,
        forget,
    )
    assert await watcher.check() == ([f"{NS}/a-2"], [])
    assert await watcher.check() == ([], [])  # its partitions count as the topic
    assert calls == [[f"{NS}/a-2"]]

    # The partitioned topic is deleted: both its partitions' streams are let go of, once.
    listed = [f"{NS}/a-1"]
    gone = [f"{NS}/a-2-partition-0", f"{NS}/a-2-partition-1"]
    assert await watcher.check() == ([], gone)
    assert await watcher.check() == ([], [])
    assert forgotten == [gone] and subscribed_to == {f"{NS}/a-1"}
    with pytest.raises(ValueError):
        PatternWatcher(TopicsPattern.of(re.compile("a-.*")), 0, list_topics, subscribe, set, forget)


def test_topic_message_id_names_its_topic_and_equals_the_plain_id() -> None:
    mid = TopicMessageId.of(f"{NS}/t", 3, 4, 1, 0)
    assert mid == MessageId(ledger_id=3, entry_id=4, batch_index=1, partition=0) and hash(
        mid
    ) == hash(MessageId(ledger_id=3, entry_id=4, batch_index=1, partition=0))
    assert mid.topic_name() == f"{NS}/t"
    back = MessageId.deserialize(mid.serialize(), topic=f"{NS}/t")
    assert isinstance(back, TopicMessageId) and back.topic_name() == f"{NS}/t"
    assert type(MessageId.deserialize(mid.serialize())) is MessageId


def test_batch_receive_policy_needs_one_limit() -> None:
    assert ConsumerBatchReceivePolicy() == ConsumerBatchReceivePolicy(-1, 10 * 1024 * 1024, 100)
    with pytest.raises(ValueError):
        ConsumerBatchReceivePolicy(-1, -1, 0)


def test_zero_queue_permit_tracker_grants_nothing_up_front() -> None:
    tracker = PermitTracker(0)
    assert tracker.initial_permits() == 0
    assert [tracker.consumed() for _ in range(3)] == [0, 0, 0]
    with pytest.raises(ValueError):
        PermitTracker(-1)


async def test_zero_queue_consumer_asks_one_message_per_receive_and_again_after_reconnect():
    dialer = FakeDialer()
    dialer.prepare = lambda call: call.push(subscribed())
    config = ConsumerConfig(receiver_queue_size=0, initial_backoff_s=0.001, max_backoff_s=0.002)
    consumer = Consumer("t", "s", config, MessageQueue())
    stream = consumer.new_stream(f"{NS}/t", -1)
    consumer.add_streams([stream])
    await stream.start(dialer.connect)
    await settle()
    assert dialer.last.of("flow") == []  # nothing prefetched
    receiving = asyncio.ensure_future(consumer.receive())
    await settle()
    assert [f.permits for f in dialer.last.of("flow")] == [1]
    # The stream is lost while receive() waits: the new stream is asked for it again.
    dialer.last.fail()
    call = await asyncio.wait_for(dialer.wait_calls(2), 5)
    await settle()
    assert [f.permits for f in call.of("flow")] == [1]
    call.push(batch(0, 1))
    assert (await asyncio.wait_for(receiving, 5)).data() == b"0-0"
    await settle()
    assert [f.permits for f in call.of("flow")] == [1]  # no refill: nothing asked
    with pytest.raises(client.InvalidConfiguration):
        await consumer.receive(timeout_millis=10)
    await consumer.close()
