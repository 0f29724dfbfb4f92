"""Batch-index bit sets (Pulsar's ackSet): which messages of one batch are acked, as an int.

A cursor keeps, per partly acked entry, the bit set of the indexes NOT acked yet (bit i =
index i, Pulsar's ``batchDeletedIndexes`` / ``BitSetRecyclable``, persisted as its ``long[]``).
A Python int is that ``long[]``: n bits in n/8 bytes. What makes it cheap or dear is how it
is used: every operation on an int copies it, so a loop that tests or clears one bit at a
time costs O(n) per index and O(n^2) per batch (a redelivery of a batch of 1,000,000 messages
with one index acked took 26.7 s of the event loop that way). Everything here works on whole
ints and bytes, in C: O(n/8) for a batch of n messages, plus O(k) for k indexes a client sent
and O(n / 2^14) Python steps to list them, never a Python step per message. (``acked_runs``
is per run of acked indexes: for tests and tools, not the delivery path.)
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from pulsar_grpc.broker.varint import encode_varint

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
# The wire lists acked indexes one by one (repeated uint32, packed). They are copied out of the
# varints of all indexes one after the other, kept in segments where every varint has the same
# width: [0, 128) one byte, [128, 2^14) two, then blocks of 2^14 indexes of three bytes (four
# from 2^21). A segment is selected from by the acked bits in C: each bit becomes `width` bytes
# of 0xFF or 0x00, the segment is masked with them, and what was masked out, set to a byte
# value no varint of the segment uses, is deleted with bytes.translate. So a batch costs a few
# C passes over its n/8 bytes and O(n / 2^14) Python steps, whatever the pattern of its acks
# (one ack every other index makes as many runs as indexes).

_BLOCK_BITS = 14
_BLOCK = 1 << _BLOCK_BITS
_LOW = bytes(range(0x80, 0x100)) * (_BLOCK >> 7)  # (i & 0x7f) | 0x80 for i in a block
_MID = b"".join(bytes([0x80 | h]) * 128 for h in range(128))  # (i >> 7 & 0x7f) | 0x80
# Each byte value as 8 bytes of 0xFF (bit set) or 0x00, least significant bit first.
_SPREAD: tuple[bytes, ...] = tuple(
    bytes(0xFF if byte >> bit & 1 else 0 for bit in range(8)) for byte in range(256)
)


@dataclass(frozen=True, slots=True)
class _Segment:
    first: int  # the segment's first index (a multiple of 128)
    count: int
    width: int  # bytes of each varint
    varints: int  # the varints of first .. first + count - 1, as a little-endian int
    unused: int  # a byte value no varint of the segment contains


def _build(first: int, count: int, width: int, unused: int) -> _Segment:
    if width == 1:
        raw = bytes(range(first, first + count))
    else:
        buf = bytearray(count * width)
        buf[0::width] = _LOW[:count]
        buf[1::width] = _MID[(first & (_BLOCK - 1)) : (first & (_BLOCK - 1)) + count]
        if width == 2:  # [128, 2^14): the second byte is the last, i >> 7
            buf[1::width] = bytes(b & 0x7F for b in _MID[128:])
        else:
            for offset, byte in enumerate(encode_varint(first >> _BLOCK_BITS)):
                buf[2 + offset :: width] = bytes([byte]) * count
        raw = bytes(buf)
    return _Segment(first, count, width, int.from_bytes(raw, "little"), unused)


_segments: dict[int, _Segment] = {}  # by first index


def _segment_at(first: int) -> _Segment:
    cached = _segments.get(first)
    if cached is None:
        if first == 0:
            cached = _build(0, 128, 1, 0xFF)  # one-byte varints are 0..127
        elif first == 128:
            cached = _build(128, _BLOCK - 128, 2, 0x00)  # a last byte i >> 7 is never 0
        else:  # a last byte i >> 14 (>> 21) is never 0 here
            cached = _build(first, _BLOCK, 3 if first < 1 << 21 else 4, 0x00)
        _segments[first] = cached
    return cached


def packed_varints(mask: int) -> bytes:
    """The set bits of ``mask`` as packed varints, in increasing order (the payload of
    ``DeliveredEntry.acked_batch_indexes``)."""
    raw = to_bytes(mask)
    parts: list[bytes] = []
    first = 0
    while first < len(raw) << 3:
        segment = _segment_at(first)
        bits = raw[first >> 3 : (first + segment.count) >> 3]
        first += segment.count
        if not bits.strip(b"\x00"):
            continue
        count, width = len(bits) << 3, segment.width
        spread = b"".join(map(_SPREAD.__getitem__, bits))
        if width == 1:
            keep = spread
        else:
            wide = bytearray(count * width)
            for offset in range(width):
                wide[offset::width] = spread
            keep = bytes(wide)
        keep_int = int.from_bytes(keep, "little")
        varints = segment.varints & ((1 << (count * width * 8)) - 1)
        if segment.unused:  # masked-out bytes become 0xFF: set them, keep the others
            selected = varints | (((1 << (count * width * 8)) - 1) ^ keep_int)
        else:
            selected = varints & keep_int
        out = selected.to_bytes(count * width, "little")
        parts.append(out.translate(None, bytes([segment.unused])))
    return b"".join(parts)
