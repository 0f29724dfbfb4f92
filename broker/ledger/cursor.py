"""ManagedCursor: a subscription's position in a managed ledger (Pulsar's ManagedCursor).

State: the mark-delete position (everything <= it is acked), the individually deleted
positions above it, batch indexes acked inside not-fully-acked entries, and properties, stored
as Pulsar's PositionInfo (broker/ledger/cursor_state.py). The read position is not persisted:
after a restart reading resumes after mark-delete, so unacked entries are redelivered
(at-least-once, as in Pulsar).

Persistence is coalesced: every ack of one loop iteration marks the cursor dirty and they all
share one state write, which rides in the store's group commit next to entries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from pulsar_grpc.broker.errors import (
    BrokerError,
    InvalidArgumentError,
    ManagedLedgerFencedError,
    PersistenceError,
)
from pulsar_grpc.broker.ledger.ack_set import acked_runs, indexes_mask
from pulsar_grpc.broker.ledger.cursor_state import (
    CursorState,
    decode_position_info,
    encode_position_info,
)
from pulsar_grpc.broker.ledger.position import Entry, Position
from pulsar_grpc.broker.ledger.range_set import PositionRangeSet
from pulsar_grpc.broker.ledger.store import EntrySpan, LedgerOwner, LedgerStore

if TYPE_CHECKING:
    from pulsar_grpc.broker.ledger.info import LedgerInfo
    from pulsar_grpc.broker.ledger.stats import LedgerStats

__all__ = ["CursorLedger", "ManagedCursor"]


class CursorLedger(Protocol):
    """What a cursor uses of its managed ledger (ManagedLedger is one): positions, entries, the
    store its state is committed to under the ledger's owner, the fencing and the stats. Named
    here so the cursor does not import the ledger that creates it: the ledger depends on its
    cursors, not the other way round."""

    name: str
    owner: LedgerOwner
    store: LedgerStore
    last_confirmed_entry: Position | None
    fenced: asyncio.Future[ManagedLedgerFencedError]
    stats: LedgerStats

    def normalize(self, position: Position) -> Position: ...

    def next_position(self, position: Position) -> Position: ...

    def end_position(self) -> Position: ...

    def entries_in(self, ledger_id: int) -> int: ...

    def count_entries(self, after: Position, upto: Position) -> int: ...

    async def read_spans(self, spans: list[EntrySpan]) -> list[Entry]: ...

    def schedule_trim(self) -> None: ...

    def mark_fenced(self, error: ManagedLedgerFencedError) -> None: ...

    @property
    def ledgers(self) -> list[LedgerInfo]: ...


class ManagedCursor:
    """Created by ManagedLedger.open_cursor / new_non_durable_cursor, never directly."""

    def __init__(
        self, ledger: CursorLedger, name: str, durable: bool, mark_delete: Position
    ) -> None:
        self.name = name
        self.durable = durable
        self.mark_delete_position = mark_delete
        # The mark-delete of the last committed state: trimming must not pass it, or a crash
        # would bring back a cursor pointing into deleted ledgers.
        self.persisted_mark_delete = mark_delete
        self.individually_deleted = PositionRangeSet()
        # Pulsar's batchDeletedIndexes: per partly acked entry, the bitset of the indexes NOT
        # acked yet (Pulsar's ackSet, bit i = index i). Negative when restored from an earlier
        # version's state, which did not record the batch size: cut to it on the next ack.
        # Only whole-int operations touch it (broker/ledger/ack_set.py): O(n/8) per batch.
        self.batch_deleted: dict[Position, int] = {}
        self.properties: dict[str, int] = {}
        self._ledger = ledger
        self.read_position = ledger.next_position(mark_delete)
        self._epoch = 0  # bumped by seeks, so an in-flight read does not undo them
        self._waiters: list[asyncio.Future[None]] = []  # acks waiting for the next state write
        # The waiters of the state write being committed, so an ack that changes nothing can
        # still wait for the write that holds it (an earlier request made the change).
        self._in_flight: list[asyncio.Future[None]] | None = None
        # Acks not yet durable: a dict as a set (empty, 64 B to a set's 216).
        self._unresolved: dict[asyncio.Future[None], None] = {}
        self._flush_scheduled = False
        self._closed = False

    def __repr__(self) -> str:
        return (
            f"ManagedCursor({self._ledger.name!r}, {self.name!r}, "
            f"mark_delete={self.mark_delete_position}, read={self.read_position})"
        )

    # -- reading ---------------------------------------------------------------------------

    def has_more_entries(self) -> bool:
        lac = self._ledger.last_confirmed_entry
        return lac is not None and self._ledger.normalize(self.read_position) <= lac

    async def read_entries(self, max_entries: int, max_bytes: int | None = None) -> list[Entry]:
        """Up to max_entries from the read position on, skipping acked ones; [] when caught up.

        Never waits for new entries (use the ledger's entries listener). At least one entry is
        returned even if it alone exceeds max_bytes. One cursor must not run two reads at once.
        """
        ml = self._ledger
        lac = ml.last_confirmed_entry
        pos = ml.normalize(self.read_position)
        if lac is None or pos > lac or max_entries <= 0:
            return []
        spans: list[EntrySpan] = []
        wanted = 0
        while wanted < max_entries and pos <= lac:
            last = (
                lac.entry_id if pos.ledger_id == lac.ledger_id else ml.entries_in(pos.ledger_id) - 1
            )
            next_pos = ml.next_position(Position(pos.ledger_id, last))
            for first, end in self.individually_deleted.gaps(pos.ledger_id, pos.entry_id, last):
                take = min(end - first + 1, max_entries - wanted)
                spans.append(EntrySpan(pos.ledger_id, first, first + take - 1))
                wanted += take
                if wanted == max_entries:
                    next_pos = ml.next_position(Position(pos.ledger_id, first + take - 1))
                    break
            if next_pos <= pos:
                break
            pos = next_pos
        epoch = self._epoch
        entries = await ml.read_spans(spans)
        if max_bytes is not None:
            total = 0
            for i, entry in enumerate(entries):
                total += len(entry.data)
                if total > max_bytes and i > 0:
                    pos = entries[i].position
                    del entries[i:]
                    break
        if epoch == self._epoch:
            self.read_position = pos
        return [e for e in entries if not self.is_deleted(e.position)]

    async def replay_entries(self, positions: Iterable[Position]) -> list[Entry]:
        """The given entries (for redelivery) in position order, minus those acked meanwhile."""
        lac = self._ledger.last_confirmed_entry
        if lac is None:
            return []
        wanted = sorted({p for p in positions if p <= lac and not self.is_deleted(p)})
        spans: list[EntrySpan] = []
        for p in wanted:
            last = spans[-1] if spans else None
            if last and last.ledger_id == p.ledger_id and last.last_entry + 1 == p.entry_id:
                spans[-1] = EntrySpan(p.ledger_id, last.first_entry, p.entry_id)
            else:
                spans.append(EntrySpan(p.ledger_id, p.entry_id, p.entry_id))
        entries = await self._ledger.read_spans(spans)
        return [e for e in entries if not self.is_deleted(e.position)]

    def seek(self, read_position: Position) -> None:
        """Move only the read position (never at or below mark-delete)."""
        if read_position <= self.mark_delete_position:
            read_position = self._ledger.next_position(self.mark_delete_position)
        self.read_position = read_position
        self._epoch += 1

    def rewind(self) -> None:
        """Read again from the first entry after mark-delete (redeliver everything unacked)."""
        self.seek(self._ledger.next_position(self.mark_delete_position))

    # -- acknowledging -----------------------------------------------------------------------

    def is_deleted(self, position: Position) -> bool:
        return position <= self.mark_delete_position or position in self.individually_deleted

    def acked_mask(self, position: Position, batch_size: int) -> int:
        """The acked indexes of the batch of ``batch_size`` messages at position, as a bit set
        (0: none, the common case, found with one dict lookup)."""
        unacked = self.batch_deleted.get(position)
        if unacked is None:
            return 0
        return ~unacked & ((1 << batch_size) - 1)

    def unacked_count(self, position: Position, batch_size: int) -> int:
        """Messages of the batch at position not acked yet (0 once the entry is deleted)."""
        if self.is_deleted(position):
            return 0
        unacked = self.batch_deleted.get(position)
        if unacked is None:
            return batch_size
        return (unacked & ((1 << batch_size) - 1)).bit_count()

    def acked_batch_indexes(self, position: Position, batch_size: int) -> set[int]:
        """The acked indexes as a set, for tests and tools: the broker's own paths use
        :meth:`acked_mask`, which never lists indexes one by one."""
        mask = self.acked_mask(position, batch_size)
        return {i for first, end in acked_runs(mask) for i in range(first, end)}

    def check_ackable(self, position: Position) -> None:
        """Refuse an ack of an entry that does not exist (yet): acking ahead of the last
        confirmed entry would make the cursor skip those entries once they are written."""
        if position <= self.mark_delete_position:
            return  # already acked: a repeated ack is harmless
        if not 0 <= position.entry_id < self._ledger.entries_in(position.ledger_id):
            raise InvalidArgumentError(
                f"cannot acknowledge {position} on {self._ledger.name}: no such entry, or "
                f"beyond the last confirmed entry {self._ledger.last_confirmed_entry}"
            )

    def mark_delete(
        self, position: Position, properties: dict[str, int] | None = None
    ) -> asyncio.Future[None]:
        """Cumulative ack of everything <= position; resolves once the new state is durable."""
        if (refused := self._refusal([position])) is not None:
            return refused
        if properties is not None:
            self.properties = dict(properties)
        if position > self.mark_delete_position:
            self._move_mark_delete(position)
        elif properties is None:
            return self._state_durable()
        return self._persist()

    def mark_delete_before(
        self, position: Position, indexes: Iterable[int], batch_size: int
    ) -> asyncio.Future[None]:
        """Cumulative ack up to a message inside a batch: every entry before ``position`` and
        the given indexes of it."""
        if (refused := self._refusal([position])) is not None:
            return refused
        before = Position(position.ledger_id, position.entry_id - 1)
        if before <= self.mark_delete_position:
            return self.ack_batch_indexes(position, indexes, batch_size)
        self._move_mark_delete(before)
        # The indexes may change nothing (acked before): the move itself must be written.
        # Both resolve with the same state write, so only the second one is handed out.
        indexes_acked = self.ack_batch_indexes(position, indexes, batch_size)
        indexes_acked.add_done_callback(lambda f: f.cancelled() or f.exception())
        return self._persist()

    def delete(self, positions: Iterable[Position]) -> asyncio.Future[None]:
        """Individual acks; resolves once the new state is durable."""
        positions = list(positions)
        if (refused := self._refusal(positions)) is not None:
            return refused
        changed = False
        for p in positions:
            if self.is_deleted(p):
                continue
            self.individually_deleted.add(p)
            self.batch_deleted.pop(p, None)
            changed = True
        if not changed:
            return self._state_durable()
        self._move_mark_delete(self.mark_delete_position)
        return self._persist()

    def ack_batch_indexes(
        self, position: Position, indexes: Iterable[int], batch_size: int
    ) -> asyncio.Future[None]:
        """Ack messages inside an entry; once all batch_size are acked the entry is deleted."""
        if self.is_deleted(position):
            return self._state_durable()
        if (refused := self._refusal([position])) is not None:
            return refused
        before = self.batch_deleted.get(position, -1) & ((1 << batch_size) - 1)
        unacked = before & ~indexes_mask(indexes, batch_size)
        if not unacked:
            return self.delete([position])
        if unacked == before:
            return self._state_durable()
        self.batch_deleted[position] = unacked
        return self._persist()

    def get_number_of_entries_in_backlog(self) -> int:
        """Unacked entries up to the last confirmed one, O(ledgers + ranges)."""
        lac = self._ledger.last_confirmed_entry
        if lac is None or self.mark_delete_position >= lac:
            return 0
        total = self._ledger.count_entries(self.mark_delete_position, lac)
        return total - self.individually_deleted.count_up_to(lac)

    async def reset_cursor(
        self, position: Position, skip_indexes: int = 0, batch_size: int = 0
    ) -> None:
        """Pulsar's resetCursor (Seek): everything before `position` acked, nothing after.

        A position past the end of the ledger lands at the end, as in Pulsar: the cursor then
        gets what is written next instead of waiting for an entry that will never exist.
        ``skip_indexes`` > 0 starts inside the batch at `position` (its first indexes acked).
        """
        end = self._ledger.end_position()
        if position > end:
            position, skip_indexes = end, 0
        self.mark_delete_position = Position(position.ledger_id, position.entry_id - 1)
        self.individually_deleted.clear()
        self.batch_deleted.clear()
        if skip_indexes > 0 and position < end:
            if skip_indexes >= batch_size:
                self.mark_delete_position = position
            else:
                self.batch_deleted[position] = (
                    ((1 << batch_size) - 1) >> skip_indexes << skip_indexes
                )
        self.read_position = self._ledger.next_position(self.mark_delete_position)
        self._epoch += 1
        await self._persist()

    def _move_mark_delete(self, position: Position) -> None:
        self.individually_deleted.remove_up_to(position)
        position = self.individually_deleted.advance(position, self._ledger.next_position)
        self.mark_delete_position = position
        self._ledger.stats.mark_deletes.record(1)
        if self.batch_deleted:
            for p in [p for p in self.batch_deleted if p <= position]:
                del self.batch_deleted[p]
        if self.read_position <= position:
            self.read_position = self._ledger.next_position(position)

    # -- persistence -------------------------------------------------------------------------

    def state(self) -> CursorState:
        """A copy of what is persisted."""
        return CursorState(
            self.mark_delete_position,
            list(self.individually_deleted.ranges()),
            dict(self.batch_deleted),
            dict(self.properties),
        )

    def encode_state(self) -> bytes:
        """The store's cursor-state row: Pulsar's PositionInfo."""
        return encode_position_info(self.state())

    def restore_state(self, state: bytes | CursorState) -> None:
        """Load a persisted state (at ledger recovery: every ledger but the new one is closed):
        a store row (PositionInfo, or JSON from earlier versions) or a decoded snapshot.

        A state written before acks and seeks past the end were refused may name entries
        that never came to be: those are dropped, so the cursor does not skip new entries.
        """
        if isinstance(state, bytes):
            state = decode_position_info(state)
        ml = self._ledger
        self.mark_delete_position = state.mark_delete
        for first, last in state.deleted:
            # Ranges this broker writes stay in one ledger; Pulsar's may span several.
            ledger_ids = (
                [first.ledger_id]
                if first.ledger_id == last.ledger_id
                else [
                    i.ledger_id
                    for i in ml.ledgers
                    if first.ledger_id <= i.ledger_id <= last.ledger_id
                ]
            )
            for ledger_id in ledger_ids:
                lo = first.entry_id if ledger_id == first.ledger_id else 0
                count = ml.entries_in(ledger_id)
                hi = min(last.entry_id if ledger_id == last.ledger_id else count - 1, count - 1)
                if lo <= hi:
                    self.individually_deleted.add_range(ledger_id, lo, hi)
        self.batch_deleted = {p: m for p, m in state.batch_deleted.items() if m}
        self.properties = dict(state.properties)
        end = ml.end_position()
        if self.mark_delete_position >= end:
            self.mark_delete_position = Position(end.ledger_id, end.entry_id - 1)
            self.individually_deleted.clear()
            self.batch_deleted.clear()
        self.persisted_mark_delete = self.mark_delete_position
        self.read_position = self._ledger.next_position(self.mark_delete_position)

    def close(self) -> None:
        """Stop persisting (the cursor was deleted or its ledger closed)."""
        self._closed = True

    async def flush(self) -> None:
        """Wait until the current state is durable."""
        if self._unresolved:
            await asyncio.wait(list(self._unresolved))

    def _persist(self) -> asyncio.Future[None]:
        if not self.durable:
            return self._done()
        if self._closed:
            return self._failed(self._closed_error())
        fut = self._waiter(self._waiters)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)
        return fut

    def _state_durable(self) -> asyncio.Future[None]:
        """Resolves once the current state is durable: with the pending state write, else
        with the one being committed, else at once."""
        if not self.durable:
            return self._done()
        if self._flush_scheduled or self._closed:
            return self._persist()
        if self._in_flight is None:
            return self._done()
        return self._waiter(self._in_flight)

    def _waiter(self, waiters: list[asyncio.Future[None]]) -> asyncio.Future[None]:
        """A future resolved with the state write that ``waiters`` belongs to."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters.append(fut)
        self._unresolved[fut] = None
        fut.add_done_callback(self._resolved)
        return fut

    def _resolved(self, fut: asyncio.Future[None]) -> None:
        self._unresolved.pop(fut, None)

    def _refusal(self, positions: Iterable[Position]) -> asyncio.Future[None] | None:
        """A failed future when one of ``positions`` cannot be acked, else None."""
        try:
            for p in positions:
                self.check_ackable(p)
        except InvalidArgumentError as exc:
            return self._failed(exc)
        return None

    def _flush(self) -> None:
        self._flush_scheduled = False
        waiters, self._waiters = self._waiters, []
        if self._closed:
            for w in waiters:
                if not w.done():
                    w.set_exception(self._closed_error())
            return
        self._in_flight = waiters
        mark_delete = self.mark_delete_position
        ledger = self._ledger
        committed = ledger.store.append(ledger.owner, (), {self.name: self.encode_state()})

        def resolve(f: asyncio.Future[None]) -> None:
            error = f.exception() if not f.cancelled() else PersistenceError("commit cancelled")
            if self._in_flight is waiters:
                self._in_flight = None
            if isinstance(error, ManagedLedgerFencedError):
                ledger.mark_fenced(error)
            if error is None:
                old_ledger = self.persisted_mark_delete.ledger_id
                self.persisted_mark_delete = mark_delete
                if mark_delete.ledger_id > old_ledger:
                    self._ledger.schedule_trim()
            for w in waiters:
                if w.done():
                    continue
                if error is None:
                    w.set_result(None)
                else:
                    w.set_exception(error)

        committed.add_done_callback(resolve)

    def _closed_error(self) -> BrokerError:
        """Why a closed cursor refuses a state write: its ledger was fenced (retryable
        elsewhere), or it was deleted or closed with its ledger."""
        fenced = self._ledger.fenced
        if fenced.done():
            return ManagedLedgerFencedError(fenced.result().message)
        return PersistenceError(f"cursor {self.name} is closed")

    @staticmethod
    def _done() -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    @staticmethod
    def _failed(error: Exception) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_exception(error)
        return fut
