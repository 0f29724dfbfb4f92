"""Message: what a consumer receives, its fields read from the delivered entry."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pulsargrpc.v1 import pulsar_pb2 as pb

from ._compression import decompress_entry
from ._message_id import MessageId, TopicMessageId, new_message_id

if TYPE_CHECKING:
    from ._crypto import EncryptionContext


class EntryOrigin:
    """What the messages of one delivered entry share: the entry, where it came from and how
    to decode it. One per entry rather than copies in every message, so that making a
    message costs two fields; ``key`` is the entry's (ledger id, entry id), what an ack of
    one of its messages is grouped under, read from the protobuf once per entry."""

    __slots__ = ("decode", "entry", "key", "messages", "partition", "topic_ids", "topic_name")

    def __init__(
        self,
        entry: pb.DeliveredEntry,
        partition: int,
        topic_name: str,
        topic_ids: bool,
        decode: Callable[[bytes], Any] | None,
    ) -> None:
        self.entry = entry
        # The entry's messages: looked up once here, not by each field a message reads.
        self.messages = entry.messages
        self.key = (entry.ledger_id, entry.entry_id)
        self.partition = partition  # the consumer's own partition index: where acks go
        self.topic_name = topic_name
        self.topic_ids = topic_ids  # message_id() names the topic (multi-topic consumers)
        # The consumer's schema resolved for the version this entry was written with.
        self.decode = decode


class Message:
    """One received message; the accessors follow the Apache Pulsar Python client.

    Fields are read from the delivered entry when asked for, not copied up front: a consumer
    receives hundreds of thousands of messages a second and most applications read only a few
    fields of each. Even the id is made only when asked for: an ack of the message itself
    goes by its entry's key and its index.

    >>> msg = await consumer.receive()
    >>> msg.data(), msg.message_id(), msg.properties()
    """

    __slots__ = ("_id", "_index", "_origin", "_value")
    _id: MessageId  # once message_id() has been asked for (unset until then)
    _value: Any  # the decoded value, once value() has been asked for (unset until then)

    def __init__(self, origin: EntryOrigin, index: int) -> None:
        # Read by the consumer's ack path too (PartitionConsumer.acknowledge_message).
        self._origin = origin
        self._index = index  # in the batch (the entry)

    def value(self) -> Any:
        """The payload decoded with the consumer's schema (the bytes without one), from the
        schema version the message was written with, as Pulsar's ``value()``. A payload the
        schema cannot read raises :class:`~pulsar_grpc.schema.SchemaSerializationError`.
        Decoded once: later calls give the same value. None for a null value (Java's
        ``getValue()``): no schema reads what was never encoded."""
        try:
            return self._value
        except AttributeError:
            pass
        decode = self._origin.decode
        message = self._origin.messages[self._index]
        if message.null_value:
            value = None
        else:
            value = message.payload if decode is None else decode(message.payload)
        self._value = value
        return value

    def schema_version(self) -> str:
        """The version of the producer's schema as pulsar-client gives it: a str of Pulsar's
        8 bytes (the version number big-endian), each byte one character (latin-1: for every
        version below 128 what pulsar-client's UTF-8 decoding gives, and defined past it);
        empty without a schema. ``Client.get_schema(topic, version)`` takes it back."""
        return self._origin.entry.schema_version.decode("latin-1")

    def data(self) -> bytes:
        """The payload (empty for a null value, as pulsar-client's)."""
        return self._origin.messages[self._index].payload

    def message_id(self) -> MessageId:
        """The id to acknowledge or seek to."""
        try:
            return self._id
        except AttributeError:
            pass
        origin = self._origin
        fields = (*origin.key, self._index, origin.partition)
        self._id = message_id = (
            TopicMessageId.of(origin.topic_name, *fields)
            if origin.topic_ids
            else new_message_id(*fields)
        )
        return message_id

    @property
    def partition(self) -> int:
        """The partition this message came from (-1: the topic is not partitioned)."""
        return self._origin.partition

    def topic_name(self) -> str:
        """Full name of the topic (of the partition, for a partitioned topic)."""
        return self._origin.topic_name

    def partition_key(self) -> str:
        """The key the producer set; empty when none."""
        return self._origin.messages[self._index].key

    def ordering_key(self) -> str:
        """The ordering key the producer set, as a str like pulsar-client's (UTF-8; a key
        that is not gets U+FFFD for each bad byte); empty when none."""
        return self._origin.messages[self._index].ordering_key.decode("utf-8", "replace")

    def wire_data(self) -> pb.MessageData:
        """The message as it came on the wire (payload, keys, properties), for what the SDK
        publishes again itself (client/_retry.py): read it, do not change it."""
        return self._origin.messages[self._index]

    def properties(self) -> dict[str, str]:
        """Application properties (a new dict on each call)."""
        return dict(self._origin.messages[self._index].properties)

    def event_timestamp(self) -> int:
        """Event time in ms since the epoch set by the producer; 0 when unset."""
        return self._origin.messages[self._index].event_time

    def publish_timestamp(self) -> int:
        """Time in ms since the epoch the broker stored the message."""
        return self._origin.entry.publish_time

    def producer_name(self) -> str:
        """Name of the producer that published the message."""
        return self._origin.entry.producer_name

    def sequence_id(self) -> int:
        """The producer's sequence id of this message."""
        return self._origin.entry.sequence_id + self._index

    def has_null_value(self) -> bool:
        """Whether the producer sent a null value (``send(None)``, a compaction tombstone)
        rather than a payload, as pulsar-client's; an empty payload is not one."""
        return self._origin.messages[self._index].null_value

    def redelivery_count(self) -> int:
        """How many times the message was delivered before."""
        return self._origin.entry.redelivery_count

    def encryption_context(self) -> EncryptionContext | None:
        """How the payload is encrypted, for a batch the consumer could not decrypt and was
        told to deliver anyway (``ConsumerCryptoFailureAction.CONSUME``); None otherwise."""
        return None

    def __repr__(self) -> str:
        return (
            f"Message(id={self.message_id()}, topic={self._origin.topic_name!r}, "
            f"len={len(self.data())})"
        )


def messages_of_entry(
    entry: pb.DeliveredEntry,
    partition: int,
    topic_name: str,
    topic_ids: bool = False,
    decode: Callable[[bytes], Any] | None = None,
) -> list[Message]:
    """The messages of one delivered entry, minus the batch indexes acked before.

    Message i gets id (ledger, entry, i, partition) and sequence id ``entry.sequence_id + i``;
    ``partition`` is the consumer's own partition index, which decides where its acks go;
    with ``topic_ids`` the id is a :class:`TopicMessageId` naming ``topic_name``; ``decode``
    makes ``value()`` (the consumer's schema for the entry's writer version). A
    compressed batch is decompressed first (InvalidMessage if it cannot be).
    """
    decompress_entry(entry)
    origin = EntryOrigin(entry, partition, topic_name, topic_ids, decode)
    count = len(origin.messages)
    if not entry.acked_batch_indexes:  # map calls the class from C: cheaper than a loop
        return list(map(Message, itertools.repeat(origin, count), range(count)))
    skipped = set(entry.acked_batch_indexes)
    return [Message(origin, i) for i in range(count) if i not in skipped]
