"""Consumers: subscribing, flow control, a merged receive queue, grouped acks, seek,
resubscribing after a lost stream."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import grpc

from pulsargrpc.v1 import pulsar_pb2 as pb

from ._acks import AckGroup
from ._connection import (
    DEFAULT_INITIAL_BACKOFF_MS,
    DEFAULT_MAX_BACKOFF_MS,
    Backoff,
    ConnectionHandler,
    HandleState,
)
from ._errors import (
    AlreadyClosed,
    ConnectError,
    InvalidConfiguration,
    PulsarError,
    Timeout,
    error_from_code,
    is_retryable,
)
from ._flow import PermitTracker
from ._message import Message, MessageId, messages_of_entry
from ._stream import (
    Connect,
    Params,
    StreamCall,
    StreamWriter,
    as_pulsar_error,
    cancel_stream,
    open_expecting,
)

_CLOSE_GRACE_S = 2.0
_MAX_LONG = 2**63 - 1


class MessageQueue:
    """Messages received from the broker and not yet handed to the application.

    Shared by the streams of all partitions; bounded by the permits they granted. Once failed,
    it still hands out what it holds, then raises the error to every receiver.
    """

    def __init__(self) -> None:
        self._items: deque[Message] = deque()
        self._nonempty = asyncio.Event()
        self._error: PulsarError | None = None

    def __len__(self) -> int:
        return len(self._items)

    def put_many(self, messages: list[Message]) -> None:
        """Append messages and wake a receiver."""
        if messages:
            self._items.extend(messages)
            self._nonempty.set()

    def fail(self, error: PulsarError) -> None:
        """Make receivers raise ``error`` once the queue is empty (first error wins)."""
        if self._error is None:
            self._error = error
        self._nonempty.set()

    def remove_if(self, predicate: Callable[[Message], bool]) -> int:
        """Drop the messages matching ``predicate``; return how many."""
        kept = deque(m for m in self._items if not predicate(m))
        removed = len(self._items) - len(kept)
        self._items = kept
        return removed

    async def get(self, timeout_s: float | None) -> Message:
        """The next message; raises Timeout after ``timeout_s`` (None: wait forever)."""
        if self._items:  # the common case under load: no timer, no event
            return self._items.popleft()
        try:
            async with asyncio.timeout(timeout_s):
                while not self._items:
                    if self._error is not None:
                        raise self._error
                    self._nonempty.clear()
                    await self._nonempty.wait()
        except TimeoutError:
            raise Timeout(f"no message within {timeout_s} s") from None
        return self._items.popleft()


class ConsumerType(StrEnum):
    """Subscription types, spelled as ``x-pulsar-subscription-type`` expects."""

    Exclusive = "Exclusive"
    Shared = "Shared"
    Failover = "Failover"
    KeyShared = "Key_Shared"


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    """Consumer settings the client keeps (the rest travel as call metadata)."""

    receiver_queue_size: int = 1000
    ack_group_time_ms: float = 1.0
    max_pending_acks: int = 1000
    operation_timeout_s: float = 30.0
    subscription_type: ConsumerType = ConsumerType.Exclusive
    # Readers: a non-durable subscription, reopened where the application stopped reading.
    durable: bool = True
    start_message_id: MessageId = MessageId.latest
    start_inclusive: bool = False
    initial_backoff_s: float = DEFAULT_INITIAL_BACKOFF_MS / 1000
    max_backoff_s: float = DEFAULT_MAX_BACKOFF_MS / 1000


class PartitionConsumer:
    """One Consume stream: a consumer of one topic or of one partition of a topic.

    On a retryable stream failure it resubscribes (``_connection``) with the same subscription,
    name and options, as Pulsar's ConsumerImpl: what the old stream queued and the application
    did not take yet is dropped (the broker redelivers what was not acked), permits are granted
    afresh on the new stream, grouped acks not sent yet go out on it, and requests that waited
    for an answer on the old stream fail with :class:`ConnectError`. A reader resumes after the
    last message the application read.
    """

    def __init__(self, config: ConsumerConfig, queue: MessageQueue, partition: int = -1) -> None:
        self.config = config
        self.partition = partition
        self.topic = ""
        self.consumer_name = ""
        self.subscription = ""
        self.is_active: bool | None = None
        self.reached_end_of_topic = False
        self._queue = queue
        self._loop = asyncio.get_running_loop()
        self._permits = PermitTracker(config.receiver_queue_size)
        self._acks = AckGroup(config.max_pending_acks)
        self._ack_timer: asyncio.TimerHandle | None = None
        self._request_ids = itertools.count(1)
        self._requests: dict[int, asyncio.Future[None]] = {}
        self._dropping: set[int] = set()  # request ids whose answer ends a drop window
        self._call: StreamCall | None = None
        self._writer: StreamWriter | None = None
        self._reader: asyncio.Task[None] | None = None
        self._connect: Connect | None = None
        # Where a reader resumes: after the last message the application took, else from
        # its start position (the one it was created with, or the one it last sought).
        self._last_dequeued: Message | None = None
        self._start = (config.start_message_id, config.start_inclusive)
        self._error: PulsarError | None = None
        self.connection = ConnectionHandler(
            f"consumer partition {partition}",
            Backoff(config.initial_backoff_s, config.max_backoff_s),
            self._open,
            self._fail,
        )

    @property
    def state(self) -> HandleState:
        """Connecting, ready, closing or closed."""
        return self.connection.state

    async def start(self, connect: Connect) -> None:
        """Open the stream, wait for ConsumerSubscribed, grant the first permits; later
        streams reopen with ``connect``."""
        self._connect = connect
        await self.connection.connect_first(self.config.operation_timeout_s)

    async def _open(self) -> None:
        assert self._connect is not None
        call, subscribed = await open_expecting(
            self._connect, self._resubscribe_params(), "subscribed", self.config.operation_timeout_s
        )
        self._call = call
        self.consumer_name = subscribed.consumer_name
        self.topic = subscribed.topic
        self.subscription = subscribed.subscription
        self._writer = writer = StreamWriter(call, lambda error: self._lost(call, error))
        self._permits = PermitTracker(self.config.receiver_queue_size)
        writer.send(pb.ConsumeRequest(flow=pb.Flow(permits=self._permits.initial_permits())))
        for request in self._acks.take():  # acked while disconnected
            writer.send(request)
        self._reader = self._loop.create_task(self._read_loop(call))

    def _resubscribe_params(self) -> Params:
        """What a reopened stream says beyond the first one's parameters: the consumer's name,
        and for a reader the position after the last message read."""
        if not self.consumer_name:
            return {}
        params: Params = {"x-pulsar-consumer-name": self.consumer_name}
        if not self.config.durable:
            if self._last_dequeued is not None:
                params["x-pulsar-start-message-id"] = str(self._last_dequeued.message_id())
                params["x-pulsar-start-message-id-inclusive"] = False
            else:
                params["x-pulsar-start-message-id"] = str(self._start[0])
                params["x-pulsar-start-message-id-inclusive"] = self._start[1]
        return params

    def dequeued(self, message: Message) -> None:
        """The application took ``message`` of this stream."""
        self._last_dequeued = message
        self.consumed(1)

    def consumed(self, count: int = 1) -> None:
        """The application took (or the client dropped) ``count`` messages of this stream."""
        permits = self._permits.consumed(count)
        if permits:
            self._send(pb.ConsumeRequest(flow=pb.Flow(permits=permits)))

    def acknowledge(self, message_id: MessageId, cumulative: bool = False) -> None:
        """Group an ack; it goes out within ``ack_group_time_ms`` (or once reconnected)."""
        self._check_open()
        if cumulative:
            self._acks.cumulative(message_id)
        else:
            self._acks.individual(message_id)
        self._schedule_acks()

    def negative_acknowledge(self, message_id: MessageId) -> None:
        """Group a nack; the broker redelivers after the negative-ack delay."""
        self._check_open()
        self._acks.negative(message_id)
        self._schedule_acks()

    async def acknowledge_and_wait(self, message_ids: list[MessageId], cumulative: bool) -> None:
        """Ack now and wait for the broker's AckReceipt (the ack is durable)."""
        request_id = next(self._request_ids)
        ack = pb.Ack(
            type=pb.Cumulative if cumulative else pb.Individual,
            ids=[m.to_proto() for m in message_ids],
            request_id=request_id,
        )
        await self._request(request_id, pb.ConsumeRequest(ack=ack))

    def flush_acks(self) -> None:
        """Send grouped acks and nacks now (kept for the next stream while reconnecting)."""
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        if self.connection.state is not HandleState.READY:
            return
        for request in self._acks.take():
            self._send(request)

    async def redeliver_unacknowledged(self) -> None:
        """Ask for every unacked message again, and wait for RedeliverDone."""
        request_id = next(self._request_ids)
        redeliver = pb.RedeliverUnacknowledged(request_id=request_id)
        await self._request_dropping(request_id, pb.ConsumeRequest(redeliver=redeliver))

    async def seek(self, target: MessageId | int) -> None:
        """Move the cursor to a message id or a publish time (ms), and wait for SeekDone."""
        request_id = next(self._request_ids)
        seek = seek_request(target, request_id)
        await self._request_dropping(request_id, pb.ConsumeRequest(seek=seek))
        # A publish time has no message id to resume from: a reader reconnecting before it
        # read anything starts over from the earliest message, as Pulsar's does.
        self._start = (
            (target, True) if isinstance(target, MessageId) else (MessageId.earliest, False)
        )
        self._last_dequeued = None

    async def _request_dropping(self, request_id: int, request: pb.ConsumeRequest) -> None:
        """Send a request whose answer separates stale messages from fresh ones: what is
        queued now, and what arrives before the answer, is dropped (its permits returned)."""
        await self._wait_ready()
        self._drop_stale()
        self._dropping.add(request_id)
        try:
            await self._request(request_id, request)
        finally:
            self._dropping.discard(request_id)

    async def unsubscribe(self) -> None:
        """Delete the subscription and wait for Unsubscribed."""
        request_id = next(self._request_ids)
        request = pb.ConsumeRequest(unsubscribe=pb.Unsubscribe(request_id=request_id))
        await self._request(request_id, request)

    async def close(self) -> None:
        """Send grouped acks, half-close the stream and let the broker end it."""
        if self.connection.state in (HandleState.CLOSING, HandleState.CLOSED):
            return
        self.flush_acks()
        self.connection.closing()
        if self._writer is not None:
            await self._writer.close()
        if self._reader is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._reader), _CLOSE_GRACE_S)
        self._fail(AlreadyClosed("the consumer is closed"))

    def on_response(self, response: pb.ConsumeResponse) -> None:
        """Handle one response after ConsumerSubscribed."""
        kind = response.WhichOneof("response")
        if kind == "messages":
            messages: list[Message] = []
            for entry in response.messages.entries:
                of_entry = messages_of_entry(entry, self.partition, self.topic)
                messages.extend(of_entry)
                if not self._dropping:
                    self._acks.delivered(entry.ledger_id, entry.entry_id, len(of_entry))
            if self._dropping:
                self.consumed(len(messages))  # the broker charged them: give the permits back
            else:
                self._queue.put_many(messages)
        elif kind in ("ack_receipt", "seek_done", "unsubscribed", "redeliver_done"):
            request_id = getattr(response, kind).request_id
            self._dropping.discard(request_id)
            future = self._requests.pop(request_id, None)
            if future is not None and not future.done():
                future.set_result(None)
        elif kind == "request_error":
            failure = response.request_error
            self._dropping.discard(failure.request_id)
            future = self._requests.pop(failure.request_id, None)
            if future is not None and not future.done():
                future.set_exception(error_from_code(failure.code, failure.message))
        elif kind == "active_consumer_change":
            self.is_active = response.active_consumer_change.is_active
            if not self.is_active:
                # The broker hands what this stream was sent to the new active consumer:
                # what the application has not taken would only be duplicates.
                self._drop_stale()
        elif kind == "reached_end_of_topic":
            self.reached_end_of_topic = True

    def _drop_queued(self) -> int:
        """Drop this stream's messages the application has not taken; return how many."""
        return self._queue.remove_if(lambda m: m.partition == self.partition)

    def _drop_stale(self) -> None:
        """On a live stream, drop what the broker will deliver anew (after a seek, a
        redelivery request, or to another consumer) and grant its permits again."""
        dropped = self._drop_queued()
        if dropped:
            self.consumed(dropped)
        self._acks.forget_deliveries()

    def _check_open(self) -> None:
        if self._error is not None:
            raise self._error
        if self.connection.state is HandleState.CLOSING:
            raise AlreadyClosed("the consumer is closed")

    def _send(self, request: pb.ConsumeRequest) -> None:
        if self._writer is not None and self.connection.state is HandleState.READY:
            self._writer.send(request)

    def _schedule_acks(self) -> None:
        if self._acks.is_full():
            self.flush_acks()
        elif self._ack_timer is None:
            delay_s = self.config.ack_group_time_ms / 1000
            self._ack_timer = self._loop.call_later(delay_s, self.flush_acks)

    async def _wait_ready(self) -> None:
        """Requests need a stream: wait for a reconnect, at most the operation timeout."""
        self._check_open()
        if not await self.connection.wait_ready(self.config.operation_timeout_s):
            self._check_open()
            raise Timeout("not reconnected to the broker within the operation timeout")

    async def _request(self, request_id: int, request: pb.ConsumeRequest) -> None:
        await self._wait_ready()
        self.flush_acks()
        future: asyncio.Future[None] = self._loop.create_future()
        self._requests[request_id] = future
        self._send(request)
        try:
            await asyncio.wait_for(future, self.config.operation_timeout_s)
        except TimeoutError:
            raise Timeout("the broker did not answer in time") from None
        finally:
            self._requests.pop(request_id, None)

    def _lost(self, call: StreamCall, error: PulsarError) -> None:
        """A stream ended: reconnect (retryable error) or fail (not retryable)."""
        if call is not self._call or self.connection.state is not HandleState.READY:
            return  # an older stream, already replaced; or close() is ending this one
        if not is_retryable(error):
            self._fail(error)
            return
        self._drop_stream()
        # Requests sent on the lost stream may or may not have been applied: say so.
        self._fail_requests(ConnectError(f"the connection to the broker was lost: {error.message}"))
        self._dropping.clear()
        # Failover: unknown until the new stream's broker says who is active.
        self.is_active = None
        # The broker redelivers what it sent and was not acked: drop what is still queued.
        self._drop_queued()
        self._acks.forget_deliveries()
        self.connection.lost(error)

    def _drop_stream(self) -> None:
        cancel_stream(self._reader, self._writer, self._call)
        self._reader = self._writer = self._call = None

    def _fail_requests(self, error: PulsarError) -> None:
        """Requests waiting for an answer get ``error``: none will come."""
        for future in self._requests.values():
            if not future.done():
                future.set_exception(error)
        self._requests.clear()

    def _fail(self, error: PulsarError) -> None:
        """Close for good: requests and receivers get ``error`` (first error wins)."""
        if self._error is None:
            self._error = error
        self.connection.closed()
        if self._ack_timer is not None:
            self._ack_timer.cancel()
        self._fail_requests(self._error)
        self._queue.fail(self._error)
        self._drop_stream()

    async def _read_loop(self, call: StreamCall) -> None:
        try:
            while True:
                response = await call.read()
                if response is grpc.aio.EOF:
                    if self.connection.state is HandleState.READY:
                        self._lost(call, ConnectError("the broker ended the consume stream"))
                    return
                self.on_response(response)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._lost(call, as_pulsar_error(exc))


def seek_request(target: MessageId | int, request_id: int) -> pb.Seek:
    """The Seek request for a message id or a publish time in ms.

    The sentinels travel as publish times, since the wire's ledger ids are unsigned:
    earliest is "published at or after 0", latest "at or after the end of time".

    >>> seek_request(MessageId.earliest, 1).publish_time
    0
    """
    if isinstance(target, int):
        return pb.Seek(publish_time=target, request_id=request_id)
    if target == MessageId.earliest:
        return pb.Seek(publish_time=0, request_id=request_id)
    if target == MessageId.latest:
        return pb.Seek(publish_time=_MAX_LONG, request_id=request_id)
    return pb.Seek(message_id=target.to_proto(), request_id=request_id)


MessageTarget = Message | MessageId


def _id_of(target: MessageTarget) -> MessageId:
    return target.message_id() if isinstance(target, Message) else target


class Consumer:
    """Receives from a subscription; for a partitioned topic, from all partitions merged.

    >>> consumer = await client.subscribe("my-topic", "my-sub", subscription_type="Shared")
    >>> async for msg in consumer:
    ...     print(msg.data())
    ...     await consumer.acknowledge(msg)
    """

    def __init__(
        self,
        topic: str,
        subscription_name: str,
        partitions: list[PartitionConsumer],
        queue: MessageQueue,
    ) -> None:
        self._topic = topic
        self._subscription = subscription_name
        self._partitions = {p.partition: p for p in partitions}
        self._subscription_type = partitions[0].config.subscription_type
        self._queue = queue
        self._closed = False

    def queued(self) -> int:
        """Messages received and not yet handed to the application."""
        return len(self._queue)

    @property
    def topic(self) -> str:
        """The topic as given to ``subscribe``."""
        return self._topic

    @property
    def subscription_name(self) -> str:
        """The subscription's name."""
        return self._subscription

    @property
    def consumer_name(self) -> str:
        """The consumer's name (given or generated by the broker)."""
        return next(iter(self._partitions.values())).consumer_name

    @property
    def is_active(self) -> bool | None:
        """Failover: whether this consumer is the active one (None until the broker says)."""
        return next(iter(self._partitions.values())).is_active

    def has_reached_end_of_topic(self) -> bool:
        """Whether the topic (every partition) was terminated and fully consumed."""
        return all(p.reached_end_of_topic for p in self._partitions.values())

    async def receive(self, timeout_ms: int | None = None) -> Message:
        """The next message; raises :class:`Timeout` after ``timeout_ms`` (None: wait).

        >>> msg = await consumer.receive(timeout_ms=1000)
        """
        if self._closed:
            raise AlreadyClosed("the consumer is closed")
        timeout_s = None if timeout_ms is None else timeout_ms / 1000
        message = await self._queue.get(timeout_s)
        self._partitions[message.partition].dequeued(message)
        return message

    async def acknowledge(self, message: MessageTarget, *, wait: bool = False) -> None:
        """Acknowledge one message.

        Acks are grouped and sent within ``ack_group_time_ms``; with ``wait=True`` the ack is
        sent at once and this returns when the broker reports it durable.

        >>> await consumer.acknowledge(msg)
        >>> await consumer.acknowledge(msg.message_id(), wait=True)
        """
        await self._ack(_id_of(message), cumulative=False, wait=wait)

    async def acknowledge_cumulative(self, message: MessageTarget, *, wait: bool = False) -> None:
        """Acknowledge this message and every earlier one of its partition (not for Shared).

        >>> await consumer.acknowledge_cumulative(last_msg)
        """
        if self._subscription_type in (ConsumerType.Shared, ConsumerType.KeyShared):
            raise InvalidConfiguration(
                "Cannot use cumulative acks with a Shared or Key_Shared subscription"
            )
        await self._ack(_id_of(message), cumulative=True, wait=wait)

    async def negative_acknowledge(self, message: MessageTarget) -> None:
        """Ask for the redelivery of a message after the negative-ack delay.

        >>> await consumer.negative_acknowledge(msg)
        """
        message_id = _id_of(message)
        self._partition_of(message_id).negative_acknowledge(message_id)

    async def redeliver_unacknowledged_messages(self) -> None:
        """Have the broker redeliver every unacked message; drops the local queue.

        >>> await consumer.redeliver_unacknowledged_messages()
        """
        await asyncio.gather(*(p.redeliver_unacknowledged() for p in self._partitions.values()))

    async def seek(self, target: MessageId | int) -> None:
        """Reset the subscription to a message id or a publish time (ms since the epoch).

        A message id of a partitioned topic moves its own partition; ``MessageId.earliest``,
        ``MessageId.latest`` and publish times move every partition.

        >>> await consumer.seek(MessageId.earliest)
        >>> await consumer.seek(int(time.time() * 1000) - 60_000)
        """
        if isinstance(target, MessageId) and target not in (MessageId.earliest, MessageId.latest):
            await self._partition_of(target).seek(target)
            return
        await asyncio.gather(*(p.seek(target) for p in self._partitions.values()))

    async def unsubscribe(self) -> None:
        """Delete the subscription, then close.

        >>> await consumer.unsubscribe()
        """
        await asyncio.gather(*(p.unsubscribe() for p in self._partitions.values()))
        await self.close()

    async def close(self) -> None:
        """Send grouped acks and close the streams. Idempotent.

        >>> await consumer.close()
        """
        if self._closed:
            return
        self._closed = True
        await asyncio.gather(*(p.close() for p in self._partitions.values()))
        self._queue.fail(AlreadyClosed("the consumer is closed"))

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> Message:
        try:
            return await self.receive()
        except AlreadyClosed:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _ack(self, message_id: MessageId, cumulative: bool, wait: bool) -> None:
        partition = self._partition_of(message_id)
        if wait:
            await partition.acknowledge_and_wait([message_id], cumulative)
        else:
            partition.acknowledge(message_id, cumulative)

    def _partition_of(self, message_id: MessageId) -> PartitionConsumer:
        try:
            return self._partitions[message_id.partition]
        except KeyError:
            raise ValueError(
                f"message id {message_id} is not from a partition of {self._topic}"
            ) from None
