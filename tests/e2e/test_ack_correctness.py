"""Acks, seeks and dead-lettering never lose or swallow a message, whatever a client sends.

Raw stubs send exactly what a hostile or careless client in another language would (acks of
ids that do not exist yet, index acks of entries the consumer no longer holds); the SDK shows
what an application sees. Real broker, real gRPC. "Nothing else arrives" is a bounded wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest

from pulsar_grpc.broker.ledger.group_commit import CommitBatch
from pulsar_grpc.broker.ledger.store import LedgerOwner
from pulsar_grpc.broker.topics.producer import PublishReceipt
from pulsar_grpc.client import Client, DeadLetterPolicy, MessageId
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.messaging import RECEIVE_MS, assert_nothing_more, receive_n
from tests.e2e.wire import batch, error_code, stub
from tests.support import BrokerThread

ARRIVE_S = 5.0  # what must arrive does so within this
QUIET_S = 0.4  # bounded wait for "nothing more arrives"


class RawConsumer:
    """A Consume call without the SDK. A task pumps responses into a queue, so a bounded wait
    for one never cancels a read on the call itself."""

    def __init__(self, call: grpc.aio.StreamStreamCall) -> None:
        self.call = call
        self.responses: asyncio.Queue[pb.ConsumeResponse] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> RawConsumer:
        first = await self.call.read()
        assert first.HasField("subscribed"), first
        self._task = asyncio.create_task(self._pump())
        return self

    async def _pump(self) -> None:
        while (response := await self.call.read()) is not grpc.aio.EOF:
            if not response.HasField("active_consumer_change"):  # Exclusive's, not asserted
                await self.responses.put(response)

    async def send(self, **request: Any) -> None:
        await self.call.write(pb.ConsumeRequest(**request))

    async def flow(self, permits: int) -> None:
        await self.send(flow=pb.Flow(permits=permits))

    async def ack(
        self, ids: list[pb.MessageId], request_id: int = 0, cumulative: bool = False
    ) -> None:
        ack_type = pb.Cumulative if cumulative else pb.Individual
        await self.send(ack=pb.Ack(type=ack_type, ids=ids, request_id=request_id))

    async def next(self, timeout_s: float = ARRIVE_S) -> pb.ConsumeResponse:
        return await asyncio.wait_for(self.responses.get(), timeout_s)

    async def entries(self, count: int) -> list[pb.DeliveredEntry]:
        """The next ``count`` delivered entries; any other response fails the test."""
        got: list[pb.DeliveredEntry] = []
        while len(got) < count:
            response = await self.next()
            assert response.HasField("messages"), response
            got += response.messages.entries
        return got

    async def assert_quiet(self) -> None:
        try:
            extra = await self.next(QUIET_S)
        except TimeoutError:
            return
        pytest.fail(f"unexpected response {extra}")

    async def close(self) -> None:
        self.call.cancel()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


OpenConsumer = Callable[..., Awaitable[RawConsumer]]


@pytest.fixture
async def consumer_on(channel: grpc.aio.Channel) -> AsyncIterator[OpenConsumer]:
    """Opens a raw consumer of subscription "sub" (Earliest); extra metadata as keywords."""
    opened: list[RawConsumer] = []

    async def open_consumer(topic: str, sub_type: str = "Exclusive", **extra: str) -> RawConsumer:
        metadata = (
            ("x-pulsar-topic", topic),
            ("x-pulsar-subscription", "sub"),
            ("x-pulsar-subscription-type", sub_type),
            ("x-pulsar-initial-position", "Earliest"),
            *((f"x-pulsar-{k.replace('_', '-')}", v) for k, v in extra.items()),
        )
        consumer = await RawConsumer(stub(channel).Consume(metadata=metadata)).start()
        opened.append(consumer)
        return consumer

    yield open_consumer
    for consumer in opened:
        await consumer.close()


async def produce(
    channel: grpc.aio.Channel, topic: str, *batches: list[bytes]
) -> list[pb.MessageId]:
    """Store each batch as one entry; the id of each entry (batch index 0)."""
    call = stub(channel).Produce(metadata=(("x-pulsar-topic", topic),))
    assert (await call.read()).HasField("ready")
    ids = []
    for i, payloads in enumerate(batches):
        await call.write(batch(i * 1000, payloads))
        r = (await call.read()).receipt
        ids.append(pb.MessageId(ledger_id=r.ledger_id, entry_id=r.entry_id, batch_index=0))
    call.cancel()
    return ids


def after(msg_id: pb.MessageId, entries: int, batch_index: int = -1) -> pb.MessageId:
    return pb.MessageId(
        ledger_id=msg_id.ledger_id, entry_id=msg_id.entry_id + entries, batch_index=batch_index
    )


def payloads_of(entries: list[pb.DeliveredEntry]) -> list[bytes]:
    return [
        m.payload
        for e in entries
        for i, m in enumerate(e.messages)
        if i not in set(e.acked_batch_indexes)
    ]


# ---------------------------------------------------------------- receipts follow durability


def store_committer(broker: BrokerThread) -> Any:
    """The broker's group committer: tests swap its commit function to act as a slow or
    failing disk."""
    assert broker.service is not None
    return broker.service.ledgers._shared.store._committer  # type: ignore[attr-defined]


class HeldCommits:
    """Test instrumentation: while held, the broker's store commits wait (a slow disk), so
    what the broker answers before its writes are durable shows up."""

    def __init__(self, broker: BrokerThread) -> None:
        self._broker = broker
        self._committer = store_committer(broker)
        self._original = self._committer._commit
        self.release = asyncio.Event()  # set on the broker's loop

    def __enter__(self) -> HeldCommits:
        async def held(batch: CommitBatch) -> set[LedgerOwner]:
            await self.release.wait()
            return await self._original(batch)

        self._committer._commit = held
        return self

    def open(self) -> None:
        self._broker.loop.call_soon_threadsafe(self.release.set)

    def __exit__(self, *exc: object) -> None:
        self.open()
        self._committer._commit = self._original


async def test_a_repeated_ack_is_confirmed_only_once_durable(
    broker: BrokerThread, channel: grpc.aio.Channel, consumer_on: OpenConsumer
) -> None:
    """A second ack of an id whose first ack is still being written gets its receipt only
    with that write: answering earlier confirms an ack that a crash right then would lose."""
    (msg,) = await produce(channel, "ack-twice", [b"a"])
    consumer = await consumer_on("ack-twice")
    await consumer.flow(10)
    await consumer.entries(1)
    whole = after(msg, 0)
    with HeldCommits(broker) as commits:
        await consumer.ack([whole], request_id=1)
        await consumer.ack([whole], request_id=2)
        await consumer.assert_quiet()  # neither is durable yet
        commits.open()
        receipts = [(await consumer.next()).ack_receipt.request_id for _ in range(2)]
    assert receipts == [1, 2]


# ---------------------------------------------------------------- acks past the end


async def test_acks_past_the_end_are_refused_and_the_messages_later_delivered(
    channel: grpc.aio.Channel, consumer_on: OpenConsumer
) -> None:
    topic = "ack-ahead"
    (first,) = await produce(channel, topic, [b"m0"])
    consumer = await consumer_on(topic)
    await consumer.flow(100)
    assert payloads_of(await consumer.entries(1)) == [b"m0"]

    ahead = [after(first, 1), after(first, 2), after(first, 3)]
    refused: dict[int, dict[str, Any]] = {
        5: dict(ids=ahead),
        6: dict(ids=[after(first, 3)], cumulative=True),
        7: dict(ids=[after(first, 1, batch_index=0)]),
        8: dict(ids=[after(first, 0), after(first, 2)]),  # one good id does not let it through
    }
    for request_id, ack in refused.items():
        await consumer.ack(request_id=request_id, **ack)
        answer = await consumer.next()
        assert answer.request_error.request_id == request_id, answer
        assert answer.request_error.code == pb.UnknownError
        assert "beyond the last confirmed entry" in answer.request_error.message
    await consumer.ack(ahead)  # no request id: refused all the same, the stream stays open
    assert (await consumer.next()).request_error.request_id == 0

    await produce(channel, topic, [b"m1"], [b"m2"], [b"m3"])
    assert payloads_of(await consumer.entries(3)) == [b"m1", b"m2", b"m3"]
    await consumer.close()
    # Nothing of the refused acks was kept: everything comes back to a new consumer.
    again = await consumer_on(topic)
    await again.flow(100)
    assert payloads_of(await again.entries(4)) == [b"m0", b"m1", b"m2", b"m3"]


async def test_a_batch_index_outside_its_batch_is_refused(
    channel: grpc.aio.Channel, consumer_on: OpenConsumer
) -> None:
    (msg,) = await produce(channel, "ack-index-out", [b"a", b"b"])
    consumer = await consumer_on("ack-index-out")
    await consumer.flow(10)
    await consumer.entries(1)
    await consumer.ack([after(msg, 0, batch_index=2)], request_id=3)
    answer = await consumer.next()
    assert answer.request_error.request_id == 3, answer
    await consumer.ack([after(msg, 0, batch_index=1)], request_id=4)
    assert (await consumer.next()).ack_receipt.request_id == 4


async def test_a_batch_index_below_minus_one_is_refused_not_read_as_the_whole_entry(
    channel: grpc.aio.Channel, consumer_on: OpenConsumer
) -> None:
    (msg,) = await produce(channel, "ack-index-negative", [b"a", b"b"])
    consumer = await consumer_on("ack-index-negative")
    await consumer.flow(10)
    await consumer.entries(1)
    await consumer.ack([after(msg, 0, batch_index=-5)], request_id=3)
    answer = await consumer.next()
    assert answer.request_error.request_id == 3, answer
    assert "-1 names the whole entry" in answer.request_error.message
    seek = pb.Seek(message_id=after(msg, 0, batch_index=-2), request_id=4)
    await consumer.send(seek=seek)
    assert (await consumer.next()).request_error.request_id == 4
    await consumer.ack([after(msg, 0, batch_index=0)], request_id=5)
    assert (await consumer.next()).ack_receipt.request_id == 5
    # The entry was not deleted by the refused ack: index 1 is still unacked.
    await consumer.send(redeliver=pb.RedeliverUnacknowledged(request_id=6))
    assert (await consumer.next()).redeliver_done.request_id == 6
    (entry,) = await consumer.entries(1)
    assert list(entry.acked_batch_indexes) == [0] and payloads_of([entry]) == [b"b"]


@pytest.mark.parametrize("sub_type", ["Shared", "Key_Shared"])
async def test_cumulative_ack_on_shared_types_is_refused_per_request(
    channel: grpc.aio.Channel, consumer_on: OpenConsumer, sub_type: str
) -> None:
    (msg,) = await produce(channel, f"cumulative-{sub_type}", [b"a"])
    consumer = await consumer_on(f"cumulative-{sub_type}", sub_type)
    await consumer.flow(10)
    await consumer.entries(1)
    await consumer.ack([msg], request_id=9, cumulative=True)
    answer = await consumer.next()
    assert answer.request_error.request_id == 9
    assert answer.request_error.code == pb.NotAllowedError
    await consumer.ack([after(msg, 0)], request_id=10)
    assert (await consumer.next()).ack_receipt.request_id == 10
    await consumer.assert_quiet()


# ---------------------------------------------------------------- seeks past the end


async def test_seek_past_the_end_receives_what_is_published_next(broker: BrokerThread) -> None:
    topic = "seek-past-end"
    async with Client(broker.service_url) as client:
        producer = await client.create_producer(topic, batching_max_messages=1)
        consumer = await client.subscribe(topic, "sub", initial_position="Earliest")
        last = [await producer.send(b"old%d" % i) for i in range(3)][-1]
        await receive_n(consumer, 3)
        # (Two ahead: the next message lands one ahead, and a seek to an id skips that id.)
        for entries_ahead in (2, 1000):
            beyond = MessageId(
                ledger_id=last.ledger_id(),
                entry_id=last.entry_id() + entries_ahead,
                batch_index=-1,
                partition=-1,
            )
            await consumer.seek(beyond)
            await producer.send(b"next%d" % entries_ahead)
            got = await consumer.receive(RECEIVE_MS)
            assert got.data() == b"next%d" % entries_ahead
            await consumer.acknowledge(got, wait=True)
            last = got.message_id()
        await consumer.seek(
            MessageId(ledger_id=last.ledger_id() + 1000, entry_id=5, batch_index=-1, partition=-1)
        )  # a ledger to come
        await consumer.close()
        # Across a reconnect too: the seek did not leave an unreachable position behind.
        again = await client.subscribe(topic, "sub", initial_position="Earliest")
        await producer.send(b"after-reconnect")
        assert (await again.receive(RECEIVE_MS)).data() == b"after-reconnect"
        await assert_nothing_more(again)


@pytest.mark.parametrize("inclusive", [False, True])
async def test_reader_starting_past_the_end_reads_what_is_published_next(
    broker: BrokerThread, inclusive: bool
) -> None:
    topic = f"reader-past-end-{inclusive}"
    async with Client(broker.service_url) as client:
        producer = await client.create_producer(topic, batching_max_messages=1)
        last = await producer.send(b"old")
        start = MessageId(
            ledger_id=last.ledger_id(), entry_id=last.entry_id() + 10, batch_index=-1, partition=-1
        )
        reader = await client.create_reader(topic, start, start_message_id_inclusive=inclusive)
        await producer.send(b"new")
        assert (await reader.read_next(RECEIVE_MS)).data() == b"new"
        await reader.close()


async def test_seek_inside_a_batch_starts_after_that_message(broker: BrokerThread) -> None:
    topic = "seek-in-batch"
    payloads = [b"b%d" % i for i in range(5)]
    async with Client(broker.service_url) as client:
        producer = await client.create_producer(
            topic, batching_max_messages=5, batching_max_publish_delay_ms=10_000
        )
        futures = [await producer.enqueue(p) for p in payloads]
        await producer.flush()
        ids = list(await asyncio.gather(*futures))
        consumer = await client.subscribe(topic, "sub", initial_position="Earliest")
        await receive_n(consumer, 5)
        await consumer.seek(ids[1])  # the message after it comes next (Pulsar's)
        back = await receive_n(consumer, 3)
        assert [m.data() for m in back] == payloads[2:]
        assert [m.message_id() for m in back] == ids[2:]
        await assert_nothing_more(consumer)


# ---------------------------------------------------------------- index acks of unpending entries


async def test_index_ack_of_an_entry_waiting_for_redelivery_acks_only_that_index(
    channel: grpc.aio.Channel, consumer_on: OpenConsumer
) -> None:
    topic = "index-ack-replay"
    (msg,) = await produce(channel, topic, [b"a", b"b", b"c", b"d"])
    consumer = await consumer_on(topic)
    await consumer.flow(4)  # exactly the batch: no permits left after it
    await consumer.entries(1)
    await consumer.send(redeliver=pb.RedeliverUnacknowledged(request_id=1))
    assert (await consumer.next()).redeliver_done.request_id == 1
    await consumer.ack([after(msg, 0, batch_index=1)], request_id=2)  # not pending anywhere now
    assert (await consumer.next()).ack_receipt.request_id == 2
    await consumer.flow(10)
    (entry,) = await consumer.entries(1)
    assert list(entry.acked_batch_indexes) == [1]
    assert payloads_of([entry]) == [b"a", b"c", b"d"]

    # After a reconnect, before the new consumer got the entry again.
    await consumer.close()
    again = await consumer_on(topic)
    await again.ack([after(msg, 0, batch_index=2)], request_id=3)
    assert (await again.next()).ack_receipt.request_id == 3
    await again.flow(10)
    (entry,) = await again.entries(1)
    assert payloads_of([entry]) == [b"a", b"d"]
    await again.assert_quiet()


# ---------------------------------------------------------------- dead letter


async def test_dead_lettered_messages_name_their_origin(broker: BrokerThread) -> None:
    topic = "dlq-origin"
    full = f"persistent://public/default/{topic}"
    async with Client(broker.service_url) as client:
        dlq = await client.subscribe(f"{full}-sub-DLQ", "dlq", initial_position="Earliest")
        consumer = await client.subscribe(
            topic,
            "sub",
            "Shared",
            negative_ack_redelivery_delay_ms=50,
            dead_letter_policy=DeadLetterPolicy(max_redeliver_count=1),
        )
        producer = await client.create_producer(topic, batching_max_messages=1)
        msg_id = await producer.send(b"poison", properties={"REAL_TOPIC": "kept"})
        for _ in range(2):
            await consumer.negative_acknowledge(await consumer.receive(RECEIVE_MS))
        dead = await dlq.receive(RECEIVE_MS)
        props = dead.properties()
        assert props["REAL_TOPIC"] == "kept"  # already there: kept, as Pulsar's client does
        assert props["REAL_SUBSCRIPTION"] == "sub"
        assert MessageId.parse(props["ORIGIN_MESSAGE_ID"]) == msg_id


async def test_a_failed_dead_letter_publish_redelivers_the_message(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    """The dead-letter copy carries origin properties, so a message close to maxMessageSize
    does not fit in the dead-letter topic: it must come back, not vanish."""
    broker = broker_factory(maxMessageSize=1000)
    topic = "dlq-too-big"
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(
            topic,
            "sub",
            "Shared",
            negative_ack_redelivery_delay_ms=50,
            dead_letter_policy=DeadLetterPolicy(max_redeliver_count=1),
        )
        producer = await client.create_producer(topic, batching_max_messages=1)
        msg_id = await producer.send(b"x" * 900)
        for _ in range(2):
            await consumer.negative_acknowledge(await consumer.receive(RECEIVE_MS))
        back = await consumer.receive(RECEIVE_MS)
        assert back.message_id() == msg_id
        assert service_stats(broker, topic)["deadLetterPublishFailures"] >= 1
        await consumer.acknowledge(back, wait=True)
        await consumer.close()
        again = await client.subscribe(topic, "sub", "Shared")
        await assert_nothing_more(again)


def service_stats(broker: BrokerThread, topic: str) -> dict[str, int]:
    async def stats() -> dict[str, int]:
        assert broker.service is not None
        loaded = await broker.service.get_topic(topic, create=False)
        return loaded.stats()["subscriptions"]["sub"]  # type: ignore[index,no-any-return]

    return broker.run(stats())


@pytest.mark.parametrize(
    ("dead_letter_topic", "status", "code"),
    [
        ("persistent://no-such-tenant/ns/dlq", grpc.StatusCode.NOT_FOUND, pb.TopicNotFound),
        ("persistent://public/no-such-ns/dlq", grpc.StatusCode.NOT_FOUND, pb.TopicNotFound),
        ("public/default/a/b", grpc.StatusCode.INVALID_ARGUMENT, pb.InvalidTopicName),
        (
            "non-persistent://public/default/d",
            grpc.StatusCode.FAILED_PRECONDITION,
            pb.NotAllowedError,
        ),
    ],
)
async def test_a_dead_letter_topic_that_cannot_exist_is_refused_at_subscribe(
    channel: grpc.aio.Channel, dead_letter_topic: str, status: grpc.StatusCode, code: int
) -> None:
    call = stub(channel).Consume(
        metadata=(
            ("x-pulsar-topic", "dlq-refused"),
            ("x-pulsar-subscription", "sub"),
            ("x-pulsar-max-redeliver-count", "3"),
            ("x-pulsar-dead-letter-topic", dead_letter_topic),
        )
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call.read()
    assert err.value.code() == status, err.value.details()
    assert error_code(err.value) == code
    assert dead_letter_topic in (err.value.details() or "")


# ---------------------------------------------------------------- deduplication


def test_a_duplicate_of_a_batch_not_yet_durable_waits_for_it(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    broker = broker_factory(brokerDeduplicationEnabled=True)
    data = batch(0, [b"once"]).SerializeToString()

    async def publish_twice() -> tuple[bool, bool, PublishReceipt, PublishReceipt]:
        assert broker.service is not None
        topic = await broker.service.get_topic("dedup-pending")
        producer = await topic.add_producer("p")
        original = producer.publish(data, 0, 1)
        resent = producer.publish(data, 0, 1)  # e.g. resent after a reconnect
        states = (original.done(), resent.done())
        return (*states, await original, await resent)

    original_done, resent_done, first, second = broker.run(publish_twice())
    assert not original_done
    assert not resent_done, "the duplicate was answered before its original was durable"
    assert first.position is not None and second.duplicate


@pytest.mark.allow_broker_errors  # the store failing on purpose is logged with its traceback
def test_a_duplicate_of_a_failed_original_fails_and_the_resend_is_stored(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    broker = broker_factory(brokerDeduplicationEnabled=True)
    data = batch(0, [b"once"]).SerializeToString()
    committer = store_committer(broker)

    async def failing(*args: object) -> None:
        raise OSError("disk gone")

    async def publish_while_the_disk_fails() -> tuple[list[Any], PublishReceipt]:
        assert broker.service is not None
        topic = await broker.service.get_topic("dedup-failed")
        producer = await topic.add_producer("p")
        working, committer._commit = committer._commit, failing
        try:
            attempts = [producer.publish(data, 0, 1), producer.publish(data, 0, 1)]
            outcomes = await asyncio.gather(*attempts, return_exceptions=True)
        finally:
            committer._commit = working
        return outcomes, await producer.publish(data, 0, 1)  # the client's retry

    outcomes, retry = broker.run(publish_while_the_disk_fails())
    assert all(isinstance(o, Exception) for o in outcomes), outcomes
    assert retry.position is not None, "the retry was dropped as a duplicate of a lost batch"
