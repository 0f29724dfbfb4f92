"""The SQLite store's single writer is never held for long by housekeeping: the WAL is copied
back into the database by a checkpointer of its own (so the WAL stays bounded while the
writer goes on), and a ledger is deleted in slices small enough that appends interleave."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path

from pulsar_grpc.broker.ledger.sqlite_store import SqliteLedgerStore
from pulsar_grpc.broker.ledger.store import EntrySpan, EntryWrite, LedgerOwner, LedgerStore
from tests.waiting import eventually

ENTRY = os.urandom(12_000)  # a 100-message batch of 100-byte messages, about
ROUND_ENTRIES = 160  # ~2 MB a round


async def _append(store: LedgerStore, ledger_id: int, first: int, count: int) -> None:
    owner = LedgerOwner("public/default/persistent/t", 1)
    for start in range(first, first + count, 16):  # several commits a round
        writes = [EntryWrite(ledger_id, i, ENTRY) for i in range(start, start + 16)]
        await store.append(owner, writes)


def _checkpointed(db: Path) -> bool:
    """Whether the database file holds every page, i.e. a checkpoint copied the whole WAL
    (read through a connection of the test's own: reading does not checkpoint)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        pages, size = (
            conn.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "page_size")
        )
    return bool(db.stat().st_size == pages * size)


def _wal_restarts(wal: Path) -> int:
    """The WAL header's checkpoint sequence number: +1 each time the writer starts it over."""
    return int.from_bytes(wal.read_bytes()[12:16], "big")


async def test_the_wal_is_checkpointed_while_the_store_runs_and_starts_over(
    tmp_path: Path,
) -> None:
    store = SqliteLedgerStore(tmp_path)
    await store.fence("public/default/persistent/t")  # epoch 1
    db, wal = tmp_path / "ledgers.db", tmp_path / "ledgers.db-wal"
    entries = 6 * ROUND_ENTRIES
    try:
        await _append(store, 1, 0, entries)
        restarts = _wal_restarts(wal)
        # The commits do not checkpoint (the writer's auto-checkpoint is off): the data
        # reaches the database file through the checkpointer, while the store stays open.
        await eventually(lambda: _checkpointed(db), timeout=30)
        # Everything was copied: a commit after the checkpoint's end starts the WAL over, so it
        # stays bounded.
        appended = 0
        while _wal_restarts(wal) == restarts:
            assert appended < 600, "the WAL never started over"
            await _append(store, 2, appended, 16)
            appended += 16
            await asyncio.sleep(0.05)
        got = await store.read_entries([EntrySpan(1, 0, entries - 1)])
        assert [entry_id for _, entry_id, _ in got] == list(range(entries))
    finally:
        await store.close()


async def test_an_append_waits_for_one_delete_slice_not_for_the_whole_delete(
    tmp_path: Path,
) -> None:
    store = SqliteLedgerStore(tmp_path)
    try:
        owner = await store.fence("public/default/persistent/t")
        for start in range(0, 3000, 500):
            await store.append(
                owner, [EntryWrite(1, i, b"m" * 1000) for i in range(start, start + 500)]
            )
        delete = asyncio.ensure_future(store.delete_ledger(1))
        await asyncio.sleep(0)  # the delete's first slice is queued in the store's thread
        await store.append(owner, [EntryWrite(2, 0, ENTRY)])
        # The append went in after the first slice or two: most of the ledger was still there
        # (one 2,000-entry transaction before would have left 1,000).
        left = await store.read_entries([EntrySpan(1, 0, 2999)])
        assert 2000 <= len(left) < 3000  # the delete had begun, and was far from done
        await delete
        assert await store.read_entries([EntrySpan(1, 0, 2999)]) == []
        assert (await store.ledger_stats(2)).entries == 1
    finally:
        await store.close()
