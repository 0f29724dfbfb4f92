"""Producers: batching, sequence ids, receipts, backpressure, send timeouts, reconnection.

A partition producer keeps every batch it sent until the broker's receipt for it. When the
stream breaks with a retryable error it reconnects (see ``_connection``) under the same producer
name and resends those batches, in order and with their sequence ids, before any new one: with
deduplication on the broker, nothing is stored twice. Meanwhile the application can keep
sending (bounded by ``max_pending_messages``); it sees a delay, and a :class:`Timeout` only
for sends without a receipt after ``send_timeout_ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import grpc

from pulsargrpc.v1 import pulsar_pb2 as pb

from ._batching import BatchingType, BatchKey, Container, batch_container
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
    PulsarError,
    Timeout,
    is_retryable,
)
from ._message import MessageId, ids_of_receipt
from ._routing import Router
from ._stream import (
    Connect,
    Params,
    StreamCall,
    StreamWriter,
    as_pulsar_error,
    cancel_stream,
    open_expecting,
)
from ._wire import encode_message

# How long close() gives the broker to end the stream after the last receipt.
_CLOSE_GRACE_S = 2.0


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    """Producer settings, as passed to ``Client.create_producer``."""

    batching_max_messages: int = 100
    batching_max_bytes: int = 128 * 1024
    batching_max_publish_delay_ms: float = 10
    batching_type: BatchingType = BatchingType.Default
    send_timeout_ms: int = 30000
    max_pending_messages: int = 1000
    initial_sequence_id: int | None = None
    operation_timeout_s: float = 30.0
    initial_backoff_s: float = DEFAULT_INITIAL_BACKOFF_MS / 1000
    max_backoff_s: float = DEFAULT_MAX_BACKOFF_MS / 1000
    # The channel's send limit (-1: none). A message over it is refused here: sent, it would
    # break the stream on every reconnect.
    max_message_size: int = -1


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
        self._next_sequence_id = 0
        self._loop = asyncio.get_running_loop()
        self._container: Container[asyncio.Future[MessageId]] = batch_container(
            config.batching_type, config.batching_max_messages, config.batching_max_bytes
        )
        self._inflight: deque[_InFlight] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._timeout_task: asyncio.Task[None] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._call: StreamCall | None = None
        self._writer: StreamWriter | None = None
        self._connect: Connect | None = None
        self._error: PulsarError | None = None
        self.connection = ConnectionHandler(
            f"producer partition {partition}",
            Backoff(config.initial_backoff_s, config.max_backoff_s),
            self._reopen,
            self._fail,
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
        await self.connection.connect_first(self.config.operation_timeout_s)

    async def _open(self) -> None:
        """Open a stream (the first, or a reconnect under the name the broker gave)."""
        assert self._connect is not None
        # Reconnecting under the same name keeps the broker's deduplication state ours.
        params: Params = {}
        if self.producer_name:
            params["x-pulsar-producer-name"] = self.producer_name
        call, ready = await open_expecting(
            self._connect, params, "ready", self.config.operation_timeout_s
        )
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
        if not first:  # reconnected: the client's own sequence ids go on
            self.last_sequence_id = max(self.last_sequence_id, ready.last_sequence_id)
            return
        initial = self.config.initial_sequence_id
        if initial is None:
            # -1 when nothing is stored (Python's protobuf reads the uint64 2**64-1 as -1).
            self.last_sequence_id = ready.last_sequence_id
            self._next_sequence_id = ready.last_sequence_id + 1
        else:
            # x-pulsar-initial-sequence-id: ids below it are duplicates, so it is the first id.
            self.last_sequence_id = initial - 1
            self._next_sequence_id = initial

    @property
    def pending(self) -> int:
        """Messages batched or sent and not yet receipted."""
        return len(self._container) + sum(len(b.futures) for b in self._inflight)

    def add(self, message: bytes, key: BatchKey = None) -> asyncio.Future[MessageId]:
        """Batch a message; the future resolves with its id once the broker stored it.

        ``key`` (the ordering key, else the key) matters only to key-based batching."""
        if self._error is not None:  # set when closed or failed for good
            raise self._error
        if 0 < self.config.max_message_size < len(message):
            raise MessageTooBig(
                f"a message of {len(message)} bytes is over max_message_size="
                f"{self.config.max_message_size}"
            )
        future: asyncio.Future[MessageId] = self._loop.create_future()
        if not self._container.fits(message, key):
            self.send_batch()
        self._container.add(message, future, key)
        if self._container.is_full():
            self.send_batch()
        elif len(self._container) == 1:
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
                PulsarError(
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
                await asyncio.wait_for(asyncio.shield(self._reader), _CLOSE_GRACE_S)
        self._fail(AlreadyClosed("the producer is closed"))

    def _lost(self, call: StreamCall, error: PulsarError) -> None:
        """A stream ended: reconnect (retryable error) or fail (closing, or not retryable)."""
        if call is not self._call:
            return  # an older stream, already replaced
        state = self.connection.state
        if state is HandleState.READY and is_retryable(error):
            self._drop_stream()
            self.connection.lost(error)
        elif state is HandleState.READY or (state is HandleState.CLOSING and self._inflight):
            self._fail(error)

    def _drop_stream(self) -> None:
        cancel_stream(self._reader, self._writer, self._call)
        self._reader = self._writer = self._call = None

    def _fail(self, error: PulsarError) -> None:
        """Fail every pending send with ``error`` and close for good (first error wins)."""
        if self._error is None:
            self._error = error
        self.connection.closed()
        if self._timer is not None:
            self._timer.cancel()
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
                if response.WhichOneof("response") == "receipt":
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
                f"no receipt within send_timeout_ms={self.config.send_timeout_ms} "
                f"(connection {self.connection.state.value})"
            )
            futures = [f for b in self._inflight for f in b.futures]
            self._inflight.clear()
            for future in futures:
                if not future.done():
                    future.set_exception(error)
            self.on_settled(len(futures))


class Producer:
    """Publishes to a topic; for a partitioned topic, to all its partitions.

    >>> async with await client.create_producer("my-topic") as producer:
    ...     msg_id = await producer.send(b"hello", properties={"a": "1"})
    ...     futures = [await producer.send_async(b"x%d" % i) for i in range(1000)]
    ...     ids = await asyncio.gather(*futures)
    """

    def __init__(
        self,
        topic: str,
        partitions: list[PartitionProducer],
        router: Router | None,
        max_pending_messages: int,
    ) -> None:
        self._topic = topic
        self._partitions = partitions
        self._router = router
        # One budget for all partitions, so memory stays bounded however many there are.
        self._max_pending = max_pending_messages
        self._pending = 0
        self._room = asyncio.Event()
        self._room.set()
        for partition in partitions:
            partition.on_settled = self._settled
        self._closed = False

    @property
    def topic(self) -> str:
        """The topic as given to ``create_producer``."""
        return self._topic

    @property
    def producer_name(self) -> str:
        """The producer's name (given or generated by the broker; of partition 0 if partitioned)."""
        return self._partitions[0].producer_name

    @property
    def last_sequence_id(self) -> int:
        """Highest sequence id the broker has stored for this producer (-1 or less: none)."""
        return max(p.last_sequence_id for p in self._partitions)

    async def send(
        self,
        payload: bytes,
        key: str | None = None,
        ordering_key: bytes | None = None,
        properties: Mapping[str, str] | None = None,
        event_time: int | None = None,
    ) -> MessageId:
        """Publish one message and wait until it is stored.

        >>> await producer.send(b"data", key="user-1", event_time=1700000000000)
        MessageId(ledger_id=3, entry_id=0, batch_index=0, partition=-1)
        """
        future = await self.send_async(payload, key, ordering_key, properties, event_time)
        return await future

    async def send_async(
        self,
        payload: bytes,
        key: str | None = None,
        ordering_key: bytes | None = None,
        properties: Mapping[str, str] | None = None,
        event_time: int | None = None,
    ) -> asyncio.Future[MessageId]:
        """Queue one message; returns a future of its id.

        Waits only while ``max_pending_messages`` messages are pending (block-if-queue-full).
        A message that deduplication dropped resolves to an id with ``ledger_id == -1``.

        >>> future = await producer.send_async(b"data")
        >>> msg_id = await future
        """
        if self._closed:
            raise AlreadyClosed("the producer is closed")
        message = encode_message(payload, key, ordering_key, properties, event_time)
        while self._pending >= self._max_pending:
            self._room.clear()
            await self._room.wait()
        index = self._router.choose(key) if self._router is not None else 0
        future = self._partitions[index].add(message, ordering_key or key)
        self._pending += 1
        return future

    def _settled(self, count: int) -> None:
        self._pending -= count
        self._room.set()

    async def flush(self) -> None:
        """Send every batched message now and wait until the broker stored them."""
        await asyncio.gather(*(p.flush() for p in self._partitions))

    async def close(self) -> None:
        """Flush, then close the streams. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await asyncio.gather(*(p.close() for p in self._partitions))

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
