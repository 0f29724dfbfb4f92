"""The Consume RPC: one consumer per call; flow, acks and the rest arrive on the stream."""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import AsyncIterator, Callable
from enum import Enum
from typing import TypeAlias

from grpc import aio

from pulsar_grpc.broker.errors import BrokerError, InvalidArgumentError
from pulsar_grpc.broker.ledger import Position
from pulsar_grpc.broker.protocol import BrokerContext
from pulsar_grpc.broker.security.authorization import TopicOperation
from pulsar_grpc.broker.security.expiry import CredentialExpiryCheck
from pulsar_grpc.broker.topics import ACK_SLICE, AckId, Consumer, ConsumerOptions, Delivery
from pulsar_grpc.handler import codec
from pulsar_grpc.handler.access import authorize_topic, ended_when_revoked
from pulsar_grpc.handler.errors import abort, owner_trailers
from pulsar_grpc.interceptors import ConsumerParams, current
from pulsargrpc.v1 import pulsar_pb2 as pb

_names = itertools.count(1)


# Message bytes queued for one consumer and not yet written out: at the high-water mark the
# dispatcher stops sending it more; once the stream has written down to the low-water mark,
# dispatch resumes (Pulsar: the channel's write-buffer water marks and isWritable()). A send
# may overshoot the high mark by one dispatcher read.
OUTBOUND_HIGH_WATER_BYTES = 2 << 20
OUTBOUND_LOW_WATER_BYTES = 1 << 20
# Answers (receipts, seek and redeliver answers) queued and not yet written out: past this
# the call stops reading the client's requests, whose answers would pile up otherwise.
MAX_QUEUED_ANSWERS = 1000

Outbound: TypeAlias = bytes | pb.ConsumeResponse | None


class Writability(Enum):
    WRITABLE = "writable"
    FULL = "full"  # at the high-water mark: nothing more is dispatched until drained


class StreamState(Enum):
    OPEN = "open"
    ENDING = "ending"  # a clean end is queued (unsubscribed, or the client half-closed)
    FAILED = "failed"  # ends now with an error


class OutboundQueue:
    """What the call writes out, in order: the broker puts, the call's one writer gets.

    An asyncio.Queue holds three deques and an Event (2.9 KB for every consumer, idle or
    not); this holds one deque while it has items, and the writer's waiter."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: deque[Outbound] | None = None
        self._waiter: asyncio.Future[None] | None = None

    def put_nowait(self, item: Outbound) -> None:
        if self._items is None:
            self._items = deque()
        self._items.append(item)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def get(self) -> Outbound:
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        item = self._items.popleft()
        if not self._items:
            self._items = None  # an idle consumer holds no deque
        return item


class GrpcConsumerTransport:
    """The broker pushes into ``outbound``; the call writes it out, in order.

    Messages are bounded in bytes (the dispatcher waits while :meth:`writable` is False).
    Answers to requests are always queued, behind the messages sent before them (a seek's
    answer must follow what was sent before the seek), and bounded by pacing the requests.
    A close with an error does not wait behind the queue: ``failed`` ends the call at once.
    Once a clean end is queued, nothing more is read from the client and late errors (an
    ack still in flight when the subscription went away) no longer matter.
    """

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.outbound = OutboundQueue()
        self.failed: asyncio.Future[BrokerError] = asyncio.get_running_loop().create_future()
        self.queued_bytes = 0
        self._answers = 0
        # Made when the client's requests are first held back (their answers piling up).
        self._answers_drained: asyncio.Event | None = None
        self._state = Writability.WRITABLE
        self._stream = StreamState.OPEN
        self._on_writable: Callable[[], None] | None = None

    # ------------------------------------------------------------ broker side

    def send_messages(self, deliveries: list[Delivery]) -> None:
        for response in codec.encode_message_batches(deliveries, self.partition):
            self.queued_bytes += len(response)
            self.outbound.put_nowait(response)
        if self.queued_bytes >= OUTBOUND_HIGH_WATER_BYTES:
            self._state = Writability.FULL

    def writable(self) -> bool:
        return self._state is Writability.WRITABLE

    def on_writable(self, callback: Callable[[], None]) -> None:
        self._on_writable = callback

    def send_active_change(self, is_active: bool) -> None:
        change = pb.ActiveConsumerChange(is_active=is_active)
        self.reply(pb.ConsumeResponse(active_consumer_change=change))

    def close(self, error: BrokerError | None = None) -> None:
        if self._stream is not StreamState.OPEN:
            return
        if error is None:
            self._stream = StreamState.ENDING
            self.outbound.put_nowait(None)  # after everything queued
        else:
            self._stream = StreamState.FAILED
            self.failed.set_result(error)

    def reply(self, response: pb.ConsumeResponse) -> None:
        self._answers += 1
        self.outbound.put_nowait(response)

    # ------------------------------------------------------------ call side

    def written(self, item: bytes | pb.ConsumeResponse) -> None:
        """``item`` left the queue for the stream: account for it, wake what waited."""
        if isinstance(item, bytes):
            self.queued_bytes -= len(item)
            if self._state is Writability.FULL and self.queued_bytes <= OUTBOUND_LOW_WATER_BYTES:
                self._state = Writability.WRITABLE
                if self._on_writable is not None:
                    self._on_writable()
        else:
            self._answers -= 1
            if self._answers < MAX_QUEUED_ANSWERS and self._answers_drained is not None:
                self._answers_drained.set()

    async def paced(
        self, requests: AsyncIterator[pb.ConsumeRequest]
    ) -> AsyncIterator[pb.ConsumeRequest]:
        """The client's requests, read only while their answers do not pile up unwritten,
        and only until the stream ends."""
        async for request in requests:
            yield request
            if self._stream is not StreamState.OPEN:
                return
            while self._answers >= MAX_QUEUED_ANSWERS:
                if self._answers_drained is None:
                    self._answers_drained = asyncio.Event()
                self._answers_drained.clear()
                await self._answers_drained.wait()


def _options(params: ConsumerParams) -> ConsumerOptions:
    return ConsumerOptions(
        name=params.consumer_name or f"consumer-{next(_names)}",
        priority_level=params.priority_level,
        ack_timeout_ms=params.ack_timeout_ms,
        negative_ack_delay_ms=params.negative_ack_delay_ms,
        max_redeliver_count=params.max_redeliver_count,
        dead_letter_topic=params.dead_letter_topic,
        dead_letter_initial_subscription=params.dead_letter_initial_subscription,
        negative_ack_backoff=params.negative_ack_backoff,
        ack_timeout_backoff=params.ack_timeout_backoff,
        key_shared=params.key_shared,
        metadata=params.metadata,
    )


async def consume(
    broker: BrokerContext,
    requests: AsyncIterator[pb.ConsumeRequest],
    context: aio.ServicerContext,
    expiry: CredentialExpiryCheck,
) -> None:
    """Serve one consumer. When the call's credentials expire (``expiry`` checks them), the
    call ends at once with the error; what was sent and not acked is redelivered."""
    ctx = current()
    params = ctx.consumer
    assert ctx.topic is not None and params is not None
    transport = GrpcConsumerTransport(ctx.topic.partition_index)
    try:
        await authorize_topic(
            broker, ctx.topic, TopicOperation.CONSUME, params.subscription or None
        )
        topic = await broker.get_topic(ctx.topic)
        await broker.schemas.consumer_schema(topic, params.schema)
        subscription = params.subscription or f"reader-{next(_names)}"
        consumer = await topic.subscribe(
            subscription,
            params.sub_type,
            _options(params),
            transport,
            initial_position=params.initial_position,
            durable=params.durable,
            start=params.start_message_id,
            start_inclusive=params.start_inclusive,
            start_batch_index=params.start_batch_index,
            client_address=ctx.peer,
            client_version=ctx.client_version,
        )
    except Exception as exc:
        await abort(context, exc, trailers=owner_trailers(broker, exc))
    subscribed = pb.ConsumerSubscribed(
        consumer_name=consumer.name, topic=topic.name, subscription=subscription
    )
    loop = asyncio.get_running_loop()
    reader = loop.create_task(_read(consumer, transport, transport.paced(requests)))
    writer = loop.create_task(_write(transport, context, subscribed))
    unwatch = expiry.watch(ctx.auth_expires_at, transport.close)
    revoked = ended_when_revoked(
        broker, ctx.topic, TopicOperation.CONSUME, transport.close, params.subscription or None
    )
    # A failure ends the call at once, not behind what is queued (a client may not be
    # reading), and with no write in progress: the writer is cancelled, then the call aborts.
    # (A callback, not asyncio.wait: that would hold a set, a future and two callbacks for
    # every idle consumer.)
    transport.failed.add_done_callback(lambda _: writer.cancel())
    try:
        with revoked:
            try:
                await writer
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not transport.failed.done() or (task is not None and task.cancelling()):
                    raise  # this call itself was cancelled
        if transport.failed.done():
            await abort(context, transport.failed.result())
    finally:
        unwatch()
        reader.cancel()
        writer.cancel()
        try:  # the writer's own failure, if any, was raised above
            await asyncio.gather(reader, writer, return_exceptions=True)
        finally:
            await consumer.close()


async def _write(
    transport: GrpcConsumerTransport,
    context: aio.ServicerContext,
    subscribed: pb.ConsumerSubscribed,
) -> None:
    """Write the queue out until a clean close; each write waits for gRPC's flow control."""
    await context.write(pb.ConsumeResponse(subscribed=subscribed))
    while (item := await transport.outbound.get()) is not None:
        await context.write(item)
        transport.written(item)


async def _read(
    consumer: Consumer, transport: GrpcConsumerTransport, requests: AsyncIterator[pb.ConsumeRequest]
) -> None:
    """Apply the client's requests; any error ends the call with it."""
    try:
        async for request in requests:
            await _apply(consumer, transport, request)
        transport.close(None)
    except asyncio.CancelledError:
        raise
    except BrokerError as exc:
        transport.close(exc)
    except Exception as exc:
        transport.close(BrokerError(f"internal error: {exc}"))


def _request_error(request_id: int, error: BrokerError) -> pb.ConsumeResponse:
    failure = pb.RequestError(request_id=request_id, code=int(error.code), message=error.message)
    return pb.ConsumeResponse(request_error=failure)


def _ack_reply(
    transport: GrpcConsumerTransport, request_id: int
) -> Callable[[asyncio.Future[None]], None]:
    """Once an ack is durable, answer its receipt (when asked for); a failed ack ends the call."""

    def reply(done: asyncio.Future[None]) -> None:
        if done.cancelled():
            return
        if (exc := done.exception()) is not None:
            transport.close(
                exc if isinstance(exc, BrokerError) else BrokerError(f"ack failed: {exc}")
            )
        elif request_id:
            transport.reply(pb.ConsumeResponse(ack_receipt=pb.AckReceipt(request_id=request_id)))

    return reply


def _check_batch_index(message_id: pb.MessageId) -> None:
    """-1 names a whole entry (Pulsar's batch index of a message that is not batched); any
    other negative index names no message, and is refused rather than read as -1 (which
    would ack or seek a whole entry the client did not name)."""
    if message_id.batch_index < -1:
        raise InvalidArgumentError(
            f"batch index {message_id.batch_index} of {message_id.ledger_id}:"
            f"{message_id.entry_id} is negative (-1 names the whole entry)"
        )


async def _ack_ids(ack: pb.Ack) -> list[AckId]:
    """The ack's ids, checked; a request of many is read in slices (ACK_SLICE ids), yielding
    to the loop between them."""
    ids: list[AckId] = []
    raw = ack.ids
    for start in range(0, len(raw), ACK_SLICE):
        for i in raw[start : start + ACK_SLICE]:
            _check_batch_index(i)
            ids.append((Position(i.ledger_id, i.entry_id), i.batch_index))
        if len(raw) > ACK_SLICE:
            await asyncio.sleep(0)
    return ids


async def _apply(
    consumer: Consumer, transport: GrpcConsumerTransport, request: pb.ConsumeRequest
) -> None:
    kind = request.WhichOneof("request")
    if kind == "flow":
        consumer.flow(request.flow.permits)
    elif kind == "ack":
        ack = request.ack
        try:
            ids = await _ack_ids(ack)
            done = await consumer.acknowledge(ids, ack.type == pb.Cumulative)
        except BrokerError as exc:
            # A refused ack changes nothing; the consumer stays open (request_id 0 when the
            # client asked for no receipt).
            transport.reply(_request_error(ack.request_id, exc))
            return
        done.add_done_callback(_ack_reply(transport, ack.request_id))
    elif kind == "negative_ack":
        positions = [Position(i.ledger_id, i.entry_id) for i in request.negative_ack.ids]
        consumer.negative_acknowledge(positions)
    elif kind == "redeliver":
        consumer.redeliver_unacknowledged()
        done = pb.RedeliverDone(request_id=request.redeliver.request_id)
        transport.reply(pb.ConsumeResponse(redeliver_done=done))
    elif kind == "seek":
        seek = request.seek
        done = pb.ConsumeResponse(seek_done=pb.SeekDone(request_id=seek.request_id))
        try:
            if seek.WhichOneof("target") == "message_id":
                target = seek.message_id
                _check_batch_index(target)
                await consumer.seek(
                    lambda: transport.reply(done),
                    position=Position(target.ledger_id, target.entry_id),
                    batch_index=target.batch_index,
                )
            elif seek.WhichOneof("target") == "publish_time":
                await consumer.seek(lambda: transport.reply(done), publish_time=seek.publish_time)
            else:
                raise InvalidArgumentError("Seek needs a message_id or a publish_time")
        except BrokerError as exc:
            transport.reply(_request_error(seek.request_id, exc))
    elif kind == "unsubscribe":
        request_id = request.unsubscribe.request_id
        try:
            await consumer.unsubscribe()
        except BrokerError as exc:
            transport.reply(_request_error(request_id, exc))
            return
        transport.reply(pb.ConsumeResponse(unsubscribed=pb.Unsubscribed(request_id=request_id)))
        transport.close(None)
    else:
        raise InvalidArgumentError("empty ConsumeRequest")
