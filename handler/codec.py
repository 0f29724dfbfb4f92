"""Byte-level encoding of the hot messages, so the broker never rebuilds them message by message.

A stored entry already holds the fields of ``DeliveredEntry`` that the producer and broker set
(10-13); delivering it means appending the per-delivery fields (1-5). They go last on purpose:
for a scalar field protobuf keeps the last value, so whatever a stored entry might contain, the
ids a consumer sees are the broker's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TypeVar

from google.protobuf import unknown_fields
from google.protobuf.message import Message

from pulsar_grpc.broker.entry_format import encode_varint
from pulsar_grpc.broker.errors import InvalidArgumentError
from pulsar_grpc.broker.topics import Delivery
from pulsargrpc.v1 import pulsar_pb2

# Split consume responses so each stays well below gRPC's default 4 MB message limit. An entry
# larger than this goes alone in its response: an entry is never split, so a client receiving
# entries near maxMessageSize must raise its channel's receive limit (docs/protocol.md).
MAX_RESPONSE_BYTES = 1 << 20


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
    if delivery.acked_batch_indexes:
        packed = b"".join(encode_varint(i) for i in sorted(delivery.acked_batch_indexes))
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
