"""Batch compression: LZ4, ZLIB, ZSTD and SNAPPY, on the wire as Pulsar has them.

A compressing producer serializes a batch's messages as it would send them (field 13 of a
ProduceRequest, each message framed), compresses those bytes in one piece, and sends a
``CompressedBatch`` instead: the codec, the uncompressed size, the message count and the
Key_Shared key travel beside the compressed bytes, so the broker stores, counts and dispatches
the entry without decompressing it (it passes through byte for byte) and a consumer in any
language knows what to undo. The formats are Pulsar's, so the same libraries read them: LZ4's
block format (no frame), a zlib stream, a Zstandard frame, Snappy's raw block format.

A consumer undoes it in :func:`decompress_entry` before reading messages. A codec it does not
know, bytes that do not decompress, a size or count other than announced, or an announced
size over :data:`MAX_UNCOMPRESSED_SIZE` raise :class:`~client.InvalidMessage` naming the
entry, never anything lower-level.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from enum import IntEnum
from typing import Protocol

import lz4.block
import snappy
import zstandard

from pulsargrpc.v1 import pulsar_pb2 as pb

from ._errors import InvalidMessage

# The most a consumer decompresses from one entry: the buffer is allocated up front from the
# announced size, so a bound keeps a hostile or broken producer from exhausting its memory.
MAX_UNCOMPRESSED_SIZE = 64 * 1024 * 1024


class CompressionType(IntEnum):
    """pulsar-client's ``CompressionType``, with the wire contract's numbers.

    >>> CompressionType.ZLib is CompressionType.ZLIB
    True
    """

    NONE = 0
    LZ4 = 1
    ZLib = 2
    ZLIB = 2  # the wire contract's spelling
    ZSTD = 3
    SNAPPY = 4


def _zstd_compress(data: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


def _zstd_decompress(data: bytes, size: int) -> bytes:
    return zstandard.ZstdDecompressor().decompress(data, max_output_size=size)


def _snappy_decompress(data: bytes, size: int) -> bytes:
    # The raw format starts with the uncompressed length (a varint), which the library
    # allocates: check it against the announced size first.
    length, shift, complete = 0, 0, False
    for byte in data[:5]:
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            complete = True
            break
    if not complete or length != size:
        raise ValueError(f"the Snappy header does not announce {size} bytes")
    return bytes(snappy.uncompress(data))


def _zlib_decompress(data: bytes, size: int) -> bytes:
    out = zlib.decompressobj()
    raw = out.decompress(data, size)
    if out.unconsumed_tail:
        raise ValueError(f"more than the announced {size} bytes")
    return raw


class Sealer(Protocol):
    """Encrypts a batch after compression (``_crypto.BatchEncryptor``)."""

    def seal(self, batch: pb.CompressedBatch) -> None: ...


_COMPRESS: dict[CompressionType, Callable[[bytes], bytes]] = {
    CompressionType.NONE: bytes,  # an encrypted batch need not be compressed
    CompressionType.LZ4: lambda data: lz4.block.compress(data, store_size=False),
    CompressionType.ZLIB: zlib.compress,
    CompressionType.ZSTD: _zstd_compress,
    CompressionType.SNAPPY: snappy.compress,
}

_DECOMPRESS: dict[int, Callable[[bytes, int], bytes]] = {
    CompressionType.NONE: lambda data, size: data,
    CompressionType.LZ4: lambda data, size: lz4.block.decompress(data, uncompressed_size=size),
    CompressionType.ZLIB: _zlib_decompress,
    CompressionType.ZSTD: _zstd_decompress,
    CompressionType.SNAPPY: _snappy_decompress,
}


def compression_type(value: CompressionType | str | int) -> CompressionType:
    """A producer's ``compression_type`` as given: the enum, its name in any case, or its
    number.

    >>> compression_type("lz4")
    <CompressionType.LZ4: 1>
    """
    if isinstance(value, str):
        for member in CompressionType:
            if member.name.lower() == value.lower():
                return member
        raise ValueError(
            f"unknown compression_type {value!r}: expected NONE, LZ4, ZLIB, ZSTD or SNAPPY"
        )
    return CompressionType(value)


def compress_batch(
    codec: CompressionType,
    messages: bytes,
    num_messages: int,
    key: bytes,
    sealer: Sealer | None = None,
) -> pb.CompressedBatch:
    """The CompressedBatch for ``messages``: serialized MessageData, each framed as field 13;
    compressed with ``codec``, then encrypted by ``sealer`` if given.

    >>> batch = compress_batch(CompressionType.ZLIB, b"\\x6a\\x03\\x0a\\x01x", 1, b"")
    >>> batch.uncompressed_size, batch.num_messages
    (5, 1)
    """
    batch = pb.CompressedBatch(
        compression=codec.value,
        uncompressed_size=len(messages),
        num_messages=num_messages,
        key=key,
        messages=_COMPRESS[codec](messages),
    )
    if sealer is not None:
        sealer.seal(batch)
    return batch


def decompress_entry(entry: pb.DeliveredEntry) -> None:
    """Replace a delivered entry's CompressedBatch by its messages, in place; an entry that
    is not compressed is left as it is. An encrypted batch must be decrypted first
    (``_crypto.EntryDecryptor``).

    Raises :class:`InvalidMessage` when the batch cannot be undone (see the module doc)."""
    if not entry.HasField("compressed"):
        return
    batch = entry.compressed
    where = f"entry {entry.ledger_id}:{entry.entry_id}"
    decompress = _DECOMPRESS.get(batch.compression)
    if decompress is None:
        raise InvalidMessage(
            f"{where} is compressed with codec {batch.compression}, which this client cannot "
            f"decompress (it knows {', '.join(c.name for c in _COMPRESS)})"
        )
    if batch.HasField("encryption"):
        raise InvalidMessage(f"{where} is still encrypted")
    name = CompressionType(batch.compression).name
    if batch.uncompressed_size > MAX_UNCOMPRESSED_SIZE:
        raise InvalidMessage(
            f"{where} announces {batch.uncompressed_size} bytes once decompressed, over the "
            f"client's limit of {MAX_UNCOMPRESSED_SIZE}"
        )
    try:
        raw = decompress(batch.messages, batch.uncompressed_size)
    except Exception as exc:  # each library raises its own error type
        raise InvalidMessage(f"{where} does not decompress as {name}: {exc}") from None
    if len(raw) != batch.uncompressed_size:
        raise InvalidMessage(
            f"{where} decompressed to {len(raw)} bytes, not the announced {batch.uncompressed_size}"
        )
    try:
        # Parsed apart, not merged into the entry: fields other than the messages (the
        # broker's publish time, producer name) must not be forgeable from inside the batch.
        messages = pb.ProduceRequest.FromString(raw).messages
    except Exception as exc:  # protobuf's DecodeError
        raise InvalidMessage(f"{where} decompressed to bytes that aren't messages: {exc}") from None
    if len(messages) != batch.num_messages:
        raise InvalidMessage(
            f"{where} holds {len(messages)} messages, not the announced {batch.num_messages}"
        )
    entry.ClearField("compressed")
    entry.messages.extend(messages)
