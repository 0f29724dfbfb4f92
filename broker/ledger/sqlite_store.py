"""SqliteLedgerStore: the embedded LedgerStore of `standalone`, in `<data_dir>/ledgers.db`.

Layout: one `entries` table whose INTEGER PRIMARY KEY (the rowid) is
`ledger_id << 32 | entry_id`, so entries are clustered by ledger and entry without a second
index: a range read or a ledger delete is one rowid range scan. Pages are 16 KB so that a
typical entry (~12 KB, 100 messages) fits in one page without overflow chains.

Durability: WAL mode; synchronous=NORMAL survives kill -9 of the process (the WAL write
happens before COMMIT returns), synchronous=FULL also survives power loss (fsync per commit,
like BookKeeper's journalSyncData). Group commit amortizes that sync over every append that
arrived while the previous commit was running.

All SQLite work runs in one dedicated thread owning the only connection, so the event loop
never blocks on disk and no locking between connections is needed.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from pulsar_grpc.broker.errors import PersistenceError
from pulsar_grpc.broker.ledger.group_commit import (
    CommitBatch,
    GroupCommittedStore,
    GroupCommitter,
)
from pulsar_grpc.broker.ledger.store import EntrySpan, LedgerOwner, LedgerStats

__all__ = ["SqliteLedgerStore"]

T = TypeVar("T")

_ENTRY_BITS = 32
_ENTRY_MASK = (1 << _ENTRY_BITS) - 1
# Deleting a ledger in slices lets appends interleave instead of waiting behind one big
# delete transaction in the single worker thread.
_DELETE_SLICE = 2000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (id INTEGER PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS cursors (
    ledger_name TEXT NOT NULL,
    cursor_name TEXT NOT NULL,
    state       BLOB NOT NULL,
    PRIMARY KEY (ledger_name, cursor_name)
);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS owners (name TEXT PRIMARY KEY, epoch INTEGER NOT NULL);
"""


def _key(ledger_id: int, entry_id: int) -> int:
    return (ledger_id << _ENTRY_BITS) | entry_id


class SqliteLedgerStore(GroupCommittedStore):
    """LedgerStore in SQLite; `sync=True` fsyncs every commit (power-loss safe)."""

    def __init__(self, data_dir: Path, sync: bool = False) -> None:
        self._path = Path(data_dir) / "ledgers.db"
        self._sync = sync
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger-sqlite")
        # The worker's first job; later jobs find the connection ready.
        self._conn = self._executor.submit(self._open)
        self._committer = GroupCommitter(self._commit)
        self._closed = False

    def _open(self) -> sqlite3.Connection:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA page_size=16384")  # only effective on a new database
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={'FULL' if self._sync else 'NORMAL'}")
        conn.execute("PRAGMA cache_size=-16384")  # 16 MB page cache
        conn.execute("PRAGMA journal_size_limit=67108864")  # truncate the WAL after checkpoints
        conn.executescript(_SCHEMA)
        return conn

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise PersistenceError("ledger store is closed")
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self._executor, lambda: fn(self._conn.result())
            )
        except (sqlite3.Error, OSError) as e:
            raise PersistenceError(f"ledger store failure: {e}") from e

    @property
    def closed(self) -> bool:
        return self._closed

    async def fence(self, name: str) -> LedgerOwner:
        def op(conn: sqlite3.Connection) -> int:
            row = conn.execute(
                "INSERT INTO owners(name, epoch) VALUES (?, 1)"
                " ON CONFLICT(name) DO UPDATE SET epoch = epoch + 1 RETURNING epoch",
                (name,),
            ).fetchone()
            return int(row[0])

        return LedgerOwner(name, await self._run(op))

    async def _commit(self, batch: CommitBatch) -> set[LedgerOwner]:
        def op(conn: sqlite3.Connection) -> set[LedgerOwner]:
            conn.execute("BEGIN")
            try:
                # The epochs are read in the commit's own transaction, and fence() runs on
                # this same connection: no fence can land between the check and the writes.
                fenced = {
                    owner
                    for owner in batch
                    if conn.execute(
                        "SELECT epoch FROM owners WHERE name=?", (owner.name,)
                    ).fetchone()
                    != (owner.epoch,)
                }
                rows = [
                    (_key(e.ledger_id, e.entry_id), e.data)
                    for owner, writes in batch.items()
                    if owner not in fenced
                    for e in writes.entries
                ]
                states = [
                    (owner.name, c, s)
                    for owner, writes in batch.items()
                    if owner not in fenced
                    for c, s in writes.cursors.items()
                ]
                upserts = [row for row in states if row[2] is not None]
                deletes = [(ml, c) for ml, c, s in states if s is None]
                if rows:
                    conn.executemany("INSERT OR REPLACE INTO entries(id, data) VALUES (?, ?)", rows)
                if upserts:
                    conn.executemany(
                        "INSERT OR REPLACE INTO cursors(ledger_name, cursor_name, state)"
                        " VALUES (?, ?, ?)",
                        upserts,
                    )
                if deletes:
                    conn.executemany(
                        "DELETE FROM cursors WHERE ledger_name=? AND cursor_name=?", deletes
                    )
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return fenced

        return await self._run(op)

    async def read_entries(self, spans: Sequence[EntrySpan]) -> list[tuple[int, int, bytes]]:
        bounds = [
            (_key(s.ledger_id, s.first_entry), _key(s.ledger_id, s.last_entry)) for s in spans
        ]

        def op(conn: sqlite3.Connection) -> list[tuple[int, int, bytes]]:
            out: list[tuple[int, int, bytes]] = []
            for lo, hi in bounds:
                cur = conn.execute(
                    "SELECT id, data FROM entries WHERE id BETWEEN ? AND ? ORDER BY id", (lo, hi)
                )
                out.extend((k >> _ENTRY_BITS, k & _ENTRY_MASK, d) for k, d in cur)
            return out

        return await self._run(op)

    async def ledger_stats(self, ledger_id: int) -> LedgerStats:
        lo, hi = _key(ledger_id, 0), _key(ledger_id, _ENTRY_MASK)

        def op(conn: sqlite3.Connection) -> LedgerStats:
            last, size = conn.execute(
                "SELECT max(id), total(length(data)) FROM entries WHERE id BETWEEN ? AND ?",
                (lo, hi),
            ).fetchone()
            return LedgerStats(0 if last is None else (last & _ENTRY_MASK) + 1, int(size))

        return await self._run(op)

    async def delete_ledger(self, ledger_id: int) -> None:
        lo, end = _key(ledger_id, 0), _key(ledger_id, _ENTRY_MASK)

        def op(conn: sqlite3.Connection) -> bool:
            conn.execute("BEGIN")
            try:
                deleted = conn.execute(
                    "DELETE FROM entries WHERE id IN"
                    " (SELECT id FROM entries WHERE id BETWEEN ? AND ? LIMIT ?)",
                    (lo, end, _DELETE_SLICE),
                ).rowcount
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return deleted == _DELETE_SLICE

        while await self._run(op):
            pass

    async def allocate_ledger_ids(self, count: int) -> int:
        def op(conn: sqlite3.Connection) -> int:
            # Always fsynced, even with sync=False: metadata (synced) will name these ids, and
            # a counter rolled back by a power loss would hand them out twice.
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute("SELECT value FROM counters WHERE name='ledger_id'").fetchone()
                first = 1 if row is None else int(row[0])
                if first + count > (1 << 31):
                    raise PersistenceError("ledger ids exhausted")
                conn.execute(
                    "INSERT OR REPLACE INTO counters(name, value) VALUES ('ledger_id', ?)",
                    (first + count,),
                )
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            conn.execute(f"PRAGMA synchronous={'FULL' if self._sync else 'NORMAL'}")
            return first

        return await self._run(op)

    async def get_cursor_states(self, ledger_name: str) -> dict[str, bytes]:
        def op(conn: sqlite3.Connection) -> dict[str, bytes]:
            rows = conn.execute(
                "SELECT cursor_name, state FROM cursors WHERE ledger_name=?", (ledger_name,)
            )
            return {name: bytes(state) for name, state in rows}

        return await self._run(op)

    async def close(self) -> None:
        if self._closed:
            return
        await self._committer.drain()
        try:
            await self._run(lambda conn: conn.close())
        finally:
            self._closed = True
            self._executor.shutdown(wait=False)
