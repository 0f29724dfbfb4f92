"""Backlog quotas (Pulsar's BacklogQuota), each policy on the size limit and on the time limit:
producer_request_hold leaves the producer's stream unread until the backlog drains, then takes
the rest in order with nothing lost; producer_exception ends the producers and refuses new ones
with ProducerBlockedQuotaExceededException (the SDK's exception of that name, a raw client's
FAILED_PRECONDITION with ServerError 8); consumer_backlog_eviction moves the slowest cursors
forward and only them. A topic's quota beats its namespace's.

The size tests run the broker's check themselves (its interval is an hour there), so they know
when it has run; the time tests let the periodic check run every second."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from pulsar_grpc.broker.topics.backlog_hold import BacklogHold, QuotaState
from pulsar_grpc.client import Client, InitialPosition
from pulsar_grpc.client.exceptions import ProducerBlockedQuotaExceededException
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.test_authorization import http
from tests.e2e.test_partitioned_and_dedup import raw_producer, send
from tests.e2e.wire import batch, error_code
from tests.support import BrokerThread
from tests.waiting import eventually

NS = "/admin/v2/namespaces/public/default"
BY_HAND = {"backlogQuotaCheckIntervalInSeconds": 3600}  # the test runs the check
EVERY_SECOND = {"backlogQuotaCheckIntervalInSeconds": 1}
PAYLOAD = b"x" * 400


def full(topic: str) -> str:
    return f"persistent://public/default/{topic}"


async def admin(broker: BrokerThread, method: str, path: str, body: Any = None) -> Any:
    status, answer = await asyncio.to_thread(http, broker, method, path, None, body)
    assert status in (200, 204), (method, path, status, answer)
    return answer


async def set_quota(
    broker: BrokerThread, topic: str | None, quota: dict[str, Any], kind: str = ""
) -> None:
    """The namespace's quota (``topic`` None) or the topic's."""
    base = NS if topic is None else f"/admin/v2/persistent/public/default/{topic}"
    query = f"?backlogQuotaType={kind}" if kind else ""
    await admin(broker, "POST", f"{base}/backlogQuota{query}", quota)


async def stats(broker: BrokerThread, topic: str) -> dict[str, Any]:
    found: dict[str, Any] = await admin(
        broker, "GET", f"/admin/v2/persistent/public/default/{topic}/stats"
    )
    return found


async def check(broker: BrokerThread) -> None:
    """One run of the broker's backlog-quota check."""
    assert broker.service is not None and broker.service.backlog_quota_check is not None
    await broker.call(broker.service.backlog_quota_check.check_all())


def hold_of(broker: BrokerThread, topic: str) -> BacklogHold:
    assert broker.service is not None
    loaded = {t.name: t for t in broker.service.topics.loaded_topics()}
    return loaded[full(topic)].backlog


async def not_answered(read: asyncio.Task[Any]) -> bool:
    """Whether ``read`` is still waiting half a second on (the broker left a request unread)."""
    done, _ = await asyncio.wait({read}, timeout=0.5)
    return not done


async def test_size_hold_leaves_the_stream_unread_until_the_backlog_drains(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    broker = broker_factory(**BY_HAND)
    topic = "hold-size"
    await set_quota(broker, None, {"limitSize": 1000, "policy": "producer_request_hold"})
    async with (
        Client(broker.service_url) as client,
        grpc.aio.insecure_channel(broker.grpc_address) as ch,
    ):
        consumer = await client.subscribe(topic, "slow", initial_position=InitialPosition.Earliest)
        call, _ = await raw_producer(ch, full(topic), "p")
        for i in range(4):
            await send(call, batch(i, [PAYLOAD]))
        await check(broker)
        assert hold_of(broker, topic).state is QuotaState.HOLDING
        # The request the stream was waiting for is taken; the ones after it are not read.
        assert (await send(call, batch(4, [PAYLOAD]))).sequence_id == 4
        await call.write(batch(5, [b"five"]))
        await call.write(batch(6, [b"six"]))
        read = asyncio.ensure_future(call.read())
        assert await not_answered(read)
        for _ in range(5):
            await consumer.acknowledge(await consumer.receive(5000), wait=True)
        # A held topic is checked again every second (not only every hour): it goes on.
        receipts = [(await asyncio.wait_for(read, 10)).receipt, (await call.read()).receipt]
        assert [r.sequence_id for r in receipts] == [5, 6]
        rest = [(await consumer.receive(5000)).data() for _ in range(2)]
        assert rest == [b"five", b"six"]  # nothing lost, nothing reordered
        await call.done_writing()


async def test_size_exception_ends_the_producers_and_refuses_new_ones(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    broker = broker_factory(**BY_HAND)
    topic = "exception-size"
    await set_quota(broker, topic, {"limitSize": 1000, "policy": "producer_exception"})
    async with (
        Client(broker.service_url) as client,
        grpc.aio.insecure_channel(broker.grpc_address) as ch,
    ):
        slow = await client.subscribe(topic, "slow", initial_position=InitialPosition.Earliest)
        producer = await client.create_producer(topic, batching_enabled=False)
        call, _ = await raw_producer(ch, full(topic), "raw")
        for _ in range(4):
            await producer.send(PAYLOAD)
        await check(broker)
        # Open producers are ended: the SDK's next send fails with pulsar-client's exception,
        # a raw client's stream with FAILED_PRECONDITION and ServerError 8.
        with pytest.raises(ProducerBlockedQuotaExceededException):
            await producer.send(b"more")
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            await call.read()
        assert ended.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert error_code(ended.value) == pb.ProducerBlockedQuotaExceededException
        assert "backlog quota exceeded" in (ended.value.details() or "")
        # New ones are refused at creation, as Pulsar's ServerCnx does.
        with pytest.raises(ProducerBlockedQuotaExceededException):
            await client.create_producer(topic)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await raw_producer(ch, full(topic), "late")
        assert error_code(refused.value) == pb.ProducerBlockedQuotaExceededException
        # Once the backlog is consumed, producers are let in again (a topic over its quota is
        # checked every second).
        for _ in range(4):
            await slow.acknowledge(await slow.receive(5000), wait=True)

        async def admitted() -> bool:
            try:
                await client.create_producer(topic)
            except ProducerBlockedQuotaExceededException:
                return False
            return True

        await eventually(admitted, what="a producer to be admitted once the backlog is consumed")


async def test_size_eviction_moves_only_the_slowest_cursors(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    broker = broker_factory(**BY_HAND)
    topic = "evict-size"
    async with Client(broker.service_url) as client:
        slow = await client.subscribe(topic, "slow", initial_position=InitialPosition.Earliest)
        await slow.close()  # its subscription stays, with nothing prefetched
        fast = await client.subscribe(topic, "fast", initial_position=InitialPosition.Earliest)
        producer = await client.create_producer(topic, batching_enabled=False)
        for i in range(20):
            await producer.send(f"{i:03}".encode() * 30)
        for _ in range(18):
            await fast.acknowledge(await fast.receive(5000), wait=True)
        before = await stats(broker, topic)
        assert before["subscriptions"]["fast"]["msgBacklog"] == 2
        await set_quota(broker, topic, {"limitSize": 1000, "policy": "consumer_backlog_eviction"})
        await eventually(lambda: hold_of(broker, topic).quotas.size.limit_size == 1000)
        await check(broker)
        after = await stats(broker, topic)
        assert after["backlogSize"] <= 900  # evicted to 90% of the quota, as Pulsar
        assert after["subscriptions"]["fast"]["msgBacklog"] == 2  # ahead: not touched
        assert 2 < after["subscriptions"]["slow"]["msgBacklog"] < 20
        assert after["sizeBasedBacklogQuotaExceededEvictionCount"] == 1
        # The slow subscription now starts at a recent message, not the first one.
        slow = await client.subscribe(topic, "slow")
        assert (await slow.receive(5000)).data() != b"000" * 30


async def test_topic_quota_beats_the_namespace_quota(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    broker = broker_factory(**BY_HAND)
    await set_quota(broker, None, {"limitSize": 1000, "policy": "producer_exception"})
    await set_quota(broker, "roomy", {"limitSize": 10**9, "policy": "producer_exception"})
    async with Client(broker.service_url) as client:
        for topic in ("roomy", "tight"):
            await client.subscribe(topic, "slow", initial_position=InitialPosition.Earliest)
            producer = await client.create_producer(topic, batching_enabled=False)
            for _ in range(4):
                await producer.send(PAYLOAD)
            await producer.close()
        await check(broker)
        await client.create_producer("roomy")  # its own quota: under it
        with pytest.raises(ProducerBlockedQuotaExceededException):
            await client.create_producer("tight")  # the namespace's: over it
        roomy = await stats(broker, "roomy")
        assert roomy["backlogQuotaLimitSize"] == 10**9
        metrics = await asyncio.to_thread(read_metrics, broker)
        assert f"pulsar_storage_backlog_quota_limit{{{labels('roomy')}}} 1e+09" in metrics
        assert f"pulsar_storage_backlog_quota_limit{{{labels('tight')}}} 1000.0" in metrics


def labels(topic: str) -> str:
    return f'cluster="standalone",namespace="public/default",topic="{full(topic)}"'


def read_metrics(broker: BrokerThread) -> str:
    with urllib.request.urlopen(f"{broker.http_url}/metrics", timeout=10) as response:
        return str(response.read().decode())


# ---------------------------------------------------------------- the time limit


async def test_time_hold_releases_once_the_old_messages_are_acked(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    broker = broker_factory(**EVERY_SECOND)
    topic = "hold-time"
    await set_quota(
        broker, topic, {"limitTime": 1, "policy": "producer_request_hold"}, "message_age"
    )
    async with (
        Client(broker.service_url) as client,
        grpc.aio.insecure_channel(broker.grpc_address) as ch,
    ):
        consumer = await client.subscribe(topic, "slow", initial_position=InitialPosition.Earliest)
        call, _ = await raw_producer(ch, full(topic), "p")
        await send(call, batch(0, [b"old"]))
        await eventually(
            lambda: hold_of(broker, topic).state is QuotaState.HOLDING,
            what="the check to find the message older than a second",
        )
        assert (await stats(broker, topic))["oldestBacklogMessageAgeSeconds"] >= 1
        assert (await send(call, batch(1, [b"taken"]))).sequence_id == 1
        await call.write(batch(2, [b"held"]))
        read = asyncio.ensure_future(call.read())
        assert await not_answered(read)
        for _ in range(2):
            await consumer.acknowledge(await consumer.receive(5000), wait=True)
        assert (await asyncio.wait_for(read, 10)).receipt.sequence_id == 2
        assert (await consumer.receive(5000)).data() == b"held"
        await call.done_writing()


async def test_time_exception_ends_the_producer(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    broker = broker_factory(**EVERY_SECOND)
    topic = "exception-time"
    await set_quota(broker, topic, {"limitTime": 1, "policy": "producer_exception"}, "message_age")
    async with (
        Client(broker.service_url) as client,
        grpc.aio.insecure_channel(broker.grpc_address) as ch,
    ):
        await client.subscribe(topic, "slow", initial_position=InitialPosition.Earliest)
        call, _ = await raw_producer(ch, full(topic), "p")
        await send(call, batch(0, [b"old"]))
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            await asyncio.wait_for(call.read(), 10)
        assert error_code(ended.value) == pb.ProducerBlockedQuotaExceededException
        with pytest.raises(ProducerBlockedQuotaExceededException):
            await client.create_producer(topic)


async def test_time_eviction_acks_what_is_older_than_the_limit(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    broker = broker_factory(**EVERY_SECOND)
    topic = "evict-time"
    await set_quota(
        broker, topic, {"limitTime": 1, "policy": "consumer_backlog_eviction"}, "message_age"
    )
    async with Client(broker.service_url) as client:
        await client.subscribe(topic, "slow", initial_position=InitialPosition.Earliest)
        producer = await client.create_producer(topic, batching_enabled=False)
        for i in range(3):
            await producer.send(f"{i}".encode())

        async def evicted() -> None:
            found = await stats(broker, topic)
            assert found["subscriptions"]["slow"]["msgBacklog"] == 0
            assert found["timeBasedBacklogQuotaExceededEvictionCount"] >= 1

        await eventually(evicted, what="the messages older than a second to be evicted")
