"""The n-th unacknowledged entry of a cursor (what the admin API's peek and skip count), found
by arithmetic over the ledgers and the acknowledged ranges: the same answer as a walk of every
entry, across ledgers and past acknowledged ranges, and at once however deep n is."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pulsar_grpc.broker.ledger import ManagedCursor, ManagedLedgerConfig, Position
from pulsar_grpc.broker.topics.cursor_admin import _nth_unacked
from tests.unit.test_ledger_managed import NAME, Env, add_all


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    e = Env.open(tmp_path, ManagedLedgerConfig(max_entries_per_ledger=3))
    yield e
    await e.close()


def walked(positions: list[Position], cursor: ManagedCursor, n: int) -> Position | None:
    unacked = [p for p in positions if not cursor.is_deleted(p)]
    return unacked[n - 1] if n <= len(unacked) else None


async def test_the_nth_unacked_entry_matches_a_walk(env: Env) -> None:
    ml = await env.factory.open(NAME)
    cursor = await ml.open_cursor("sub", "earliest")
    positions = await add_all(ml, [b"%d" % i for i in range(14)])  # five ledgers of 3
    await cursor.mark_delete(positions[1])
    # Acked: one entry, a whole ledger (6..8) and a run across a ledger boundary (10..12).
    await cursor.delete([positions[i] for i in (3, 6, 7, 8, 10, 11, 12)])
    assert len({p.ledger_id for p in positions}) == 5
    backlog = cursor.get_number_of_entries_in_backlog()
    assert backlog == 14 - 2 - 7
    for n in range(1, backlog + 3):
        assert _nth_unacked(ml, cursor, n) == walked(positions, cursor, n), n
    start = time.perf_counter()
    assert _nth_unacked(ml, cursor, 99_999_999_999) is None
    assert time.perf_counter() - start < 0.1
