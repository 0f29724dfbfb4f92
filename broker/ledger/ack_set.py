"""Batch-index bit sets (Pulsar's ackSet): which messages of one batch are acked, as an int.

A cursor keeps, per partly acked entry, the bit set of the indexes NOT acked yet (bit i =
index i, Pulsar's ``batchDeletedIndexes`` / ``BitSetRecyclable``, persisted as its ``long[]``).
A Python int is that ``long[]``: n bits in n/8 bytes. What makes it cheap or dear is how it
is used: every operation on an int copies it, so a loop that tests or clears one bit at a
time costs O(n) per index and O(n^2) per batch (a redelivery of a batch of 1,000,000 messages
with one index acked took 26.7 s of the event loop that way). Everything here works on whole
ints and bytes, in C: O(n/8) for a batch of n messages, plus O(k) for k indexes a client sent
or O(r) for r runs of acked indexes, never O(n) Python steps per message.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = [
    "acked_runs",
    "contains",
    "indexes_mask",
    "packed_varints",
    "to_bytes",
]

_NONZERO = re.compile(rb"[^\x00]")
# The set bits of each byte value, lowest first.
_BITS: tuple[tuple[int, ...], ...] = tuple(
    tuple(bit for bit in range(8) if byte >> bit & 1) for byte in range(256)
)


def indexes_mask(indexes: Iterable[int], size: int) -> int:
    """The bits of ``indexes`` that are inside a batch of ``size`` (others are ignored).

    A ``range`` (a cumulative ack, a start inside a batch) costs two shifts; any other
    iterable one byte operation per index, then one conversion of n/8 bytes."""
    if isinstance(indexes, range) and indexes.step == 1:
        lo, hi = max(indexes.start, 0), min(indexes.stop, size)
        return ((1 << hi) - 1) ^ ((1 << lo) - 1) if hi > lo else 0
    buf = bytearray((size + 7) >> 3)
    for i in indexes:
        if 0 <= i < size:
            buf[i >> 3] |= 1 << (i & 7)
    return int.from_bytes(buf, "little")


def to_bytes(mask: int) -> bytes:
    """The bit set as bytes, bit i in byte i/8 (least significant bit first), trailing zero
    bytes left out: java.util.BitSet.toByteArray()."""
    return mask.to_bytes((mask.bit_length() + 7) >> 3, "little")


def contains(raw: bytes, index: int) -> bool:
    """Whether bit ``index`` is set in ``raw`` (from :func:`to_bytes`): O(1), where
    ``mask >> index & 1`` copies the int."""
    byte = index >> 3
    return byte < len(raw) and bool(raw[byte] >> (index & 7) & 1)


def acked_runs(mask: int) -> list[tuple[int, int]]:
    """The runs of set bits of ``mask``, each as ``(first, end)`` with ``end`` exclusive.

    A run starts and ends where a bit differs from the one below it; those edges are found
    by scanning bytes in C, so the Python work is per edge, not per index."""
    if mask <= 0:
        return []
    raw = to_bytes(mask ^ (mask << 1))
    edges = [
        (match.start() << 3) + bit
        for match in _NONZERO.finditer(raw)
        for bit in _BITS[raw[match.start()]]
    ]
    return list(zip(edges[0::2], edges[1::2], strict=True))


# -- the packed varints of DeliveredEntry.acked_batch_indexes --------------------------------
#
# The wire lists acked indexes one by one (repeated uint32, packed). The encoding of a run of
# consecutive indexes is a slice of the varints of all indexes one after the other, so the list
# is copied from blocks of 16,384 indexes (2^14: the varint width is the same across a block
# but the first), each built once with slice assignments, never index by index.

_BLOCK_BITS = 14
_BLOCK = 1 << _BLOCK_BITS
_LOW = bytes(range(0x80, 0x100)) * (_BLOCK >> 7)  # (i & 0x7f) | 0x80 for i in a block
_MID = b"".join(bytes([0x80 | h]) * 128 for h in range(128))  # (i >> 7 & 0x7f) | 0x80
_blocks: dict[int, tuple[bytes, int]] = {}  # block number -> (varints, width; 0: block 0)


def _block(number: int) -> tuple[bytes, int]:
    cached = _blocks.get(number)
    if cached is not None:
        return cached
    if number == 0:  # 0..127 take one byte, 128..16383 two: low 7 bits | 0x80, then i >> 7
        two = bytearray(2 * (_BLOCK - 128))
        two[0::2] = _LOW[128:]
        two[1::2] = b"".join(bytes([h]) * 128 for h in range(1, 128))
        block = bytes(range(128)) + bytes(two)
        width = 0
    else:
        high = _varint(number)  # i >> 14: one byte below 2^21, two below 2^28
        width = 2 + len(high)
        buf = bytearray(_BLOCK * width)
        buf[0::width] = _LOW
        buf[1::width] = _MID
        for offset, byte in enumerate(high):
            buf[2 + offset :: width] = bytes([byte]) * _BLOCK
        block = bytes(buf)
    _blocks[number] = (block, width)
    return block, width


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _offset(width: int, local: int) -> int:
    """Where the varint of index ``local`` of a block starts in it."""
    if width:
        return local * width
    return local if local <= 128 else 128 + 2 * (local - 128)


def packed_varints(mask: int) -> bytes:
    """The set bits of ``mask`` as packed varints, in increasing order (the payload of
    ``DeliveredEntry.acked_batch_indexes``): O(n/8) in C plus O(runs + blocks) in Python."""
    parts: list[bytes] = []
    for first, end in acked_runs(mask):
        while first < end:
            number, local = first >> _BLOCK_BITS, first & (_BLOCK - 1)
            stop = min(end - (number << _BLOCK_BITS), _BLOCK)
            block, width = _block(number)
            parts.append(block[_offset(width, local) : _offset(width, stop)])
            first = (number << _BLOCK_BITS) + stop
    return b"".join(parts)
