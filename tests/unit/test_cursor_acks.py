"""ManagedCursor ack correctness over the real SQLite stores: an ack resolves only with the
state write that holds it, acks of entries that do not exist are refused, and seeks or start
positions past the end land at the end."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from pulsar_grpc.broker.errors import InvalidArgumentError
from pulsar_grpc.broker.ledger import ManagedCursor, ManagedLedger, ManagedLedgerConfig, Position
from pulsar_grpc.broker.ledger.group_commit import CommitBatch
from pulsar_grpc.broker.ledger.store import LedgerOwner
from tests.unit.test_ledger_managed import NAME, Env, add_all

P = Position


class CommitGate:
    """Once installed, holds every store commit until opened, so a test can act while a
    write is in flight."""

    def __init__(self, env: Env) -> None:
        self.open = asyncio.Event()
        self.waiting = asyncio.Event()
        self._env = env
        self._original = env.store._commit

    def install(self) -> None:
        self._env.store._committer._commit = self._commit

    async def _commit(self, batch: CommitBatch) -> set[LedgerOwner]:
        self.waiting.set()
        await self.open.wait()
        return await self._original(batch)


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    e = Env.open(tmp_path, ManagedLedgerConfig(max_entries_per_ledger=100))
    yield e
    await e.close()


@pytest.fixture
async def gate(env: Env) -> AsyncIterator[CommitGate]:
    """Installed by the test after its setup writes; always opened at teardown."""
    commits = CommitGate(env)
    yield commits
    commits.open.set()


async def ledger_with_cursor(env: Env, n: int) -> tuple[ManagedLedger, ManagedCursor, list[P]]:
    ml = await env.factory.open(NAME)
    cursor = await ml.open_cursor("sub", "earliest")
    positions = await add_all(ml, [b"%d" % i for i in range(n)])
    return ml, cursor, positions


AckOf = Callable[[ManagedCursor, list[P]], "asyncio.Future[None]"]

ACKS: dict[str, AckOf] = {
    "individual": lambda c, ps: c.delete([ps[1]]),
    "cumulative": lambda c, ps: c.mark_delete(ps[1]),
    "batch-index": lambda c, ps: c.ack_batch_indexes(ps[1], [0], batch_size=3),
}


@pytest.mark.parametrize("kind", ACKS)
async def test_a_repeated_ack_resolves_only_with_the_write_that_holds_it(
    env: Env, gate: CommitGate, kind: str
) -> None:
    _, cursor, positions = await ledger_with_cursor(env, 3)
    gate.install()
    first = ACKS[kind](cursor, positions)
    await asyncio.wait_for(gate.waiting.wait(), 5)  # the state write is in flight
    again = ACKS[kind](cursor, positions)  # changes nothing in memory
    for _ in range(5):
        await asyncio.sleep(0)
    assert not first.done()
    assert not again.done(), "the repeated ack resolved before its state was durable"
    gate.open.set()
    await asyncio.wait_for(asyncio.gather(first, again), 5)


async def test_a_repeated_ack_joins_the_pending_write(env: Env, gate: CommitGate) -> None:
    _, cursor, positions = await ledger_with_cursor(env, 3)
    gate.install()
    first = cursor.delete([positions[0]])
    again = cursor.delete([positions[0]])  # same loop iteration: the write is not sent yet
    await asyncio.sleep(0)
    assert not again.done()
    gate.open.set()
    await asyncio.wait_for(asyncio.gather(first, again), 5)


async def test_an_ack_with_nothing_written_resolves_at_once(env: Env) -> None:
    _, cursor, positions = await ledger_with_cursor(env, 3)
    await cursor.delete([positions[0]])
    assert cursor.delete([positions[0]]).done()


@pytest.mark.parametrize(
    "ack",
    [
        lambda c, lac: c.delete([P(lac.ledger_id, lac.entry_id + 1)]),
        lambda c, lac: c.mark_delete(P(lac.ledger_id, lac.entry_id + 2)),
        lambda c, lac: c.ack_batch_indexes(P(lac.ledger_id, lac.entry_id + 1), [0], 2),
        lambda c, lac: c.delete([P(lac.ledger_id + 7, 0)]),
        lambda c, lac: c.delete([P(lac.ledger_id, 0), P(lac.ledger_id, lac.entry_id + 1)]),
    ],
    ids=["individual", "cumulative", "batch-index", "unknown-ledger", "one-of-several"],
)
async def test_acks_of_entries_that_do_not_exist_are_refused(
    env: Env, ack: Callable[[ManagedCursor, P], asyncio.Future[None]]
) -> None:
    ml, cursor, positions = await ledger_with_cursor(env, 2)
    lac = positions[-1]
    with pytest.raises(InvalidArgumentError, match="beyond"):
        await ack(cursor, lac)
    assert cursor.mark_delete_position < positions[0]
    assert not cursor.individually_deleted and not cursor.batch_deleted
    # The entries written next are delivered, not skipped.
    later = await add_all(ml, [b"x", b"y", b"z"])
    assert [e.position for e in await cursor.read_entries(100)] == positions + later


async def test_acks_at_or_below_mark_delete_are_accepted(env: Env) -> None:
    _, cursor, positions = await ledger_with_cursor(env, 3)
    await cursor.mark_delete(positions[1])
    await cursor.delete([positions[0], P(positions[0].ledger_id, -1)])
    await cursor.mark_delete(positions[0])
    assert cursor.mark_delete_position == positions[1]


async def test_seek_past_the_end_lands_at_the_end(env: Env) -> None:
    ml, cursor, positions = await ledger_with_cursor(env, 3)
    lac = positions[-1]
    await cursor.reset_cursor(P(lac.ledger_id, lac.entry_id + 100))
    assert cursor.mark_delete_position == lac
    await cursor.reset_cursor(P(lac.ledger_id + 5, 3))
    assert cursor.mark_delete_position == lac
    later = await add_all(ml, [b"next"])
    assert [e.position for e in await cursor.read_entries(100)] == later


async def test_seek_inside_a_batch_acks_the_indexes_before_it(env: Env) -> None:
    _, cursor, positions = await ledger_with_cursor(env, 3)
    await cursor.reset_cursor(positions[1], skip_indexes=2, batch_size=5)
    assert cursor.acked_batch_indexes(positions[1], 5) == {0, 1}
    assert [e.position for e in await cursor.read_entries(100)] == positions[1:]
    # An index past the batch skips the whole entry.
    await cursor.reset_cursor(positions[1], skip_indexes=5, batch_size=5)
    assert [e.position for e in await cursor.read_entries(100)] == positions[2:]


@pytest.mark.parametrize("inclusive", [True, False])
async def test_reader_start_past_the_end_reads_what_comes_next(env: Env, inclusive: bool) -> None:
    ml, _, positions = await ledger_with_cursor(env, 2)
    lac = positions[-1]
    for start in (P(lac.ledger_id, lac.entry_id + 1), P(lac.ledger_id, lac.entry_id + 50)):
        reader = ml.new_non_durable_cursor(start, inclusive=inclusive)
        later = await add_all(ml, [b"next"])
        assert [e.position for e in await reader.read_entries(100)] == later


async def test_a_persisted_position_past_the_end_is_brought_back_on_recovery(
    tmp_path: Path,
) -> None:
    env = Env.open(tmp_path)
    ml = await env.factory.open(NAME)
    cursor = await ml.open_cursor("sub", "earliest")
    await add_all(ml, [b"a"])
    # States written by an older broker that accepted acks past the end.
    cursor.mark_delete_position = P(10**12, 10)
    await cursor._persist()
    other = await ml.open_cursor("other", "earliest")
    other.individually_deleted.add_range(ml.current_ledger_id, 1, 5)
    await other._persist()
    await env.close()

    env = Env.open(tmp_path)
    ml = await env.factory.open(NAME)
    later = await add_all(ml, [b"b"])
    assert [e.position for e in await ml.cursors["sub"].read_entries(100)] == later
    other = ml.cursors["other"]
    assert not other.individually_deleted
    assert other.get_number_of_entries_in_backlog() == 2
    assert [e.data for e in await other.read_entries(100)] == [b"a", b"b"]
    await env.close()


async def test_a_cumulative_ack_inside_a_batch_writes_the_mark_delete_it_moves(
    tmp_path: Path,
) -> None:
    """The indexes of the batch were acked before: only the mark-delete moves, and that move
    must be written before the ack resolves."""
    env = Env.open(tmp_path)
    ml = await env.factory.open(NAME)
    cursor = await ml.open_cursor("sub", "earliest")
    positions = await add_all(ml, [b"a", b"b", b"c"])
    await cursor.ack_batch_indexes(positions[2], [0], batch_size=3)
    await cursor.mark_delete_before(positions[2], [0], batch_size=3)
    await env.close()

    env = Env.open(tmp_path)
    ml = await env.factory.open(NAME)
    assert ml.cursors["sub"].mark_delete_position == positions[1]
    await env.close()
