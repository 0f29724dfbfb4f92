"""PositionRangeSet: the acked positions above a cursor's mark-delete position.

Ranges never cross a ledger boundary (like Pulsar's LongPairRangeSet, keyed by ledger id):
within a ledger, entry ids are closed intervals kept as two sorted lists so that add,
contains and gap iteration are bisections. Moving across ledgers needs the ledger list, so
advancing the mark-delete position takes a successor function from the managed ledger.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterator

from pulsar_grpc.broker.ledger.position import Position

__all__ = ["PositionRangeSet"]


class _LedgerRanges:
    """Disjoint, non-adjacent closed intervals of entry ids in one ledger."""

    __slots__ = ("ends", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def add(self, lo: int, hi: int) -> None:
        # Intervals overlapping or adjacent to [lo, hi] are those in [left, right).
        left = bisect_left(self.ends, lo - 1)
        right = bisect_right(self.starts, hi + 1)
        if left < right:
            lo = min(lo, self.starts[left])
            hi = max(hi, self.ends[right - 1])
        self.starts[left:right] = [lo]
        self.ends[left:right] = [hi]

    def contains(self, entry_id: int) -> bool:
        i = bisect_right(self.starts, entry_id) - 1
        return i >= 0 and self.ends[i] >= entry_id

    def remove_up_to(self, entry_id: int) -> None:
        """Drop every entry id <= entry_id."""
        i = bisect_right(self.ends, entry_id)
        del self.starts[:i]
        del self.ends[:i]
        if self.starts and self.starts[0] <= entry_id:
            self.starts[0] = entry_id + 1

    def count(self) -> int:
        return sum(self.ends) - sum(self.starts) + len(self.starts)

    def gaps(self, lo: int, hi: int) -> Iterator[tuple[int, int]]:
        """The runs of [lo, hi] not covered by an interval, in order."""
        i = max(bisect_right(self.starts, lo) - 1, 0)
        cur = lo
        while cur <= hi:
            while i < len(self.starts) and self.ends[i] < cur:
                i += 1
            if i < len(self.starts) and self.starts[i] <= cur:
                cur = self.ends[i] + 1
                continue
            end = hi if i >= len(self.starts) else min(hi, self.starts[i] - 1)
            yield cur, end
            cur = end + 1


class PositionRangeSet:
    """A set of positions stored as per-ledger intervals."""

    def __init__(self) -> None:
        self._ledgers: dict[int, _LedgerRanges] = {}
        self._ledger_ids: list[int] = []

    def add(self, position: Position) -> None:
        self.add_range(position.ledger_id, position.entry_id, position.entry_id)

    def add_range(self, ledger_id: int, first_entry: int, last_entry: int) -> None:
        """Add entries first_entry..last_entry (inclusive) of one ledger."""
        ranges = self._ledgers.get(ledger_id)
        if ranges is None:
            ranges = self._ledgers[ledger_id] = _LedgerRanges()
            insort(self._ledger_ids, ledger_id)
        ranges.add(first_entry, last_entry)

    def contains(self, position: Position) -> bool:
        ranges = self._ledgers.get(position.ledger_id)
        return ranges is not None and ranges.contains(position.entry_id)

    def __contains__(self, position: object) -> bool:
        return isinstance(position, Position) and self.contains(position)

    def __bool__(self) -> bool:
        return bool(self._ledger_ids)

    def clear(self) -> None:
        self._ledgers.clear()
        self._ledger_ids.clear()

    def ranges(self) -> list[tuple[Position, Position]]:
        """The closed ranges (first, last) in position order."""
        return [
            (Position(lid, s), Position(lid, e))
            for lid in self._ledger_ids
            for s, e in zip(self._ledgers[lid].starts, self._ledgers[lid].ends, strict=True)
        ]

    def count(self) -> int:
        """Number of positions in the set, O(ranges)."""
        return sum(r.count() for r in self._ledgers.values())

    def count_up_to(self, position: Position) -> int:
        """Number of positions <= position, O(ranges)."""
        total = 0
        for lid in self._ledger_ids:
            if lid > position.ledger_id:
                break
            ranges = self._ledgers[lid]
            if lid < position.ledger_id:
                total += ranges.count()
                continue
            for s, e in zip(ranges.starts, ranges.ends, strict=True):
                if s > position.entry_id:
                    break
                total += min(e, position.entry_id) - s + 1
        return total

    def remove_up_to(self, position: Position) -> None:
        """Drop every position <= position (they are covered by mark-delete)."""
        while self._ledger_ids and self._ledger_ids[0] < position.ledger_id:
            del self._ledgers[self._ledger_ids.pop(0)]
        ranges = self._ledgers.get(position.ledger_id)
        if ranges is not None:
            ranges.remove_up_to(position.entry_id)
            if not ranges.starts:
                del self._ledgers[position.ledger_id]
                self._ledger_ids.remove(position.ledger_id)

    def gaps(self, ledger_id: int, first_entry: int, last_entry: int) -> Iterator[tuple[int, int]]:
        """Runs of entry ids in first_entry..last_entry of a ledger that are not in the set."""
        ranges = self._ledgers.get(ledger_id)
        if ranges is None:
            if first_entry <= last_entry:
                yield first_entry, last_entry
            return
        yield from ranges.gaps(first_entry, last_entry)

    def advance(self, mark_delete: Position, successor: Callable[[Position], Position]) -> Position:
        """Fold into mark_delete every range that starts right after it; return the new value.

        successor(p) is the position of the entry after p (it crosses ledger boundaries).
        """
        while self._ledger_ids:
            lid = self._ledger_ids[0]
            ranges = self._ledgers[lid]
            first = Position(lid, ranges.starts[0])
            if first <= mark_delete:
                self.remove_up_to(mark_delete)
                continue
            if successor(mark_delete) != first:
                break
            mark_delete = Position(lid, ranges.ends[0])
            self.remove_up_to(mark_delete)
        return mark_delete
