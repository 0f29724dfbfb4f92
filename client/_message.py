"""MessageId and Message: what producers get back and consumers receive."""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable
from functools import partial
from itertools import repeat
from typing import TYPE_CHECKING, Any, ClassVar

from pulsargrpc.v1 import pulsar_pb2 as pb

from ._compression import decompress_entry
from ._protowire import MessageIdDataField, WireType, tag, varint

if TYPE_CHECKING:
    from ._crypto import EncryptionContext

# Ids serialized by this SDK before issue 26: four big-endian fields, 24 bytes.
_LEGACY_PACKED = struct.Struct(">qqii")
_MAX_LONG = 2**63 - 1
_LEDGER_ID = tag(MessageIdDataField.LEDGER_ID, WireType.VARINT)
_ENTRY_ID = tag(MessageIdDataField.ENTRY_ID, WireType.VARINT)
_PARTITION = tag(MessageIdDataField.PARTITION, WireType.VARINT)
_BATCH_INDEX = tag(MessageIdDataField.BATCH_INDEX, WireType.VARINT)


def _signed(value: int, bits: int) -> int:
    value %= 1 << bits
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated or malformed serialized MessageId")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _decode_message_id_data(data: bytes) -> tuple[int, int, int, int]:
    """(ledger, entry, batch, partition) from Pulsar's ``MessageIdData`` protobuf
    (PulsarApi.proto: ledgerId = 1, entryId = 2, partition = 3 [default -1], batch_index = 4
    [default -1]; ack_set, batch_size, first_chunk_message_id and the rest are skipped)."""
    fields: dict[int, int] = {MessageIdDataField.PARTITION: -1, MessageIdDataField.BATCH_INDEX: -1}
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == WireType.VARINT:
            value, pos = _read_varint(data, pos)
            fields[number] = value
        elif wire == WireType.LEN:
            length, pos = _read_varint(data, pos)
            pos += length
        elif wire == WireType.I64:
            pos += 8
        elif wire == WireType.I32:
            pos += 4
        else:
            raise ValueError(f"malformed serialized MessageId (wire type {wire})")
        if pos > len(data):
            raise ValueError("truncated serialized MessageId")
    if MessageIdDataField.LEDGER_ID not in fields or MessageIdDataField.ENTRY_ID not in fields:
        raise ValueError("a serialized MessageId lacks its ledger or entry id")
    return (
        _signed(fields[MessageIdDataField.LEDGER_ID], 64),
        _signed(fields[MessageIdDataField.ENTRY_ID], 64),
        _signed(fields[MessageIdDataField.BATCH_INDEX], 32),
        _signed(fields[MessageIdDataField.PARTITION], 32),
    )


class MessageId(tuple[int, int, int, int]):
    """Pulsar's message id, as pulsar-client's: ``MessageId(partition, ledger_id, entry_id,
    batch_index)`` with the accessors ``ledger_id()``, ``entry_id()``, ``partition()`` and
    ``batch_index()``.

    Immutable, hashable, cheap to make (a consumer makes one per message): a tuple that holds
    (ledger, entry, batch index, partition) in that order. Equal when all four are equal; ordered
    by ledger, entry, then batch index, as pulsar-client's (the partition takes no part in the
    order: see the comparison operators). A send that
    deduplication dropped resolves to an id whose ledger and entry ids are -1 (as in Pulsar).

    Its text form is Pulsar's ``MessageId.toString()``: ``ledger:entry:partition:batch``, or
    ``ledger:entry:partition`` without a batch index; the one form the SDK, the CLI, the admin
    commands, ``x-pulsar-start-message-id`` and ``ORIGIN_MESSAGE_ID`` print and parse (see
    :func:`parse_message_id_text`).

    >>> MessageId.parse("7:3")
    MessageId(partition=-1, ledger_id=7, entry_id=3, batch_index=-1)
    >>> str(MessageId(2, 7, 3, 0)), str(MessageId(-1, 7, 3, 0)), str(MessageId(-1, 7, 3))
    ('7:3:2:0', '7:3:-1:0', '7:3:-1')
    >>> MessageId.deserialize(MessageId(-1, 7, 3).serialize()) == MessageId(-1, 7, 3)
    True
    """

    __slots__ = ()

    earliest: ClassVar[MessageId]
    latest: ClassVar[MessageId]

    def __new__(
        cls, partition: int = -1, ledger_id: int = -1, entry_id: int = -1, batch_index: int = -1
    ) -> MessageId:
        fields = (ledger_id, entry_id, batch_index, partition)
        for value in fields:
            if not isinstance(value, int):  # as pulsar-client's, which takes only integers
                raise TypeError(f"MessageId fields are integers, got {value!r}")
        return tuple.__new__(cls, fields)

    def __init__(
        self, partition: int = -1, ledger_id: int = -1, entry_id: int = -1, batch_index: int = -1
    ) -> None:
        """Made by ``__new__``; this only states pulsar-client's parameters."""

    def __getnewargs__(self) -> tuple[int, int, int, int]:  # type: ignore[override]
        """What pickle and copy make it again with: ``__new__``'s order, not the tuple's."""
        ledger_id, entry_id, batch_index, partition = self
        return partition, ledger_id, entry_id, batch_index

    def ledger_id(self) -> int:
        return self[0]

    def entry_id(self) -> int:
        return self[1]

    def batch_index(self) -> int:
        """The index in the batch; -1 for a message not sent in a batch."""
        return self[2]

    def partition(self) -> int:
        """The partition index; -1 for a topic that is not partitioned."""
        return self[3]

    # pulsar-client's C++ operators: < by (ledger, entry, batch index), the partition left out;
    # <= is < or ==; > is not <=; >= is not <. So of two ids that differ only in partition,
    # each is > and >= the other, neither < nor <=.
    def __lt__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self[:3] < other[:3]

    def __le__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self[:3] < other[:3] or tuple.__eq__(self, other)

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return not (self[:3] < other[:3] or tuple.__eq__(self, other))

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return not self[:3] < other[:3]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MessageId) and tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = tuple.__hash__

    def __repr__(self) -> str:
        ledger_id, entry_id, batch_index, partition = self
        return (
            f"MessageId(partition={partition}, ledger_id={ledger_id}, entry_id={entry_id}, "
            f"batch_index={batch_index})"
        )

    def __str__(self) -> str:
        if self == MessageId.earliest:
            return "earliest"
        if self == MessageId.latest:
            return "latest"
        ledger_id, entry_id, batch_index, partition = self
        if batch_index < 0:
            return f"{ledger_id}:{entry_id}:{partition}"
        return f"{ledger_id}:{entry_id}:{partition}:{batch_index}"

    @classmethod
    def parse(cls, text: str) -> MessageId:
        """Parse ``"ledger:entry[:partition[:batch]]"``, ``"earliest"`` or ``"latest"``.

        >>> MessageId.parse("7:3:-1:4")
        MessageId(partition=-1, ledger_id=7, entry_id=3, batch_index=4)
        >>> MessageId.parse("7:3:4:-1")  # the earlier ledger:entry:batch:-1, unambiguous
        MessageId(partition=-1, ledger_id=7, entry_id=3, batch_index=4)
        """
        lowered = text.strip().lower()
        if lowered == "earliest":
            return cls.earliest
        if lowered == "latest":
            return cls.latest
        ledger_id, entry_id, partition, batch_index = parse_message_id_text(text)
        return cls(partition, ledger_id, entry_id, batch_index)

    def serialize(self) -> bytes:
        """Pulsar's ``MessageIdData`` protobuf, byte for byte what pulsar-client's
        ``serialize()`` gives: ids saved by either load in the other."""
        ledger_id, entry_id, batch_index, partition = self
        out = _LEDGER_ID + varint(ledger_id) + _ENTRY_ID + varint(entry_id)
        if partition != -1:
            out += _PARTITION + varint(partition)
        if batch_index != -1:
            out += _BATCH_INDEX + varint(batch_index)
        return out

    @staticmethod
    def deserialize(message_id_bytes: bytes, topic: str | None = None) -> MessageId:
        """Inverse of :meth:`serialize`. With ``topic`` (as Pulsar's), a :class:`TopicMessageId`
        that a multi-topic consumer can acknowledge or seek to.

        Also reads the 24 bytes this SDK wrote before issue 26 (four big-endian fields): Pulsar's
        encoding always starts with byte 0x08 (the ledger id's tag), which those bytes never do
        for a ledger id below 2**59 (every real one, the earliest and latest sentinels
        included)."""
        data = bytes(message_id_bytes)
        if len(data) == _LEGACY_PACKED.size and data[:1] != _LEDGER_ID:
            fields = _LEGACY_PACKED.unpack(data)
        else:
            fields = _decode_message_id_data(data)
        mid = tuple.__new__(MessageId, fields)
        return mid if topic is None else TopicMessageId.of(topic, *fields)

    @classmethod
    def wrap(cls, msg_id: MessageId) -> MessageId:
        """pulsar-client wraps its C++ id in its Python class; here both are this class, so
        ``wrap`` gives the id back as a plain :class:`MessageId`."""
        return tuple.__new__(cls, tuple(msg_id))

    def to_proto(self) -> pb.MessageId:
        """The wire form; ledger and entry ids must not be negative."""
        ledger_id, entry_id, batch_index, partition = self
        if ledger_id < 0 or entry_id < 0:
            raise ValueError(f"message id {self} cannot be sent to the broker")
        return pb.MessageId(
            ledger_id=ledger_id, entry_id=entry_id, batch_index=batch_index, partition=partition
        )


def new_message_id(
    ledger_id: int, entry_id: int, batch_index: int = -1, partition: int = -1
) -> MessageId:
    """A :class:`MessageId` from its fields in storage order (ledger, entry, batch, partition):
    what the SDK's own code makes them with."""
    return tuple.__new__(MessageId, (ledger_id, entry_id, batch_index, partition))


class TopicMessageId(MessageId):
    """A message id that also names its topic (Pulsar's TopicMessageId): what the messages
    of a multi-topic or pattern consumer carry, so that an id alone routes an ack or a seek
    to the right topic. Equal to the plain :class:`MessageId` with the same fields.

    >>> mid = TopicMessageId.of("persistent://public/default/a", 7, 3)
    >>> mid.topic_name(), mid == MessageId(-1, 7, 3)
    ('persistent://public/default/a', True)
    """

    # No __slots__: a tuple subtype keeps an extra field only in its __dict__, which is why
    # single-topic consumers hand out plain MessageIds.
    _topic: str

    @classmethod
    def of(
        cls, topic: str, ledger_id: int, entry_id: int, batch_index: int = -1, partition: int = -1
    ) -> TopicMessageId:
        """The id of a message of ``topic`` (the partition's name for a partitioned topic)."""
        mid = tuple.__new__(cls, (ledger_id, entry_id, batch_index, partition))
        mid._topic = topic
        return mid

    def topic_name(self) -> str:
        """Full name of the topic (of the partition) the message belongs to."""
        return self._topic


# Pulsar's sentinels: earliest is (-1, -1), latest is (Long.MAX_VALUE, Long.MAX_VALUE).
MessageId.earliest = MessageId(-1, -1, -1, -1)
MessageId.latest = MessageId(-1, _MAX_LONG, _MAX_LONG, -1)


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


_new_message_id = partial(tuple.__new__, MessageId)


def ids_of_receipt(receipt: pb.SendReceipt, count: int, partition: int) -> list[MessageId]:
    """The ids of the ``count`` messages of a batch the receipt covers.

    A duplicate batch was dropped by deduplication and got no ids: each message resolves to
    ``MessageId(partition, -1, -1, -1)`` as in Pulsar.
    """
    if receipt.duplicate:
        return [MessageId(partition, -1, -1, -1)] * count
    # Built in C (tuple.__new__ over zipped fields), not through the named tuple's Python
    # __new__: a producer makes one per message sent, this costs about half as much.
    ledger, entry = receipt.ledger_id, receipt.entry_id
    fields = zip(repeat(ledger), repeat(entry), range(count), repeat(partition), strict=False)
    return list(map(_new_message_id, fields))


MESSAGE_ID_FORM = "ledger:entry[:partition[:batch]]"


def parse_message_id_text(text: str) -> tuple[int, int, int, int]:
    """``(ledger, entry, partition, batch)`` from Pulsar's text form
    ``ledger:entry[:partition[:batch]]`` (a missing partition or batch is -1).

    This product printed ``ledger:entry:batch:partition`` before issue 25. That form is still
    read where it cannot be mistaken for Pulsar's: four parts ending in ``-1`` with a batch
    index before it (``7:3:4:-1``, how it printed every message of a non-partitioned topic),
    since Pulsar's form never prints a batch index of -1 (it leaves the part out). Three
    parts are Pulsar's ``ledger:entry:partition``, not the earlier ``ledger:entry:batch``.
    """
    parts = text.strip().split(":")
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        raise ValueError(
            f"invalid message id {text!r}: expected {MESSAGE_ID_FORM} (integers), "
            "earliest or latest"
        ) from None
    if not 2 <= len(numbers) <= 4:
        raise ValueError(
            f"invalid message id {text!r}: expected {MESSAGE_ID_FORM}, earliest or latest"
        )
    numbers += [-1] * (4 - len(numbers))
    ledger_id, entry_id, partition, batch_index = numbers
    if batch_index == -1 and len(parts) == 4 and partition >= 0:
        partition, batch_index = -1, partition  # the earlier ledger:entry:batch:-1
    return ledger_id, entry_id, partition, batch_index
