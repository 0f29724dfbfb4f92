"""open_ledger_store: the LedgerStore that ledgerStorageUrl names."""

from __future__ import annotations

from pathlib import Path

from pulsar_grpc.broker.ledger.postgres_store import PostgresLedgerStore
from pulsar_grpc.broker.ledger.sqlite_store import SqliteLedgerStore
from pulsar_grpc.broker.ledger.storage_url import LedgerStorageKind, parse_ledger_storage_url
from pulsar_grpc.broker.ledger.store import LedgerStore

__all__ = ["open_ledger_store"]


async def open_ledger_store(url: str, data_dir: Path, sync: bool) -> LedgerStore:
    """The embedded store in `data_dir` for an empty `url`, else the database it names,
    connected already so that an unreachable one stops start-up with PersistenceError.

    `sync` is journalSyncData, for the embedded store; PostgreSQL's own settings decide when
    its commits are durable.
    """
    storage = parse_ledger_storage_url(url)
    if storage.kind is LedgerStorageKind.EMBEDDED:
        return SqliteLedgerStore(data_dir, sync=sync)
    store = PostgresLedgerStore(storage.dsn, storage.where)
    await store.connect()
    return store
