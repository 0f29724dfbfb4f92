"""SqliteLedgerStore: the embedded LedgerStore of `standalone`, in `<data_dir>/ledgers.db`.

Layout: one `entries` table whose INTEGER PRIMARY KEY (the rowid) is
`ledger_id << 32 | entry_id`, so entries are clustered by ledger and entry without a second
index: a range read or a ledger delete is one rowid range scan. Pages are 16 KB so that a
typical entry (~12 KB, 100 messages) fits in one page without overflow chains.

Durability: WAL mode; synchronous=NORMAL survives kill -9 of the process (the WAL write
happens before COMMIT returns), synchronous=FULL also survives power loss (fsync per commit,
like BookKeeper's journalSyncData). Group commit amortizes that sync over every append that
arrived while the previous commit was running.

All reads and writes run in one dedicated thread owning the writing connection, so the event
loop never blocks on disk and no locking between writers is needed. A checkpointer thread with a
connection of its own copies the WAL back into the database (see _Checkpointer), so that a
checkpoint never holds the writer.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
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

log = logging.getLogger(__name__)

T = TypeVar("T")

# An entry's rowid is ledger_id << ENTRY_BITS | entry_id (entry_key).
ENTRY_BITS = 32
ENTRY_MASK = (1 << ENTRY_BITS) - 1
# Deleting a ledger in slices lets appends interleave instead of waiting behind one big
# delete transaction in the single worker thread: a commit waits for one slice at most. A slice
# is sized to take about _DELETE_SLICE_S, since what an entry costs to delete varies with its
# size (~100 µs for a 5 KB entry on the 2-core machine: 2,000-entry slices held the writer
# 200 ms, and every receipt with it).
_DELETE_SLICE_S = 0.005
_DELETE_SLICE_FIRST = 64
_DELETE_SLICE_MAX = 2000

# How long the checkpointer lets the WAL grow after a commit before copying it back: bounds the
# WAL to about this much of the write rate, in checkpoints few enough to cost little.
_CHECKPOINT_EVERY_S = 0.2

# Store work that held its thread longer than this is logged at DEBUG (_log_slow)
_SLOW_S = 0.005

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


def _log_slow(started: float, what: str, *args: object) -> None:
    """Log at DEBUG what took the store's thread longer than _SLOW_S since ``started``: what
    a publish latency spike is matched with (its cause, if it held the writer)."""
    took = time.perf_counter() - started
    if took >= _SLOW_S:
        log.debug(f"{what}: %.1f ms", *args, took * 1000)


def entry_key(ledger_id: int, entry_id: int) -> int:
    """An entry's rowid (the inspector reads entries by the same layout)."""
    return (ledger_id << ENTRY_BITS) | entry_id


class _Checkpointer:
    """Copies the WAL back into the database from a thread and connection of its own.

    SQLite's automatic checkpoint runs inside the COMMIT that crosses wal_autocheckpoint
    pages, in the committing connection: every ~1 s at 50,000 msg/s it held the one writer for
    20-150 ms (copying 16 MB and fsyncing the WAL and the database file), and every receipt
    due meanwhile waited. A PASSIVE checkpoint from another connection copies the frames that
    are committed while the writer goes on appending (WAL allows one writer and checkpointers
    at once), and the writer restarts the WAL from its start at its next transaction once a
    checkpoint copied everything. The checkpoint syncs as the writer's connection would
    (synchronous=NORMAL or FULL), so what a crash or a power loss can do is unchanged.
    """

    def __init__(self, path: Path, synchronous: str) -> None:
        self._path = path
        self._synchronous = synchronous
        self._wrote = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="ledger-sqlite-checkpoint", daemon=True
        )
        self._thread.start()

    def wal_grew(self) -> None:
        """A transaction committed: checkpoint within _CHECKPOINT_EVERY_S."""
        self._wrote.set()

    def close(self) -> None:
        self._stop.set()
        self._wrote.set()
        self._thread.join()

    def _run(self) -> None:
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            while True:
                self._wrote.wait()
                if self._stop.wait(_CHECKPOINT_EVERY_S):
                    return
                self._wrote.clear()
                self._checkpoint(conn)
        finally:
            conn.close()

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        started = time.perf_counter()
        try:
            busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as e:  # the next commit tries again; the WAL only grows meanwhile
            log.warning("ledger store checkpoint failed: %s", e)
            return
        _log_slow(
            started, "checkpoint: %d of %d WAL frames copied%s", copied, frames, busy * " (busy)"
        )


class SqliteLedgerStore(GroupCommittedStore):
    """LedgerStore in SQLite; `sync=True` fsyncs every commit (power-loss safe)."""

    def __init__(self, data_dir: Path, sync: bool = False) -> None:
        self._path = Path(data_dir) / "ledgers.db"
        self._sync = sync
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger-sqlite")
        self._checkpointer: _Checkpointer | None = None  # made by _open, once the WAL is on
        # The worker's first job; later jobs find the connection ready.
        self._conn = self._executor.submit(self._open)
        self._committer = GroupCommitter(self._commit)
        self._closed = False

    def _open(self) -> sqlite3.Connection:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA page_size=16384")  # only effective on a new database
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self._synchronous}")
        conn.execute("PRAGMA cache_size=-16384")  # 16 MB page cache
        conn.execute("PRAGMA journal_size_limit=67108864")  # truncate the WAL after checkpoints
        conn.execute("PRAGMA wal_autocheckpoint=0")  # the checkpointer's thread does it
        conn.executescript(_SCHEMA)
        self._checkpointer = _Checkpointer(self._path, self._synchronous)
        return conn

    @property
    def _synchronous(self) -> str:
        return "FULL" if self._sync else "NORMAL"

    def _wal_grew(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.wal_grew()

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
            started = time.perf_counter()
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
                    (entry_key(e.ledger_id, e.entry_id), e.data)
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
            self._wal_grew()
            _log_slow(started, "commit of %d entries", len(rows))
            return fenced

        return await self._run(op)

    async def read_entries(self, spans: Sequence[EntrySpan]) -> list[tuple[int, int, bytes]]:
        bounds = [
            (entry_key(s.ledger_id, s.first_entry), entry_key(s.ledger_id, s.last_entry))
            for s in spans
        ]

        def op(conn: sqlite3.Connection) -> list[tuple[int, int, bytes]]:
            out: list[tuple[int, int, bytes]] = []
            for lo, hi in bounds:
                cur = conn.execute(
                    "SELECT id, data FROM entries WHERE id BETWEEN ? AND ? ORDER BY id", (lo, hi)
                )
                out.extend((k >> ENTRY_BITS, k & ENTRY_MASK, d) for k, d in cur)
            return out

        return await self._run(op)

    async def ledger_stats(self, ledger_id: int) -> LedgerStats:
        lo, hi = entry_key(ledger_id, 0), entry_key(ledger_id, ENTRY_MASK)

        def op(conn: sqlite3.Connection) -> LedgerStats:
            count, last, size = conn.execute(
                "SELECT count(*), max(id), total(length(data)) FROM entries"
                " WHERE id BETWEEN ? AND ?",
                (lo, hi),
            ).fetchone()
            if last is None or count == (last & ENTRY_MASK) + 1:
                return LedgerStats(count, int(size))
            # A hole (an add failed and the owner stopped before its next ledger): count up
            # to the first missing entry (rare; see LedgerStats).
            (first_missing,) = conn.execute(
                "SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM entries WHERE id = ?) THEN ?"
                " ELSE (SELECT min(e.id) + 1 FROM entries e WHERE e.id BETWEEN ? AND ?"
                " AND NOT EXISTS (SELECT 1 FROM entries n WHERE n.id = e.id + 1)) END",
                (lo, lo, lo, hi),
            ).fetchone()
            (size,) = conn.execute(
                "SELECT total(length(data)) FROM entries WHERE id >= ? AND id < ?",
                (lo, first_missing),
            ).fetchone()
            return LedgerStats(first_missing - lo, int(size))

        return await self._run(op)

    async def delete_ledger(self, ledger_id: int) -> None:
        lo, end = entry_key(ledger_id, 0), entry_key(ledger_id, ENTRY_MASK)
        size = _DELETE_SLICE_FIRST

        def op(conn: sqlite3.Connection) -> tuple[int, float]:
            started = time.perf_counter()
            conn.execute("BEGIN")
            try:
                deleted = conn.execute(
                    "DELETE FROM entries WHERE id IN"
                    " (SELECT id FROM entries WHERE id BETWEEN ? AND ? LIMIT ?)",
                    (lo, end, size),
                ).rowcount
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            self._wal_grew()
            _log_slow(started, "delete slice of %d entries", deleted)
            return deleted, time.perf_counter() - started

        while True:
            deleted, took = await self._run(op)
            if deleted < size:
                return
            if took < _DELETE_SLICE_S / 2:
                size = min(size * 2, _DELETE_SLICE_MAX)
            elif took > _DELETE_SLICE_S:
                size = max(size // 2, 1)

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
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
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
        if self._checkpointer is not None:
            await asyncio.to_thread(self._checkpointer.close)
        try:
            await self._run(lambda conn: conn.close())
        finally:
            self._closed = True
            self._executor.shutdown(wait=False)
