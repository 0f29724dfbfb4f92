"""Read-only access to where a broker keeps its state, without going through it.

Two kinds of source, each in two flavours:

- metadata (managed-ledger and cursor nodes): the embedded ``metadata.db`` of a data directory,
  or ZooKeeper;
- the ledger store (entries and cursor-state rows): the embedded ``ledgers.db``, or the
  cluster's shared PostgreSQL.

None of them can write. SQLite files are opened with ``mode=ro`` URIs, or ``immutable=1`` when
no write-ahead log is beside them (no broker has them open; SQLite would otherwise create an
empty log next to them) (a running broker is
never blocked: in WAL mode a reader and the writer do not wait on each other; each query is its
own short read transaction, so a checkpoint is never held back for long). ZooKeeper is read
with plain gets (no watch, no node created, no lock or ownership taken: the session holds no
ephemeral node). PostgreSQL sessions run with ``default_transaction_read_only=on``, so the
server itself refuses any write, and nothing creates the schema the broker's store would.

The broker's own stores are not reused here because opening them writes (the embedded metadata
store drops a dead session's ephemeral nodes, the stores create their schema, a ZooKeeper
chroot is created if missing), which an inspection must never do.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pulsar_grpc.broker.ledger.sqlite_store import ENTRY_MASK, entry_key
from pulsar_grpc.broker.ledger.store import LedgerStats
from pulsar_grpc.inspector.model import CorruptDataError, StorageUnavailableError

__all__ = [
    "LedgerSource",
    "MetadataSource",
    "PostgresLedgerSource",
    "SqliteLedgerSource",
    "SqliteMetadataSource",
    "ZooKeeperMetadataSource",
    "iterate_pages",
]

T = TypeVar("T")


class MetadataSource(Protocol):
    """Reads nodes of the metadata tree."""

    def get(self, path: str) -> bytes | None:
        """The node's value; None when there is no such node."""

    def children(self, path: str) -> list[str]:
        """The names of the node's children, sorted ([] when there is no such node)."""

    def close(self) -> None: ...


class LedgerSource(Protocol):
    """Reads entries and cursor-state rows of the ledger store."""

    def cursor_states(self, ledger_name: str) -> dict[str, bytes]:
        """Cursor name -> its latest committed state row, for one managed ledger."""

    def ledger_stats(self, ledger_id: int) -> LedgerStats:
        """What the store holds of a ledger: last entry id + 1, and bytes."""

    def read(self, ledger_id: int, first: int, last: int, limit: int) -> list[tuple[int, bytes]]:
        """At most ``limit`` (entry id, data) of the ledger with ids in [first, last], in order."""

    def close(self) -> None: ...


def _open_sqlite_ro(path: Path, what: str) -> sqlite3.Connection:
    if not path.is_file():
        raise StorageUnavailableError(f"no {what} at {path}")
    # Without a write-ahead log beside it no broker has the file open (its last connection
    # removed the log when it closed): read it as immutable, or SQLite would create an empty
    # -wal and -shm next to a stopped broker's data (or fail on read-only media).
    mode = "ro" if path.with_name(path.name + "-wal").exists() else "ro&immutable=1"
    try:
        conn = sqlite3.connect(
            path.resolve().as_uri() + f"?mode={mode}", uri=True, timeout=5, check_same_thread=False
        )
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as e:
        raise StorageUnavailableError(f"cannot read {path}: {e}") from None
    return conn


def _sqlite_query(conn: sqlite3.Connection, path: Path, sql: str, args: tuple[Any, ...]) -> list:
    try:
        return conn.execute(sql, args).fetchall()
    except sqlite3.OperationalError as e:
        if "no such table" in str(e):
            raise CorruptDataError(f"{path} is not a pulsar-grpc store: {e}") from None
        raise StorageUnavailableError(f"cannot read {path}: {e}") from None
    except sqlite3.Error as e:
        raise CorruptDataError(f"cannot read {path}: {e}") from None


class SqliteMetadataSource:
    """The embedded metadata store's file, ``<dataDirectory>/metadata.db`` (its ``nodes``
    table: path, parent, value)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._conn = _open_sqlite_ro(path, "metadata store (metadata.db)")

    def get(self, path: str) -> bytes | None:
        rows = _sqlite_query(
            self._conn, self._path, "SELECT value FROM nodes WHERE path=?", (path,)
        )
        return bytes(rows[0][0]) if rows else None

    def children(self, path: str) -> list[str]:
        prefix = "/" if path == "/" else path + "/"
        rows = _sqlite_query(
            self._conn, self._path, "SELECT path FROM nodes WHERE parent=?", (path,)
        )
        return sorted(row[0][len(prefix) :] for row in rows)

    def close(self) -> None:
        self._conn.close()


class SqliteLedgerSource:
    """The embedded ledger store's file, ``<dataDirectory>/ledgers.db`` (``entries`` keyed by
    the rowid ``ledger_id << 32 | entry_id``; ``cursors`` by managed ledger and cursor)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._conn = _open_sqlite_ro(path, "ledger store (ledgers.db)")

    def cursor_states(self, ledger_name: str) -> dict[str, bytes]:
        rows = _sqlite_query(
            self._conn,
            self._path,
            "SELECT cursor_name, state FROM cursors WHERE ledger_name=?",
            (ledger_name,),
        )
        return {name: bytes(state) for name, state in rows}

    def ledger_stats(self, ledger_id: int) -> LedgerStats:
        lo, hi = entry_key(ledger_id, 0), entry_key(ledger_id, ENTRY_MASK)
        ((last, size),) = _sqlite_query(
            self._conn,
            self._path,
            "SELECT max(id), total(length(data)) FROM entries WHERE id BETWEEN ? AND ?",
            (lo, hi),
        )
        return LedgerStats(0 if last is None else (last & ENTRY_MASK) + 1, int(size))

    def read(self, ledger_id: int, first: int, last: int, limit: int) -> list[tuple[int, bytes]]:
        rows = _sqlite_query(
            self._conn,
            self._path,
            "SELECT id, data FROM entries WHERE id BETWEEN ? AND ? ORDER BY id LIMIT ?",
            (entry_key(ledger_id, first), entry_key(ledger_id, last), limit),
        )
        return [(key & ENTRY_MASK, bytes(data)) for key, data in rows]

    def close(self) -> None:
        self._conn.close()


class ZooKeeperMetadataSource:
    """ZooKeeper at ``hosts`` ("h:p,h:p"), paths under ``chroot``: plain reads, no watches.

    The connection is tried for ``timeout_s`` at most; an unreachable ensemble is a
    :class:`StorageUnavailableError`, not a wait for ever."""

    def __init__(self, hosts: str, chroot: str, timeout_s: float) -> None:
        from kazoo.client import KazooClient
        from kazoo.handlers.threading import KazooTimeoutError
        from kazoo.retry import KazooRetry

        self._where = hosts + chroot
        self._timeout_s = timeout_s
        self._client = KazooClient(
            hosts=hosts + chroot,
            timeout=timeout_s,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
            command_retry=KazooRetry(max_tries=2, delay=0.1, deadline=timeout_s),
        )
        try:
            self._client.start(timeout=timeout_s)
        except KazooTimeoutError:
            self._stop()
            raise StorageUnavailableError(
                f"cannot connect to ZooKeeper at {hosts} within {timeout_s:g}s"
            ) from None

    def _call(self, fn: Any, path: str) -> Any:
        from kazoo.exceptions import KazooException, NoNodeError

        try:
            return fn(path)
        except NoNodeError:
            return None
        except KazooException as e:
            raise StorageUnavailableError(
                f"ZooKeeper at {self._where}: reading {path} failed: {type(e).__name__}"
            ) from None

    def get(self, path: str) -> bytes | None:
        got = self._call(self._client.get, path)
        return None if got is None else bytes(got[0])

    def children(self, path: str) -> list[str]:
        got = self._call(self._client.get_children, path)
        return [] if got is None else sorted(got)

    def _stop(self) -> None:
        self._client.stop()
        self._client.close()

    def close(self) -> None:
        self._stop()


class _LoopThread:
    """An event loop of its own on a daemon thread, so that asyncpg (asyncio only) serves a
    synchronous API, callable from any thread, inside a running loop or not."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="inspector-postgres", daemon=True
        )
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()


class PostgresLedgerSource:
    """The cluster's ledger store in PostgreSQL (``ledger_entries``, ``ledger_cursors``), one
    connection whose every transaction is read-only; ``where`` names it (never the password)."""

    def __init__(self, dsn: str, where: str, timeout_s: float) -> None:
        import asyncpg

        self._where = where
        self._timeout_s = timeout_s
        self._loop = _LoopThread()
        try:
            self._conn = self._run(
                asyncpg.connect(
                    dsn,
                    timeout=timeout_s,
                    command_timeout=timeout_s,
                    server_settings={
                        "default_transaction_read_only": "on",
                        "application_name": "pulsar-grpc inspect",
                    },
                )
            )
        except BaseException:
            self._loop.stop()
            raise

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        import asyncpg

        async def bounded() -> T:
            async with asyncio.timeout(self._timeout_s):
                return await coro

        try:
            return self._loop.run(bounded())
        except asyncpg.UndefinedTableError as e:
            raise CorruptDataError(
                f"PostgreSQL at {self._where} holds no pulsar-grpc ledger store: {e}"
            ) from None
        except TimeoutError:
            raise StorageUnavailableError(
                f"PostgreSQL at {self._where}: no answer within {self._timeout_s:g}s"
            ) from None
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as e:
            raise StorageUnavailableError(
                f"PostgreSQL at {self._where}: {str(e) or type(e).__name__}"
            ) from None

    def cursor_states(self, ledger_name: str) -> dict[str, bytes]:
        rows = self._run(
            self._conn.fetch(
                "SELECT cursor_name, state FROM ledger_cursors WHERE ledger_name = $1",
                ledger_name,
            )
        )
        return {r[0]: bytes(r[1]) for r in rows}

    def ledger_stats(self, ledger_id: int) -> LedgerStats:
        row = self._run(
            self._conn.fetchrow(
                "SELECT max(entry_id), coalesce(sum(octet_length(data)), 0)::bigint"
                " FROM ledger_entries WHERE ledger_id = $1",
                ledger_id,
            )
        )
        assert row is not None  # an aggregate always returns one row
        last, size = row
        return LedgerStats(0 if last is None else last + 1, int(size))

    def read(self, ledger_id: int, first: int, last: int, limit: int) -> list[tuple[int, bytes]]:
        rows = self._run(
            self._conn.fetch(
                "SELECT entry_id, data FROM ledger_entries WHERE ledger_id = $1"
                " AND entry_id BETWEEN $2 AND $3 ORDER BY entry_id LIMIT $4",
                ledger_id,
                first,
                last,
                limit,
            )
        )
        return [(int(r[0]), bytes(r[1])) for r in rows]

    def close(self) -> None:
        try:
            self._run(self._conn.close(timeout=self._timeout_s))
        except Exception:  # closing a broken connection: nothing left to release but the loop
            pass
        finally:
            self._loop.stop()


def iterate_pages(
    source: LedgerSource, ledger_id: int, first: int, last: int, page: int
) -> Iterator[tuple[int, bytes]]:
    """Entries ``first..last`` of a ledger, read ``page`` at a time (never all at once)."""
    while first <= last:
        rows = source.read(ledger_id, first, last, page)
        yield from rows
        if len(rows) < page:
            return
        first = rows[-1][0] + 1
