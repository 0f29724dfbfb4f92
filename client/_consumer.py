"""The application's consumer, with Pulsar's Python API: receive, batch receive, a message
listener, acks routed to the stream a message came from, seek.

One :class:`Consumer` serves a topic, a partitioned topic (a stream per partition), a list of
topics or a pattern (a stream per topic or partition, streams added as topics appear): all
its streams (``PartitionConsumer``) share one receive queue.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import weakref
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from functools import partial
from typing import TYPE_CHECKING, NoReturn

from ._connection import HandleState
from ._crypto_message import EncryptedMessage, failed_decryption
from ._errors import (
    AlreadyClosed,
    CryptoError,
    CumulativeAcknowledgementNotAllowedError,
    InvalidConfiguration,
    OperationNotSupported,
    PulsarException,
    Timeout,
)
from ._headers import Header
from ._key_shared import ConsumerKeySharedPolicy, key_shared_params
from ._message import Message
from ._message_id import MessageId, TopicMessageId
from ._partition_consumer import ConsumerConfig, ConsumerType, MessageQueue, PartitionConsumer
from ._retry import RetryLetter
from ._stream import Params

if TYPE_CHECKING:
    from ._multi_consumer import PatternWatcher

log = logging.getLogger(__name__)

MessageTarget = Message | MessageId
# isinstance with a tuple: faster than with the union, on every ack.
_ONE = (Message, MessageId)


class _Done:
    """An awaitable that is complete already: what a call that did its work at once returns,
    so that awaiting it (as pulsar-client's asyncio API asks) and not awaiting it both work."""

    def __await__(self) -> Generator[None, None, None]:
        return
        yield  # a generator that ends at once: ``await`` returns None


_DONE = _Done()
# What a message listener may be: a plain function or a coroutine function.
MessageListener = Callable[["Consumer", Message], Awaitable[None] | None]


@dataclass(frozen=True, slots=True)
class ConsumerBatchReceivePolicy:
    """When :meth:`Consumer.batch_receive` returns (Pulsar's BatchReceivePolicy): once the
    batch holds ``max_num_message`` messages or ``max_num_bytes`` bytes of payload, or
    ``timeout_ms`` after the call; 0 or below is no limit. The defaults are Pulsar's.

    >>> ConsumerBatchReceivePolicy(100, -1, 50)
    ConsumerBatchReceivePolicy(max_num_message=100, max_num_bytes=-1, timeout_ms=50)
    """

    max_num_message: int = -1
    max_num_bytes: int = 10 * 1024 * 1024
    timeout_ms: int = 100

    def __post_init__(self) -> None:
        if self.max_num_message <= 0 and self.max_num_bytes <= 0 and self.timeout_ms <= 0:
            raise ValueError(
                "a batch receive policy needs at least one of max_num_message, max_num_bytes "
                "and timeout_ms above 0"
            )


# The name pulsar-client's C extension gives it.
BatchReceivePolicy = ConsumerBatchReceivePolicy


class InitialPosition(StrEnum):
    """Where a new subscription starts."""

    Latest = "Latest"
    Earliest = "Earliest"


@dataclass(frozen=True, slots=True)
class DeadLetterPolicy:
    """After ``max_redeliver_count`` redeliveries a message goes to the dead-letter topic
    (default ``<topic>-<subscription>-DLQ``). ``initial_subscription_name``: a durable
    subscription the dead-letter topic gets (from its earliest message) before its first
    message is written, so no dead letter is missed by a consumer subscribing later.
    ``retry_letter_topic`` (Java's, beyond pulsar-client): where a consumer subscribed with
    ``retry_enable=True`` reconsumes (default ``<topic>-<subscription>-RETRY``)."""

    max_redeliver_count: int
    dead_letter_topic: str | None = None
    initial_subscription_name: str | None = None
    retry_letter_topic: str | None = None


# pulsar-client's name for it.
ConsumerDeadLetterPolicy = DeadLetterPolicy


def as_consumer_type(value: ConsumerType | str) -> ConsumerType:
    """``ConsumerType.Shared``, or its name in any case ("shared", "key_shared")."""
    for member in ConsumerType:
        if value.lower().replace("_", "") == member.value.lower().replace("_", ""):
            return member
    raise ValueError(f"unknown subscription type {value!r}: expected one of {list(ConsumerType)}")


def as_initial_position(value: InitialPosition | str) -> InitialPosition:
    """``InitialPosition.Earliest``, or its name in any case."""
    for member in InitialPosition:
        if value.lower() == member.value.lower():
            return member
    raise ValueError(f"unknown initial position {value!r}: expected latest or earliest")


def subscription_params(
    subscription_name: str,
    consumer_type: ConsumerType,
    consumer_name: str | None,
    initial_position: InitialPosition,
    priority_level: int,
    negative_ack_redelivery_delay_ms: int,
    unacked_messages_timeout_ms: int | None,
    dead_letter_policy: DeadLetterPolicy | None,
    key_shared_policy: ConsumerKeySharedPolicy | None,
) -> Params:
    """The Consume call's parameters (PIP-59 call metadata) for a durable subscription; a
    key_shared_policy counts on a Key_Shared one only, as in pulsar-client.

    A blank name is refused here, before any call, as Pulsar's Java client refuses it
    (InvalidConfiguration "Empty subscription name"), rather than by the broker's answer to
    a call without the parameter."""
    if not subscription_name.strip():
        raise InvalidConfiguration("Empty subscription name")
    params: Params = {
        Header.SUBSCRIPTION: subscription_name,
        Header.SUBSCRIPTION_TYPE: consumer_type.value,
        Header.CONSUMER_NAME: consumer_name,
        Header.INITIAL_POSITION: initial_position.value,
        Header.PRIORITY_LEVEL: priority_level,
        Header.NEGATIVE_ACK_DELAY_MS: negative_ack_redelivery_delay_ms,
        Header.ACK_TIMEOUT_MS: unacked_messages_timeout_ms or 0,
    }
    if dead_letter_policy is not None:
        params[Header.MAX_REDELIVER_COUNT] = dead_letter_policy.max_redeliver_count
        params[Header.DEAD_LETTER_TOPIC] = dead_letter_policy.dead_letter_topic
        params[Header.DEAD_LETTER_INITIAL_SUBSCRIPTION] = (
            dead_letter_policy.initial_subscription_name
        )
    if consumer_type is ConsumerType.KeyShared:
        params.update(key_shared_params(key_shared_policy))
    return params


class Consumer:
    """Receives from a subscription: one topic, a partitioned topic's partitions merged, a
    list of topics or the topics of a pattern.

    >>> consumer = await client.subscribe("my-topic", "my-sub", ConsumerType.Shared)
    >>> msg = await consumer.receive(timeout_millis=1000)
    >>> print(msg.data(), msg.topic_name())
    >>> await consumer.acknowledge(msg)
    """

    def __init__(
        self,
        topic: str,
        subscription_name: str,
        config: ConsumerConfig,
        queue: MessageQueue,
        message_listener: MessageListener | None = None,
        batch_receive_policy: ConsumerBatchReceivePolicy | None = None,
    ) -> None:
        self._topic = topic
        self._subscription = subscription_name
        self._config = config
        self._zero_queue = not config.receiver_queue_size  # Pulsar's ZeroQueueConsumerImpl
        self._queue = queue
        # Streams by the full name of their topic (partition): where a message's ack goes.
        self._streams: dict[str, PartitionConsumer] = {}
        # A single topic's streams by partition index: where a bare MessageId's ack goes.
        self._partitions: dict[int, PartitionConsumer] = {}
        self._batch_policy = batch_receive_policy or ConsumerBatchReceivePolicy()
        self._listener = message_listener
        self._listener_task: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()
        self._listening.set()
        # What closing needs, kept apart from self so that a dropped consumer can be closed.
        self._watchers: list[PatternWatcher] = []
        self._loop = asyncio.get_running_loop()
        self._closed = False
        # Told of each batch held back under crypto_failure_action=FAIL (a reader counts it
        # as read).
        self.held_back: Callable[[EncryptedMessage], None] | None = None
        # The client's get_last_message_id (set by subscribe).
        self.last_message_id_of: Callable[[str], Awaitable[MessageId | None]] | None = None
        # Where reconsume_later publishes (set by subscribe with retry_enable=True).
        self.retry_letter: RetryLetter | None = None

    # ------------------------------------------------------------ set up by the client

    def add_streams(self, streams: Iterable[PartitionConsumer]) -> None:
        """Streams the client is starting for this consumer (at subscribe, or for a topic a
        pattern consumer discovered later): known before their first message arrives."""
        for stream in streams:
            self._streams[stream.topic] = stream
            if not self._config.topic_ids:
                self._partitions[stream.partition] = stream

    def remove_streams(self, streams: Iterable[PartitionConsumer]) -> None:
        """Streams that failed to start (the client closed them)."""
        for stream in streams:
            self._streams.pop(stream.topic, None)
            self._partitions.pop(stream.partition, None)

    async def forget_topics(self, topics: list[str]) -> None:
        """Close the streams on ``topics`` (full names of topics or partitions) and drop what
        they queued, without unsubscribing: a pattern consumer's topic that stopped matching."""
        streams = [self._streams.pop(t) for t in topics if t in self._streams]
        for stream in streams:
            if self._partitions.get(stream.partition) is stream:
                del self._partitions[stream.partition]
            stream.drop_queued()
        await asyncio.gather(*(s.close() for s in streams))

    def new_stream(self, topic: str, partition: int) -> PartitionConsumer:
        """A stream on ``topic`` (full name; a partition's for a partitioned topic) feeding
        this consumer's queue; the client adds it with :meth:`add_streams`, then starts it."""
        # A multi-topic consumer outlives a topic that fails for good (deleted, refused):
        # as Pulsar's MultiTopicsConsumerImpl, it goes on with the others.
        # Weak: a stream must not keep a consumer the application dropped alive.
        drop_failed = weakref.WeakMethod(self._drop_failed)

        def on_failed(stream: PartitionConsumer, error: PulsarException) -> None:
            method = drop_failed()
            if method is not None:
                method(stream, error)

        return PartitionConsumer(
            self._config,
            self._queue,
            topic,
            partition,
            on_failed if self._config.topic_ids else None,
        )

    def _drop_failed(self, stream: PartitionConsumer, error: PulsarException) -> None:
        """A stream of a multi-topic consumer failed for good: forget it and what it queued
        (unacked, so the broker redelivers it if the topic comes back)."""
        if self._closed or isinstance(error, AlreadyClosed):
            return
        if self._streams.get(stream.topic) is stream:
            del self._streams[stream.topic]
            stream.drop_queued()
            log.warning("consumer of %s: dropped %s: %s", self._topic, stream.topic, error)
        if not self._streams and not self._watchers:
            self._queue.fail(error)  # a list whose every topic failed: nothing left to wait for

    def watch(self, watcher: PatternWatcher) -> None:
        """Own ``watcher`` (a pattern consumer's topic discovery): closed with the consumer."""
        self._watchers.append(watcher)

    def closer(self) -> tuple[asyncio.AbstractEventLoop, Callable[[], Awaitable[None]]]:
        """The loop of this consumer and a function that closes its streams and topic
        discovery without referring to the consumer: what the client runs once the
        application dropped it (a listener keeps its consumer alive, so is not dropped)."""
        streams, watchers = self._streams, self._watchers

        async def close() -> None:
            await asyncio.gather(*(w.close() for w in watchers))
            await asyncio.gather(*(s.close() for s in list(streams.values())))

        return self._loop, close

    def start_listener(self) -> None:
        """Call the message listener for each message, from a task of this consumer."""
        if self._listener is not None and self._listener_task is None:
            self._listener_task = asyncio.get_running_loop().create_task(self._listen())

    def subscribed_topics(self) -> set[str]:
        """Full names of the topics (partitions) this consumer has a stream on."""
        return set(self._streams)

    # ------------------------------------------------------------ Pulsar's accessors

    def topic(self) -> str:
        """The topic's full name, as pulsar-client's (``persistent://public/default/t`` for
        ``t``); for a list, the full names joined with commas; for a pattern, its text."""
        return self._topic

    async def get_last_message_id(self) -> MessageId:
        """The id of the last message stored in the topic, as pulsar-client's
        ``get_last_message_id()``; ``MessageId.earliest`` while the topic is empty.

        Like pulsar-client's, only for a consumer of one topic that is not partitioned: a
        partitioned, multi-topic or pattern consumer raises :class:`OperationNotSupported`
        (``Client.get_last_message_id(topic)`` answers for each partition).

        >>> await consumer.get_last_message_id()
        MessageId(partition=-1, ledger_id=3, entry_id=41, batch_index=0)
        """
        if self._closed:
            raise AlreadyClosed(f"consumer of {self._topic} is closed")
        if set(self._partitions) != {-1} or len(self._streams) != 1 or not self.last_message_id_of:
            raise OperationNotSupported(
                "get_last_message_id takes a consumer of one non-partitioned topic, as "
                "pulsar-client's; use Client.get_last_message_id(topic) for each partition"
            )
        [topic] = self._streams
        last = await self.last_message_id_of(topic)
        return MessageId.earliest if last is None else last

    def subscription_name(self) -> str:
        """The subscription's name."""
        return self._subscription

    def consumer_name(self) -> str:
        """The consumer's name (given or generated by the broker)."""
        stream = next(iter(self._streams.values()), None)
        return stream.consumer_name if stream is not None else ""

    def is_connected(self) -> bool:
        """Whether every stream is open (none is reconnecting)."""
        return not self._closed and all(
            s.state is HandleState.READY for s in self._streams.values()
        )

    @property
    def is_active(self) -> bool | None:
        """Failover: whether this consumer is the active one (None until the broker says)."""
        stream = next(iter(self._streams.values()), None)
        return stream.is_active if stream is not None else None

    def queued(self) -> int:
        """Messages received and not yet handed to the application."""
        return len(self._queue)

    def has_reached_end_of_topic(self) -> bool:
        """Whether the topic (every partition) was terminated and fully consumed."""
        return all(p.reached_end_of_topic for p in self._streams.values())

    # ------------------------------------------------------------ receiving

    async def receive(
        self, timeout_millis: int | None = None, *, timeout_ms: int | None = None
    ) -> Message:
        """The next message; raises :class:`Timeout` after ``timeout_millis`` (None: wait).

        ``timeout_ms`` is the name earlier versions used. Not with a message listener
        (:class:`InvalidConfiguration`), as Pulsar's.

        >>> msg = await consumer.receive(timeout_millis=1000)
        """
        if self._closed or self._listener is not None:
            self._check_receive()
        timeout = timeout_millis if timeout_millis is not None else timeout_ms
        queue = self._queue
        if self._zero_queue:
            if timeout is not None:
                raise InvalidConfiguration(
                    "Can't use receive with timeout, if the queue size is 0 (as Pulsar's client)"
                )
            if not len(queue):  # ask for the one message this call returns
                for stream in self._streams.values():
                    stream.want_one()
        # Under load a message is waiting: take it without a coroutine, a timer or an event.
        message = queue.take() or await queue.get(None if timeout is None else timeout / 1000)
        self._streams[message._origin.topic_name].dequeued(message)
        if isinstance(message, EncryptedMessage):
            if message.held_back():  # crypto_failure_action=FAIL: wait on for the next one
                return await self._after_held_back(message, wait_ms=timeout)
            message.raise_if_failed()  # crypto_failure_action=RAISE: an error in its place
        return message

    async def _after_held_back(self, message: EncryptedMessage, wait_ms: int | None) -> Message:
        """receive() went past a batch it cannot decrypt under FAIL (logged when it came, as
        pulsar-client's, and left unacknowledged): the next message within ``wait_ms`` from
        now (receive's timeout counts again from the held-back batch: the hot path of receive
        reads no clock), else Timeout."""
        loop = asyncio.get_running_loop()
        deadline = None if wait_ms is None else loop.time() + wait_ms / 1000
        while True:
            if self.held_back is not None:
                self.held_back(message)
            if self._zero_queue and not len(self._queue):
                for stream in self._streams.values():
                    stream.want_one()
            left = None if deadline is None else max(0.0, deadline - loop.time())
            taken = self._queue.take() or await self._queue.get(left)
            self._streams[taken._origin.topic_name].dequeued(taken)
            if not isinstance(taken, EncryptedMessage):
                return taken
            if not taken.held_back():
                taken.raise_if_failed()
                return taken
            message = taken

    async def batch_receive(self) -> list[Message]:
        """Messages received, at most the batch receive policy's count and bytes, waiting at
        most its timeout (maybe none, then an empty list).

        >>> for msg in await consumer.batch_receive():
        ...     await consumer.acknowledge(msg)
        """
        self._check_receive()
        if not self._config.receiver_queue_size:
            raise InvalidConfiguration("batch_receive needs a receiver queue (size above 0)")
        policy = self._batch_policy
        max_count, max_bytes = policy.max_num_message, policy.max_num_bytes
        loop = asyncio.get_running_loop()
        deadline = loop.time() + policy.timeout_ms / 1000 if policy.timeout_ms > 0 else None
        queue, streams = self._queue, self._streams
        batch: list[Message] = []
        size = 0
        while max_count <= 0 or len(batch) < max_count:
            message = queue.take()  # what is queued already: no coroutine, no clock
            if message is None:
                remaining = None if deadline is None else max(0.0, deadline - loop.time())
                if remaining == 0.0:
                    break
                try:
                    message = await queue.get(remaining)
                except Timeout:
                    break
                except PulsarException:  # closed or failed: hand out what was taken, raise next
                    if batch:
                        break
                    raise
            if batch and failed_decryption(message):
                queue.put_back(message)  # its error is the next call's
                break
            if isinstance(message, EncryptedMessage) and message.held_back():
                streams[message._origin.topic_name].dequeued(message)  # FAIL: not delivered
                if self.held_back is not None:
                    self.held_back(message)
                continue
            if max_bytes > 0:
                length = len(message.data())
                if batch and size + length > max_bytes:
                    queue.put_back(message)  # first of the next batch
                    break
                size += length
            streams[message._origin.topic_name].dequeued(message)
            if isinstance(message, EncryptedMessage):
                message.raise_if_failed()
            batch.append(message)
            if max_bytes > 0 and size >= max_bytes:
                break
        return batch

    def pause_message_listener(self) -> None:
        """Stop calling the message listener until :meth:`resume_message_listener`; messages
        keep arriving up to the receiver queue's size."""
        self._listening.clear()

    def resume_message_listener(self) -> None:
        """Call the message listener again, first with what arrived while paused."""
        self._listening.set()

    # ------------------------------------------------------------ acknowledging

    async def reconsume_later(
        self,
        message: Message,
        delay: timedelta | int,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        """Java's ``reconsumeLater``: publish a copy of ``message`` to the retry letter topic,
        delivered ``delay`` (a timedelta, or ms) from now, and acknowledge the original; a
        message reconsumed more than the dead-letter policy's ``max_redeliver_count`` times
        goes to the dead-letter topic instead. ``properties`` are added to the copy's. Needs
        ``retry_enable=True`` on subscribe.

        >>> await consumer.reconsume_later(msg, timedelta(seconds=10))
        """
        if self.retry_letter is None:
            raise InvalidConfiguration("reconsume_later needs retry_enable=True on subscribe")
        await self.retry_letter.reconsume_later(
            message, delay, properties, partial(self.acknowledge, wait=True)
        )

    async def acknowledge(
        self, message: MessageTarget | Sequence[MessageTarget], *, wait: bool = False
    ) -> None:
        """Acknowledge a message, a message id, or a list of messages or message ids.

        Acks are grouped and sent within ``ack_group_time_ms``; with ``wait=True`` they go
        out at once and this returns when the broker reports them durable. Once every
        message of a produced batch is acked, the batch goes out as one id.

        >>> await consumer.acknowledge(msg)
        >>> await consumer.acknowledge(await consumer.batch_receive())
        >>> await consumer.acknowledge([m.message_id() for m in batch])
        """
        if not wait and isinstance(message, Message):  # the hot path: no id, no list
            stream = self._streams.get(message._origin.topic_name)
            if stream is not None:
                stream.acknowledge_message(message)
                return
        if not isinstance(message, _ONE):
            await self._ack(list(message), cumulative=False, wait=wait)
            return
        stream, message_id = self._route(message)
        if wait:
            await stream.acknowledge_and_wait([message_id], False)
        else:
            stream.acknowledge(message_id, False)

    async def acknowledge_cumulative(self, message: MessageTarget, *, wait: bool = False) -> None:
        """Acknowledge this message and every earlier one of its partition (not for Shared).

        >>> await consumer.acknowledge_cumulative(last_msg)
        """
        if self._config.subscription_type in (ConsumerType.Shared, ConsumerType.KeyShared):
            raise CumulativeAcknowledgementNotAllowedError(
                "Cannot use cumulative acks with a Shared or Key_Shared subscription"
            )
        await self._ack([message], cumulative=True, wait=wait)

    def negative_acknowledge(self, message: MessageTarget) -> Awaitable[None]:
        """Ask for the redelivery of a message after the negative-ack delay.

        A coroutine in pulsar-client's ``pulsar.asyncio``, so it is awaited there; here the
        nack is recorded at the call and what it returns is already done, so a caller that
        forgets the ``await`` loses nothing (issue 29).

        >>> await consumer.negative_acknowledge(msg)
        """
        stream, message_id = self._route(message)
        stream.negative_acknowledge(message_id)
        return _DONE

    async def redeliver_unacknowledged_messages(self) -> None:
        """Have the broker redeliver every unacked message; drops the local queue.

        >>> await consumer.redeliver_unacknowledged_messages()
        """
        await asyncio.gather(*(p.redeliver_unacknowledged() for p in self._streams.values()))

    async def seek(self, messageid: MessageTarget | int) -> None:
        """Reset the subscription to a message id or a publish time (ms since the epoch).

        A message id of one partition (or, for a multi-topic consumer, of one topic) moves
        only that partition, as Pulsar's; ``MessageId.earliest``, ``MessageId.latest`` and
        publish times move every one.

        >>> await consumer.seek(MessageId.earliest)
        >>> await consumer.seek(int(time.time() * 1000) - 60_000)
        """
        if not isinstance(messageid, Message) and (
            isinstance(messageid, int) or messageid in (MessageId.earliest, MessageId.latest)
        ):
            everywhere = messageid
            await asyncio.gather(*(p.seek(everywhere) for p in self._streams.values()))
            return
        stream, message_id = self._route(messageid)
        await stream.seek(message_id)

    async def unsubscribe(self) -> None:
        """Delete the subscription, then close.

        >>> await consumer.unsubscribe()
        """
        await self._stop_background()
        await asyncio.gather(*(p.unsubscribe() for p in self._streams.values()))
        await self.close()

    async def close(self) -> None:
        """Send grouped acks and close the streams. A second close raises AlreadyClosed, as
        pulsar-client's.

        >>> await consumer.close()
        """
        if self._closed:
            raise AlreadyClosed(f"the consumer of {self._topic} is already closed")
        await self.close_if_open()

    async def close_if_open(self) -> None:
        """:meth:`close` unless closed already (what leaving ``async with`` does)."""
        if self._closed:
            return
        self._closed = True
        await self._stop_background()
        if self.retry_letter is not None:
            await self.retry_letter.close()
        await asyncio.gather(*(p.close() for p in self._streams.values()))
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
        await self.close_if_open()

    # ------------------------------------------------------------ internals

    def _check_receive(self) -> None:
        if self._closed:
            raise AlreadyClosed("the consumer is closed")
        if self._listener is not None and asyncio.current_task() is not self._listener_task:
            raise InvalidConfiguration("Cannot receive when a message listener has been set")

    async def _listen(self) -> None:
        """Hand each message to the listener, one at a time, in order; a listener that
        raises is logged (as Pulsar's) and gets the next message."""
        assert self._listener is not None
        while True:
            await self._listening.wait()
            try:
                message = await self.receive()
            except CryptoError:  # crypto_failure_action=RAISE: logged, not delivered
                continue
            except PulsarException:  # closed, or failed for good: receive() would say so
                return
            await self._listening.wait()  # paused while waiting: hold it until resumed
            try:
                result = self._listener(self, message)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("the message listener of %s raised", self._topic)

    async def _stop_background(self) -> None:
        """Stop topic discovery and the listener (not from inside the listener itself)."""
        await asyncio.gather(*(w.close() for w in self._watchers))
        task, self._listener_task = self._listener_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _ack(self, targets: list[MessageTarget], cumulative: bool, wait: bool) -> None:
        if not wait and not cumulative:
            # Messages by stream, each stream's added at once; ids one by one.
            batches: dict[PartitionConsumer, list[Message]] = {}
            for target in targets:
                if isinstance(target, Message):
                    batches.setdefault(self._stream_of(target), []).append(target)
                else:
                    stream, message_id = self._route(target)
                    stream.acknowledge(message_id, False)
            for stream, messages in batches.items():
                stream.acknowledge_messages(messages)
            return
        routed = [self._route(t) for t in targets]
        if not wait:
            for stream, message_id in routed:
                stream.acknowledge(message_id, cumulative)
            return
        by_stream: dict[str, list[MessageId]] = {}
        for stream, message_id in routed:
            by_stream.setdefault(stream.topic, []).append(message_id)
        await asyncio.gather(
            *(
                self._streams[topic].acknowledge_and_wait(ids, cumulative)
                for topic, ids in by_stream.items()
            )
        )

    def _stream_of(self, message: Message) -> PartitionConsumer:
        """The stream ``message`` came from."""
        stream = self._streams.get(message._origin.topic_name)
        if stream is None:
            self._not_ours(message.message_id())
        return stream

    def _route(self, target: MessageTarget) -> tuple[PartitionConsumer, MessageId]:
        """The stream a message (id) belongs to, and its id."""
        if isinstance(target, Message):
            return self._stream_of(target), target.message_id()
        if isinstance(target, TopicMessageId):
            stream = self._streams.get(target.topic_name())
        else:
            stream = self._partitions.get(target.partition())
        if stream is None:
            self._not_ours(target)
        return stream, target

    def _not_ours(self, message_id: MessageId) -> NoReturn:
        hint = (
            " (a multi-topic consumer needs the message, or msg.message_id())"
            if self._config.topic_ids
            else ""
        )
        raise ValueError(f"message id {message_id} is not from {self._topic}{hint}")
