"""Ledger ids: many ledgers opening at once all get ids, however the refills interleave."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pulsar_grpc.broker.ledger import ManagedLedgerFactory, SqliteLedgerStore
from pulsar_grpc.broker.ledger.id_pool import LedgerIdPool
from pulsar_grpc.broker.metadata import EmbeddedMetadataStore


async def test_a_thousand_ledgers_opened_at_once_all_open_with_distinct_ids(
    tmp_path: Path,
) -> None:
    store = SqliteLedgerStore(tmp_path, sync=False)
    metadata = EmbeddedMetadataStore(tmp_path)
    factory = ManagedLedgerFactory(store, metadata)
    try:
        names = [f"public/default/persistent/t{i}" for i in range(1000)]
        ledgers = await asyncio.wait_for(
            asyncio.gather(*(factory.open(name) for name in names)), 120
        )
        ids = [ml.ledgers[-1].ledger_id for ml in ledgers]
        assert len(set(ids)) == 1000
    finally:
        await factory.close()
        await store.close()
        await metadata.close()


async def test_waiters_that_find_a_refill_drained_wait_for_the_next_one(tmp_path: Path) -> None:
    store = SqliteLedgerStore(tmp_path, sync=False)
    pool = LedgerIdPool(store, block=2)
    try:

        async def one() -> int:
            await pool.ensure()
            return pool.take()

        ids = await asyncio.wait_for(asyncio.gather(*(one() for _ in range(300))), 60)
        assert len(set(ids)) == 300
    finally:
        await store.close()


async def test_a_ledger_moved_between_brokers_gets_a_higher_ledger_id(tmp_path: Path) -> None:
    """Two brokers' pools on one store: the one that reserved ids first still holds lower ids
    when a managed ledger that the other wrote moves to it; positions compare by ledger id,
    so the ledger it opens must be above the other's."""
    store = SqliteLedgerStore(tmp_path, sync=False)
    metadata = EmbeddedMetadataStore(tmp_path)
    first, second = ManagedLedgerFactory(store, metadata), ManagedLedgerFactory(store, metadata)
    name = "public/default/persistent/moved"
    try:
        other = await first.open("public/default/persistent/other")  # reserves low ids
        on_second = await second.open(name)
        await on_second.add_entry(b"m")
        highest = on_second.ledgers[-1].ledger_id
        assert other.ledgers[-1].ledger_id < highest
        await second.close()
        on_first = await first.open(name)
        assert on_first.ledgers[-1].ledger_id > highest
    finally:
        await first.close()
        await store.close()
        await metadata.close()
