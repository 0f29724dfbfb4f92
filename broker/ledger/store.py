"""LedgerStore: the durable bytes under managed ledgers.

Kept deliberately small so that several implementations sit behind it: SqliteLedgerStore
(embedded, standalone's default), PostgresLedgerStore (shared by the brokers of a cluster) and
MemoryLedgerStore (tests); open_ledger_store picks one from ledgerStorageUrl, and
tests/unit/test_ledger_store_contract.py holds each to this contract. Everything above it —
ledger lists, rollover, cursors, caching — lives in the managed-ledger layer; the store only
knows entries by (ledger id, entry id), cursor state blobs by (managed-ledger name, cursor
name), a ledger-id counter, and an owner epoch per managed-ledger name.

Fencing (BookKeeper fences a ledger on recovery; here the store does it per managed ledger):
whoever opens a managed ledger first takes a new epoch with :meth:`LedgerStore.fence`, and
every write goes through the :class:`LedgerOwner` that returned. A commit checks, inside its
own transaction, that each owner's epoch is still the current one for its name and drops the
writes of an owner that was fenced since (their futures fail with
ManagedLedgerFencedError), so a broker that lost a topic to another can neither add an entry
the new owner would not see nor overwrite a cursor state the new owner wrote.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["CursorKey", "EntrySpan", "EntryWrite", "LedgerOwner", "LedgerStats", "LedgerStore"]

CursorKey = tuple[str, str]
"""(managed-ledger name, cursor name)."""


@dataclass(frozen=True, slots=True)
class LedgerOwner:
    """The right to write one managed ledger, as of one epoch: what LedgerStore.fence returns
    and every append names. It stops being current once anyone fences the name again."""

    name: str
    epoch: int


@dataclass(frozen=True, slots=True)
class EntryWrite:
    ledger_id: int
    entry_id: int
    data: bytes


@dataclass(frozen=True, slots=True)
class EntrySpan:
    """Entries first_entry..last_entry (inclusive) of one ledger."""

    ledger_id: int
    first_entry: int
    last_entry: int


@dataclass(frozen=True, slots=True)
class LedgerStats:
    """What a ledger holds as recovery reads it (BookKeeper's recovery read): ``entries``
    entries 0..entries-1 with no hole, ``size`` their bytes.

    Entries past the first hole are not counted: a hole is an add that failed (or never
    committed), and a managed ledger confirms an entry only after every one before it, and
    writes nothing more to a ledger once an add failed. So an entry past a hole was never
    receipted, and a recount that counted it would make readers wait on the hole."""

    entries: int
    size: int


class LedgerStore(ABC):
    """Durable storage of entries and cursor states."""

    @abstractmethod
    async def fence(self, name: str) -> LedgerOwner:
        """Become the owner of managed ledger `name` with a new epoch, durably: from now on
        the writes of every earlier owner of `name` are refused. Whatever an earlier owner
        committed before is visible to reads made after this returns."""

    @abstractmethod
    def append(
        self,
        owner: LedgerOwner,
        entries: Sequence[EntryWrite],
        cursor_states: Mapping[str, bytes | None] | None = None,
    ) -> asyncio.Future[None]:
        """Queue entries and cursor states (by cursor name of the owner's managed ledger; None
        deletes a state) for ONE atomic commit.

        A synchronous call, so callers control ordering: writes are committed in call order,
        and calls that arrive while a commit is in flight are grouped into the next one (group
        commit). The future resolves once durable; it fails with ManagedLedgerFencedError when
        `owner` was fenced (nothing of this call is written; the other owners' writes of the
        same commit are), or with PersistenceError.
        """

    @abstractmethod
    async def read_entries(self, spans: Sequence[EntrySpan]) -> list[tuple[int, int, bytes]]:
        """(ledger id, entry id, data) of the stored entries in the spans, in span order.

        Several spans cost one round trip, so a reader skipping acked entries stays cheap.
        """

    @abstractmethod
    async def ledger_stats(self, ledger_id: int) -> LedgerStats:
        """Recovery of a ledger that was open when its owner stopped: its entries up to the
        first hole (see LedgerStats)."""

    @abstractmethod
    async def delete_ledger(self, ledger_id: int) -> None:
        """Delete all entries of a ledger (idempotent)."""

    @abstractmethod
    async def allocate_ledger_ids(self, count: int) -> int:
        """Durably reserve `count` consecutive, never reused ledger ids; returns the first."""

    @abstractmethod
    async def get_cursor_states(self, ledger_name: str) -> dict[str, bytes]:
        """Cursor name -> last committed state, for one managed ledger."""

    @abstractmethod
    async def close(self) -> None:
        """Commit what is queued, then release resources."""
