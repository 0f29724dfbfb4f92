"""The retry letter topic (Pulsar's Java and Go clients' ``retryEnable`` and
``reconsumeLater``): a consumer with ``retry_enable=True`` also subscribes to its retry topic,
and :meth:`Consumer.reconsume_later` publishes a copy of a message there, to be delivered
after a delay, then acks the original. A copy reconsumed more than the dead-letter policy's
``max_redeliver_count`` times goes to the dead-letter topic instead.

Done by the SDK, as Pulsar's clients do it (docs/semantics.md says why): the copy is an
ordinary produce and the original's removal an ordinary ack, both of the wire contract
already, so a client in another language does the same with no new request; the broker could
not do it for a message of a compressed batch without decompressing it, which it never does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from ._errors import InvalidConfiguration
from ._message import Message
from ._producer import Producer
from ._wire import deliver_at_time, frame_message

# Pulsar's RetryMessageUtil: the property names, the suffixes of the default topics, and the
# reconsume count after which a message is dead when no dead-letter policy says.
RECONSUMETIMES = "RECONSUMETIMES"
DELAY_TIME = "DELAY_TIME"
REAL_TOPIC = "REAL_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
RETRY_GROUP_TOPIC_SUFFIX = "-RETRY"
DLQ_GROUP_TOPIC_SUFFIX = "-DLQ"
MAX_RECONSUMETIMES = 16

_PARTITION = "-partition-"

MakeProducer = Callable[[str], Awaitable[Producer]]
Acknowledge = Callable[[Message], Awaitable[None]]


@dataclass(slots=True)
class RetryLetter:
    """A consumer's retry and dead-letter topics, and the producers it publishes to them with
    (made on first use, without batching or compression: each copy is a request of its own,
    which the retry copy's delivery time belongs to)."""

    retry_letter_topic: str
    dead_letter_topic: str
    max_redeliver_count: int
    make_producer: MakeProducer
    _producers: dict[str, asyncio.Task[Producer]] = field(default_factory=dict)

    async def reconsume_later(
        self,
        message: Message,
        delay: timedelta | int,
        properties: Mapping[str, str] | None,
        acknowledge: Acknowledge,
    ) -> None:
        """Publish the copy (to the retry topic after ``delay``, or to the dead-letter topic
        once reconsumed too often), then ack ``message``; a failed publish acks nothing."""
        delay_ms = max(0, _milliseconds(delay))
        copied = retry_properties(message, delay_ms, properties)
        dead = int(copied[RECONSUMETIMES]) > self.max_redeliver_count
        data = message.wire_data()
        payload = None if data.null_value else data.payload
        framed = frame_message(payload, data.key, data.ordering_key, copied)
        if not dead and delay_ms > 0:
            framed += deliver_at_time(time.time_ns() // 1_000_000 + delay_ms)
        topic = self.dead_letter_topic if dead else self.retry_letter_topic
        producer = await self._producer(topic)
        await (await producer.enqueue_framed(framed, data.key or None, data.ordering_key or None))
        await acknowledge(message)

    async def _producer(self, topic: str) -> Producer:
        task = self._producers.get(topic)
        if task is None or (task.done() and task.exception() is not None):
            task = self._producers[topic] = asyncio.ensure_future(self.make_producer(topic))
        return await asyncio.shield(task)

    async def close(self) -> None:
        """Close the producers it made (with its consumer)."""
        for task in self._producers.values():
            if task.done() and task.exception() is None:
                await task.result().close_if_open()
            else:
                task.cancel()
        self._producers.clear()


def retry_letter(
    topic: str,
    subscription: str,
    make_producer: MakeProducer,
    retry_letter_topic: str | None = None,
    dead_letter_topic: str | None = None,
    max_redeliver_count: int = MAX_RECONSUMETIMES,
) -> RetryLetter:
    """The retry set-up of a consumer of ``topic`` (full name), with Java's defaults: topics
    ``<topic>-<subscription>-RETRY`` and ``-DLQ``, dead after 16 reconsumes."""
    prefix = f"{topic}-{subscription}"
    return RetryLetter(
        retry_letter_topic=retry_letter_topic or prefix + RETRY_GROUP_TOPIC_SUFFIX,
        dead_letter_topic=dead_letter_topic or prefix + DLQ_GROUP_TOPIC_SUFFIX,
        max_redeliver_count=max_redeliver_count,
        make_producer=make_producer,
    )


def retry_properties(
    message: Message, delay_ms: int, custom: Mapping[str, str] | None
) -> dict[str, str]:
    """The copy's properties as Java's ``doReconsumeLater`` sets them: the original's, its
    origin (REAL_TOPIC without a partition suffix, ORIGIN_MESSAGE_ID) unless a copy has them
    already, ``custom`` over them, RECONSUMETIMES one more than the original's, DELAY_TIME."""
    copied = message.properties()
    topic = message.topic_name()
    copied.setdefault(REAL_TOPIC, topic.split(_PARTITION)[0] if _PARTITION in topic else topic)
    copied.setdefault(ORIGIN_MESSAGE_ID, str(message.message_id()))
    copied.update(custom or {})
    previous = copied.get(RECONSUMETIMES, "0")
    if not previous.isdigit():
        raise InvalidConfiguration(f"{RECONSUMETIMES} is not a count: {previous[:40]!r}")
    copied[RECONSUMETIMES] = str(int(previous) + 1)
    copied[DELAY_TIME] = str(delay_ms)
    return copied


def _milliseconds(delay: timedelta | int) -> int:
    if isinstance(delay, timedelta):
        return int(delay.total_seconds() * 1000)
    if isinstance(delay, int) and not isinstance(delay, bool):
        return delay
    raise TypeError(f"delay must be a timedelta or an int of ms, not {type(delay).__name__}")
