"""Reconnection on fake streams: backoff, the handle state machine, which errors are retried,
a producer resending what has no receipt, a consumer resubscribing, a reader resuming.

Every reconnect here opens a new FakeCall from a FakeDialer, so the tests see what the client
writes on the old and the new stream. Backoff delays are recorded by a fake sleep in the state
machine tests, and are 1 ms in the producer and consumer tests.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest

from pulsar_grpc import client
from pulsar_grpc.client import HandleState, MessageId
from pulsar_grpc.client._channels import channel_options
from pulsar_grpc.client._connection import Backoff, ConnectionHandler
from pulsar_grpc.client._consumer import Consumer
from pulsar_grpc.client._errors import PulsarError, is_retryable
from pulsar_grpc.client._partition_consumer import (
    ConsumerConfig,
    ConsumerType,
    MessageQueue,
    PartitionConsumer,
)
from pulsar_grpc.client._producer import PartitionProducer, Producer, ProducerConfig
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.unit.fake_stream import FakeCall, FakeDialer
from tests.unit.test_client_batching import ready, receipt, settle
from tests.unit.test_client_flow import batch, subscribed
from tests.waiting import eventually


def consumer_of(parts: list[PartitionConsumer], queue: MessageQueue) -> Consumer:
    """The application's consumer over streams started by the test."""
    consumer = Consumer("t", "s", parts[0].config, queue)
    consumer.add_streams(parts)
    return consumer


FAST = {"initial_backoff_s": 0.001, "max_backoff_s": 0.002}

# ---------------------------------------------------------------- backoff


def test_backoff_doubles_from_initial_to_max_and_resets():
    b = Backoff(0.1, 60.0, rand=lambda: 0.0)
    delays = [b.next() for _ in range(12)]
    assert delays[:4] == [0.1, 0.2, 0.4, 0.8]
    assert delays[-1] == 60.0 and max(delays) == 60.0
    b.reset()
    assert b.next() == 0.1


def test_backoff_jitter_takes_off_at_most_a_tenth_and_never_goes_below_initial():
    b = Backoff(0.1, 60.0, rand=lambda: 0.999)
    assert b.next() == 0.1  # 0.1 less jitter would fall below the initial delay
    assert 0.18 < b.next() < 0.2
    spread = {Backoff(1.0, 8.0).next() for _ in range(50)}
    assert len(spread) == 1  # the first delay is the initial one, whatever the jitter
    b = Backoff(1.0, 8.0)
    b.next()
    assert all(1.8 <= Backoff.next(b) <= 8.0 for _ in range(20))


def test_backoff_validates():
    with pytest.raises(ValueError):
        Backoff(0, 1)
    with pytest.raises(ValueError):
        Backoff(2, 1)
    with pytest.raises(ValueError, match="backoff"):
        client.Client("grpc://h:1", initial_backoff_interval_ms=0)


# ---------------------------------------------------------------- which errors are retried


def rpc_error(status: grpc.StatusCode, code: str | None = None) -> PulsarError:
    trailers = grpc.aio.Metadata(("pulsar-error-code", code)) if code else None
    return client.error_from_rpc(grpc.aio.AioRpcError(status, None, trailers, "x"))


S = grpc.StatusCode


@pytest.mark.parametrize(
    ("error", "retried", "retried_reconnecting"),
    [
        (rpc_error(S.UNAVAILABLE), True, True),  # dropped connection, broker down
        (rpc_error(S.UNAVAILABLE, "6"), True, True),  # ServiceNotReady: topic unloaded
        (rpc_error(S.INTERNAL), True, True),
        (rpc_error(S.INTERNAL, "2"), True, True),  # PersistenceError
        (rpc_error(S.DEADLINE_EXCEEDED), True, True),
        (client.ConnectError("the broker ended the produce stream"), True, True),
        (client.LookupFailed("no owner"), False, True),
        (rpc_error(S.FAILED_PRECONDITION, "16"), False, True),  # ProducerBusy
        (rpc_error(S.FAILED_PRECONDITION, "5"), False, True),  # ConsumerBusy
        (rpc_error(S.NOT_FOUND, "11"), False, False),  # TopicNotFound
        (rpc_error(S.INVALID_ARGUMENT), False, False),
        (rpc_error(S.INVALID_ARGUMENT, "17"), False, False),
        (rpc_error(S.FAILED_PRECONDITION, "22"), False, False),  # NotAllowed
        (rpc_error(S.RESOURCE_EXHAUSTED, "22"), False, False),  # too big
        (rpc_error(S.UNAUTHENTICATED, "3"), False, False),
        (rpc_error(S.PERMISSION_DENIED, "4"), False, False),
        (client.AlreadyClosed("closed"), False, False),
        (PulsarError("receipt out of order"), False, False),
    ],
)
def test_retryable_errors(error: PulsarError, retried: bool, retried_reconnecting: bool) -> None:
    assert is_retryable(error) is retried
    assert is_retryable(error, reconnecting=True) is retried_reconnecting


# ---------------------------------------------------------------- the state machine


class Recorder:
    """A reopen that fails as told, a give_up that records, a sleep that records delays."""

    def __init__(self, failures: list[PulsarError]) -> None:
        self.failures = failures
        self.delays: list[float] = []
        self.given_up: list[PulsarError] = []
        self.opened = 0

    async def reopen(self) -> None:
        if self.failures:
            raise self.failures.pop(0)
        self.opened += 1

    def give_up(self, error: PulsarError) -> None:
        self.given_up.append(error)

    def drop(self, error: PulsarError) -> None:
        """Nothing to drop: the recorder has no stream."""

    async def sleep(self, delay: float) -> None:
        self.delays.append(delay)


def handler(recorder: Recorder) -> ConnectionHandler:
    backoff = Backoff(0.1, 0.5, rand=lambda: 0.0)
    return ConnectionHandler(
        "test", backoff, recorder.reopen, recorder.give_up, recorder.drop, sleep=recorder.sleep
    )


async def test_state_machine_reconnects_with_growing_delays_then_resets():
    rec = Recorder([])
    h = handler(rec)
    assert h.state is HandleState.CONNECTING
    await h.connect_first(5)
    assert h.state is HandleState.READY and rec.opened == 1
    rec.failures = [client.ConnectError("refused")] * 4 + [rpc_error(S.FAILED_PRECONDITION, "16")]
    h.lost(client.ConnectError("gone"))
    assert h.state is HandleState.CONNECTING
    assert await h.wait_ready(5)
    assert h.state is HandleState.READY and h.reconnects == 1 and rec.opened == 2
    # Five refusals (the last a ProducerBusy, retried while reconnecting), then success.
    assert rec.delays == [0.1, 0.2, 0.4, 0.5, 0.5, 0.5]
    assert rec.given_up == []
    h.lost(client.ConnectError("gone again"))
    assert await h.wait_ready(5)
    assert rec.delays[-1] == 0.1  # a success resets the backoff


async def test_state_machine_gives_up_on_non_retryable_errors():
    rec = Recorder([])
    h = handler(rec)
    await h.connect_first(5)
    not_found = rpc_error(S.NOT_FOUND, "11")
    h.lost(not_found)  # the stream itself ended with it: no attempt at all
    assert rec.given_up == [not_found] and rec.delays == []
    rec2 = Recorder([])
    h2 = handler(rec2)
    await h2.connect_first(5)
    rec2.failures = [client.ConnectError("refused"), not_found]
    h2.lost(client.ConnectError("gone"))
    await settle()
    assert rec2.given_up == [not_found] and len(rec2.delays) == 2
    assert not await h2.wait_ready(0.01)


REFUSED = "failed to connect to all addresses; ...: Connection refused"
TLS_REFUSED = "...: Tls handshake failed (TSI_PROTOCOL_FAILURE): ...CERTIFICATE_VERIFY_FAILED"


async def test_first_connect_retries_only_a_broker_that_is_restarting():
    busy = rpc_error(S.FAILED_PRECONDITION, "16")
    for refusal in (busy, client.ConnectError(TLS_REFUSED), client.ConnectError("Socket closed")):
        rec = Recorder([refusal])
        h = handler(rec)
        with pytest.raises(type(refusal)):
            await h.connect_first(30)  # a name taken, a TLS refusal: the caller's, at once
        assert rec.delays == [] and h.state is HandleState.CONNECTING
    # Nothing listening yet, then a broker still loading the topic: retried, then opened.
    rec = Recorder([client.ConnectError(REFUSED)] * 3 + [rpc_error(S.UNAVAILABLE, "6")])
    h = handler(rec)
    await h.connect_first(30)
    assert h.state is HandleState.READY and rec.opened == 1
    assert rec.delays == [0.1, 0.2, 0.4, 0.5]
    assert h.backoff.next() == 0.1  # reconnects later start from the initial delay


async def test_first_connect_gives_up_at_the_operation_timeout():
    rec = Recorder([client.ConnectError(REFUSED)] * 1000)
    h = handler(rec)
    with pytest.raises(client.ConnectError, match="Connection refused"):
        await h.connect_first(0.35)  # the recorder's sleep takes no time: the deadline does
    assert rec.delays == [0.1, 0.2]  # the next delay, 0.4 s, would end past the deadline


async def test_closing_stops_reconnecting():
    rec = Recorder([])
    h = handler(rec)
    await h.connect_first(5)
    rec.failures = [client.ConnectError("refused")] * 100
    h.lost(client.ConnectError("gone"))
    await settle()
    h.closing()
    assert h.state is HandleState.CLOSING
    attempts = len(rec.delays)
    await settle()
    assert len(rec.delays) == attempts
    assert not await h.wait_ready(1)  # answers at once: closing never becomes ready
    h.closed()
    assert h.state is HandleState.CLOSED


# ---------------------------------------------------------------- producer


async def start_producer(dialer: FakeDialer, **conf) -> tuple[Producer, PartitionProducer]:
    config = ProducerConfig(**{**FAST, **conf})
    part = PartitionProducer(config)
    dialer.prepare = lambda call: call.push(ready(last_sequence_id=9, name="p-gen"))
    await part.start(dialer.connect)
    return Producer("t", [part], None, config.max_pending_messages), part


async def reconnected(dialer: FakeDialer, count: int) -> FakeCall:
    call = await asyncio.wait_for(dialer.wait_calls(count), 5)
    await settle()
    return call


async def test_producer_resends_unreceipted_batches_in_order_before_new_ones():
    dialer = FakeDialer()
    producer, part = await start_producer(dialer, batching_max_messages=1)
    first = dialer.last
    futures = [await producer.enqueue(b"m%d" % i) for i in range(3)]
    await settle()
    assert [r.sequence_id for r in first.written] == [10, 11, 12]
    first.push(receipt(first.written[0], ledger=1, entry=0))
    await asyncio.sleep(0)
    first.fail()  # the broker went away: 11 and 12 have no receipt
    await settle()
    assert part.state is HandleState.CONNECTING
    during = await producer.enqueue(b"during")  # queued while reconnecting
    second = await reconnected(dialer, 2)
    assert part.state is HandleState.READY
    # Same name (the broker's deduplication state), same sequence ids, oldest first.
    grouped = {"x-pulsar-grouped-receipts": True}
    assert dialer.params == [grouped, {"x-pulsar-producer-name": "p-gen", **grouped}]
    assert [(r.sequence_id, r.messages[0].payload) for r in second.written] == [
        (11, b"m1"),
        (12, b"m2"),
        (13, b"during"),
    ]
    second.push(receipt(second.written[0], duplicate=True))  # stored before the restart
    second.push(receipt(second.written[1], ledger=2, entry=0))
    second.push(receipt(second.written[2], ledger=2, entry=1))
    ids = await asyncio.wait_for(asyncio.gather(*futures, during), 1)
    assert ids == [
        MessageId(ledger_id=1, entry_id=0, batch_index=0, partition=-1),
        MessageId(ledger_id=-1, entry_id=-1, batch_index=-1, partition=-1),
        MessageId(ledger_id=2, entry_id=0, batch_index=0, partition=-1),
        MessageId(ledger_id=2, entry_id=1, batch_index=0, partition=-1),
    ]
    assert first.cancelled and not second.cancelled
    await producer.close()
    assert part.state is HandleState.CLOSED


async def test_producer_retries_refused_attempts_and_busy_names():
    dialer = FakeDialer()
    producer, part = await start_producer(dialer, batching_max_messages=1)
    dialer.refusals = [
        client.ConnectError("connection refused"),
        rpc_error(S.FAILED_PRECONDITION, "16"),  # the broker still has the old stream
        rpc_error(S.UNAVAILABLE, "6"),
    ]
    future = await producer.enqueue(b"x")
    dialer.last.fail()
    second = await reconnected(dialer, 2)
    assert len(dialer.params) == 5 and part.connection.reconnects == 1
    second.push(receipt(second.written[0], ledger=3, entry=0))
    assert await asyncio.wait_for(future, 1) == MessageId(
        ledger_id=3, entry_id=0, batch_index=0, partition=-1
    )


async def test_producer_sends_time_out_clearly_when_the_broker_never_comes_back():
    dialer = FakeDialer()
    producer, part = await start_producer(dialer, send_timeout_ms=50, batching_max_messages=1)
    dialer.refusals = [client.ConnectError("connection refused")] * 10_000
    future = await producer.enqueue(b"lost")
    dialer.last.fail()
    await settle()
    later = await producer.enqueue(b"later")  # accepted and queued, then timed out too
    for pending in (future, later):
        with pytest.raises(client.Timeout, match="send_timeout_millis=50"):
            await asyncio.wait_for(pending, 2)
    assert part.state is HandleState.CONNECTING  # still trying; the app saw only Timeout
    await asyncio.wait_for(producer.close(), 2)
    assert part.state is HandleState.CLOSED


async def test_producer_fails_for_good_when_reconnecting_finds_the_topic_gone():
    dialer = FakeDialer()
    producer, part = await start_producer(dialer, batching_max_messages=1)
    dialer.refusals = [rpc_error(S.NOT_FOUND, "11")]
    future = await producer.enqueue(b"x")
    dialer.last.fail()
    with pytest.raises(client.TopicNotFound):
        await asyncio.wait_for(future, 2)
    assert part.state is HandleState.CLOSED
    with pytest.raises(client.TopicNotFound):
        await producer.enqueue(b"y")


# ---------------------------------------------------------------- consumer and reader


async def start_consumer(
    dialer: FakeDialer, partition: int = -1, **conf
) -> tuple[Consumer, PartitionConsumer]:
    queue = MessageQueue()
    part = PartitionConsumer(
        ConsumerConfig(**{**FAST, **conf}),
        queue,
        "t" if partition < 0 else f"t-partition-{partition}",
        partition,
    )
    dialer.prepare = lambda call: call.push(subscribed())
    await part.start(dialer.connect)
    return consumer_of([part], queue), part


async def test_consumer_resubscribes_and_the_receive_loop_sees_no_error():
    dialer = FakeDialer()
    consumer, part = await start_consumer(dialer, receiver_queue_size=10, ack_group_time_ms=1e4)
    first = dialer.last
    first.push(batch(0, 3))
    taken = await consumer.receive(timeout_ms=1000)
    waiting_ack = asyncio.ensure_future(
        consumer.acknowledge(
            MessageId(ledger_id=1, entry_id=9, batch_index=0, partition=-1), wait=True
        )
    )
    await settle()
    await consumer.acknowledge(taken)  # grouped, not sent yet
    assert consumer.queued() == 2
    first.fail()
    with pytest.raises(client.ConnectError, match="lost"):
        await asyncio.wait_for(waiting_ack, 1)  # its answer could not come: said clearly
    second = await reconnected(dialer, 2)
    # What the old stream queued was dropped: the broker redelivers it.
    assert consumer.queued() == 0
    receiving = asyncio.ensure_future(consumer.receive(timeout_ms=5000))
    await settle()
    assert not receiving.done()
    assert dialer.params[1] == {"x-pulsar-consumer-name": "c-1"}
    assert [f.permits for f in second.of("flow")] == [10]  # granted afresh
    acked = [(i.entry_id, i.batch_index) for a in second.of("ack") for i in a.ids]
    assert acked == [(0, 0)]  # the grouped ack went out on the new stream
    second.push(batch(0, 3))  # redelivered
    msg = await asyncio.wait_for(receiving, 1)
    assert msg.data() == b"0-0"
    assert part.state is HandleState.READY


async def test_consumer_request_waits_for_the_reconnect():
    dialer = FakeDialer()
    consumer, part = await start_consumer(dialer)
    dialer.refusals = [client.ConnectError("refused")] * 3
    dialer.last.fail()
    await settle()
    assert part.state is HandleState.CONNECTING
    seeking = asyncio.ensure_future(consumer.seek(MessageId.earliest))
    second = await reconnected(dialer, 2)
    await settle()
    (seek,) = second.of("seek")
    second.push(pb.ConsumeResponse(seek_done=pb.SeekDone(request_id=seek.request_id)))
    await asyncio.wait_for(seeking, 1)


async def test_reader_resumes_after_the_last_message_read():
    dialer = FakeDialer()
    start = MessageId(ledger_id=1, entry_id=0, batch_index=-1, partition=-1)
    consumer, _ = await start_consumer(
        dialer, durable=False, start_message_id=start, start_inclusive=True
    )
    dialer.last.fail()
    await reconnected(dialer, 2)
    # Nothing read yet: from the start position, inclusive as asked.
    assert dialer.params[1]["x-pulsar-start-message-id"] == "1:0:-1"
    assert dialer.params[1]["x-pulsar-start-message-id-inclusive"] is True
    dialer.last.push(batch(4, 3))
    assert (await consumer.receive(timeout_ms=1000)).message_id() == MessageId(
        ledger_id=1, entry_id=4, batch_index=0, partition=-1
    )
    assert (await consumer.receive(timeout_ms=1000)).message_id() == MessageId(
        ledger_id=1, entry_id=4, batch_index=1, partition=-1
    )
    dialer.last.fail()
    await reconnected(dialer, 3)
    assert dialer.params[2]["x-pulsar-start-message-id"] == "1:4:-1:1"
    assert dialer.params[2]["x-pulsar-start-message-id-inclusive"] is False
    assert consumer.queued() == 0


async def test_each_partition_reconnects_on_its_own():
    queue = MessageQueue()
    dialers = [FakeDialer(), FakeDialer()]
    parts = []
    for i, dialer in enumerate(dialers):
        part = PartitionConsumer(ConsumerConfig(**FAST), queue, f"t-partition-{i}", i)
        dialer.prepare = lambda call, i=i: call.push(subscribed(f"t-partition-{i}"))
        await part.start(dialer.connect)
        parts.append(part)
    consumer = consumer_of(parts, queue)
    dialers[0].last.push(batch(0, 2))
    dialers[1].last.push(batch(0, 2))
    await settle()
    assert consumer.queued() == 4
    dialers[1].last.fail()
    await reconnected(dialers[1], 2)
    assert len(dialers[0].calls) == 1 and parts[0].state is HandleState.READY
    assert [m.partition for m in [await consumer.receive(1000) for _ in range(2)]] == [0, 0]
    assert consumer.queued() == 0


async def test_cumulative_ack_refused_on_shared_and_key_shared_before_sending():
    for sub_type in (ConsumerType.Shared, ConsumerType.KeyShared):
        dialer = FakeDialer()
        consumer, _ = await start_consumer(dialer, subscription_type=sub_type)
        with pytest.raises(client.CumulativeAcknowledgementNotAllowedError, match="cumulative"):
            await consumer.acknowledge_cumulative(
                MessageId(ledger_id=1, entry_id=1, batch_index=0, partition=-1), wait=True
            )
        await asyncio.sleep(0.01)
        assert dialer.last.of("ack") == []
        await consumer.close()
    dialer = FakeDialer()
    consumer, _ = await start_consumer(dialer, subscription_type=ConsumerType.Failover)
    await consumer.acknowledge_cumulative(
        MessageId(ledger_id=1, entry_id=1, batch_index=0, partition=-1)
    )
    await eventually(lambda: len(dialer.last.of("ack")) == 1)
    await consumer.close()


# ---------------------------------------------------------------- channel options


def test_channels_take_messages_of_any_size_and_redial_quickly():
    options = dict(channel_options(-1, 100, 300))
    assert options["grpc.max_receive_message_length"] == -1
    assert options["grpc.max_send_message_length"] == -1
    assert options["grpc.max_reconnect_backoff_ms"] <= 1000
    c = client.Client("grpc://h:1", max_message_size=8 << 20)
    assert dict(c._calls.pool._options)["grpc.max_receive_message_length"] == 8 << 20


async def test_reader_reconnecting_after_a_seek_resumes_at_the_sought_message():
    dialer = FakeDialer()
    consumer, _ = await start_consumer(dialer, durable=False, start_message_id=MessageId.earliest)
    dialer.last.push(batch(4, 2))
    await consumer.receive(timeout_ms=1000)
    seeking = asyncio.ensure_future(
        consumer.seek(MessageId(ledger_id=1, entry_id=2, batch_index=-1, partition=-1))
    )
    await settle()
    (seek,) = dialer.last.of("seek")
    dialer.last.push(pb.ConsumeResponse(seek_done=pb.SeekDone(request_id=seek.request_id)))
    await asyncio.wait_for(seeking, 1)
    dialer.last.fail()
    await reconnected(dialer, 2)
    assert dialer.params[1]["x-pulsar-start-message-id"] == "1:2:-1"
    # Pulsar's: a seek to an id resumes after it (start_message_id_inclusive=False).
    assert dialer.params[1]["x-pulsar-start-message-id-inclusive"] is False


async def test_a_message_over_the_channel_limit_is_refused_before_sending():
    dialer = FakeDialer()
    producer, part = await start_producer(dialer, max_message_size=1000)
    with pytest.raises(client.MessageTooBig, match="max_message_size=1000"):
        await producer.enqueue(b"x" * 2000)
    future = await producer.enqueue(b"x" * 900)
    part.send_batch()
    await settle()
    assert [len(r.messages[0].payload) for r in dialer.last.written] == [900]
    assert not future.done() and part.state is HandleState.READY


async def test_a_seek_pending_on_a_lost_stream_fails_clearly_and_close_while_reconnecting():
    dialer = FakeDialer()
    consumer, part = await start_consumer(dialer)
    seeking = asyncio.ensure_future(consumer.seek(MessageId.earliest))
    await settle()
    assert len(dialer.last.of("seek")) == 1
    dialer.refusals = [client.ConnectError("refused")] * 10_000  # the broker stays away
    dialer.last.fail()
    with pytest.raises(client.ConnectError, match="connection to the broker was lost"):
        await asyncio.wait_for(seeking, 1)
    assert part.state is HandleState.CONNECTING
    receiving = asyncio.ensure_future(consumer.receive())
    await asyncio.wait_for(consumer.close(), 1)
    assert part.state is HandleState.CLOSED
    with pytest.raises(client.AlreadyClosed):
        await asyncio.wait_for(receiving, 1)


def not_owner(owner: str) -> PulsarError:
    """What a broker that does not own the topic ends a Produce or Consume with."""
    trailers = grpc.aio.Metadata(("pulsar-error-code", "6"), ("pulsar-owner-url", owner))
    return client.error_from_rpc(grpc.aio.AioRpcError(S.UNAVAILABLE, None, trailers, "x"))


async def test_a_refusal_naming_the_owner_is_followed_at_once_but_only_once_in_a_row():
    moved = not_owner("grpc://10.0.0.2:6650")
    assert moved.owner_url == "grpc://10.0.0.2:6650"
    assert isinstance(moved, client.ServiceUnitNotReady)
    assert rpc_error(S.UNAVAILABLE, "6").owner_url is None
    rec = Recorder([])
    h = handler(rec)
    await h.connect_first(5)
    # The stream ends naming the owner: the first attempt (a fresh lookup) goes at once; two
    # brokers naming each other while a bundle moves fall back to the backoff.
    rec.failures = [not_owner("grpc://a:1"), not_owner("grpc://b:1")]
    h.lost(moved)
    assert await h.wait_ready(5)
    assert rec.delays == [0.0, 0.1, 0.0]
    # Creating: the same rule.
    rec = Recorder([moved, moved, moved])
    h = handler(rec)
    await h.connect_first(5)
    assert rec.delays == [0.0, 0.1, 0.0]


async def test_a_producer_names_its_partition_only_when_it_has_one() -> None:
    """Its reconnect log lines say "producer: connection lost", not "partition -1"."""
    config = ProducerConfig()
    assert PartitionProducer(config).connection.name == "producer"
    assert PartitionProducer(config, 3).connection.name == "producer partition 3"
