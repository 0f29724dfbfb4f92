"""The LedgerStore contract, run unchanged against every implementation.

Each test gets a :class:`Backing`: a place where a store's data lives (a data directory, a
MemoryLedgerData, a PostgreSQL database) over which it opens stores one after another, as a
broker does across restarts. ``poison`` makes every later commit writing a given cursor state
fail inside its transaction (a trigger on the real databases), after the commit's entries were
written, which is how atomicity is observed.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path

import asyncpg
import pytest

from pulsar_grpc.broker.errors import ManagedLedgerFencedError, PersistenceError, ServerError
from pulsar_grpc.broker.ledger import ManagedLedgerFactory
from pulsar_grpc.broker.ledger.memory_store import MemoryLedgerData, MemoryLedgerStore
from pulsar_grpc.broker.ledger.postgres_store import PostgresLedgerStore
from pulsar_grpc.broker.ledger.sqlite_store import SqliteLedgerStore
from pulsar_grpc.broker.ledger.storage_url import parse_ledger_storage_url
from pulsar_grpc.broker.ledger.store import (
    EntrySpan,
    EntryWrite,
    LedgerOwner,
    LedgerStats,
    LedgerStore,
)
from pulsar_grpc.broker.metadata import EmbeddedMetadataStore
from tests.postgres import postgres_server, postgres_url  # noqa: F401

ML = "public/default/persistent/t"
POISON = b"poison"


class Backing:
    """Opens stores over one place; closes what it opened. ``shared`` tells whether several
    stores may be open over it at once, as the brokers of a cluster share one database (the
    embedded store belongs to one process: two brokers there share one store)."""

    def __init__(
        self,
        open_store: Callable[[], LedgerStore],
        poison: Callable[[], Awaitable[None]],
        shared: bool,
    ) -> None:
        self._open = open_store
        self.poison = poison
        self.shared = shared
        self.opened: list[LedgerStore] = []

    def another_broker(self, store: LedgerStore) -> LedgerStore:
        """The store a second broker writes through: its own where the backing allows."""
        return self.open() if self.shared else store

    def open(self) -> LedgerStore:
        store = self._open()
        self.opened.append(store)
        return store

    async def reopen(self, store: LedgerStore) -> LedgerStore:
        await store.close()
        return self.open()

    async def close(self) -> None:
        for store in self.opened:
            await store.close()


def sqlite_backing(data_dir: Path) -> Backing:
    def poison() -> None:
        with sqlite3.connect(data_dir / "ledgers.db") as conn:
            conn.execute(
                f"CREATE TRIGGER poison BEFORE INSERT ON cursors WHEN NEW.state = x'{POISON.hex()}'"
                " BEGIN SELECT RAISE(ABORT, 'poisoned state'); END"
            )

    async def poison_async() -> None:
        await asyncio.to_thread(poison)

    return Backing(lambda: SqliteLedgerStore(data_dir, sync=False), poison_async, shared=False)


def memory_backing() -> Backing:
    data = MemoryLedgerData()

    async def poison() -> None:
        data.rejected_states.add(POISON)

    return Backing(lambda: MemoryLedgerStore(data), poison, shared=True)


def postgres_backing(url: str) -> Backing:
    where = parse_ledger_storage_url(url).where

    async def poison() -> None:
        conn = await asyncpg.connect(url, timeout=30)
        try:
            await conn.execute(
                f"""
                CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN RAISE EXCEPTION 'poisoned state'; END $$;
                CREATE TRIGGER poison BEFORE INSERT OR UPDATE ON ledger_cursors FOR EACH ROW
                WHEN (NEW.state = '\\x{POISON.hex()}'::bytea) EXECUTE FUNCTION poison();
                """
            )
        finally:
            await conn.close()

    return Backing(lambda: PostgresLedgerStore(url, where, timeout=30), poison, shared=True)


@pytest.fixture(params=["sqlite", "memory", "postgres"])
async def backing(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backing]:
    if request.param == "sqlite":
        b = sqlite_backing(tmp_path)
    elif request.param == "memory":
        b = memory_backing()
    else:
        b = postgres_backing(request.getfixturevalue("postgres_url"))
    try:
        yield b
    finally:
        await b.close()


@pytest.fixture
async def store(backing: Backing) -> LedgerStore:
    s = backing.open()
    await s.allocate_ledger_ids(1)  # schema created before a test poisons it
    return s


@pytest.fixture
async def owner(store: LedgerStore) -> LedgerOwner:
    """The owner of managed ledger ML, which every write of these tests names."""
    return await store.fence(ML)


def writes(ledger_id: int, ids: range, tag: str = "e") -> list[EntryWrite]:
    return [EntryWrite(ledger_id, i, f"{tag}{ledger_id}-{i}".encode()) for i in ids]


async def test_appended_entries_read_back_by_spans_in_span_order(
    store: LedgerStore, owner: LedgerOwner
) -> None:
    await store.append(owner, writes(7, range(10)) + writes(8, range(3)))
    spans = [EntrySpan(8, 1, 5), EntrySpan(7, 6, 7), EntrySpan(7, 0, 1), EntrySpan(9, 0, 9)]
    got = await store.read_entries(spans)
    assert got == [
        (8, 1, b"e8-1"), (8, 2, b"e8-2"),
        (7, 6, b"e7-6"), (7, 7, b"e7-7"),
        (7, 0, b"e7-0"), (7, 1, b"e7-1"),
    ]  # fmt: skip
    assert await store.read_entries([]) == []


async def test_writes_commit_in_call_order_later_ones_win(
    store: LedgerStore, owner: LedgerOwner
) -> None:
    key = "sub"
    futures = [
        store.append(owner, [EntryWrite(1, 0, f"v{i}".encode())], {key: f"s{i}".encode()})
        for i in range(20)
    ]
    resolved: list[int] = []

    def record(i: int, _fut: asyncio.Future[None]) -> None:
        resolved.append(i)

    for i, fut in enumerate(futures):
        fut.add_done_callback(partial(record, i))
    await asyncio.gather(*futures)
    assert resolved == list(range(20))
    assert await store.read_entries([EntrySpan(1, 0, 0)]) == [(1, 0, b"v19")]
    assert await store.get_cursor_states(ML) == {"sub": b"s19"}


async def test_calls_during_a_commit_in_flight_are_grouped_into_the_next(
    store: LedgerStore, owner: LedgerOwner
) -> None:
    first = store.append(owner, writes(1, range(0, 1)))
    await asyncio.sleep(0)  # the first commit has taken its batch and is in flight
    second = store.append(owner, writes(1, range(1, 2)))
    third = store.append(owner, writes(1, range(2, 3)), {"c": b"x"})
    # What each future saw done among the others when it resolved.
    seen: dict[str, tuple[bool, bool, bool]] = {}

    def snapshot(name: str, _fut: asyncio.Future[None]) -> None:
        seen[name] = (first.done(), second.done(), third.done())

    for name, fut in {"first": first, "second": second, "third": third}.items():
        fut.add_done_callback(partial(snapshot, name))
    await asyncio.gather(first, second, third)
    assert seen["first"] == (True, False, False)  # committed alone
    assert seen["second"] == (True, True, True)  # second and third: one commit
    assert len(await store.read_entries([EntrySpan(1, 0, 2)])) == 3


@pytest.mark.allow_broker_errors  # the group commit logs the failed commit
async def test_entries_and_cursor_states_commit_atomically(
    backing: Backing, store: LedgerStore, owner: LedgerOwner
) -> None:
    await backing.poison()
    ok = store.append(owner, writes(3, range(2)), {"a": b"fine"})
    await ok
    await asyncio.sleep(0)
    failing = store.append(owner, writes(3, range(2, 5)))
    also_failing = store.append(owner, (), {"a": POISON})
    with pytest.raises(PersistenceError):
        await failing
    with pytest.raises(PersistenceError):
        await also_failing
    # Neither the group's entries nor its cursor state is there; the store still works.
    assert [e[1] for e in await store.read_entries([EntrySpan(3, 0, 9)])] == [0, 1]
    assert await store.get_cursor_states(ML) == {"a": b"fine"}
    await store.append(owner, writes(3, range(2, 3)), {"a": b"later"})
    assert [e[1] for e in await store.read_entries([EntrySpan(3, 0, 9)])] == [0, 1, 2]
    assert await store.get_cursor_states(ML) == {"a": b"later"}


async def test_cursor_states_per_ledger_and_none_deletes(
    store: LedgerStore, owner: LedgerOwner
) -> None:
    other = await store.fence(ML + "x")
    await store.append(owner, (), {"a": b"1", "b": b"2"})
    await store.append(other, (), {"a": b"3"})
    assert await store.get_cursor_states(ML) == {"a": b"1", "b": b"2"}
    await store.append(owner, (), {"a": None, "never-written": None})
    assert await store.get_cursor_states(ML) == {"b": b"2"}
    assert await store.get_cursor_states(ML + "x") == {"a": b"3"}
    assert await store.get_cursor_states("nothing") == {}


async def test_ledger_stats_and_idempotent_delete(store: LedgerStore, owner: LedgerOwner) -> None:
    assert await store.ledger_stats(4) == LedgerStats(0, 0)
    await store.append(
        owner, [EntryWrite(4, i, b"x" * (i + 1)) for i in range(6)] + writes(5, range(2))
    )
    assert await store.ledger_stats(4) == LedgerStats(6, 21)
    await store.delete_ledger(4)
    await store.delete_ledger(4)
    assert await store.ledger_stats(4) == LedgerStats(0, 0)
    assert await store.read_entries([EntrySpan(4, 0, 9)]) == []
    assert len(await store.read_entries([EntrySpan(5, 0, 9)])) == 2  # other ledgers untouched


@pytest.mark.parametrize(
    ("present", "counted"),
    [([0, 1, 2, 5, 6], 3), ([1, 2, 3], 0), ([0, 2], 1), ([0, 1, 2, 3], 4)],
    ids=["hole-in-the-middle", "no-first-entry", "hole-after-first", "no-hole"],
)
async def test_ledger_stats_count_up_to_the_first_hole(
    store: LedgerStore, owner: LedgerOwner, present: list[int], counted: int
) -> None:
    """Recovery counts the entries before the first hole: an entry past a failed add was never
    confirmed, and counting it would leave readers waiting on the hole."""
    await store.append(owner, [EntryWrite(7, i, b"x" * (i + 1)) for i in present])
    assert await store.ledger_stats(7) == LedgerStats(counted, sum(range(1, counted + 1)))


async def test_ledger_ids_are_never_reused_across_reopen(
    backing: Backing, store: LedgerStore
) -> None:
    firsts = await asyncio.gather(*(store.allocate_ledger_ids(n) for n in (1, 5, 16, 2)))
    used = {
        i for first, n in zip(firsts, (1, 5, 16, 2), strict=True) for i in range(first, first + n)
    }
    assert len(used) == 24
    store = await backing.reopen(store)
    first = await store.allocate_ledger_ids(10)
    assert first > max(used)


async def test_entries_and_states_survive_reopen(
    backing: Backing, store: LedgerStore, owner: LedgerOwner
) -> None:
    await store.append(owner, writes(2, range(50)), {"sub": b"state"})
    store = await backing.reopen(store)
    assert len(await store.read_entries([EntrySpan(2, 0, 49)])) == 50
    assert await store.ledger_stats(2) == LedgerStats(
        50, sum(len(w.data) for w in writes(2, range(50)))
    )
    assert await store.get_cursor_states(ML) == {"sub": b"state"}


async def test_close_commits_what_is_queued_then_refuses(
    backing: Backing, store: LedgerStore, owner: LedgerOwner
) -> None:
    queued = [store.append(owner, writes(6, range(i, i + 1)), {"c": b"%d" % i}) for i in range(5)]
    await store.close()
    assert all(f.done() and f.exception() is None for f in queued)
    with pytest.raises(PersistenceError):
        await store.append(owner, writes(6, range(9, 10)))
    store = backing.open()
    assert [e[1] for e in await store.read_entries([EntrySpan(6, 0, 9)])] == [0, 1, 2, 3, 4]
    assert await store.get_cursor_states(ML) == {"c": b"4"}


# -- fencing: a new owner of a managed ledger fences the old one ------------------------------


@pytest.mark.allow_broker_errors  # the refused writes are logged
async def test_a_fenced_owner_can_no_longer_write_and_other_owners_are_unaffected(
    backing: Backing, store: LedgerStore, owner: LedgerOwner
) -> None:
    other = await store.fence(ML + "-other")
    await store.append(owner, writes(1, range(2)), {"sub": b"old"})
    newer = await backing.another_broker(store).fence(ML)
    assert newer.name == ML and newer.epoch > owner.epoch
    # One group commit: the stale owner's entries and cursor state, and another ledger's.
    stale_entries = store.append(owner, writes(1, range(2, 4)))
    stale_state = store.append(owner, (), {"sub": b"stale"})
    unaffected = store.append(other, writes(9, range(3)), {"c": b"other"})
    for stale in (stale_entries, stale_state):
        with pytest.raises(ManagedLedgerFencedError, match=ML) as refused:
            await stale
        assert refused.value.code is ServerError.ServiceNotReady  # retryable
    await unaffected
    assert [e[1] for e in await store.read_entries([EntrySpan(1, 0, 9)])] == [0, 1]
    assert await store.get_cursor_states(ML) == {"sub": b"old"}
    assert len(await store.read_entries([EntrySpan(9, 0, 9)])) == 3
    assert await store.get_cursor_states(ML + "-other") == {"c": b"other"}
    # The new owner writes; the old one stays fenced, across a reopen too.
    await backing.another_broker(store).append(newer, writes(2, range(1)), {"sub": b"new"})
    store = await backing.reopen(store)
    with pytest.raises(ManagedLedgerFencedError):
        await store.append(owner, (), {"sub": b"stale again"})
    assert await store.get_cursor_states(ML) == {"sub": b"new"}


@pytest.mark.allow_broker_errors
async def test_a_second_broker_opening_a_managed_ledger_fences_the_first(
    backing: Backing, store: LedgerStore, tmp_path: Path
) -> None:
    """Two brokers (factories) over one store and one metadata store: the second opens the
    ledger while the first has appends in flight. Every entry the first confirmed is the
    second's to read; nothing of the first's after that is written, entries or acks."""
    metadata = EmbeddedMetadataStore(tmp_path / "metadata")
    first = ManagedLedgerFactory(store, metadata)
    second = ManagedLedgerFactory(backing.another_broker(store), metadata)
    try:
        old = await first.open(ML)
        old_cursor = await old.open_cursor("sub", "earliest")
        confirmed = list(await asyncio.gather(*(old.add_entry(b"a%d" % i) for i in range(5))))
        await old_cursor.mark_delete(confirmed[0])
        racing = [old.add_entry(b"racing%d" % i) for i in range(3)]  # commit before or after
        new = await second.open(ML)
        outcomes = await asyncio.gather(*racing, return_exceptions=True)
        confirmed += [o for o in outcomes if not isinstance(o, BaseException)]
        assert all(isinstance(o, ManagedLedgerFencedError) for o in outcomes if o not in confirmed)

        with pytest.raises(ManagedLedgerFencedError):
            await old.add_entry(b"after the move")
        assert old.fenced.done()
        with pytest.raises(ManagedLedgerFencedError):
            await old.add_entry(b"refused at once")
        with pytest.raises(ManagedLedgerFencedError):
            await old_cursor.mark_delete(confirmed[-1])  # a stale ack never lands

        reader = new.new_non_durable_cursor("earliest")
        got = [e.position for e in await reader.read_entries(100)]
        assert got == confirmed
        new_cursor = new.cursors["sub"]
        assert new_cursor.mark_delete_position == confirmed[0]
        await new_cursor.mark_delete(confirmed[1])
        with pytest.raises(ManagedLedgerFencedError):
            await old_cursor.mark_delete(confirmed[-1])
        assert (await new.add_entry(b"b")) > confirmed[-1]
        reopened = ManagedLedgerFactory(store, metadata)
        try:
            # What the new owner persisted is what a later owner recovers.
            recovered = await reopened.open(ML)
            assert recovered.cursors["sub"].mark_delete_position == confirmed[1]
            assert recovered.number_of_entries == len(confirmed) + 1
        finally:
            await reopened.close()
    finally:
        await first.close()
        await second.close()
        await metadata.close()


@pytest.mark.allow_broker_errors
async def test_appends_racing_a_fence_commit_before_it_or_not_at_all(
    backing: Backing, store: LedgerStore, owner: LedgerOwner
) -> None:
    """An owner appends without pause while another broker fences it and at once counts the
    ledger, as a managed ledger's open does: the appends that succeeded are exactly the ones
    counted (a prefix, all visible to the new owner), and the rest failed and are not stored."""
    other = backing.another_broker(store)
    await other.ledger_stats(11)  # connected: the fence below is one round trip

    async def take_over() -> LedgerStats:
        await other.fence(ML)
        return await other.ledger_stats(11)

    appends: list[asyncio.Future[None]] = []
    taking_over: asyncio.Task[LedgerStats] | None = None
    refused_after = 0
    while refused_after < 5:  # until some appends came after the fence
        assert len(appends) < 100_000, "the fence never completed"
        appends.append(store.append(owner, [EntryWrite(11, len(appends), b"x")]))
        if taking_over is None and len(appends) >= 20 and appends[0].done():
            taking_over = asyncio.create_task(take_over())  # amid commits in flight
        if taking_over is not None and taking_over.done():
            refused_after += 1
        await asyncio.sleep(0)
    assert taking_over is not None
    counted = await taking_over
    outcomes = await asyncio.gather(*appends, return_exceptions=True)
    succeeded = [i for i, o in enumerate(outcomes) if o is None]
    assert succeeded == list(range(len(succeeded))) and succeeded  # the first commit, at least
    assert all(isinstance(o, ManagedLedgerFencedError) for o in outcomes[len(succeeded) :])
    assert counted.entries == len(succeeded)
    assert [e[1] for e in await other.read_entries([EntrySpan(11, 0, len(appends))])] == succeeded
