"""Byte-level encoding of the hot messages, so the broker never rebuilds them message by message.

A stored entry already holds the fields of ``DeliveredEntry`` that the producer and broker set
(10-13); delivering it means appending the per-delivery fields (1-5). They go last on purpose:
for a scalar field protobuf keeps the last value, so whatever a stored entry might contain, the
ids a consumer sees are the broker's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import TypeVar

from google.protobuf import unknown_fields
from google.protobuf.message import Message

from pulsar_grpc.broker.errors import InvalidArgumentError, TooLargeError
from pulsar_grpc.broker.ledger.ack_set import packed_varints
from pulsar_grpc.broker.topics import Delivery
from pulsar_grpc.broker.varint import encode_varint
from pulsargrpc.v1 import pulsar_pb2

# Split consume responses so each stays well below gRPC's default 4 MiB message limit. An
# entry larger than this goes alone in its response: an entry is never split, so the broker
# stores only batches whose delivery fits GRPC_DEFAULT_RECEIVE_LIMIT (check_deliverable).
MAX_RESPONSE_BYTES = 1 << 20
# gRPC's default receive limit, the same in every implementation: what a client written from
# docs/protocol.md without channel options accepts. Whatever the broker stores, such a client
# must be able to read, or the subscription would be stuck behind an entry it cannot take.
GRPC_DEFAULT_RECEIVE_LIMIT = 4 << 20
# The bytes a compressed batch's messages take at least, each, once decompressed: the field-13
# tag and a zero length (an empty MessageData).
MIN_FRAMED_MESSAGE_BYTES = 2
# The broker's fields of a stored entry besides the producer's (publish time: tag + varint).
_PUBLISH_TIME_BYTES = 11
# A delivery's ids: ledger_id, entry_id, partition (a negative int32 takes 10), redelivery count.
_DELIVERY_ID_BYTES = 4 * 11


def _int32(value: int) -> bytes:
    return encode_varint(value & 0xFFFFFFFFFFFFFFFF)


def encode_delivery(delivery: Delivery, partition: int) -> bytes:
    pos = delivery.position
    parts = [
        delivery.data,
        b"\x08",
        encode_varint(pos.ledger_id),
        b"\x10",
        encode_varint(pos.entry_id),
        b"\x18",
        _int32(partition),
        b"\x20",
        encode_varint(delivery.redelivery_count),
    ]
    if delivery.acked_indexes:
        packed = packed_varints(delivery.acked_indexes)
        parts += [b"\x2a", encode_varint(len(packed)), packed]
    return b"".join(parts)


def encode_message_batches(deliveries: list[Delivery], partition: int) -> Iterator[bytes]:
    """ConsumeResponse{messages: MessageBatch{entries...}} as bytes, chunked by size."""
    chunk: list[bytes] = []
    size = 0
    for delivery in deliveries:
        entry = encode_delivery(delivery, partition)
        framed = b"\x0a" + encode_varint(len(entry)) + entry
        if chunk and size + len(framed) > MAX_RESPONSE_BYTES:
            yield _response(chunk, size)
            chunk, size = [], 0
        chunk.append(framed)
        size += len(framed)
    if chunk:
        yield _response(chunk, size)


def _response(chunk: list[bytes], size: int) -> bytes:
    return b"".join([b"\x12", encode_varint(size), *chunk])


M = TypeVar("M", bound=Message)

# Sequence ids are Java longs in Pulsar, and ProducerReady.last_sequence_id is an int64: a
# batch reaching past this could be stored but never answered (its receipt would not encode).
MAX_SEQUENCE_ID = 2**63 - 1


def parse(message_type: type[M], raw: bytes) -> M:
    """Decode a client's request; bytes that are not one are the client's error.

    Every RPC takes raw bytes and decodes here rather than in a gRPC request deserializer: a
    deserializer that fails ends the call with INTERNAL (or UNKNOWN), which blames the broker.
    """
    try:
        return message_type.FromString(raw)
    except Exception as exc:  # protobuf raises DecodeError, a plain Exception subclass
        name = message_type.DESCRIPTOR.name
        raise InvalidArgumentError(f"malformed {name}: {exc}") from None


async def parse_stream(message_type: type[M], requests: AsyncIterator[bytes]) -> AsyncIterator[M]:
    """:func:`parse` for each request of a stream, in order."""
    async for raw in requests:
        yield parse(message_type, raw)


def varints_size(count: int) -> int:
    """Bytes of the varints of 0, 1, ..., count - 1 one after the other (each takes one byte
    more from 2^7, 2^14, 2^21 and 2^28 on)."""
    return count + sum(max(0, count - (1 << bits)) for bits in (7, 14, 21, 28))


def delivered_size_bound(stored_size: int, num_messages: int) -> int:
    """The largest consume response one entry can make: an entry of ``stored_size`` bytes
    (sealed) alone in its response, redelivered with every index but one listed as acked."""
    acked = varints_size(num_messages)
    entry = stored_size + _DELIVERY_ID_BYTES + (1 + len(encode_varint(acked)) + acked)
    framed = 1 + len(encode_varint(entry)) + entry
    return 1 + len(encode_varint(framed)) + framed


def check_batch(request: pulsar_pb2.ProduceRequest, raw_size: int, limits: BatchLimits) -> None:
    """Refuse a batch whose message count is not backed by its bytes or is over
    ``maxMessagesPerBatch``, or whose delivery would not fit a client's default receive limit.

    The count sizes the broker's per-batch work and memory (permits, the bit set of acked
    indexes, listing them on a redelivery), so it is checked before anything is allocated for
    it: a plain batch's count is what was parsed, a compressed batch's is declared, and each
    of its messages takes at least MIN_FRAMED_MESSAGE_BYTES of its declared uncompressed size,
    which itself may not exceed maxMessageSize (Pulsar's consumer refuses an uncompressed size
    over maxMessageSize)."""
    count = message_count(request)
    if request.HasField("compressed"):
        size = request.compressed.uncompressed_size
        if size > limits.max_message_size:
            raise InvalidArgumentError(
                f"ProduceRequest.compressed.uncompressed_size {size} exceeds maxMessageSize "
                f"{limits.max_message_size}"
            )
        if count > size // MIN_FRAMED_MESSAGE_BYTES:
            raise InvalidArgumentError(
                f"ProduceRequest.compressed declares {count} messages in uncompressed_size {size} "
                f"bytes: each message takes at least {MIN_FRAMED_MESSAGE_BYTES}"
            )
    if count > limits.max_messages:
        raise InvalidArgumentError(
            f"batch of {count} messages exceeds maxMessagesPerBatch {limits.max_messages}"
        )
    stored = raw_size + _PUBLISH_TIME_BYTES + limits.producer_fields_size
    delivered = delivered_size_bound(stored, count)
    if delivered > GRPC_DEFAULT_RECEIVE_LIMIT:
        raise TooLargeError(
            f"batch of {raw_size} bytes and {count} messages would be delivered in up to "
            f"{delivered} bytes, over gRPC's default receive limit of {GRPC_DEFAULT_RECEIVE_LIMIT} "
            f"bytes (4 MiB) that every consumer must be able to read"
        )


@dataclass(slots=True, frozen=True)
class BatchLimits:
    """What a produced batch is checked against (:func:`check_batch`)."""

    max_messages: int  # maxMessagesPerBatch
    max_message_size: int  # maxMessageSize
    producer_fields_size: int  # what the broker appends to each of the producer's batches


def parse_produce_request(raw: bytes) -> pulsar_pb2.ProduceRequest:
    """Parse a batch and refuse fields this version does not know (they would be stored)."""
    request = parse(pulsar_pb2.ProduceRequest, raw)
    if len(unknown_fields.UnknownFieldSet(request)):
        raise InvalidArgumentError("ProduceRequest carries fields this broker does not know")
    if request.HasField("compressed"):
        if request.messages:
            raise InvalidArgumentError("ProduceRequest carries both messages and compressed")
        if not request.compressed.num_messages:
            raise InvalidArgumentError("ProduceRequest.compressed has num_messages 0")
        encryption = request.compressed.encryption
        if request.compressed.HasField("encryption") and not encryption.keys:
            # Pulsar counts a message as encrypted by its encryption keys (what the namespace
            # policy encryption_required checks): without any, no consumer could decrypt it.
            raise InvalidArgumentError("ProduceRequest.compressed.encryption has no keys")
    elif not request.messages:
        raise InvalidArgumentError("ProduceRequest carries no messages")
    highest = request.sequence_id + message_count(request) - 1
    if highest > MAX_SEQUENCE_ID:
        raise InvalidArgumentError(
            f"sequence ids up to {highest} exceed {MAX_SEQUENCE_ID} (Pulsar's are Java longs)"
        )
    return request


def message_count(request: pulsar_pb2.ProduceRequest) -> int:
    """Messages in a batch; a compressed batch says how many (the broker never decompresses)."""
    if request.HasField("compressed"):
        return request.compressed.num_messages
    return len(request.messages)


def encrypted(request: pulsar_pb2.ProduceRequest) -> bool:
    """Whether the batch is end-to-end encrypted (Pulsar's test for encryption_required is that
    it carries an encrypted data key: :func:`parse_produce_request` refused an encryption
    without one; the broker never decrypts)."""
    return request.HasField("compressed") and request.compressed.HasField("encryption")


def serialize_response(
    response: bytes | pulsar_pb2.ProduceResponse | pulsar_pb2.ConsumeResponse,
) -> bytes:
    return response if isinstance(response, bytes) else response.SerializeToString()


def identity(raw: bytes) -> bytes:
    return raw
