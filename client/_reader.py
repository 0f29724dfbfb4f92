"""Readers: non-durable consumers positioned by message id, driven by the application."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ._consumer import Consumer
from ._crypto_message import EncryptedMessage
from ._errors import AlreadyClosed, CryptoError
from ._message import Message
from ._message_id import MessageId

LastMessageId = Callable[[str], Awaitable[MessageId | None]]


class Reader:
    """Reads a topic from a position without a durable subscription (nothing is acked).

    >>> reader = await client.create_reader("my-topic", MessageId.earliest)
    >>> msg = await reader.read_next(timeout_millis=1000)
    >>> async for msg in reader:
    ...     print(msg.message_id(), msg.data())
    """

    def __init__(
        self,
        consumer: Consumer,
        last_message_id: LastMessageId,
        topics: list[str],
        start: MessageId,
        inclusive: bool,
    ) -> None:
        self._consumer = consumer
        self._last_message_id = last_message_id
        self._topics = topics  # one per partition, in partition order
        # Per partition: the id of the last message read (or, before any, the start point);
        # None means "from the beginning". `inclusive` applies until the first read.
        start_point = None if start == MessageId.earliest else start
        self._read: list[MessageId | None] = [start_point] * len(topics)
        self._inclusive = [inclusive] * len(topics)
        self._start_inclusive = inclusive  # also how seek(message id) lands (Pulsar's)
        # A batch held back under crypto_failure_action=FAIL counts as read.
        consumer.held_back = lambda message: self._passed(message.last_position())

    async def mark_latest(self, inclusive: bool = False) -> None:
        """A reader started at latest has read up to what each partition held then (with
        ``start_message_id_inclusive``, all but that last message, which comes next)."""
        for index, topic in enumerate(self._topics):
            self._read[index] = await self._last_message_id(topic)
            self._inclusive[index] = inclusive

    def topic(self) -> str:
        """The topic's full name, as pulsar-client's (``persistent://public/default/t``)."""
        return self._consumer.topic()

    def is_connected(self) -> bool:
        """Whether every stream is open (none is reconnecting)."""
        return self._consumer.is_connected()

    async def read_next(
        self, timeout_millis: int | None = None, *, timeout_ms: int | None = None
    ) -> Message:
        """The next message; raises :class:`Timeout` after ``timeout_millis`` (None: wait).
        ``timeout_ms`` is the name earlier versions used.

        >>> msg = await reader.read_next(timeout_millis=500)
        """
        try:
            message = await self._consumer.receive(timeout_millis, timeout_ms=timeout_ms)
        except CryptoError as exc:  # a batch it cannot decrypt (RAISE) was read all the same
            if exc.position is not None:
                self._passed(exc.position)
            raise
        if isinstance(message, EncryptedMessage):  # CONSUME: the whole batch in one message
            self._passed(message.last_position())
        else:
            self._passed(message.message_id())
        return message

    def _passed(self, message_id: MessageId) -> None:
        """The reader got to ``message_id`` in its partition (what has_message_available
        compares with the broker's last id)."""
        index = max(message_id.partition(), 0)
        self._read[index] = message_id
        self._inclusive[index] = False

    async def has_message_available(self) -> bool:
        """Whether :meth:`read_next` would return a message now or once it arrives: asks the
        broker for each partition's last message id (Pulsar's hasMessageAvailable).

        >>> while await reader.has_message_available():
        ...     msg = await reader.read_next()
        """
        if self._consumer.queued():
            return True
        for index, topic in enumerate(self._topics):
            last = await self._last_message_id(topic)
            if last is None:
                continue
            seen = self._read[index]
            if seen is None or _position(last) > _position(seen):
                return True
            if self._inclusive[index] and _position(last) == _position(seen):
                return True
        return False

    def has_reached_end_of_topic(self) -> bool:
        """Whether the topic was terminated and everything in it was read."""
        return self._consumer.has_reached_end_of_topic()

    async def seek(self, messageid: MessageId | int) -> None:
        """Move to a message id or a publish time (ms since the epoch).

        >>> await reader.seek(MessageId.earliest)
        """
        await self._consumer.seek(messageid)
        n = len(self._topics)
        if messageid == MessageId.latest:
            await self.mark_latest()
        elif isinstance(messageid, MessageId) and messageid != MessageId.earliest:
            # As Pulsar's: the message after ``messageid`` comes next, or with
            # start_message_id_inclusive ``messageid`` itself.
            index = max(messageid.partition(), 0)
            self._read[index] = messageid
            self._inclusive[index] = self._start_inclusive
        else:  # earliest, or a publish time: anything stored may come next
            self._read, self._inclusive = [None] * n, [False] * n

    async def close(self) -> None:
        """Close the reader. A second close raises AlreadyClosed, as pulsar-client's."""
        await self._consumer.close()

    async def close_if_open(self) -> None:
        """:meth:`close` unless closed already (what leaving ``async with`` does)."""
        await self._consumer.close_if_open()

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
        await self.close_if_open()


def _position(message_id: MessageId) -> tuple[int, int, int]:
    """Order within a partition (the partition field aside)."""
    return message_id.ledger_id(), message_id.entry_id(), message_id.batch_index()
