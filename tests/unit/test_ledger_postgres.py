"""What only the PostgreSQL ledger store has: a network between it and its data, and several
brokers sharing one database. A FaultProxy between the store and a real server cuts or
silences the connections; every failure is a PersistenceError naming the server, none hangs,
and the store carries on over new connections once the network is back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from pulsar_grpc.broker.errors import PersistenceError
from pulsar_grpc.broker.ledger.postgres_store import PostgresLedgerStore
from pulsar_grpc.broker.ledger.storage_url import parse_ledger_storage_url
from pulsar_grpc.broker.ledger.store import EntrySpan, EntryWrite, LedgerOwner, LedgerStats
from tests.faultproxy import FaultProxy
from tests.postgres import postgres_server, postgres_url  # noqa: F401

TIMEOUT_S = 1.0
ML = "public/default/persistent/t"


def store_at(url: str, timeout: float = 30) -> PostgresLedgerStore:
    return PostgresLedgerStore(url, parse_ledger_storage_url(url).where, timeout=timeout)


@pytest.fixture
async def proxy(postgres_url: str) -> AsyncIterator[tuple[FaultProxy, str]]:  # noqa: F811
    port = parse_ledger_storage_url(postgres_url).where.split(":")[1].split("/")[0]
    async with FaultProxy(int(port)) as p:
        yield p, postgres_url.replace(f":{port}/", f":{p.port}/")


def entry(i: int) -> list[EntryWrite]:
    return [EntryWrite(1, i, b"e%d" % i)]


async def owner_of(store: PostgresLedgerStore) -> LedgerOwner:
    return await store.fence(ML)


@pytest.mark.allow_broker_errors  # the group commit logs its failed commit
async def test_a_connection_cut_mid_commit_fails_it_and_the_next_call_reconnects(
    proxy: tuple[FaultProxy, str],
) -> None:
    fault, url = proxy
    store = store_at(url, TIMEOUT_S * 10)
    try:
        owner = await owner_of(store)
        await store.append(owner, entry(0))
        fault.delay_s = 0.5  # the next commit's statements are still on the way...
        in_flight = store.append(owner, entry(1))
        await asyncio.sleep(0.1)
        assert fault.cut() >= 1  # ...when the connection is lost
        with pytest.raises(PersistenceError, match=f"PostgreSQL at 127.0.0.1:{fault.port}/"):
            await in_flight
        fault.delay_s = 0
        await store.append(owner, entry(2))  # over a new connection, without reopening the store
        got = await store.read_entries([EntrySpan(1, 0, 9)])
        assert [e for _, e, _ in got] == [0, 2]
    finally:
        await store.close()


@pytest.mark.allow_broker_errors
async def test_a_silent_server_fails_calls_within_the_timeout_and_close_does_not_hang(
    proxy: tuple[FaultProxy, str],
) -> None:
    fault, url = proxy
    store = store_at(url, TIMEOUT_S)
    owner = await owner_of(store)
    await store.append(owner, entry(0))
    fault.blackhole()
    began = time.monotonic()
    with pytest.raises(PersistenceError, match="no answer in time"):
        await store.read_entries([EntrySpan(1, 0, 0)])
    with pytest.raises(PersistenceError):
        await store.allocate_ledger_ids(1)
    queued = store.append(owner, entry(1))
    await asyncio.wait_for(store.close(), TIMEOUT_S * 10)
    assert queued.done() and isinstance(queued.exception(), PersistenceError)
    assert time.monotonic() - began < TIMEOUT_S * 10
    fault.heal()
    store = store_at(url)
    try:
        assert [e for _, e, _ in await store.read_entries([EntrySpan(1, 0, 9)])] == [0]
    finally:
        await store.close()


async def test_a_refused_connection_is_a_persistence_error(
    proxy: tuple[FaultProxy, str],
) -> None:
    fault, url = proxy
    fault.refusing = True
    store = store_at(url, TIMEOUT_S * 10)
    with pytest.raises(PersistenceError, match=f"PostgreSQL at 127.0.0.1:{fault.port}/"):
        await store.connect()
    fault.refusing = False
    await store.connect()
    await store.close()


async def test_brokers_sharing_a_database_get_distinct_ids_and_see_each_others_entries(
    postgres_url: str,  # noqa: F811
) -> None:
    stores = [store_at(postgres_url) for _ in range(4)]
    try:
        # Schema creation races too: all four connect at once.
        await asyncio.gather(*(s.connect() for s in stores))
        firsts = await asyncio.gather(
            *(s.allocate_ledger_ids(10) for s in stores for _ in range(5))
        )
        ids = [i for first in firsts for i in range(first, first + 10)]
        assert len(set(ids)) == 200
        owner = await owner_of(stores[0])
        await stores[0].append(owner, [EntryWrite(firsts[0], 0, b"from broker 0")])
        assert await stores[3].read_entries([EntrySpan(firsts[0], 0, 0)]) == [
            (firsts[0], 0, b"from broker 0")
        ]
    finally:
        for s in stores:
            await s.close()


async def test_deleting_a_large_ledger_removes_every_entry_and_only_its_own(
    postgres_url: str,  # noqa: F811
) -> None:
    store = store_at(postgres_url)
    try:
        await store.append(
            await owner_of(store),
            [EntryWrite(3, i, b"x") for i in range(4500)] + [EntryWrite(4, 0, b"y")],
        )
        await store.delete_ledger(3)  # more than two slices
        assert await store.ledger_stats(3) == LedgerStats(0, 0)
        assert await store.ledger_stats(4) == LedgerStats(1, 1)
    finally:
        await store.close()
