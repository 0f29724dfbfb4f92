"""A blocking client for scripts and the CLI: the asyncio client on a background loop.

>>> with SyncClient("grpc://127.0.0.1:50051") as client:
...     producer = client.create_producer("my-topic")
...     producer.send(b"hello")
...     consumer = client.subscribe("my-topic", "sub", initial_position="earliest")
...     msg = consumer.receive(timeout_millis=1000)
...     consumer.acknowledge(msg)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from ._client import Client, LookupResult
from ._consumer import Consumer, MessageTarget
from ._errors import AlreadyClosed
from ._message import Message, MessageId
from ._producer import Producer
from ._reader import Reader

T = TypeVar("T")


class _LoopThread:
    """An event loop running in a daemon thread; ``run`` executes a coroutine on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="pulsar-grpc-client", daemon=True
        )
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        future = self.submit(coro)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # e.g. KeyboardInterrupt while blocked in receive()
            raise

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class SyncProducer:
    """Blocking :class:`~client.Producer`."""

    def __init__(self, runner: _LoopThread, producer: Producer) -> None:
        self._runner = runner
        self._producer = producer

    @property
    def topic(self) -> str:
        return self._producer.topic

    @property
    def producer_name(self) -> str:
        return self._producer.producer_name

    @property
    def last_sequence_id(self) -> int:
        return self._producer.last_sequence_id

    def send(
        self,
        payload: bytes,
        key: str | None = None,
        ordering_key: bytes | None = None,
        properties: Mapping[str, str] | None = None,
        event_time: int | None = None,
    ) -> MessageId:
        """Publish and wait until stored. ``producer.send(b"x", key="k")``"""
        return self._runner.run(
            self._producer.send(payload, key, ordering_key, properties, event_time)
        )

    def send_async(
        self,
        payload: bytes,
        key: str | None = None,
        ordering_key: bytes | None = None,
        properties: Mapping[str, str] | None = None,
        event_time: int | None = None,
    ) -> concurrent.futures.Future[MessageId]:
        """Queue a message (blocks only while the pending queue is full); returns a future.

        >>> futures = [producer.send_async(b"x") for _ in range(100)]
        >>> ids = [f.result() for f in futures]
        """

        async def queue() -> asyncio.Future[MessageId]:
            return await self._producer.send_async(
                payload, key, ordering_key, properties, event_time
            )

        inner = self._runner.run(queue())
        return self._runner.submit(_await(inner))

    def flush(self) -> None:
        """Send batched messages and wait until stored."""
        self._runner.run(self._producer.flush())

    def close(self) -> None:
        """Flush and close."""
        self._runner.run(self._producer.close())

    def __enter__(self) -> SyncProducer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


async def _await(future: asyncio.Future[T]) -> T:
    return await future


class SyncConsumer:
    """Blocking :class:`~client.Consumer` with pulsar-client's method names; iterating
    yields messages until closed.

    >>> consumer = client.subscribe("my-topic", "sub", ConsumerType.Shared)
    >>> msg = consumer.receive(timeout_millis=1000)
    >>> consumer.acknowledge(msg)
    """

    def __init__(self, runner: _LoopThread, consumer: Consumer) -> None:
        self._runner = runner
        self._consumer = consumer

    def topic(self) -> str:
        """The topic as given to ``subscribe``."""
        return self._consumer.topic()

    def subscription_name(self) -> str:
        """The subscription's name."""
        return self._consumer.subscription_name()

    def consumer_name(self) -> str:
        """The consumer's name."""
        return self._consumer.consumer_name()

    def is_connected(self) -> bool:
        """Whether every stream is open."""
        return self._consumer.is_connected()

    def receive(
        self, timeout_millis: int | None = None, *, timeout_ms: int | None = None
    ) -> Message:
        """The next message; raises Timeout after ``timeout_millis``."""
        return self._runner.run(self._consumer.receive(timeout_millis, timeout_ms=timeout_ms))

    def batch_receive(self) -> list[Message]:
        """Messages as the batch receive policy allows (maybe none)."""
        return self._runner.run(self._consumer.batch_receive())

    def acknowledge(
        self, message: MessageTarget | Sequence[MessageId], *, wait: bool = False
    ) -> None:
        """Ack a message, an id or a list of ids (grouped; ``wait=True``: until durable)."""
        self._runner.run(self._consumer.acknowledge(message, wait=wait))

    def acknowledge_cumulative(self, message: MessageTarget, *, wait: bool = False) -> None:
        """Ack this and every earlier message of its partition."""
        self._runner.run(self._consumer.acknowledge_cumulative(message, wait=wait))

    def negative_acknowledge(self, message: MessageTarget) -> None:
        """Ask for a redelivery after the negative-ack delay."""
        self._runner.run(self._consumer.negative_acknowledge(message))

    def redeliver_unacknowledged_messages(self) -> None:
        """Redeliver every unacked message."""
        self._runner.run(self._consumer.redeliver_unacknowledged_messages())

    def pause_message_listener(self) -> None:
        """No listener call starts after this returns, until resumed."""
        self._runner.run(_call(self._consumer.pause_message_listener))

    def resume_message_listener(self) -> None:
        """Call the listener again."""
        self._runner.run(_call(self._consumer.resume_message_listener))

    def seek(self, target: MessageTarget | int) -> None:
        """Reset to a message id or publish time (ms)."""
        self._runner.run(self._consumer.seek(target))

    def unsubscribe(self) -> None:
        """Delete the subscription and close."""
        self._runner.run(self._consumer.unsubscribe())

    def close(self) -> None:
        """Close the consumer."""
        self._runner.run(self._consumer.close())

    def __iter__(self) -> Iterator[Message]:
        while True:
            try:
                yield self.receive()
            except AlreadyClosed:
                return

    def __enter__(self) -> SyncConsumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


async def _call(function: Callable[[], None]) -> None:
    """Run a plain method on the loop's thread (the consumer's state belongs to it)."""
    function()


class SyncReader:
    """Blocking :class:`~client.Reader` with pulsar-client's method names."""

    def __init__(self, runner: _LoopThread, reader: Reader) -> None:
        self._runner = runner
        self._reader = reader

    def topic(self) -> str:
        """The topic as given to ``create_reader``."""
        return self._reader.topic()

    def is_connected(self) -> bool:
        """Whether every stream is open."""
        return self._reader.is_connected()

    def read_next(
        self, timeout_millis: int | None = None, *, timeout_ms: int | None = None
    ) -> Message:
        """The next message; raises Timeout after ``timeout_millis``."""
        return self._runner.run(self._reader.read_next(timeout_millis, timeout_ms=timeout_ms))

    def has_message_available(self) -> bool:
        """Whether a message is there to read (asks the broker)."""
        return self._runner.run(self._reader.has_message_available())

    def has_reached_end_of_topic(self) -> bool:
        """Whether the topic was terminated and everything in it was read."""
        return self._reader.has_reached_end_of_topic()

    def seek(self, target: MessageId | int) -> None:
        """Move to a message id or publish time (ms)."""
        self._runner.run(self._reader.seek(target))

    def close(self) -> None:
        """Close the reader."""
        self._runner.run(self._reader.close())

    def __iter__(self) -> Iterator[Message]:
        while True:
            try:
                yield self.read_next()
            except AlreadyClosed:
                return

    def __enter__(self) -> SyncReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


SyncListener = Callable[[SyncConsumer, Message], None]


class SyncClient:
    """Blocking :class:`~client.Client`; takes the same arguments.

    A ``message_listener`` given to :meth:`subscribe` is called as pulsar-client calls it,
    ``listener(consumer, message)`` with a :class:`SyncConsumer`, on one listener thread of
    this client (so it may block and call the consumer's blocking methods).
    """

    def __init__(self, service_url: str, listener_name: str | None = None, **kwargs: Any) -> None:
        self._runner = _LoopThread()
        self._listener_thread: concurrent.futures.ThreadPoolExecutor | None = None
        try:
            self._client = self._runner.run(_make_client(service_url, listener_name, kwargs))
        except BaseException:
            self._runner.stop()
            raise

    def create_producer(self, topic: str, *args: Any, **kwargs: Any) -> SyncProducer:
        """See :meth:`Client.create_producer`."""
        producer = self._runner.run(self._client.create_producer(topic, *args, **kwargs))
        return SyncProducer(self._runner, producer)

    def subscribe(
        self,
        topic: str | Sequence[str] | re.Pattern[str],
        subscription_name: str,
        *args: Any,
        message_listener: SyncListener | None = None,
        **kwargs: Any,
    ) -> SyncConsumer:
        """See :meth:`Client.subscribe`."""
        if message_listener is not None:
            kwargs["message_listener"] = self._on_listener_thread(message_listener)
        consumer = self._runner.run(
            self._client.subscribe(topic, subscription_name, *args, **kwargs)
        )
        return SyncConsumer(self._runner, consumer)

    def create_reader(
        self, topic: str, start_message_id: MessageId | str, *args: Any, **kwargs: Any
    ) -> SyncReader:
        """See :meth:`Client.create_reader`."""
        reader = self._runner.run(
            self._client.create_reader(topic, start_message_id, *args, **kwargs)
        )
        return SyncReader(self._runner, reader)

    def get_partitions_for_topic(self, topic: str) -> list[str]:
        """See :meth:`Client.get_partitions_for_topic`."""
        return self._runner.run(self._client.get_partitions_for_topic(topic))

    def get_topics_of_namespace(self, namespace: str) -> list[str]:
        """See :meth:`Client.get_topics_of_namespace`."""
        return self._runner.run(self._client.get_topics_of_namespace(namespace))

    def lookup(self, topic: str) -> LookupResult:
        """See :meth:`Client.lookup`."""
        return self._runner.run(self._client.lookup(topic))

    def close(self) -> None:
        """Close everything and stop the background loop. Idempotent.

        A listener call under way finishes first (its calls on the closed consumer raise
        AlreadyClosed), so no thread outlives the client."""
        if self._runner.loop.is_closed():
            return
        self._runner.run(self._client.close())
        if self._listener_thread is not None:
            self._listener_thread.shutdown(wait=True, cancel_futures=True)
        self._runner.stop()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _on_listener_thread(
        self, listener: SyncListener
    ) -> Callable[[Consumer, Message], Awaitable[None]]:
        """The async listener that runs ``listener`` on the listener thread and waits."""
        if self._listener_thread is None:
            self._listener_thread = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="pulsar-grpc-listener"
            )
        thread, runner = self._listener_thread, self._runner

        async def call(consumer: Consumer, message: Message) -> None:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(thread, listener, SyncConsumer(runner, consumer), message)

        return call


async def _make_client(service_url: str, listener_name: str | None, kwargs: Any) -> Client:
    # Created on the loop's thread so that its channels bind to that loop.
    return Client(service_url, listener_name, **kwargs)
