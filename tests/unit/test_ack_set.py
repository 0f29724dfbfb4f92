"""Batch-index bit sets (broker/ledger/ack_set.py) against plain per-index references, and the
cursor-state words they persist as (java.util.BitSet.toLongArray), at batch sizes where the
per-index forms were quadratic."""

from __future__ import annotations

import random

import pytest

from pulsar_grpc.broker.ledger import Position, ack_set
from pulsar_grpc.broker.ledger.cursor_state import (
    CursorState,
    _from_words,
    _to_words,
    decode_position_info,
    encode_position_info,
)
from pulsar_grpc.broker.topics.dispatcher import ReplaySet
from pulsar_grpc.broker.varint import encode_varint


def reference_varints(indexes: list[int]) -> bytes:
    return b"".join(encode_varint(i) for i in sorted(indexes))


def mask_of(indexes: set[int]) -> int:
    return sum(1 << i for i in indexes)


# Sizes around each varint width and block boundary (2^7, 2^14, 2^21).
SIZES = [1, 2, 127, 128, 129, 16383, 16384, 16385, 40_000, (1 << 21) + 3]


@pytest.mark.parametrize("size", SIZES)
def test_masks_runs_and_packed_varints_match_per_index_references(size: int) -> None:
    rng = random.Random(size)
    indexes = set(rng.sample(range(size), min(size, 200))) | {0, size - 1}
    if size > 200:  # a long run across a block boundary too
        indexes |= set(range(size // 2 - 150, size // 2 + 150))
    mask = ack_set.indexes_mask(indexes, size)
    assert mask == mask_of(indexes)
    assert [i for a, b in ack_set.acked_runs(mask) for i in range(a, b)] == sorted(indexes)
    assert ack_set.packed_varints(mask) == reference_varints(sorted(indexes))
    raw = ack_set.to_bytes(mask)
    probes = list(indexes)[:50] + rng.sample(range(size), min(size, 50)) + [size, size + 64]
    assert all(ack_set.contains(raw, i) == (i in indexes) for i in probes)


def test_a_whole_batch_of_a_million_acked_indexes_encodes_like_the_reference() -> None:
    size = 1_000_000
    full = (1 << size) - 1
    assert ack_set.acked_runs(full) == [(0, size)]
    expected = bytes(range(128)) + b"".join(encode_varint(i) for i in range(128, size))
    assert ack_set.packed_varints(full) == expected
    every_other = ack_set.indexes_mask(range(0, size, 2), size)  # a stepped range: per index
    assert every_other.bit_count() == size // 2
    assert ack_set.packed_varints(every_other) == reference_varints(list(range(0, size, 2)))


def test_ranges_and_out_of_batch_indexes() -> None:
    assert ack_set.indexes_mask(range(3), 10) == 0b111
    assert ack_set.indexes_mask(range(2, 50), 5) == 0b11100
    assert ack_set.indexes_mask(range(7, 3), 10) == 0
    assert ack_set.indexes_mask([-1, 3, 10, 11], 10) == 0b1000
    assert ack_set.acked_runs(0) == [] and ack_set.packed_varints(0) == b""
    assert ack_set.to_bytes(0) == b"" and not ack_set.contains(b"", 0)


@pytest.mark.parametrize("size", [2, 63, 64, 65, 1000, 1_000_000])
def test_cursor_state_words_round_trip_as_java_bitset_words(size: int) -> None:
    unacked = ((1 << size) - 1) & ~1  # index 0 acked
    words = _to_words(unacked)
    assert len(words) == -(-size // 64)
    assert all(-(2**63) <= w < 2**63 for w in words)
    assert _from_words(words) == unacked
    # The per-word reference: BitSet.toLongArray()'s signed 64-bit words, lowest first.
    reference = [(unacked >> (64 * i)) & (2**64 - 1) for i in range(min(len(words), 40))]
    assert [w & (2**64 - 1) for w in words[:40]] == reference


def test_a_state_with_a_million_index_batch_round_trips_through_position_info() -> None:
    unacked = ((1 << 1_000_000) - 1) ^ 1
    state = CursorState(Position(3, 1), batch_deleted={Position(3, 2): unacked})
    decoded = decode_position_info(encode_position_info(state))
    assert decoded.batch_deleted == {Position(3, 2): unacked}


def test_negative_legacy_masks_are_cut_after_their_highest_acked_word() -> None:
    assert _to_words(~0b101) == [-6]  # ...11111010 in one word, as Pulsar reads it
    assert _from_words(_to_words(~(1 << 70))) == ((1 << 128) - 1) ^ (1 << 70)


def test_the_replay_set_yields_its_first_positions_in_order_without_losing_any() -> None:
    replay = ReplaySet()
    positions = [Position(1, i) for i in range(1000)]
    random.Random(7).shuffle(positions)
    for p in positions:
        replay[p] = None
    assert replay.first(3) == [Position(1, 0), Position(1, 1), Position(1, 2)]
    assert replay.first(3) == [Position(1, 0), Position(1, 1), Position(1, 2)]  # still there
    for i in range(0, 1000, 2):
        replay.pop(Position(1, i))
    replay[Position(1, 4)] = 7  # removed, then back
    assert replay.first(4) == [Position(1, 1), Position(1, 3), Position(1, 4), Position(1, 5)]
    taken: list[Position] = []
    while replay:
        batch = replay.first(100)
        taken += batch
        for p in batch:
            replay.pop(p)
    assert taken == sorted(taken) and len(taken) == 501
    replay.clear()
    assert replay.first(5) == []
