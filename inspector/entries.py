"""Decoding one stored entry into an :class:`EntryRecord`, with the broker's and the SDK's own
decoders: the entry format is the broker's (``entry_format.parse``: a StoredEntry), and a
compressed batch is undone by the SDK's ``decompress_entry``, exactly as a consumer would (so
the same limits apply: a batch announcing more than 64 MiB is refused, not allocated).

An end-to-end encrypted batch (``compressed.encryption`` set) is never decoded: its envelope
(key names and metadata, wrapped data keys, algorithm, nonce) and its ciphertext are shown as
stored. The inspector has no private key and must not pretend to read the payload.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from pulsar_grpc.broker import entry_format
from pulsar_grpc.client._compression import decompress_entry
from pulsar_grpc.client._errors import InvalidMessage
from pulsar_grpc.inspector.model import (
    CorruptDataError,
    EncryptedBatch,
    EncryptionKeyRecord,
    EntryRecord,
    MessageRecord,
)
from pulsargrpc.v1 import pulsar_pb2 as pb

__all__ = ["decode_entry"]


def _codec_name(value: int) -> str:
    """The wire contract's name of a codec (ZLIB, not the SDK's alias ZLib)."""
    try:
        return pb.CompressionType.Name(value)
    except ValueError:
        return f"UNKNOWN({value})"


def decode_entry(ledger_id: int, entry_id: int, data: bytes) -> EntryRecord:
    """The entry at ``ledger_id:entry_id`` whose stored bytes are ``data``.

    Raises :class:`CorruptDataError` naming the entry when the bytes are not an entry, or a
    compressed batch does not decompress to what it announces."""
    where = f"entry {ledger_id}:{entry_id}"
    try:
        stored = entry_format.parse(data)
    except DecodeError as e:
        raise CorruptDataError(f"{where} is not a stored entry: {e}") from None
    encrypted: EncryptedBatch | None = None
    messages: list[pb.MessageData] = list(stored.messages)
    compression = "NONE"
    num_messages = len(messages)
    if stored.HasField("compressed"):
        batch = stored.compressed
        compression = _codec_name(batch.compression)
        num_messages = batch.num_messages
        if batch.HasField("encryption"):
            encrypted = _encrypted(batch, compression)
            messages = []
        else:
            delivered = pb.DeliveredEntry(ledger_id=ledger_id, entry_id=entry_id, compressed=batch)
            try:
                decompress_entry(delivered)
            except InvalidMessage as e:
                raise CorruptDataError(str(e)) from None
            messages = list(delivered.messages)
    return EntryRecord(
        ledger_id=ledger_id,
        entry_id=entry_id,
        size=len(data),
        num_messages=num_messages,
        publish_time=stored.publish_time,
        sequence_id=stored.sequence_id,
        producer_name=stored.producer_name,
        schema_version=stored.schema_version,
        compression=compression,
        messages=tuple(
            MessageRecord(
                index=i,
                key=m.key,
                ordering_key=m.ordering_key,
                properties=dict(m.properties),
                event_time=m.event_time,
                payload=m.payload,
                null_value=m.null_value,
            )
            for i, m in enumerate(messages)
        ),
        encrypted=encrypted,
    )


def _encrypted(batch: pb.CompressedBatch, compression: str) -> EncryptedBatch:
    context = batch.encryption
    return EncryptedBatch(
        algorithm=context.algorithm,
        param=context.param,
        keys=tuple(
            EncryptionKeyRecord(name=k.key, metadata=dict(k.metadata), wrapped_data_key=k.value)
            for k in context.keys
        ),
        compression=compression,
        uncompressed_size=batch.uncompressed_size,
        ciphertext=batch.messages,
    )
