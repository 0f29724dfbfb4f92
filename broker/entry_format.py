"""The broker's entry format: one managed-ledger entry is one produced batch.

A producer's batch arrives as the message fields (12-13) of a ``StoredEntry``
(protos/pulsargrpc/internal/v1/entry.proto, the broker's own package, not the client contract);
the broker seals it by appending the fields only it may set (publish time, producer name, and
the version of the producer's schema).
Protobuf keeps the last value of a repeated scalar field, so a client cannot forge them. The
hot path therefore never rebuilds messages: sealing is a byte append, and delivering is a byte
prefix (see ``DeliveredEntry`` in the wire contract).
"""

from __future__ import annotations

from dataclasses import dataclass

from pulsar_grpc.broker.ledger import ack_set
from pulsar_grpc.broker.varint import encode_varint
from pulsargrpc.internal.v1 import entry_pb2

_PUBLISH_TIME_TAG = b"\x50"  # field 10, varint
_PRODUCER_NAME_TAG = b"\x5a"  # field 11, length-delimited
_SCHEMA_VERSION_TAG = b"\x7a"  # field 15, length-delimited


def seal(batch: bytes, publish_time_ms: int, producer_fields: bytes) -> bytes:
    """Turn a producer's batch into a stored entry stamped with broker-owned fields.

    ``producer_fields`` comes from :func:`producer_fields`, computed once per producer.
    """
    return b"".join((batch, _PUBLISH_TIME_TAG, encode_varint(publish_time_ms), producer_fields))


def schema_version(data: bytes) -> bytes:
    """The version of the schema an entry's messages were written with (empty: none); one
    per entry, as a batch comes from one producer."""
    return parse(data).schema_version


def producer_fields(producer_name: str, schema_version: bytes = b"") -> bytes:
    """The fields every entry of a producer carries: its name and its schema's version
    (Pulsar's 8 bytes; none without a schema)."""
    raw = producer_name.encode()
    fields = _PRODUCER_NAME_TAG + encode_varint(len(raw)) + raw
    if schema_version:
        fields += _SCHEMA_VERSION_TAG + encode_varint(len(schema_version)) + schema_version
    return fields


@dataclass(slots=True, frozen=True)
class EntryInfo:
    """What dispatch, deduplication and seek need to know about an entry."""

    num_messages: int
    publish_time: int
    producer_name: str
    sequence_id: int
    sticky_key: bytes


# The most messages an entry stored before produce checked declared counts (handler/codec.py
# check_batch) is taken to hold: above what any maxMessageSize of sense can frame, low enough
# that a bit set over the batch stays small (512 KiB).
_STORED_COUNT_CAP = 1 << 22


def _count_bound(uncompressed_size: int) -> int:
    """What a compressed batch's declared size can hold (each message is framed in at least 2
    bytes): produce refuses more, and an entry stored before it did is read as this many."""
    return max(1, min(uncompressed_size // 2, _STORED_COUNT_CAP))


def parse(data: bytes) -> entry_pb2.StoredEntry:
    return entry_pb2.StoredEntry.FromString(data)


def info(data: bytes) -> EntryInfo:
    entry = parse(data)
    first = entry.messages[0] if entry.messages else None
    if entry.HasField("compressed"):  # opaque here: its count and key travel beside it
        batch = entry.compressed
        key, count = batch.key, min(batch.num_messages, _count_bound(batch.uncompressed_size))
    elif first is None:
        key, count = b"", 0
    else:
        key, count = first.ordering_key or first.key.encode(), len(entry.messages)
    return EntryInfo(
        num_messages=count,
        publish_time=entry.publish_time,
        producer_name=entry.producer_name,
        sequence_id=entry.sequence_id,
        sticky_key=key,
    )


def dead_letter(
    data: bytes,
    acked: int,
    real_topic: str,
    real_subscription: str,
    origin_position: object,
    partition: int,
) -> bytes:
    """The batch to publish on a dead-letter topic: the entry's unacked messages, each with
    Pulsar's REAL_TOPIC, REAL_SUBSCRIPTION and ORIGIN_MESSAGE_ID properties added (kept when
    already there, as Pulsar's client does, so a message dead-lettered twice names its first
    origin). ORIGIN_MESSAGE_ID is written as Pulsar's client and this product print message
    ids, ``ledger:entry:partition:batch``. A compressed batch is copied whole (see below).
    ``acked`` is the bit set of the indexes acked already (bit i = index i), tested through
    its bytes: a shift of the int per message would copy it each time."""
    acked_bits = ack_set.to_bytes(acked)
    entry = parse(data)
    out = entry_pb2.StoredEntry(sequence_id=entry.sequence_id)
    if entry.HasField("compressed"):
        # The broker does not decompress: a compressed batch moves whole, without the
        # origin properties and with any messages of it already acked.
        out.compressed.CopyFrom(entry.compressed)
        return out.SerializeToString()
    for index, message in enumerate(entry.messages):
        if ack_set.contains(acked_bits, index):
            continue
        copy = out.messages.add()
        copy.CopyFrom(message)
        origin = {
            "REAL_TOPIC": real_topic,
            "REAL_SUBSCRIPTION": real_subscription,
            "ORIGIN_MESSAGE_ID": f"{origin_position}:{partition}:{index}",
        }
        for key, value in origin.items():
            copy.properties.setdefault(key, value)
    return out.SerializeToString()
