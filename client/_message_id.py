"""MessageId: what a producer gets back for each message sent and what a consumer acks, seeks
to or resumes from; its text form and Pulsar's serialized form (MessageIdData).

Kept apart from the messages themselves (client/_message.py) so that the exceptions, which
carry the position of a batch a consumer could not decrypt, can name it without importing
the messages (and through them compression and encryption).
"""

from __future__ import annotations

import struct
from functools import partial
from itertools import repeat
from typing import ClassVar

from pulsargrpc.v1 import pulsar_pb2 as pb

from ._protowire import MessageIdDataField, WireType, tag, varint

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
