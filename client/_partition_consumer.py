"""One Consume stream (a topic, or one partition of one): subscribing, flow control, grouped
acks, seek, resubscribing after a lost stream; and the receive queue that the streams of one
consumer share."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

import grpc

from pulsargrpc.v1 import pulsar_pb2 as pb

from ._acks import AckGroup
from ._auth import CredentialRenewal
from ._connection import (
    DEFAULT_INITIAL_BACKOFF_MS,
    DEFAULT_MAX_BACKOFF_MS,
    Backoff,
    ConnectionHandler,
    HandleState,
)
from ._crypto import EntryDecryptor
from ._crypto_message import undecryptable
from ._errors import (
    AlreadyClosed,
    ConnectError,
    PulsarException,
    Timeout,
    error_from_code,
)
from ._flow import PermitTracker
from ._headers import Header
from ._message import Message, messages_of_entry
from ._message_id import MessageId
from ._schemas import ValueDecoder
from ._stream import (
    CLOSE_GRACE_S,
    Connect,
    Params,
    StreamCall,
    StreamWriter,
    as_pulsar_error,
    cancel_stream,
    open_expecting,
)

# Looked up once: on the ack path, an enum member's lookup costs as much as the ack itself.
_CLOSING = HandleState.CLOSING

# Seeking to "latest" is seeking to a publish time after every message (Java's Long.MAX_VALUE).
_AFTER_EVERY_MESSAGE_MS = 2**63 - 1


class MessageQueue:
    """Messages received from the broker and not yet handed to the application.

    Shared by the streams of all partitions; bounded by the permits they granted. Once failed,
    it still hands out what it holds, then raises the error to every receiver.
    """

    def __init__(self) -> None:
        self._items: deque[Message] = deque()
        self._nonempty = asyncio.Event()
        self._error: PulsarException | None = None
        self.waiting = 0  # receivers waiting for a message (zero-queue consumers ask anew)

    def __len__(self) -> int:
        return len(self._items)

    def put_many(self, messages: list[Message]) -> None:
        """Append messages and wake a receiver."""
        if messages:
            self._items.extend(messages)
            self._nonempty.set()

    def put_back(self, message: Message) -> None:
        """Return a message taken and not handed out: it comes next."""
        self._items.appendleft(message)
        self._nonempty.set()

    def fail(self, error: PulsarException) -> None:
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

    def take(self) -> Message | None:
        """The next message if one is waiting, else None."""
        return self._items.popleft() if self._items else None

    async def get(self, timeout_s: float | None) -> Message:
        """The next message; raises Timeout after ``timeout_s`` (None: wait forever)."""
        if self._items:
            return self._items.popleft()
        self.waiting += 1
        try:
            async with asyncio.timeout(timeout_s):
                while not self._items:
                    if self._error is not None:
                        raise self._error
                    self._nonempty.clear()
                    await self._nonempty.wait()
        except TimeoutError:
            raise Timeout(f"no message within {timeout_s} s") from None
        finally:
            self.waiting -= 1
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

    receiver_queue_size: int = 1000  # 0: Pulsar's zero-queue consumer
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
    # Whether a stream ended for expired credentials reopens with fresh ones (a token supplier).
    renewal: CredentialRenewal = CredentialRenewal.FIXED
    # Multi-topic and pattern consumers: message ids name their topic (TopicMessageId).
    topic_ids: bool = False
    # With a schema: how its streams decode values (one cache of writer versions for all).
    values: ValueDecoder | None = None
    # Encrypted batches: the crypto_key_reader and crypto_failure_action (FAIL without them).
    decryptor: EntryDecryptor = field(default_factory=EntryDecryptor)


class PartitionConsumer:
    """One Consume stream: a consumer of one topic or of one partition of a topic.

    On a retryable stream failure it resubscribes (``_connection``) with the same subscription,
    name and options, as Pulsar's ConsumerImpl: what the old stream queued and the application
    did not take yet is dropped (the broker redelivers what was not acked), permits are granted
    afresh on the new stream, grouped acks not sent yet go out on it, and requests that waited
    for an answer on the old stream fail with :class:`ConnectError`. A reader resumes after the
    last message the application read.
    """

    def __init__(
        self,
        config: ConsumerConfig,
        queue: MessageQueue,
        topic: str,
        partition: int = -1,
        on_failed: Callable[[PartitionConsumer, PulsarException], None] | None = None,
    ) -> None:
        self.config = config
        self.partition = partition
        self.topic = topic  # full name (of the partition): what its messages' topic_name() say
        self.consumer_name = ""
        self.subscription = ""
        self.is_active: bool | None = None
        self.reached_end_of_topic = False
        self._queue = queue
        # Who hears that this stream failed for good; by default every receiver of the queue.
        self._on_failed = on_failed or (lambda _, error: queue.fail(error))
        self._loop = asyncio.get_running_loop()
        self._permits = PermitTracker(config.receiver_queue_size)
        self._acks = AckGroup(config.max_pending_acks)
        self._ack_timer: asyncio.TimerHandle | None = None
        self._ack_delay_s = config.ack_group_time_ms / 1000
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
        # After a seek to a message id without start_message_id_inclusive: the broker resumes
        # at that message's entry, and the messages up to it (itself included) are dropped
        # here, as Pulsar's client does (its startMessageId / resetIncludeHead).
        self._skip_through: MessageId | None = None
        self._error: PulsarException | None = None
        # Zero-queue consumers: whether a receive() waits for the one message it asked for
        # (asked again on a new stream, whose permits start at zero).
        self._wants_one = False
        self.connection = ConnectionHandler(
            f"consumer of {topic}",
            Backoff(config.initial_backoff_s, config.max_backoff_s),
            self._open,
            self._fail,
            self._drop,
            renewal=config.renewal,
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
        self.subscription = subscribed.subscription
        self._writer = writer = StreamWriter(call, lambda error: self._lost(call, error))
        self._permits = PermitTracker(self.config.receiver_queue_size)
        permits = self._permits.initial_permits() or int(self._wants_one)
        if permits:
            writer.send(pb.ConsumeRequest(flow=pb.Flow(permits=permits)))
        for request in self._acks.take():  # acked while disconnected
            writer.send(request)
        self._reader = self._loop.create_task(self._read_loop(call))

    def _resubscribe_params(self) -> Params:
        """What a reopened stream says beyond the first one's parameters: the consumer's name,
        and for a reader the position after the last message read."""
        if not self.consumer_name:
            return {}
        params: Params = {Header.CONSUMER_NAME: self.consumer_name}
        if not self.config.durable:
            if self._last_dequeued is not None:
                params[Header.START_MESSAGE_ID] = str(self._last_dequeued.message_id())
                params[Header.START_MESSAGE_ID_INCLUSIVE] = False
            else:
                params[Header.START_MESSAGE_ID] = str(self._start[0])
                params[Header.START_MESSAGE_ID_INCLUSIVE] = self._start[1]
        return params

    def dequeued(self, message: Message) -> None:
        """The application took ``message`` of this stream."""
        self._last_dequeued = message
        permits = self._permits.consumed(1)
        if permits:
            self._grant(permits)

    def want_one(self) -> None:
        """Zero-queue consumers: a receive() waits and nothing is queued: grant one permit
        (once until a message arrives), as Pulsar's ZeroQueueConsumerImpl."""
        if not self._wants_one:
            self._wants_one = True
            self._send(pb.ConsumeRequest(flow=pb.Flow(permits=1)))

    def consumed(self, count: int = 1) -> None:
        """The application took (or the client dropped) ``count`` messages of this stream."""
        permits = self._permits.consumed(count)
        if permits:
            self._grant(permits)

    def _grant(self, permits: int) -> None:
        self._send(pb.ConsumeRequest(flow=pb.Flow(permits=permits)))

    def acknowledge(self, message_id: MessageId, cumulative: bool = False) -> None:
        """Group an ack; it goes out within ``ack_group_time_ms`` (or once reconnected)."""
        self._check_open()
        if cumulative:
            self._acks.cumulative(message_id)
        else:
            self._acks.individual(message_id)
        self._schedule_acks()

    def acknowledge_message(self, message: Message) -> None:
        """Group an individual ack of a message this stream delivered: the hot path of a
        consumer acking message by message, so no MessageId is made, only the index added
        to its entry's acks."""
        if self._error is not None or self.connection.state is _CLOSING:
            self._check_open()
        if self._acks.index(message._origin.key, message._index, self.partition):
            self.flush_acks()
        elif self._ack_timer is None:
            self._ack_timer = self._loop.call_later(self._ack_delay_s, self.flush_acks)

    def acknowledge_messages(self, messages: list[Message]) -> None:
        """Group individual acks of messages this stream delivered (a list acked at once)."""
        self._check_open()
        acks, partition = self._acks, self.partition
        for message in messages:
            if acks.index(message._origin.key, message._index, partition):
                self.flush_acks()
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
        by_id = isinstance(target, MessageId) and target not in (
            MessageId.earliest,
            MessageId.latest,
        )
        inclusive = self.config.start_inclusive
        # Set before the request: what arrives before SeekDone is dropped anyway, and what
        # the broker sends right after SeekDone may be handled before this coroutine resumes.
        previous_skip = self._skip_through
        self._skip_through = (
            target if isinstance(target, MessageId) and by_id and not inclusive else None
        )
        try:
            await self._request_dropping(request_id, pb.ConsumeRequest(seek=seek))
        except BaseException:
            self._skip_through = previous_skip
            raise
        # A publish time has no message id to resume from: a reader reconnecting before it
        # read anything starts over from the earliest message, as Pulsar's does.
        self._start = (
            (target, inclusive or not by_id)
            if isinstance(target, MessageId)
            else (MessageId.earliest, False)
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
                await asyncio.wait_for(asyncio.shield(self._reader), CLOSE_GRACE_S)
        self._fail(AlreadyClosed("the consumer is closed"))

    def on_response(self, response: pb.ConsumeResponse) -> None:
        """Handle one response after ConsumerSubscribed."""
        kind = response.WhichOneof("response")
        if kind == "messages":
            messages: list[Message] = []
            self._wants_one = False
            values = self.config.values
            decryptor = self.config.decryptor
            for entry in response.messages.entries:
                failure = decryptor.decrypt(entry)
                if failure is not None:  # not decrypted: the consumer's crypto_failure_action
                    messages.extend(undecryptable(entry, failure, self, self.config.topic_ids))
                    continue
                of_entry = messages_of_entry(
                    entry,
                    self.partition,
                    self.topic,
                    self.config.topic_ids,
                    values.for_entry(self.topic, entry) if values is not None else None,
                )
                messages.extend(of_entry)
                if not self._dropping:
                    self._acks.delivered(
                        entry.ledger_id, entry.entry_id, len(of_entry), self.partition
                    )
            if self._skip_through is not None and not self._dropping:
                kept = [m for m in messages if not _at_or_before(m, self._skip_through)]
                if len(kept) < len(messages):
                    self.consumed(len(messages) - len(kept))  # dropped: permits back
                    messages = kept
            if self._dropping:
                self.consumed(len(messages))  # the broker charged them: give the permits back
                if not self.config.receiver_queue_size and self._queue.waiting:
                    self.want_one()  # the message a receive() asked for was stale
            else:
                self._queue.put_many(messages)
                if not messages and not self.config.receiver_queue_size and self._queue.waiting:
                    self.want_one()  # the one message asked for was discarded (DISCARD)
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

    def drop_queued(self) -> int:
        """Drop this stream's messages the application has not taken; return how many."""
        return self._queue.remove_if(lambda m: m.topic_name() == self.topic)

    def _drop_stale(self) -> None:
        """On a live stream, drop what the broker will deliver anew (after a seek, a
        redelivery request, or to another consumer) and grant its permits again."""
        dropped = self.drop_queued()
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
            self._ack_timer = self._loop.call_later(self._ack_delay_s, self.flush_acks)

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

    def _lost(self, call: StreamCall, error: PulsarException) -> None:
        """A stream ended: reconnect (retryable error) or fail (not retryable)."""
        if call is not self._call or self.connection.state is not HandleState.READY:
            return  # an older stream, already replaced; or close() is ending this one
        if not self.connection.retries(error):
            self._fail(error)
            return
        self._drop_stream()
        # Requests sent on the lost stream may or may not have been applied: say so.
        self._fail_requests(ConnectError(f"the connection to the broker was lost: {error.message}"))
        self._dropping.clear()
        # Failover: unknown until the new stream's broker says who is active.
        self.is_active = None
        # The broker redelivers what it sent and was not acked: drop what is still queued.
        self.drop_queued()
        self._acks.forget_deliveries()
        self.connection.lost(error)

    def _drop(self, error: PulsarException) -> None:
        """End the current stream as lost with ``error`` (its connection reconnects)."""
        if self._call is not None:
            self._lost(self._call, error)

    def _drop_stream(self) -> None:
        cancel_stream(self._reader, self._writer, self._call)
        self._reader = self._writer = self._call = None

    def _fail_requests(self, error: PulsarException) -> None:
        """Requests waiting for an answer get ``error``: none will come."""
        for future in self._requests.values():
            if not future.done():
                future.set_exception(error)
        self._requests.clear()

    def _fail(self, error: PulsarException) -> None:
        """Close for good: requests and receivers get ``error`` (first error wins)."""
        if self._error is None:
            self._error = error
        self.connection.closed()
        if self._ack_timer is not None:
            self._ack_timer.cancel()
        self._fail_requests(self._error)
        self._on_failed(self, self._error)
        self._drop_stream()

    async def _read_loop(self, call: StreamCall) -> None:
        try:
            while True:
                response = await call.read()
                if response is grpc.aio.EOF:
                    if self.connection.state is HandleState.READY:
                        self._lost(call, ConnectError("the broker ended the consume stream"))
                    return
                values = self.config.values
                if values is not None and response.WhichOneof("response") == "messages":
                    # A writer version seen first is fetched before its messages are queued.
                    await values.prepare(self.topic, response.messages.entries)
                self.on_response(response)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._lost(call, as_pulsar_error(exc))


def _at_or_before(message: Message, target: MessageId) -> bool:
    """Whether ``message`` is ``target`` or comes before it in its entry (a target that is
    not a batch message, batch index -1, covers its whole entry). Only the target's entry is
    looked at, as Pulsar's isSameEntry: a seek past the end lands at the end, and what is
    published next comes before the target without being skipped."""
    found = message.message_id()
    if (found.ledger_id(), found.entry_id()) != (target.ledger_id(), target.entry_id()):
        return False
    return target.batch_index() < 0 or found.batch_index() <= target.batch_index()


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
        return pb.Seek(publish_time=_AFTER_EVERY_MESSAGE_MS, request_id=request_id)
    return pb.Seek(message_id=target.to_proto(), request_id=request_id)
