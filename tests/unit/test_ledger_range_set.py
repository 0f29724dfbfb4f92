"""Pure logic: Position ordering and PositionRangeSet."""

from __future__ import annotations

import random

from pulsar_grpc.broker.ledger import Position, PositionRangeSet
from pulsar_grpc.broker.ledger.cache import EntryCache

P = Position


def test_position_order_and_str() -> None:
    assert P(1, 5) < P(1, 6) < P(2, -1) < P(2, 0)
    assert str(P(3, 4)) == "3:4"
    assert Position.parse("3:4") == P(3, 4)
    assert Position.parse(str(P(7, -1))) == P(7, -1)
    assert len({P(1, 1), P(1, 1)}) == 1


def test_add_merges_adjacent_and_overlapping() -> None:
    s = PositionRangeSet()
    for e in [1, 3, 2, 7, 5]:
        s.add(P(1, e))
    assert s.ranges() == [(P(1, 1), P(1, 3)), (P(1, 5), P(1, 5)), (P(1, 7), P(1, 7))]
    s.add_range(1, 4, 8)
    assert s.ranges() == [(P(1, 1), P(1, 8))]
    assert s.count() == 8


def test_ranges_do_not_cross_ledgers() -> None:
    s = PositionRangeSet()
    s.add(P(2, 0))
    s.add(P(1, 9))
    assert s.ranges() == [(P(1, 9), P(1, 9)), (P(2, 0), P(2, 0))]
    assert P(1, 9) in s and P(2, 0) in s and P(2, 1) not in s


def test_count_up_to_and_remove_up_to() -> None:
    s = PositionRangeSet()
    s.add_range(1, 0, 9)
    s.add_range(2, 5, 6)
    s.add_range(3, 0, 0)
    assert s.count_up_to(P(2, 5)) == 11
    assert s.count_up_to(P(1, 4)) == 5
    s.remove_up_to(P(2, 5))
    assert s.ranges() == [(P(2, 6), P(2, 6)), (P(3, 0), P(3, 0))]
    s.remove_up_to(P(9, 0))
    assert not s


def test_gaps() -> None:
    s = PositionRangeSet()
    s.add_range(1, 2, 3)
    s.add_range(1, 6, 6)
    assert list(s.gaps(1, 0, 9)) == [(0, 1), (4, 5), (7, 9)]
    assert list(s.gaps(1, 2, 3)) == []
    assert list(s.gaps(1, 3, 6)) == [(4, 5)]
    assert list(s.gaps(2, 0, 4)) == [(0, 4)]
    assert list(s.gaps(2, 5, 4)) == []


def test_advance_folds_ranges_into_mark_delete_across_ledgers() -> None:
    sizes = {1: 10, 2: 5, 3: 5}

    def successor(p: Position) -> Position:
        if p.entry_id + 1 < sizes[p.ledger_id]:
            return P(p.ledger_id, p.entry_id + 1)
        return P(p.ledger_id + 1, 0)

    s = PositionRangeSet()
    s.add_range(1, 5, 9)
    s.add_range(2, 0, 1)
    s.add_range(2, 3, 3)
    assert s.advance(P(1, 3), successor) == P(1, 3)  # 1:4 missing
    s.add(P(1, 4))
    assert s.advance(P(1, 3), successor) == P(2, 1)
    assert s.ranges() == [(P(2, 3), P(2, 3))]


def test_against_a_plain_set() -> None:
    rng = random.Random(7)
    s = PositionRangeSet()
    plain: set[Position] = set()
    for _ in range(2000):
        p = P(rng.randint(1, 3), rng.randint(0, 60))
        s.add(p)
        plain.add(p)
    for ledger in (1, 2, 3):
        for e in range(0, 61):
            assert (P(ledger, e) in s) == (P(ledger, e) in plain)
        gaps = [e for lo, hi in s.gaps(ledger, 0, 60) for e in range(lo, hi + 1)]
        assert gaps == [e for e in range(61) if P(ledger, e) not in plain]
    assert s.count() == len(plain)
    cut = P(2, 30)
    assert s.count_up_to(cut) == sum(1 for p in plain if p <= cut)


def test_entry_cache_bounded_fifo() -> None:
    cache = EntryCache(max_bytes=100)
    for i in range(10):
        cache.put(P(1, i), b"x" * 30)
    assert cache.size <= 100 and len(cache) == 3
    assert cache.get(P(1, 9)) is not None and cache.get(P(1, 0)) is None
    cache.put(P(2, 0), b"y" * 10)
    cache.invalidate({1})
    assert len(cache) == 1 and cache.size == 10
    cache.put(P(3, 0), b"z" * 1000)  # larger than the whole cache: not cached
    assert cache.get(P(3, 0)) is None
