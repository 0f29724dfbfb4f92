"""Protobuf's wire format, for the few messages the SDK encodes or decodes by hand: the field
numbers it writes, their tags, and base-128 varints.

The produce hot path (client/_wire.py) frames MessageData and ProduceRequest as bytes rather
than protobuf objects, and MessageId.serialize (client/_message_id.py) writes Pulsar's own
MessageIdData, which is not in this contract's proto. Each field number is named here once:
tests/unit/test_client_protowire.py checks the contract's against the generated descriptors,
and tests/unit/test_client_message.py checks MessageIdData's bytes against pulsar-client's.
"""

from __future__ import annotations

from enum import IntEnum

_U64 = 2**64
_ONE_BYTE = [bytes((value,)) for value in range(0x80)]


class WireType(IntEnum):
    """How a field's value is laid out after its tag."""

    VARINT = 0
    I64 = 1
    LEN = 2  # length-delimited: bytes, strings, embedded messages
    I32 = 5


class MessageDataField(IntEnum):
    """pulsar.proto's MessageData fields written by hand."""

    PAYLOAD = 1
    KEY = 2
    NULL_VALUE = 6


class ProduceRequestField(IntEnum):
    """pulsar.proto's ProduceRequest fields written by hand."""

    SEQUENCE_ID = 12
    MESSAGES = 13
    COMPRESSED = 14
    DELIVER_AT_TIME = 16


class MessageIdDataField(IntEnum):
    """Pulsar's MessageIdData (PulsarApi.proto), what pulsar-client's ``serialize()`` writes."""

    LEDGER_ID = 1
    ENTRY_ID = 2
    PARTITION = 3
    BATCH_INDEX = 4


def varint(value: int) -> bytes:
    """Protobuf's base-128 varint of ``value`` (a negative one as its 64-bit two's complement,
    as protobuf writes int32 and int64 fields).

    >>> varint(1), varint(300), varint(-1)[-1]
    (b'\\x01', b'\\xac\\x02', 1)
    """
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    value %= _U64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def tag(field: int, wire_type: WireType) -> bytes:
    """The bytes that open a field: its number and wire type.

    >>> tag(ProduceRequestField.MESSAGES, WireType.LEN)
    b'j'
    """
    return varint(field << 3 | wire_type)
