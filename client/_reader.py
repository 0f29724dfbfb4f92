"""Readers: non-durable consumers positioned by message id, driven by the application."""

from __future__ import annotations

from ._consumer import Consumer
from ._errors import AlreadyClosed
from ._message import Message, MessageId


class Reader:
    """Reads a topic from a position without a durable subscription (nothing is acked).

    >>> reader = await client.create_reader("my-topic", MessageId.earliest)
    >>> msg = await reader.read_next(timeout_ms=1000)
    >>> async for msg in reader:
    ...     print(msg.message_id(), msg.data())
    """

    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer

    @property
    def topic(self) -> str:
        """The topic as given to ``create_reader``."""
        return self._consumer.topic

    async def read_next(self, timeout_ms: int | None = None) -> Message:
        """The next message; raises :class:`Timeout` after ``timeout_ms`` (None: wait).

        >>> msg = await reader.read_next(timeout_ms=500)
        """
        return await self._consumer.receive(timeout_ms)

    def has_reached_end_of_topic(self) -> bool:
        """Whether the topic was terminated and everything in it was read."""
        return self._consumer.has_reached_end_of_topic()

    async def seek(self, target: MessageId | int) -> None:
        """Move to a message id or a publish time (ms since the epoch).

        >>> await reader.seek(MessageId.earliest)
        """
        await self._consumer.seek(target)

    async def close(self) -> None:
        """Close the reader. Idempotent."""
        await self._consumer.close()

    def __aiter__(self) -> Reader:
        return self

    async def __anext__(self) -> Message:
        try:
            return await self.read_next()
        except AlreadyClosed:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Reader:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
