"""Producers: batching, sequence ids, receipts, backpressure, send timeouts, reconnection.

A partition producer keeps every batch it sent until the broker's receipt for it. When the
stream breaks with a retryable error it reconnects (see ``_connection``) under the same producer
name and resends those batches, in order and with their sequence ids, before any new one: with
deduplication on the broker, nothing is stored twice. Meanwhile the application can keep
sending (bounded by ``max_pending_messages``); it sees a delay, and a :class:`Timeout` only
for sends without a receipt after ``send_timeout_millis``.

The API is pulsar-client's: ``send`` (awaited here, as in its ``pulsar.asyncio``),
``send_async(content, callback)``, ``flush``, ``producer_name()``, ``topic()``,
``last_sequence_id()``. ``enqueue`` is the asyncio way to keep many sends in flight: it returns
the future of the message id without waiting for the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

import grpc

from pulsargrpc.v1 import pulsar_pb2 as pb

from ..schema import BytesSchema, Schema
from ._auth import CredentialRenewal
from ._batching import BatchingType, BatchKey, Container, batch_container
from ._compat import ProducerAccessMode, refuse_unsupported
from ._compression import CompressionType, Sealer
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
    MessageTooBig,
    ProducerQueueIsFull,
    PulsarException,
    Result,
    Timeout,
)
from ._headers import Header
from ._message_id import MessageId, ids_of_receipt
from ._routing import RoutedMessage, Router
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
from ._wire import frame_message


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    """Producer settings, as passed to ``Client.create_producer``."""

    batching_max_messages: int = 1000
    batching_max_bytes: int = 128 * 1024
    batching_max_publish_delay_ms: float = 10
    batching_type: BatchingType = BatchingType.Default
    compression_type: CompressionType = CompressionType.NONE
    # Encrypts each batch after compression (``_crypto.BatchEncryptor``; shared by partitions).
    encryptor: Sealer | None = None
    send_timeout_ms: int = 30000
    max_pending_messages: int = 1000
    # Pulsar's initialSequenceId: the last id already published, so the first message gets
    # the one after it.
    initial_sequence_id: int | None = None
    operation_timeout_s: float = 30.0
    initial_backoff_s: float = DEFAULT_INITIAL_BACKOFF_MS / 1000
    max_backoff_s: float = DEFAULT_MAX_BACKOFF_MS / 1000
    # Whether a stream ended for expired credentials reopens with fresh ones (a token supplier).
    renewal: CredentialRenewal = CredentialRenewal.FIXED
    # The channel's send limit (-1: none). A message over it is refused here: sent, it would
    # break the stream on every reconnect.
    max_message_size: int = -1
    # PIP-68: sent as x-pulsar-producer-access-mode; the broker enforces it.
    access_mode: ProducerAccessMode = ProducerAccessMode.Shared


@dataclass(slots=True)
class _InFlight:
    sequence_id: int
    request: bytes  # kept until the receipt: a reconnect resends it as it was
    futures: list[asyncio.Future[MessageId]]
    deadline: float


class PartitionProducer:
    """One Produce stream: a producer on one topic or on one partition of a topic."""

    def __init__(self, config: ProducerConfig, partition: int = -1) -> None:
        self.config = config
        self.partition = partition
        self.producer_name = ""
        self.topic = ""
        self.last_sequence_id = -1
        self.schema_version = b""  # of the producer's schema, from ProducerReady
        # The topic epoch the broker admitted this producer under (ProducerReady.topic_epoch),
        # sent back on each reconnect: a producer another exclusive one replaced is fenced.
        self.topic_epoch: int | None = None
        self._next_sequence_id = 0
        self._loop = asyncio.get_running_loop()
        self._container: Container[asyncio.Future[MessageId]] = batch_container(
            config.batching_type,
            config.batching_max_messages,
            config.batching_max_bytes,
            config.compression_type,
            config.encryptor,
        )
        self._inflight: deque[_InFlight] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._timeout_task: asyncio.Task[None] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._call: StreamCall | None = None
        self._writer: StreamWriter | None = None
        self._connect: Connect | None = None
        self._error: PulsarException | None = None
        self.connection = ConnectionHandler(
            # "partition -1" named no partition: a non-partitioned topic's producer is "producer"
            f"producer partition {partition}" if partition >= 0 else "producer",
            Backoff(config.initial_backoff_s, config.max_backoff_s),
            self._reopen,
            self._fail,
            self._drop,
            renewal=config.renewal,
        )
        # Told how many sends settled (stored, failed or timed out), once per batch: the
        # owning Producer counts pending sends with it instead of a callback per message.
        self.on_settled: Callable[[int], None] = lambda count: None

    @property
    def state(self) -> HandleState:
        """Connecting, ready, closing or closed."""
        return self.connection.state

    async def start(self, connect: Connect) -> None:
        """Open the stream and wait for ProducerReady; later streams reopen with ``connect``."""
        self._connect = connect
        await self.connection.connect_first(self._ready_timeout_s())

    def _ready_timeout_s(self) -> float:
        """How long the broker may take to answer: a WaitForExclusive producer waits until
        the topic is its own, however long that is (as Pulsar's client)."""
        if self.config.access_mode is ProducerAccessMode.WaitForExclusive:
            return math.inf
        return self.config.operation_timeout_s

    async def _open(self) -> None:
        """Open a stream (the first, or a reconnect under the name the broker gave)."""
        assert self._connect is not None
        # Reconnecting under the same name keeps the broker's deduplication state ours.
        params: Params = {}
        if self.producer_name:
            params[Header.PRODUCER_NAME] = self.producer_name
        # Several receipts per response when several batches are stored together.
        params[Header.GROUPED_RECEIPTS] = True
        if self.config.access_mode is not ProducerAccessMode.Shared:
            params[Header.PRODUCER_ACCESS_MODE] = self.config.access_mode.name
        if self.topic_epoch is not None:
            params[Header.PRODUCER_TOPIC_EPOCH] = self.topic_epoch
        call, ready = await open_expecting(self._connect, params, "ready", self._ready_timeout_s())
        first = not self.producer_name
        self._call = call
        self.on_ready(ready, first)
        self._writer = StreamWriter(call, lambda error: self._lost(call, error))
        self._reader = self._loop.create_task(self._read_loop(call))

    async def _reopen(self) -> None:
        """Reconnect, then resend every batch without a receipt, oldest first."""
        await self._open()
        assert self._writer is not None
        for batch in self._inflight:
            self._writer.send(batch.request)

    def on_ready(self, ready: pb.ProducerReady, first: bool = True) -> None:
        """Take name, topic and, on the first stream only, the first sequence id."""
        self.producer_name = ready.producer_name
        self.topic = ready.topic
        self.schema_version = ready.schema_version
        if ready.HasField("topic_epoch"):
            self.topic_epoch = ready.topic_epoch
        if not first:  # reconnected: the client's own sequence ids go on
            self.last_sequence_id = max(self.last_sequence_id, ready.last_sequence_id)
            return
        initial = self.config.initial_sequence_id
        if initial is None:
            # -1 when nothing is stored (Python's protobuf reads the uint64 2**64-1 as -1).
            self.last_sequence_id = ready.last_sequence_id
            self._next_sequence_id = ready.last_sequence_id + 1
        else:  # as Pulsar's producer: initial is the last id published before
            self.last_sequence_id = initial
            self._next_sequence_id = initial + 1

    @property
    def pending(self) -> int:
        """Messages batched or sent and not yet receipted."""
        return len(self._container) + sum(len(b.futures) for b in self._inflight)

    def add(
        self, message: bytes, key: BatchKey = None, sequence_id: int | None = None
    ) -> asyncio.Future[MessageId]:
        """Batch a message; the future resolves with its id once the broker stored it.

        ``key`` (the ordering key, else the key) decides key-based batching and the Key_Shared
        key of a compressed batch. A ``sequence_id`` other than the next one starts a new batch
        (a batch's messages have consecutive ids on the wire) and the ids go on from it."""
        if self._error is not None:  # set when closed or failed for good
            raise self._error
        if 0 < self.config.max_message_size < len(message):
            raise MessageTooBig(
                f"a message of {len(message)} bytes is over max_message_size="
                f"{self.config.max_message_size}"
            )
        future: asyncio.Future[MessageId] = self._loop.create_future()
        container = self._container
        if sequence_id is not None:
            keyed = self.config.batching_type is BatchingType.KeyBased
            if keyed or sequence_id != self._next_sequence_id + len(container):
                self.send_batch()
                self._next_sequence_id = sequence_id
        if not container.fits(message, key):
            self.send_batch()
        if container.add(message, future, key):  # full
            self.send_batch()
        elif self._timer is None:  # the batch's first message: send_batch clears the timer
            delay_s = self.config.batching_max_publish_delay_ms / 1000
            self._timer = self._loop.call_later(delay_s, self.send_batch)
        return future

    def send_batch(self) -> None:
        """Send what is batched (one ProduceRequest, or one per key). While reconnecting the
        batches wait, with their sequence ids, for the new stream."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not len(self._container):
            return
        deadline = self._loop.time() + self.config.send_timeout_ms / 1000
        writer = self._writer if self.connection.state is HandleState.READY else None
        for sequence_id, request, futures in self._container.drain(self._next_sequence_id):
            self._next_sequence_id += len(futures)
            self._inflight.append(_InFlight(sequence_id, request, futures, deadline))
            if writer is not None:
                writer.send(request)
        if self.config.send_timeout_ms > 0 and (
            self._timeout_task is None or self._timeout_task.done()
        ):
            self._timeout_task = self._loop.create_task(self._expire())

    def on_receipt(self, receipt: pb.SendReceipt) -> None:
        """Resolve the futures of the oldest batch, which the receipt must be for."""
        if not self._inflight or receipt.sequence_id < self._inflight[0].sequence_id:
            return  # its batch already failed with a send timeout
        batch = self._inflight[0]
        if receipt.sequence_id != batch.sequence_id:
            self._fail(
                PulsarException(
                    f"receipt for sequence id {receipt.sequence_id} while "
                    f"{batch.sequence_id} was expected"
                )
            )
            return
        self._inflight.popleft()
        ids = ids_of_receipt(receipt, len(batch.futures), self.partition)
        for future, message_id in zip(batch.futures, ids, strict=True):
            if not future.done():
                future.set_result(message_id)
        self.on_settled(len(batch.futures))
        self.last_sequence_id = max(
            self.last_sequence_id, batch.sequence_id + len(batch.futures) - 1
        )

    async def flush(self) -> None:
        """Send the current batch and wait for the receipt of the last batch sent."""
        self.send_batch()
        if self._inflight:
            await asyncio.gather(*self._inflight[-1].futures)

    async def close(self) -> None:
        """Connected: send what is batched, wait for its receipts (across reconnects, within
        the send timeout), then end the stream. Reconnecting: fail what is pending at once
        with :class:`AlreadyClosed`, as Pulsar's producer does when it is not connected."""
        state = self.connection.state
        if state in (HandleState.CLOSING, HandleState.CLOSED):
            return
        if state is HandleState.CONNECTING:
            self.connection.closing()
            self._fail(
                AlreadyClosed(
                    "the producer was closed while reconnecting: sends without a receipt "
                    "failed (they may or may not have been stored)"
                )
            )
            return
        self.send_batch()
        pending = [f for b in self._inflight for f in b.futures]
        if pending and self._error is None:
            timeout = self.config.send_timeout_ms / 1000 or None
            await asyncio.wait(pending, timeout=timeout)
        self.connection.closing()
        if self._writer is not None:
            await self._writer.close()
        if self._reader is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._reader), CLOSE_GRACE_S)
        self._fail(AlreadyClosed("the producer is closed"))

    def _lost(self, call: StreamCall, error: PulsarException) -> None:
        """A stream ended: reconnect (retryable error) or fail (closing, or not retryable)."""
        if call is not self._call:
            return  # an older stream, already replaced
        state = self.connection.state
        if state is HandleState.READY and self.connection.retries(error):
            self._drop_stream()
            self.connection.lost(error)
        elif state is HandleState.READY or (state is HandleState.CLOSING and self._inflight):
            self._fail(error)

    def _drop(self, error: PulsarException) -> None:
        """End the current stream as lost with ``error`` (its connection reconnects)."""
        if self._call is not None:
            self._lost(self._call, error)

    def _drop_stream(self) -> None:
        cancel_stream(self._reader, self._writer, self._call)
        self._reader = self._writer = self._call = None

    def _fail(self, error: PulsarException) -> None:
        """Fail every pending send with ``error`` and close for good (first error wins)."""
        if self._error is None:
            self._error = error
        self.connection.closed()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        drained = self._container.drain(self._next_sequence_id)
        futures = [f for _, _, tokens in drained for f in tokens]
        for batch in self._inflight:
            futures.extend(batch.futures)
        self._inflight.clear()
        for future in futures:
            if not future.done():
                future.set_exception(self._error)
        if futures:
            self.on_settled(len(futures))
        if self._timeout_task is not None and self._timeout_task is not asyncio.current_task():
            self._timeout_task.cancel()
        self._drop_stream()

    async def _read_loop(self, call: StreamCall) -> None:
        try:
            while True:
                response = await call.read()
                if response is grpc.aio.EOF:
                    if self._inflight or self.connection.state is HandleState.READY:
                        self._lost(call, ConnectError("the broker ended the produce stream"))
                    return
                kind = response.WhichOneof("response")
                if kind == "receipts":  # batches stored together (x-pulsar-grouped-receipts)
                    for receipt in response.receipts.receipts:
                        self.on_receipt(receipt)
                elif kind == "receipt":
                    self.on_receipt(response.receipt)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._lost(call, as_pulsar_error(exc))

    async def _expire(self) -> None:
        """Fail every pending send once the oldest batch is older than the send timeout."""
        while self._inflight:
            delay = self._inflight[0].deadline - self._loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
                continue
            error = Timeout(
                f"no receipt within send_timeout_millis={self.config.send_timeout_ms} "
                f"(connection {self.connection.state.value})"
            )
            futures = [f for b in self._inflight for f in b.futures]
            self._inflight.clear()
            for future in futures:
                if not future.done():
                    future.set_exception(error)
            self.on_settled(len(futures))


SendCallback = Callable[[Result, MessageId | None], object]


def report_to(callback: SendCallback, future: asyncio.Future[MessageId]) -> None:
    """Tell a ``send_async`` callback how its send ended, as pulsar-client does:
    ``callback(Result.Ok, message_id)`` or ``callback(<the failure's Result>, None)``."""
    if future.cancelled():
        callback(Result.Interrupted, None)
        return
    error = future.exception()  # read, so asyncio does not log it as never retrieved
    if error is None:
        callback(Result.Ok, future.result())
    elif isinstance(error, PulsarException):
        callback(error.error(), None)
    else:
        callback(Result.UnknownError, None)


def refuse_unsupported_send(
    replication_clusters: Sequence[str] | None,
    deliver_at: int | None,
    deliver_after: timedelta | None,
) -> None:
    """pulsar-client's send options that this broker cannot honour take only None."""
    refuse_unsupported(
        "send",
        replication_clusters=(replication_clusters, None),
        deliver_at=(deliver_at, None),
        deliver_after=(deliver_after, None),
    )


def _ordering_key(ordering_key: str | bytes | None) -> bytes | None:
    return ordering_key.encode() if isinstance(ordering_key, str) else ordering_key


class Producer:
    """Publishes to a topic; for a partitioned topic, to all its partitions.

    >>> async with await client.create_producer("my-topic") as producer:
    ...     msg_id = await producer.send(b"hello", properties={"a": "1"}, partition_key="k")
    ...     producer.send_async(b"x", lambda result, msg_id: print(result, msg_id))
    ...     futures = [await producer.enqueue(b"x%d" % i) for i in range(1000)]
    ...     ids = await asyncio.gather(*futures)

    At most ``max_pending_messages`` sends are pending (batched or without a receipt) across
    all partitions. Beyond it a send fails at once with :class:`ProducerQueueIsFull`, or, with
    ``block_if_queue_full=True``, ``send`` and ``enqueue`` wait for room in call order.
    ``send_async`` never waits (an event loop cannot block): its callback gets
    ``Result.ProducerQueueIsFull``.
    """

    def __init__(
        self,
        topic: str,
        partitions: list[PartitionProducer],
        router: Router | None,
        max_pending_messages: int,
        block_if_queue_full: bool = False,
        schema: Schema | None = None,
    ) -> None:
        self._topic = topic
        # Turns each value sent into its payload (a TypeError for a value of the wrong type,
        # worded as pulsar-client's: without a schema, as its BytesSchema, anything but bytes).
        self._encode: Callable[[Any], bytes] = (schema or BytesSchema()).encode
        self._schema = schema
        self._partitions = partitions
        self._router = router
        # The application's message_router, if any: looked up once, not on every send.
        self._custom_router = None if router is None else router.custom
        # One budget for all partitions, so memory stays bounded however many there are.
        self._max_pending = max_pending_messages
        self._block_if_queue_full = block_if_queue_full
        self._pending = 0
        # Sends waiting for room (block_if_queue_full), first come first served: a slot freed
        # by a receipt is handed to the oldest waiter, never to a newer send that overtakes it.
        self._waiters: deque[asyncio.Future[None]] = deque()
        for partition in partitions:
            partition.on_settled = self._settled
        self._closed = False

    def topic(self) -> str:
        """The topic's full name (``persistent://public/default/t`` for ``t``), as
        pulsar-client's ``topic()``."""
        return self._topic

    def producer_name(self) -> str:
        """The producer's name (given or generated by the broker; of partition 0 if partitioned)."""
        return self._partitions[0].producer_name

    def last_sequence_id(self) -> int:
        """The highest sequence id the broker stored for this producer (-1: none), as
        pulsar-client's ``last_sequence_id()``."""
        return max(p.last_sequence_id for p in self._partitions)

    def schema(self) -> Schema | None:
        """The schema values are sent with (None: bytes, as given)."""
        return self._schema

    def schema_version(self) -> bytes:
        """The version under which the topic holds the producer's schema (Pulsar's 8 bytes,
        from ProducerReady); empty without a schema."""
        return self._partitions[0].schema_version

    def is_connected(self) -> bool:
        """Whether every partition's stream is open (False while reconnecting or closed)."""
        return all(p.state is HandleState.READY for p in self._partitions)

    async def send(
        self,
        content: Any,
        properties: Mapping[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | bytes | None = None,
        sequence_id: int | None = None,
        replication_clusters: Sequence[str] | None = None,
        disable_replication: bool | None = None,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: timedelta | None = None,
    ) -> MessageId:
        """Publish one message and wait until it is stored; pulsar-client's ``send``.
        ``content`` is bytes, or a value of the producer's schema (encoded by it), or None
        for a null value (a compaction tombstone, never given to the schema): its consumers
        see ``has_null_value()`` True, ``data()`` empty and ``value()`` None.

        ``partition_key`` picks the partition (and is the Key_Shared key unless
        ``ordering_key`` is set); ``event_timestamp`` is in ms since the epoch;
        ``sequence_id`` overrides the producer's next id (later ones go on from it).
        The parameters are pulsar.asyncio's; ``replication_clusters``, ``deliver_at`` and
        ``deliver_after`` take only None (no replication, no delayed delivery here), and
        ``disable_replication`` is always true in effect.

        >>> await producer.send(b"data", partition_key="user-1", event_timestamp=1700000000000)
        MessageId(partition=-1, ledger_id=3, entry_id=0, batch_index=0)
        """
        refuse_unsupported_send(replication_clusters, deliver_at, deliver_after)
        future = await self.enqueue(
            content,
            properties,
            partition_key,
            ordering_key,
            sequence_id,
            event_timestamp=event_timestamp,
        )
        return await future

    def send_async(
        self,
        content: Any,
        callback: SendCallback,
        properties: Mapping[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | bytes | None = None,
        sequence_id: int | None = None,
        replication_clusters: Sequence[str] | None = None,
        disable_replication: bool = False,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: timedelta | None = None,
    ) -> None:
        """Queue one message without waiting; pulsar-client's ``send_async``.

        ``callback(result, message_id)`` runs on the event loop once the broker stored the
        message (``Result.Ok`` and its id) or the send failed (the failure's :class:`Result`
        and None), also when it fails at once: producer closed, queue full. A message that
        deduplication dropped gets an id with ``ledger_id == -1``.

        >>> producer.send_async(b"data", lambda result, msg_id: print(result, msg_id))
        """
        refuse_unsupported_send(replication_clusters, deliver_at, deliver_after)
        payload = None if content is None else self._encode(content)
        ordering = _ordering_key(ordering_key)
        try:
            message = frame_message(payload, partition_key, ordering, properties, event_timestamp)
            self._check_open()
            index = (
                None
                if self._custom_router is None
                else self._custom_route(
                    content, payload, partition_key, ordering, properties, event_timestamp
                )
            )
            if not self._take_slot_now():
                raise self._queue_full()
            future = self._add(message, partition_key, ordering, sequence_id, index)
        except PulsarException as exc:
            asyncio.get_running_loop().call_soon(callback, exc.result(), None)
            return
        future.add_done_callback(partial(report_to, callback))

    async def enqueue(
        self,
        content: Any,
        properties: Mapping[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | bytes | None = None,
        sequence_id: int | None = None,
        *,
        event_timestamp: int | None = None,
    ) -> asyncio.Future[MessageId]:
        """Queue one message and return the future of its id, without waiting for the broker:
        the asyncio way to keep many sends in flight. Waits only for room in the queue
        (``block_if_queue_full=True``); otherwise a full queue raises
        :class:`ProducerQueueIsFull`.

        >>> futures = [await producer.enqueue(b"x%d" % i) for i in range(10_000)]
        >>> ids = await asyncio.gather(*futures)
        """
        # Bytes without an ordering key (the common send) skip two calls: per message, they
        # are a measurable share of what the SDK costs.
        ordering = ordering_key if ordering_key is None else _ordering_key(ordering_key)
        payload = (
            content
            if content is None or (self._schema is None and type(content) is bytes)
            else self._encode(content)
        )
        message = frame_message(payload, partition_key, ordering, properties, event_timestamp)
        self._check_open()
        index = (
            None
            if self._custom_router is None
            else self._custom_route(
                content, payload, partition_key, ordering, properties, event_timestamp
            )
        )
        if not self._take_slot_now():
            if not self._block_if_queue_full:
                raise self._queue_full()
            await self._wait_for_slot()
        return self._add(message, partition_key, ordering, sequence_id, index)

    async def enqueue_framed(
        self, message: bytes, key: str | None, ordering_key: bytes | None
    ) -> asyncio.Future[MessageId]:
        """Queue a message framed already (client/_wire.py), waiting for room: for what the
        SDK publishes itself (client/_retry.py), which may carry request fields a send has
        no argument for."""
        self._check_open()
        if not self._take_slot_now():
            await self._wait_for_slot()
        return self._add(message, key, ordering_key, None)

    def _custom_route(
        self,
        content: Any,
        payload: bytes | None,
        partition_key: str | None,
        ordering: bytes | None,
        properties: Mapping[str, str] | None,
        event_timestamp: int | None,
    ) -> int:
        """The partition the custom message_router chooses (callers check that there is one:
        without it the routing mode chooses in :meth:`_add`, and a send makes no message
        object nor this call)."""
        assert self._router is not None
        routed = RoutedMessage(
            content,
            payload,
            partition_key,
            ordering,
            dict(properties) if properties else None,
            event_timestamp,
        )
        return self._router.route(routed)

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosed("the producer is closed")

    def _queue_full(self) -> ProducerQueueIsFull:
        return ProducerQueueIsFull(
            f"{self._pending} sends are pending, max_pending_messages={self._max_pending} "
            "(block_if_queue_full=True waits for room instead)"
        )

    def _take_slot_now(self) -> bool:
        """Take a pending slot if one is free and nobody waits for one."""
        if self._pending < self._max_pending and not self._waiters:
            self._pending += 1
            return True
        return False

    async def _wait_for_slot(self) -> None:
        """Wait until :meth:`_settled` hands this send a slot (oldest waiter first)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._settled(1)  # handed a slot just before the cancel: pass it on
            raise

    def _add(
        self,
        message: bytes,
        key: str | None,
        ordering_key: bytes | None,
        sequence_id: int | None,
        index: int | None = None,
    ) -> asyncio.Future[MessageId]:
        """Hand a message that holds a slot to its partition's producer (``index``: the one
        a custom router chose already)."""
        if index is None:
            index = self._router.choose(key) if self._router is not None else 0
        try:
            return self._partitions[index].add(message, ordering_key or key, sequence_id)
        except BaseException:
            self._settled(1)
            raise

    def _settled(self, count: int) -> None:
        self._pending -= count
        while self._waiters and self._pending < self._max_pending:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._pending += 1
                waiter.set_result(None)

    async def flush(self) -> None:
        """Send every batched message now and wait until the broker stored them."""
        await asyncio.gather(*(p.flush() for p in self._partitions))

    async def close(self) -> None:
        """Flush, then close the streams; sends waiting for room fail with AlreadyClosed.
        A second close raises AlreadyClosed, as pulsar-client's."""
        if self._closed:
            raise AlreadyClosed(f"the producer of {self._topic} is already closed")
        await self.close_if_open()

    async def close_if_open(self) -> None:
        """:meth:`close` unless closed already (what leaving ``async with`` does)."""
        if self._closed:
            return
        self._closed = True
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(AlreadyClosed("the producer was closed"))
        await asyncio.gather(*(p.close() for p in self._partitions))

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close_if_open()
