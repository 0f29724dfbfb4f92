"""MemoryLedgerStore: a LedgerStore in a dict, for fast unit tests.

The data lives in a :class:`MemoryLedgerData` that outlives the stores opened over it, as a
database outlives its clients: a test "reopens" the store by opening a new one over the same
data, which is how the contract suite checks durability and ids across a reopen. Commits go
through the same group commit as the real stores and yield to the event loop once, so calls
arriving meanwhile are grouped into the next commit exactly as they would be on disk.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from pulsar_grpc.broker.errors import PersistenceError
from pulsar_grpc.broker.ledger.group_commit import (
    CommitBatch,
    GroupCommittedStore,
    GroupCommitter,
)
from pulsar_grpc.broker.ledger.store import CursorKey, EntrySpan, LedgerOwner, LedgerStats

__all__ = ["MemoryLedgerData", "MemoryLedgerStore"]


@dataclass
class MemoryLedgerData:
    """What a memory store holds; shared by the stores opened over it one after another."""

    entries: dict[int, dict[int, bytes]] = field(default_factory=dict)
    cursors: dict[CursorKey, bytes] = field(default_factory=dict)
    next_ledger_id: int = 1
    epochs: dict[str, int] = field(default_factory=dict)  # managed-ledger name -> owner epoch
    # Fault injection for tests: a commit writing one of these cursor states fails, after its
    # entries were staged, as a storage error part-way through a transaction would.
    rejected_states: set[bytes] = field(default_factory=set)


class _State(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"


class MemoryLedgerStore(GroupCommittedStore):
    """LedgerStore over a :class:`MemoryLedgerData` (a fresh one unless given)."""

    def __init__(self, data: MemoryLedgerData | None = None) -> None:
        self.data = MemoryLedgerData() if data is None else data
        self._committer = GroupCommitter(self._commit)
        self._state = _State.OPEN

    def _check_open(self) -> None:
        if self._state is _State.CLOSED:
            raise PersistenceError("ledger store is closed")

    @property
    def closed(self) -> bool:
        return self._state is _State.CLOSED

    async def fence(self, name: str) -> LedgerOwner:
        self._check_open()
        epoch = self.data.epochs[name] = self.data.epochs.get(name, 0) + 1
        return LedgerOwner(name, epoch)

    async def _commit(self, batch: CommitBatch) -> set[LedgerOwner]:
        await asyncio.sleep(0)  # a commit is in flight for one loop iteration, as on disk
        epochs = self.data.epochs
        fenced = {owner for owner in batch if epochs.get(owner.name) != owner.epoch}
        # Staged first and applied only when nothing failed: one atomic commit.
        staged: dict[int, dict[int, bytes]] = {}
        cursors: dict[CursorKey, bytes | None] = {}
        for owner, writes in batch.items():
            if owner in fenced:
                continue
            for e in writes.entries:
                staged.setdefault(e.ledger_id, {})[e.entry_id] = e.data
            cursors.update(((owner.name, c), s) for c, s in writes.cursors.items())
        for state in cursors.values():
            if state is not None and state in self.data.rejected_states:
                raise PersistenceError("cursor state rejected (injected fault)")
        for ledger_id, written in staged.items():
            self.data.entries.setdefault(ledger_id, {}).update(written)
        for key, state in cursors.items():
            if state is None:
                self.data.cursors.pop(key, None)
            else:
                self.data.cursors[key] = state
        return fenced

    async def read_entries(self, spans: Sequence[EntrySpan]) -> list[tuple[int, int, bytes]]:
        self._check_open()
        out: list[tuple[int, int, bytes]] = []
        for span in spans:
            ledger = self.data.entries.get(span.ledger_id, {})
            out.extend(
                (span.ledger_id, entry_id, ledger[entry_id])
                for entry_id in sorted(ledger)
                if span.first_entry <= entry_id <= span.last_entry
            )
        return out

    async def ledger_stats(self, ledger_id: int) -> LedgerStats:
        self._check_open()
        ledger = self.data.entries.get(ledger_id, {})
        entries = 0
        while entries in ledger:
            entries += 1
        return LedgerStats(entries, sum(len(ledger[e]) for e in range(entries)))

    async def delete_ledger(self, ledger_id: int) -> None:
        self._check_open()
        self.data.entries.pop(ledger_id, None)

    async def allocate_ledger_ids(self, count: int) -> int:
        self._check_open()
        first = self.data.next_ledger_id
        self.data.next_ledger_id += count
        return first

    async def get_cursor_states(self, ledger_name: str) -> dict[str, bytes]:
        self._check_open()
        return {c: s for (ml, c), s in self.data.cursors.items() if ml == ledger_name}

    async def close(self) -> None:
        if self._state is _State.CLOSED:
            return
        await self._committer.drain()
        self._state = _State.CLOSED
