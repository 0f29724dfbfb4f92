"""A producer attached to a topic."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from pulsar_grpc.broker import entry_format
from pulsar_grpc.broker.errors import BrokerError
from pulsar_grpc.broker.ledger import Position
from pulsar_grpc.broker.meters import RateMeter
from pulsar_grpc.broker.topics.encryption_policy import EncryptionPolicy
from pulsar_grpc.broker.topics.producer_access import ProducerAccessMode
from pulsar_grpc.broker.topics.settings import TopicSettings


@dataclass(slots=True, frozen=True)
class PublishReceipt:
    sequence_id: int
    highest_sequence_id: int
    position: Position | None  # None: dropped as a duplicate
    num_messages: int

    @property
    def duplicate(self) -> bool:
        return self.position is None


class ProducerOwner(Protocol):
    """The port a producer reaches its topic through: exactly what it reads and asks of it.
    A protocol rather than the topic's class, so the producer sits below the topic that owns
    it instead of in an import circle with it; the topic satisfies it structurally."""

    @property
    def partition(self) -> int: ...

    @property
    def settings(self) -> TopicSettings: ...

    @property
    def encryption(self) -> EncryptionPolicy: ...

    async def hold_publish(self) -> None: ...

    def publish(
        self, producer: Producer, data: bytes, sequence_id: int, num_messages: int
    ) -> asyncio.Future[PublishReceipt]: ...

    def remove_producer(self, producer: Producer) -> None: ...


@dataclass(eq=False)
class Producer:
    topic: ProducerOwner
    name: str
    client_address: str = ""
    producer_id: int = 0
    # The version of the producer's schema (Pulsar's 8 bytes), carried by each of its entries;
    # empty without a schema.
    schema_version: bytes = b""
    # The client library's name and version (Pulsar's clientVersion): the call's user-agent.
    client_version: str = ""
    connected_since: float = field(default_factory=time.time)
    access_mode: ProducerAccessMode = ProducerAccessMode.SHARED
    # The topic epoch it was admitted under (ProducerReady.topic_epoch); None: no producer
    # ever had the topic exclusively.
    topic_epoch: int | None = None
    # The producer's properties (Pulsar's metadata), shown in the topic's stats.
    metadata: Mapping[str, str] = field(default_factory=dict)
    # What this producer published: msgInCounter, bytesInCounter and their rates.
    rate_in: RateMeter = field(default_factory=RateMeter)
    _fields: bytes = b""
    # Resolved when the broker ends this producer (its topic unloaded): the protocol handler
    # stops reading the stream, writes the receipts still due, then ends it with this error.
    ended: asyncio.Future[BrokerError] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future(), repr=False
    )

    def __post_init__(self) -> None:
        self._fields = entry_format.producer_fields(self.name, self.schema_version)

    @property
    def fields_size(self) -> int:
        """Bytes the broker appends to each batch of this producer, publish time aside."""
        return len(self._fields)

    @property
    def partition(self) -> int:
        """The partition of its topic (-1: the topic is not partitioned)."""
        return self.topic.partition

    @property
    def max_messages_per_batch(self) -> int:
        return self.topic.settings.publish.max_messages_per_batch

    @property
    def max_message_size(self) -> int:
        return self.topic.settings.publish.max_message_size

    def check_encryption(self, encrypted: bool) -> None:
        """Refuse a batch the namespace's encryption_required policy does not take."""
        self.topic.encryption.check(encrypted)

    async def wait_for_publish_rate(self) -> None:
        """Return once the topic's publish rates let this producer's next batch in (Pulsar
        stops reading the producer's connection meanwhile)."""
        await self.topic.hold_publish()

    def publish(
        self, batch: bytes, sequence_id: int, num_messages: int
    ) -> asyncio.Future[PublishReceipt]:
        """Store one batch (the message fields of the entry format) as one entry.

        Synchronous: call order is storage order, so receipts come back in order. The future
        resolves once the entry is durable. An ended producer (fenced, unloaded) stores
        nothing more, whatever its stream still delivers.
        """
        if self.ended.done():
            raise self.ended.result()
        now_ms = time.time_ns() // 1_000_000
        data = entry_format.seal(batch, now_ms, self._fields)
        self.rate_in.record(num_messages, len(data))
        return self.topic.publish(self, data, sequence_id, num_messages)

    def end(self, error: BrokerError) -> None:
        if not self.ended.done():
            self.ended.set_result(error)

    async def close(self) -> None:
        self.topic.remove_producer(self)
