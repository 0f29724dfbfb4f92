"""EntryCache: recently committed entries, so tailing consumers read from memory.

One cache per factory, bounded in bytes like Pulsar's managedLedgerCacheSizeMB (a broker-wide
budget, not per topic). Entries are inserted in commit order and evicted oldest first, which
is what tailing readers need; backlog reads go to the store and do not pollute it. Keys are
positions alone because ledger ids are unique per store.
"""

from __future__ import annotations

from collections import OrderedDict

from pulsar_grpc.broker.ledger.position import Position

__all__ = ["EntryCache"]


class EntryCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._entries: OrderedDict[Position, bytes] = OrderedDict()

    def put(self, position: Position, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return
        old = self._entries.pop(position, None)
        if old is not None:
            self.size -= len(old)
        self._entries[position] = data
        self.size += len(data)
        while self.size > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self.size -= len(evicted)

    def get(self, position: Position) -> bytes | None:
        return self._entries.get(position)

    def invalidate(self, ledger_ids: set[int]) -> None:
        """Free the memory of deleted ledgers (O(cache entries), only on deletes)."""
        for pos in [p for p in self._entries if p.ledger_id in ledger_ids]:
            self.size -= len(self._entries.pop(pos))

    def __len__(self) -> int:
        return len(self._entries)
