"""ManagedLedger and ManagedCursor over the real SQLite stores in a tmp dir."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from pulsar_grpc.broker.errors import ManagedLedgerFencedError, NotFoundError, PersistenceError
from pulsar_grpc.broker.ledger import (
    Entry,
    ManagedLedger,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    Position,
    SqliteLedgerStore,
)
from pulsar_grpc.broker.ledger.group_commit import CommitBatch
from pulsar_grpc.broker.ledger.info import LedgerInfo, cursor_path, decode_ledgers, ledger_path
from pulsar_grpc.broker.ledger.store import EntrySpan, LedgerOwner
from pulsar_grpc.broker.metadata import EmbeddedMetadataStore
from tests.waiting import eventually

NAME = "public/default/persistent/t1"
P = Position


@dataclass
class Env:
    dir: Path
    store: SqliteLedgerStore
    metadata: EmbeddedMetadataStore
    factory: ManagedLedgerFactory

    @classmethod
    def open(cls, data_dir: Path, config: ManagedLedgerConfig | None = None, **kw: int) -> Env:
        store = SqliteLedgerStore(data_dir, sync=False)
        metadata = EmbeddedMetadataStore(data_dir)
        return cls(data_dir, store, metadata, ManagedLedgerFactory(store, metadata, config, **kw))

    async def close(self) -> None:
        await self.factory.close()
        await self.store.close()
        await self.metadata.close()


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    e = Env.open(tmp_path, ManagedLedgerConfig(max_entries_per_ledger=5))
    yield e
    await e.close()


async def add_all(ml: ManagedLedger, payloads: list[bytes]) -> list[Position]:
    return list(await asyncio.gather(*(ml.add_entry(p) for p in payloads)))


async def test_positions_in_call_order_and_readable_when_durable(env: Env) -> None:
    ml = await env.factory.open(NAME)
    futures = [ml.add_entry(f"m{i}".encode()) for i in range(3)]
    assert ml.last_confirmed_entry is None
    positions = await asyncio.gather(*futures)
    first = ml.ledgers[0].ledger_id
    assert positions == [P(first, 0), P(first, 1), P(first, 2)]
    assert ml.last_confirmed_entry == P(first, 2)
    entry = await ml.read_entry(P(first, 1))
    assert entry is not None and entry.data == b"m1"
    assert ml.number_of_entries == 3 and ml.total_size == 6 and ml.entries_added_counter == 3


async def test_group_commit_shares_transactions(env: Env) -> None:
    ml = await env.factory.open(NAME)
    commits = 0
    original = env.store._commit

    async def counting(batch: CommitBatch) -> set[LedgerOwner]:
        nonlocal commits
        commits += 1
        return await original(batch)

    env.store._committer._commit = counting
    ml.config.max_entries_per_ledger = 10_000
    await add_all(ml, [b"x"] * 500)
    assert commits == 1
    # Appends arriving while a commit is in flight go together into the next one.
    first = ml.add_entry(b"a")
    await asyncio.sleep(0)
    rest = [ml.add_entry(b"b") for _ in range(100)]
    await asyncio.gather(first, *rest)
    assert commits <= 3


async def test_rollover_and_metadata(env: Env) -> None:
    ml = await env.factory.open(NAME)
    await ml.open_cursor("holds-ledgers", "earliest")
    positions = await add_all(ml, [b"e%d" % i for i in range(12)])
    ids = sorted({p.ledger_id for p in positions})
    assert len(ids) == 3
    assert [p.entry_id for p in positions] == [0, 1, 2, 3, 4] * 2 + [0, 1]

    # Rollover registration runs in the background: wait until the metadata lists them.
    async def registered() -> list[LedgerInfo]:
        got = await env.metadata.get(ledger_path(NAME))
        assert got is not None
        infos = decode_ledgers(got.value)
        assert [i.ledger_id for i in infos][:3] == ids and infos[0].entries == 5, infos
        return infos

    infos = await eventually(registered, timeout=5)
    assert infos[0].entries == 5 and infos[0].size == sum(len(b"e%d" % i) for i in range(5))
    cursor = ml.new_non_durable_cursor("earliest")
    entries = await cursor.read_entries(100)
    assert [e.data for e in entries] == [b"e%d" % i for i in range(12)]


async def test_rollover_by_size(tmp_path: Path) -> None:
    env = Env.open(tmp_path, ManagedLedgerConfig(max_size_per_ledger_bytes=100))
    ml = await env.factory.open(NAME)
    positions = await add_all(ml, [b"x" * 60] * 4)
    assert [p.entry_id for p in positions] == [0, 1, 0, 1]
    await env.close()


async def test_listener_called_after_durable_commit(env: Env) -> None:
    ml = await env.factory.open(NAME)
    seen: list[Position | None] = []

    def listener() -> None:
        seen.append(ml.last_confirmed_entry)

    ml.add_entries_listener(listener)
    await add_all(ml, [b"a", b"b"])
    assert seen == [ml.last_confirmed_entry]
    ml.remove_entries_listener(listener)
    await add_all(ml, [b"c"])
    assert len(seen) == 1


async def test_cursor_read_ack_backlog(env: Env) -> None:
    ml = await env.factory.open(NAME)
    cursor = await ml.open_cursor("sub", "earliest")
    positions = await add_all(ml, [b"%d" % i for i in range(12)])
    assert cursor.get_number_of_entries_in_backlog() == 12
    batch = await cursor.read_entries(4)
    assert [e.position for e in batch] == positions[:4]
    assert cursor.has_more_entries()
    batch = await cursor.read_entries(100)
    assert [e.position for e in batch] == positions[4:]
    assert await cursor.read_entries(10) == []
    assert not cursor.has_more_entries()

    await cursor.delete([positions[1], positions[2], positions[7]])
    assert cursor.mark_delete_position < positions[0]
    assert cursor.get_number_of_entries_in_backlog() == 9
    await cursor.delete([positions[0]])
    assert cursor.mark_delete_position == positions[2]
    assert cursor.get_number_of_entries_in_backlog() == 8
    await cursor.mark_delete(positions[6])
    assert cursor.mark_delete_position == positions[7]  # 7 was already deleted
    assert cursor.get_number_of_entries_in_backlog() == 4
    assert cursor.is_deleted(positions[5]) and not cursor.is_deleted(positions[8])

    cursor.rewind()
    batch = await cursor.read_entries(100)
    assert [e.position for e in batch] == positions[8:]


async def test_read_skips_individually_deleted_and_respects_bytes(env: Env) -> None:
    ml = await env.factory.open(NAME)
    ml.config.max_entries_per_ledger = 1000
    cursor = await ml.open_cursor("sub", "earliest")
    positions = await add_all(ml, [b"x" * 10] * 10)
    await cursor.delete([positions[2], positions[3], positions[5]])
    batch = await cursor.read_entries(4)
    assert [e.position for e in batch] == [positions[i] for i in (0, 1, 4, 6)]
    batch = await cursor.read_entries(100, max_bytes=25)
    assert [e.position for e in batch] == [positions[7], positions[8]]
    batch = await cursor.read_entries(100, max_bytes=1)
    assert [e.position for e in batch] == [positions[9]]  # at least one


async def test_replay_and_seek(env: Env) -> None:
    ml = await env.factory.open(NAME)
    cursor = await ml.open_cursor("sub", "earliest")
    positions = await add_all(ml, [b"%d" % i for i in range(8)])
    await cursor.read_entries(100)
    await cursor.delete([positions[3]])
    replayed = await cursor.replay_entries([positions[6], positions[3], positions[1]])
    assert [e.position for e in replayed] == [positions[1], positions[6]]
    cursor.seek(positions[5])
    assert [e.position for e in await cursor.read_entries(2)] == positions[5:7]


async def test_batch_index_acks(env: Env) -> None:
    ml = await env.factory.open(NAME)
    cursor = await ml.open_cursor("sub", "earliest")
    positions = await add_all(ml, [b"a", b"b"])
    await cursor.ack_batch_indexes(positions[1], [0, 2], batch_size=3)
    assert cursor.acked_batch_indexes(positions[1], 3) == {0, 2}
    assert not cursor.is_deleted(positions[1])
    await cursor.ack_batch_indexes(positions[1], [1], batch_size=3)
    assert cursor.is_deleted(positions[1]) and positions[1] not in cursor.batch_deleted
    await cursor.ack_batch_indexes(positions[0], range(2), batch_size=2)
    assert cursor.mark_delete_position == positions[1]


async def test_latest_cursor_and_non_durable(env: Env) -> None:
    ml = await env.factory.open(NAME)
    positions = await add_all(ml, [b"old1", b"old2"])
    latest = await ml.open_cursor("late", "latest")
    reader_incl = ml.new_non_durable_cursor(positions[1], inclusive=True)
    reader_excl = ml.new_non_durable_cursor(positions[1], inclusive=False)
    new = await add_all(ml, [b"new"])
    assert [e.data for e in await latest.read_entries(10)] == [b"new"]
    assert [e.data for e in await reader_incl.read_entries(10)] == [b"old2", b"new"]
    assert [e.position for e in await reader_excl.read_entries(10)] == new
    assert set(ml.cursors) == {"late"}


async def test_reset_cursor(env: Env) -> None:
    ml = await env.factory.open(NAME)
    cursor = await ml.open_cursor("sub", "earliest")
    positions = await add_all(ml, [b"%d" % i for i in range(8)])
    await cursor.mark_delete(positions[3])  # same ledger: nothing is trimmed
    await cursor.delete([positions[6]])
    await cursor.reset_cursor(positions[2])
    assert cursor.mark_delete_position == P(positions[2].ledger_id, 1)
    assert cursor.read_position == positions[2]
    assert not cursor.individually_deleted
    assert cursor.get_number_of_entries_in_backlog() == 6
    assert [e.position for e in await cursor.read_entries(100)] == positions[2:]


async def test_mark_delete_beyond_last_confirmed_fails(env: Env) -> None:
    ml = await env.factory.open(NAME)
    cursor = await ml.open_cursor("sub")
    await add_all(ml, [b"a"])
    with pytest.raises(Exception, match="beyond"):
        await cursor.mark_delete(P(10**6, 0))


async def test_find_newest_matching_reads_log_n(env: Env) -> None:
    ml = await env.factory.open(NAME)
    await ml.open_cursor("holds-ledgers", "earliest")
    ml.config.max_entries_per_ledger = 7
    positions = await add_all(ml, [i.to_bytes(4, "big") for i in range(100)])
    reads = 0
    original = ml.read_entry

    async def counting(pos: Position) -> Entry | None:
        nonlocal reads
        reads += 1
        return await original(pos)

    ml.read_entry = counting  # type: ignore[method-assign,assignment]
    for t in (0, 41, 99):
        reads = 0

        def not_after(data: bytes, t: int = t) -> bool:
            return int.from_bytes(data, "big") <= t

        found = await ml.find_newest_matching(not_after)
        assert found == positions[t]
        assert reads <= 8
    assert await ml.find_newest_matching(lambda d: False) is None


async def test_cursor_state_recovered_after_reopen(tmp_path: Path) -> None:
    env = Env.open(tmp_path, ManagedLedgerConfig(max_entries_per_ledger=4))
    ml = await env.factory.open(NAME)
    cursor = await ml.open_cursor("sub/with:odd chars", "earliest")
    positions = await add_all(ml, [b"%d" % i for i in range(10)])
    await cursor.mark_delete(positions[2], properties={"seq": 42})
    await cursor.delete([positions[5], positions[6]])
    await cursor.ack_batch_indexes(positions[8], [1, 3], batch_size=5)
    await env.close()

    env = Env.open(tmp_path, ManagedLedgerConfig(max_entries_per_ledger=4))
    ml = await env.factory.open(NAME)
    assert ml.last_confirmed_entry == positions[-1]
    assert ml.number_of_entries == 10
    cursor = ml.cursors["sub/with:odd chars"]
    assert cursor.mark_delete_position == positions[2]
    assert cursor.properties == {"seq": 42}
    assert cursor.is_deleted(positions[5]) and cursor.is_deleted(positions[6])
    assert cursor.acked_batch_indexes(positions[8], 5) == {1, 3}
    entries = await cursor.read_entries(100)
    assert [e.position for e in entries] == [positions[i] for i in (3, 4, 7, 8, 9)]
    # Appends continue in a new ledger after the recovered ones.
    new = await ml.add_entry(b"after")
    assert new.ledger_id > positions[-1].ledger_id
    assert [e.data for e in await cursor.read_entries(100)] == [b"after"]
    await env.close()


async def test_trim_deletes_consumed_ledgers(env: Env) -> None:
    ml = await env.factory.open(NAME)
    slow = await ml.open_cursor("slow", "earliest")
    fast = await ml.open_cursor("fast", "earliest")
    positions = await add_all(ml, [b"%d" % i for i in range(12)])  # ledgers of 5, 5, 2
    first_ledger = positions[0].ledger_id
    await fast.mark_delete(positions[-1])
    await ml.trim()
    assert ml.ledgers[0].ledger_id == first_ledger  # slow holds everything
    await slow.mark_delete(positions[7])
    await ml.trim()
    assert ml.ledgers[0].ledger_id == positions[5].ledger_id
    assert ml.number_of_entries == 7
    assert await env.store.read_entries([]) == []
    assert await ml.read_entry(positions[0]) is None
    got = await env.metadata.get(ledger_path(NAME))
    assert got is not None and decode_ledgers(got.value)[0].ledger_id == positions[5].ledger_id
    reader = ml.new_non_durable_cursor("earliest")
    assert [e.position for e in await reader.read_entries(100)] == positions[5:]


async def test_trim_runs_in_background_after_mark_delete(env: Env) -> None:
    ml = await env.factory.open(NAME)
    cursor = await ml.open_cursor("sub", "earliest")
    positions = await add_all(ml, [b"%d" % i for i in range(11)])
    await cursor.mark_delete(positions[-1])
    await eventually(lambda: [i.ledger_id for i in ml.ledgers] == [ml.current_ledger_id], 5)
    assert cursor.get_number_of_entries_in_backlog() == 0


async def test_retention_keeps_consumed_ledgers(tmp_path: Path) -> None:
    config = ManagedLedgerConfig(max_entries_per_ledger=5, retention_time_minutes=60)
    config.retention_size_mb = -1
    env = Env.open(tmp_path, config)
    ml = await env.factory.open(NAME)
    cursor = await ml.open_cursor("sub", "earliest")
    positions = await add_all(ml, [b"%d" % i for i in range(12)])
    await cursor.mark_delete(positions[-1])
    await ml.trim()
    assert len(ml.ledgers) == 3  # within the retention time
    ml.config.retention_time_minutes = 0
    await ml.trim()
    assert len(ml.ledgers) == 1
    await env.close()


async def test_no_cursor_means_consumed(env: Env) -> None:
    ml = await env.factory.open(NAME)
    await add_all(ml, [b"x"] * 11)
    await ml.trim()
    assert len(ml.ledgers) == 1


async def test_delete_cursor(env: Env) -> None:
    ml = await env.factory.open(NAME)
    await ml.open_cursor("sub")
    assert await env.metadata.exists(cursor_path(NAME, "sub"))
    await ml.delete_cursor("sub")
    assert not await env.metadata.exists(cursor_path(NAME, "sub"))
    assert await env.store.get_cursor_states(NAME) == {}
    with pytest.raises(NotFoundError):
        await ml.delete_cursor("sub")


async def test_factory_open_exists_list_delete(env: Env) -> None:
    a, b = await asyncio.gather(env.factory.open(NAME), env.factory.open(NAME))
    assert a is b
    await env.factory.open("public/default/persistent/t2")
    await env.factory.open("other/ns/persistent/t3")
    assert await env.factory.exists(NAME)
    assert not await env.factory.exists("public/default/persistent/nope")
    assert await env.factory.list_names("public/default") == [
        NAME,
        "public/default/persistent/t2",
    ]
    assert len(await env.factory.list_names()) == 3
    cursor = await a.open_cursor("sub", "earliest")
    positions = await add_all(a, [b"x"] * 7)
    await cursor.delete([positions[3]])
    await env.factory.delete(NAME)
    assert not await env.factory.exists(NAME)
    assert not await env.metadata.exists(cursor_path(NAME, "sub"))
    assert await env.store.get_cursor_states(NAME) == {}
    ids = sorted({p.ledger_id for p in positions})
    assert await env.store.read_entries([]) == []
    for ledger_id in ids:
        assert (await env.store.ledger_stats(ledger_id)).entries == 0
    fresh = await env.factory.open(NAME)
    assert fresh is not a and fresh.last_confirmed_entry is None and not fresh.cursors


async def test_closed_ledger_refuses_appends(env: Env) -> None:
    ml = await env.factory.open(NAME)
    pending = ml.add_entry(b"in flight")
    await ml.close()
    assert pending.done() and not pending.exception()
    with pytest.raises(PersistenceError):
        await ml.add_entry(b"late")


@pytest.mark.allow_broker_errors  # the failed commit is logged with its traceback
async def test_failed_commit_fails_futures_and_moves_to_new_ledger(env: Env) -> None:
    ml = await env.factory.open(NAME)
    await ml.open_cursor("holds-ledgers", "earliest")
    ok = await ml.add_entry(b"ok")
    original = env.store._committer._commit

    async def failing(batch: CommitBatch) -> set[LedgerOwner]:
        raise OSError("disk full")

    env.store._committer._commit = failing
    bad = [ml.add_entry(b"bad") for _ in range(3)]
    for f in bad:
        with pytest.raises(PersistenceError):
            await f
    env.store._committer._commit = original
    after = await ml.add_entry(b"after")
    assert after.ledger_id != ok.ledger_id and after.entry_id == 0
    reader = ml.new_non_durable_cursor("earliest")
    assert [e.data for e in await reader.read_entries(10)] == [b"ok", b"after"]


@pytest.mark.allow_broker_errors  # the failed commit is logged with its traceback
async def test_no_entry_goes_past_a_failed_one_while_no_new_ledger_can_start(env: Env) -> None:
    """A commit fails while the store cannot hand out ledger ids (it is unreachable): adds are
    refused until a new ledger starts, never written past the hole, so every receipt stays
    readable on this broker and after a recount on the next (the entry count in the metadata
    is the number of entries from 0 with no hole)."""
    ml = await env.factory.open(NAME)
    await ml.open_cursor("holds-ledgers", "earliest")
    ok = await ml.add_entry(b"ok")
    original_commit = env.store._committer._commit
    original_allocate = env.store.allocate_ledger_ids

    async def failing(batch: CommitBatch) -> set[LedgerOwner]:
        raise OSError("connection reset")

    async def no_ids(count: int) -> int:
        raise PersistenceError("ledger store unreachable")

    env.store._committer._commit = failing
    env.store.allocate_ledger_ids = no_ids  # type: ignore[method-assign]
    while env.factory._shared.ids.available():
        env.factory._shared.ids.take()
    with pytest.raises(PersistenceError):
        await ml.add_entry(b"bad")
    env.store._committer._commit = original_commit
    with pytest.raises(PersistenceError, match="no new ledger can be started yet"):
        await ml.add_entry(b"refused, not written past the hole")
    env.store.allocate_ledger_ids = original_allocate  # type: ignore[method-assign]
    positions = []
    async with asyncio.timeout(10):
        while len(positions) < 3:  # the refill the refusals started, then a new ledger
            try:
                positions.append(await ml.add_entry(b"after"))
            except PersistenceError:
                await asyncio.sleep(0.01)
    assert {p.ledger_id for p in positions} != {ok.ledger_id}
    assert [p.entry_id for p in positions] == [0, 1, 2]
    reader = ml.new_non_durable_cursor("earliest")
    assert [e.data for e in await reader.read_entries(10)] == [b"ok"] + [b"after"] * 3
    await env.close()
    reopened = Env.open(env.dir, ManagedLedgerConfig(max_entries_per_ledger=5))
    try:
        ml = await reopened.factory.open(NAME)
        reader = ml.new_non_durable_cursor("earliest")
        assert [e.data for e in await reader.read_entries(10)] == [b"ok"] + [b"after"] * 3
    finally:
        await reopened.close()


async def test_metadata_changed_behind_the_ledger_fences_it(env: Env) -> None:
    """The ledger list was rewritten by someone else (another owner, or a write of ours whose
    answer was lost): the next metadata write fails its version check, and the ledger is
    fenced (its topic closes and reloads) rather than failing every rollover from then on."""
    ml = await env.factory.open(NAME)
    await add_all(ml, [b"x"] * 3)
    got = await env.metadata.get(ledger_path(NAME))
    assert got is not None
    await env.metadata.put(ledger_path(NAME), got.value, got.version)
    await add_all(ml, [b"y"] * 2)  # the fifth entry fills the ledger: a rollover's write
    fenced = await asyncio.wait_for(asyncio.shield(ml.fenced), 5)
    assert "metadata changed" in fenced.message
    with pytest.raises(ManagedLedgerFencedError):
        await ml.add_entry(b"z")
    reopened = await env.factory.open(NAME)
    assert reopened is not ml
    reader = reopened.new_non_durable_cursor("earliest")
    assert [e.data for e in await reader.read_entries(10)] == [b"x"] * 3 + [b"y"] * 2


async def test_tailing_reads_come_from_cache(env: Env) -> None:
    ml = await env.factory.open(NAME)
    cursor = await ml.open_cursor("sub", "latest")
    await add_all(ml, [b"x"] * 3)
    calls = 0
    original = env.store.read_entries

    async def counting(spans: Sequence[EntrySpan]) -> list[tuple[int, int, bytes]]:
        nonlocal calls
        calls += 1
        return await original(spans)

    env.store.read_entries = counting  # type: ignore[method-assign]
    assert len(await cursor.read_entries(10)) == 3
    assert calls == 0
    env.factory.cache.invalidate({p.ledger_id for p in [ml.last_confirmed_entry] if p})
    cursor.rewind()
    assert len(await cursor.read_entries(10)) == 3
    assert calls == 1


async def test_trim_waits_for_mark_delete_to_be_durable(env: Env) -> None:
    ml = await env.factory.open(NAME)
    cursor = await ml.open_cursor("sub", "earliest")
    positions = await add_all(ml, [b"%d" % i for i in range(11)])
    acked = cursor.mark_delete(positions[-1])
    await ml.trim()  # runs before the new cursor state is committed
    assert ml.ledgers[0].ledger_id == positions[0].ledger_id
    await acked
    assert cursor.persisted_mark_delete == positions[-1]
    await ml.trim()
    assert [i.ledger_id for i in ml.ledgers] == [ml.current_ledger_id]


async def test_estimated_size_after_a_position_and_the_ledger_stats(env: Env) -> None:
    """Pulsar's estimated backlog size: whole ledgers after the position, its own ledger at its
    average entry size; and what the ledger counts for the stats task."""
    ml = await env.factory.open(NAME)
    positions = await add_all(ml, [b"x" * 10] * 7)  # 5 entries per ledger: 5 + 2
    first, second = positions[0].ledger_id, positions[5].ledger_id
    assert ml.estimated_size_after(P(first, -1)) == 70  # nothing consumed: everything
    assert ml.estimated_size_after(P(first, 2)) == 20 + 20  # 2 left in the first, the second
    assert ml.estimated_size_after(P(second, 1)) == 0
    await ml.read_entry(positions[0])
    ml.stats.update()
    assert ml.stats.added.interval_messages == 7 and ml.stats.added.bytes == 70
    assert ml.stats.entry_size.interval == (7, 0, 0, 0, 0, 0, 0, 0, 0)
    assert ml.stats.add_latency_ms.interval_count == 7
    assert ml.stats.read.interval_messages == 1
