"""EmbeddedMetadataStore: the `standalone` metadata store, persisted in SQLite.

Every write is committed in WAL mode with synchronous=FULL before it returns, so it survives
power loss as well as kill -9. All SQLite calls run in one dedicated worker thread holding the
only connection, so the event loop never blocks on disk, and they go there in groups: the calls
that arrive while the worker is busy go together as its next job, their writes in one
transaction (one fsync), each inside its own savepoint (a write that fails, on a version check
say, is rolled back alone and fails alone), and no call is answered before that transaction
has committed. Writes are rare in steady state (ledger rollover, cursor creation, policies),
but loading a topic reads several nodes and writes one (its ledger list), and thousands of
topics load at once after a restart: a thread hand-off per read and an fsync per write bounded
that to a few hundred topics a second.

The session is the store object's life: ephemeral nodes are deleted when it closes, and those a
killed process left behind are deleted when the next one opens the file. Only this store writes
the file (the data-directory lock), so it notifies its listeners of every change it makes.
"""

from __future__ import annotations

import asyncio
import contextvars
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from pulsar_grpc.broker.metadata.store import (
    BadVersionError,
    CreateOption,
    GetResult,
    MetadataNotFoundError,
    MetadataStore,
    MetadataStoreError,
    Notification,
    NotificationType,
    parent_of,
    sequential_name,
    validate_path,
    validate_writable,
)

__all__ = ["EmbeddedMetadataStore"]

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    path    TEXT PRIMARY KEY,
    parent  TEXT NOT NULL,
    value   BLOB NOT NULL,
    version INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS nodes_parent ON nodes(parent);
CREATE TABLE IF NOT EXISTS sequences (
    parent  TEXT PRIMARY KEY,
    next    INTEGER NOT NULL
);
"""
# Added with ephemeral nodes; files written before get it on open.
_EPHEMERAL_COLUMN = "ALTER TABLE nodes ADD COLUMN ephemeral INTEGER NOT NULL DEFAULT 0"


@dataclass(slots=True)
class _Call:
    """A call waiting for the worker's next job, and its caller's answer."""

    op: Callable[[sqlite3.Connection], Any]
    writes: bool  # run inside the job's transaction, in a savepoint of its own
    done: asyncio.Future[Any]


class EmbeddedMetadataStore(MetadataStore):
    """MetadataStore in `<data_dir>/metadata.db` (the directory is created if missing)."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__()
        self._path = Path(data_dir) / "metadata.db"
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="metadata-sqlite")
        # The open is the worker's first job, so every later job finds the connection ready;
        # an open failure surfaces on the first operation.
        self._conn = self._executor.submit(self._open)
        self._closed = False
        self._calls: list[_Call] = []  # for the worker's next job, in arrival order
        self._committer: asyncio.Task[None] | None = None  # hands the calls over in groups

    def _open(self) -> sqlite3.Connection:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.executescript(_SCHEMA)
        columns = {row[1] for row in conn.execute("PRAGMA table_info(nodes)")}
        if "ephemeral" not in columns:
            conn.execute(_EPHEMERAL_COLUMN)
        conn.execute("DELETE FROM nodes WHERE ephemeral=1")  # a killed predecessor's session
        return conn

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise MetadataStoreError("metadata store is closed")
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self._executor, lambda: fn(self._conn.result())
            )
        except MetadataStoreError:
            raise
        except (sqlite3.Error, OSError) as e:
            raise MetadataStoreError(f"metadata store failure: {e}") from e

    async def _read(self, op: Callable[[sqlite3.Connection], T]) -> T:
        """``op`` run by the worker (with the calls that arrive meanwhile); its result."""
        return await self._call(op, writes=False)

    async def _write(self, op: Callable[[sqlite3.Connection], T]) -> T:
        """``op`` committed (with the calls that arrive meanwhile); its result or error."""
        return await self._call(op, writes=True)

    async def _call(self, op: Callable[[sqlite3.Connection], T], writes: bool) -> T:
        if self._closed:
            raise MetadataStoreError("metadata store is closed")
        loop = asyncio.get_running_loop()
        call = _Call(op, writes, loop.create_future())
        self._calls.append(call)
        if self._committer is None or self._committer.done():
            # An empty context: the task outlives no caller's, and keeps none alive.
            self._committer = loop.create_task(self._commit(), context=contextvars.Context())
        return cast(T, await call.done)

    async def _commit(self) -> None:
        """Hand the waiting calls to the worker, one job per round, until none are left."""
        while self._calls:
            batch, self._calls = self._calls, []
            try:
                outcomes = await self._run(_group(batch))
            except BaseException as e:  # the transaction failed, so did each of its calls
                failed = e if isinstance(e, MetadataStoreError) else MetadataStoreError(str(e))
                outcomes = [_Failed(failed)] * len(batch)
                if not isinstance(e, Exception):  # cancelled: the callers hear of it
                    _answer(batch + self._calls, outcomes + [_Failed(failed)] * len(self._calls))
                    self._calls = []
                    raise
            _answer(batch, outcomes)

    async def get(self, path: str) -> GetResult | None:
        validate_path(path)

        def op(conn: sqlite3.Connection) -> GetResult | None:
            row = conn.execute("SELECT value, version FROM nodes WHERE path=?", (path,)).fetchone()
            return None if row is None else GetResult(bytes(row[0]), row[1])

        return await self._read(op)

    async def put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None = None,
        options: CreateOption = CreateOption.NONE,
    ) -> int:
        validate_writable(path)
        data = bytes(value)
        ephemeral = CreateOption.EPHEMERAL in options

        version, created = await self._write(
            lambda conn: _put_locked(conn, path, data, expected_version, ephemeral)
        )
        self._notify_created(created)
        if not created:
            self._notify(Notification(NotificationType.MODIFIED, path))
        return version

    def _notify_created(self, created: list[str]) -> None:
        for p in created:
            self._notify(Notification(NotificationType.CREATED, p))
            self._notify(Notification(NotificationType.CHILDREN_CHANGED, parent_of(p)))

    async def put_sequential(
        self, prefix: str, value: bytes, options: CreateOption = CreateOption.NONE
    ) -> str:
        validate_writable(prefix + "0")
        data = bytes(value)
        ephemeral = CreateOption.EPHEMERAL in options

        path, created = await self._write(
            lambda conn: _put_sequential_locked(conn, prefix, data, ephemeral)
        )
        self._notify_created(created)
        return path

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        validate_path(path)

        await self._write(lambda conn: _delete_locked(conn, path, expected_version))
        self._notify(Notification(NotificationType.DELETED, path))
        self._notify(Notification(NotificationType.CHILDREN_CHANGED, parent_of(path)))

    async def get_children(self, path: str) -> list[str]:
        validate_path(path)
        prefix = "/" if path == "/" else path + "/"

        def op(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute("SELECT path FROM nodes WHERE parent=?", (path,)).fetchall()
            return sorted(row[0][len(prefix) :] for row in rows)

        return await self._read(op)

    async def exists(self, path: str) -> bool:
        validate_path(path)
        if path == "/":
            return True

        def op(conn: sqlite3.Connection) -> bool:
            return conn.execute("SELECT 1 FROM nodes WHERE path=?", (path,)).fetchone() is not None

        return await self._read(op)

    async def close(self) -> None:
        if self._closed:
            return
        if self._committer is not None:  # the calls already accepted are answered first
            await asyncio.gather(self._committer, return_exceptions=True)

        def end_session(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM nodes WHERE ephemeral=1")
            conn.close()

        try:
            await self._run(end_session)
        finally:
            self._closed = True
            self._executor.shutdown(wait=False)


@dataclass(slots=True)
class _Failed:
    """One write's own failure inside a group commit (the others may have succeeded)."""

    error: MetadataStoreError


def _answer(calls: list[_Call], outcomes: list[Any]) -> None:
    for call, outcome in zip(calls, outcomes, strict=True):
        if call.done.done():  # its caller was cancelled
            continue
        if isinstance(outcome, _Failed):
            call.done.set_exception(outcome.error)
        else:
            call.done.set_result(outcome)


def _group(calls: list[_Call]) -> Callable[[sqlite3.Connection], list[Any]]:
    """``calls`` in order, their writes in one transaction, each in a savepoint: one that
    raises is rolled back alone, and its outcome is the error (:class:`_Failed`)."""
    writes = any(call.writes for call in calls)

    def run(conn: sqlite3.Connection) -> list[Any]:
        if writes:
            conn.execute("BEGIN IMMEDIATE")
        outcomes: list[Any] = []
        try:
            for call in calls:
                if call.writes:
                    conn.execute("SAVEPOINT write")
                try:
                    outcomes.append(call.op(conn))
                except (MetadataStoreError, sqlite3.Error) as e:
                    if call.writes:
                        conn.execute("ROLLBACK TO write")
                    if isinstance(e, sqlite3.Error):
                        e = MetadataStoreError(f"metadata store failure: {e}")
                    outcomes.append(_Failed(e))
                if call.writes:
                    conn.execute("RELEASE write")
        except BaseException:
            if writes:
                conn.execute("ROLLBACK")
            raise
        if writes:
            conn.execute("COMMIT")
        return outcomes

    return run


def _put_locked(
    conn: sqlite3.Connection,
    path: str,
    value: bytes,
    expected_version: int | None,
    ephemeral: bool,
) -> tuple[int, list[str]]:
    """The new version, and the paths created (parents first; [] for an update)."""
    row = conn.execute("SELECT version FROM nodes WHERE path=?", (path,)).fetchone()
    if row is None:
        if expected_version is not None and expected_version != -1:
            raise BadVersionError(f"{path} does not exist (expected version {expected_version})")
        created = _create_parents(conn, parent_of(path))
        conn.execute(
            "INSERT INTO nodes(path, parent, value, version, ephemeral) VALUES (?, ?, ?, 0, ?)",
            (path, parent_of(path), value, int(ephemeral)),
        )
        return 0, [*created, path]
    current: int = row[0]
    if expected_version is not None and expected_version != current:
        raise BadVersionError(f"{path} is at version {current}, expected {expected_version}")
    conn.execute("UPDATE nodes SET value=?, version=? WHERE path=?", (value, current + 1, path))
    return current + 1, []


def _put_sequential_locked(
    conn: sqlite3.Connection, prefix: str, value: bytes, ephemeral: bool
) -> tuple[str, list[str]]:
    """The path created, and every path created (as _put_locked)."""
    parent = parent_of(prefix + "0")
    row = conn.execute("SELECT next FROM sequences WHERE parent=?", (parent,)).fetchone()
    counter = 0 if row is None else row[0]
    taken = "SELECT 1 FROM nodes WHERE path=?"
    while conn.execute(taken, (sequential_name(prefix, counter),)).fetchone():
        counter += 1  # a node someone named like a sequential one: skip it
    path = sequential_name(prefix, counter)
    _, created = _put_locked(conn, path, value, -1, ephemeral)
    conn.execute(
        "INSERT OR REPLACE INTO sequences(parent, next) VALUES (?, ?)", (parent, counter + 1)
    )
    return path, created


def _create_parents(conn: sqlite3.Connection, path: str) -> list[str]:
    missing: list[str] = []
    while path != "/":
        row = conn.execute("SELECT ephemeral FROM nodes WHERE path=?", (path,)).fetchone()
        if row is not None:
            if row[0]:
                raise MetadataStoreError(f"{path} is ephemeral: it cannot have children")
            break
        missing.append(path)
        path = parent_of(path)
    missing.reverse()
    for p in missing:
        conn.execute(
            "INSERT INTO nodes(path, parent, value, version) VALUES (?, ?, x'', 0)",
            (p, parent_of(p)),
        )
    return missing


def _delete_locked(conn: sqlite3.Connection, path: str, expected_version: int | None) -> None:
    row = conn.execute("SELECT version FROM nodes WHERE path=?", (path,)).fetchone()
    if row is None:
        raise MetadataNotFoundError(f"{path} does not exist")
    if expected_version is not None and expected_version != row[0]:
        raise BadVersionError(f"{path} is at version {row[0]}, expected {expected_version}")
    if conn.execute("SELECT 1 FROM nodes WHERE parent=? LIMIT 1", (path,)).fetchone():
        raise MetadataStoreError(f"{path} has children")
    conn.execute("DELETE FROM nodes WHERE path=?", (path,))
