"""A blocking client for scripts and the CLI: the asyncio client on a background loop.

>>> with SyncClient("grpc://127.0.0.1:50051") as client:
...     producer = client.create_producer("my-topic")
...     producer.send(b"hello")
...     consumer = client.subscribe("my-topic", "sub", initial_position="earliest")
...     msg = consumer.receive(timeout_ms=1000)
...     consumer.acknowledge(msg)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine, Iterator, Mapping
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
    """Blocking :class:`~client.Consumer`; iterating yields messages until closed."""

    def __init__(self, runner: _LoopThread, consumer: Consumer) -> None:
        self._runner = runner
        self._consumer = consumer

    @property
    def topic(self) -> str:
        return self._consumer.topic

    @property
    def subscription_name(self) -> str:
        return self._consumer.subscription_name

    @property
    def consumer_name(self) -> str:
        return self._consumer.consumer_name

    def receive(self, timeout_ms: int | None = None) -> Message:
        """The next message; raises Timeout after ``timeout_ms``."""
        return self._runner.run(self._consumer.receive(timeout_ms))

    def acknowledge(self, message: MessageTarget, *, wait: bool = False) -> None:
        """Ack (grouped; ``wait=True``: until durable)."""
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

    def seek(self, target: MessageId | int) -> None:
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


class SyncReader:
    """Blocking :class:`~client.Reader`."""

    def __init__(self, runner: _LoopThread, reader: Reader) -> None:
        self._runner = runner
        self._reader = reader

    @property
    def topic(self) -> str:
        return self._reader.topic

    def read_next(self, timeout_ms: int | None = None) -> Message:
        """The next message; raises Timeout after ``timeout_ms``."""
        return self._runner.run(self._reader.read_next(timeout_ms))

    def has_reached_end_of_topic(self) -> bool:
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


class SyncClient:
    """Blocking :class:`~client.Client`; takes the same arguments."""

    def __init__(self, service_url: str, listener_name: str | None = None, **kwargs: Any) -> None:
        self._runner = _LoopThread()
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
        self, topic: str, subscription_name: str, *args: Any, **kwargs: Any
    ) -> SyncConsumer:
        """See :meth:`Client.subscribe`."""
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

    def lookup(self, topic: str) -> LookupResult:
        """See :meth:`Client.lookup`."""
        return self._runner.run(self._client.lookup(topic))

    def close(self) -> None:
        """Close everything and stop the background loop. Idempotent."""
        if self._runner.loop.is_closed():
            return
        self._runner.run(self._client.close())
        self._runner.stop()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


async def _make_client(service_url: str, listener_name: str | None, kwargs: Any) -> Client:
    # Created on the loop's thread so that its channels bind to that loop.
    return Client(service_url, listener_name, **kwargs)
