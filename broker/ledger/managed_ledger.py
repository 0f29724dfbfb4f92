"""ManagedLedger: Pulsar's ManagedLedger over a LedgerStore (opened by ledger_factory).

A managed ledger is a sequence of ledgers; the current one takes appends until it reaches
max_entries_per_ledger or max_size_per_ledger_bytes, then it is closed and a new one starts.
The ledger list lives in the MetadataStore (`/managed-ledgers/<name>`) and is written only at
open, rollover and trim — never per entry.

Appends: add_entry assigns the position synchronously (call order = position order), the
appends of one loop iteration go to the store as one write, and the store group-commits
writes across topics. An entry becomes readable, its future resolves and the entries
listeners run only once it is committed AND its ledger is registered in the metadata, so a
crash can never leave a confirmed entry in a ledger the metadata does not know about.

Fencing: opening a managed ledger takes a new owner epoch in the store first (store.fence),
so that the broker that had it before can no longer commit to it; every write names that
owner. When a commit reports this ledger fenced (another broker opened it since), the ledger
refuses every write from then on and resolves `fenced`, so its topic stops serving.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Literal

from pulsar_grpc.broker.errors import (
    BrokerError,
    ManagedLedgerFencedError,
    NotFoundError,
    PersistenceError,
)
from pulsar_grpc.broker.ledger.cache import EntryCache
from pulsar_grpc.broker.ledger.cursor import ManagedCursor
from pulsar_grpc.broker.ledger.cursor_state import decode_cursor_info, encode_cursor_info
from pulsar_grpc.broker.ledger.id_pool import LedgerIdPool
from pulsar_grpc.broker.ledger.info import (
    LedgerInfo,
    ManagedLedgerConfig,
    cursor_name_from_node,
    cursor_path,
    encode_ledgers,
    ledger_path,
)
from pulsar_grpc.broker.ledger.position import Entry, Position
from pulsar_grpc.broker.ledger.stats import LedgerStats
from pulsar_grpc.broker.ledger.store import EntrySpan, EntryWrite, LedgerOwner, LedgerStore
from pulsar_grpc.broker.metadata.store import (
    BadVersionError,
    MetadataNotFoundError,
    MetadataStore,
    MetadataStoreError,
)

__all__ = ["ManagedLedger", "ManagedLedgerConfig", "MetadataLink", "SharedResources", "now_ms"]

log = logging.getLogger(__name__)

InitialPosition = Literal["earliest", "latest"]

_MB = 1024 * 1024


def _ms_since(started: float) -> float:
    return (time.monotonic() - started) * 1000


def now_ms() -> int:
    return int(time.time() * 1000)


# Shared by every ledger with no rollover in flight (an empty frozenset is 0.2 KB each).
_NONE_UNREGISTERED: frozenset[int] = frozenset()


class LedgerState(enum.Enum):
    OPEN = "open"
    FENCED = "fenced"  # another owner opened it since: every write is refused
    CLOSED = "closed"


class CurrentLedger(enum.Enum):
    """Whether the ledger being written may take the next entry (BookKeeper's ledger handle
    after an add: open, or closed for good once an add failed)."""

    WRITABLE = "writable"
    # Reached max entries or size: the next add starts a new ledger when an id is at hand,
    # else it may still go here (nothing is missing before it).
    FULL = "full"
    # An add failed: its position may hold nothing, or an entry nobody was told about. No
    # later entry may go here (a receipt past a hole would be lost to a recount), so adds are
    # refused until a new ledger starts.
    BROKEN = "broken"


@dataclass(slots=True)
class _PendingAdd:
    position: Position
    data: bytes
    future: asyncio.Future[Position]
    added_at: float  # time.monotonic() of add_entry: the write latency is measured from it
    committed: bool = False


class MetadataLink(enum.Enum):
    """Whether the metadata store's connection is up, as its session events last said."""

    CONNECTED = "connected"
    DISCONNECTED = "disconnected"


@dataclass(slots=True)
class SharedResources:
    """What every managed ledger of one factory uses."""

    store: LedgerStore
    metadata: MetadataStore
    cache: EntryCache
    ids: LedgerIdPool
    on_close: Callable[[ManagedLedger], None]
    reader_ids: Iterator[int] = field(default_factory=itertools.count)
    # Set by the factory's session listener; closes skip their metadata snapshots while the
    # connection is down, so that a shutdown does not wait out a timeout per topic.
    link: MetadataLink = MetadataLink.CONNECTED


class ManagedLedger:
    """An append-only log of entries with cursors; obtain one from ManagedLedgerFactory.open."""

    def __init__(
        self,
        shared: SharedResources,
        owner: LedgerOwner,
        config: ManagedLedgerConfig,
        ledgers: list[LedgerInfo],
        metadata_version: int,
        properties: dict[str, str] | None = None,
    ) -> None:
        self.name = owner.name
        # Pulsar's managed-ledger properties, kept in the ledger node: what the topic must find
        # again on whichever broker loads it next (its epoch). Changed with set_property only.
        self.properties: dict[str, str] = dict(properties or {})
        self.owner = owner  # every write of this ledger and its cursors names it
        self.config = config
        self.cursors: dict[str, ManagedCursor] = {}
        self._shared = shared
        self.store = shared.store
        self._ledgers = ledgers  # sorted by id; the last one is the current ledger
        self._by_id = {info.ledger_id: info for info in ledgers}
        self._metadata_version = metadata_version
        self._metadata_lock = asyncio.Lock()
        self._cursor_lock = asyncio.Lock()
        self._cur_entries = self._ledgers[-1].entries  # assigned (not only durable) in current
        self._cur_bytes = self._ledgers[-1].size
        # Made by the first add_entry (a deque is 0.6 KB; most of a broker's thousands of
        # ledgers may never take an entry while loaded).
        self._pending: deque[_PendingAdd] | None = None
        self._batch: list[_PendingAdd] = []
        # Rolled-over ledgers whose metadata is not written yet; replaced, never changed in
        # place (rollovers are rare), so the idle ones all share the empty frozenset.
        self._unregistered = _NONE_UNREGISTERED
        self._current = CurrentLedger.WRITABLE
        self._listeners: list[Callable[[], None]] = []
        self._trim_task: asyncio.Task[None] | None = None
        self._trim_again = False
        self._tasks: set[asyncio.Task[Any]] | None = None  # made by the first _spawn
        self.state = LedgerState.OPEN
        # Resolved once, with the error, when a commit finds this ledger fenced.
        self.fenced: asyncio.Future[ManagedLedgerFencedError] = (
            asyncio.get_running_loop().create_future()
        )
        self.last_confirmed_entry: Position | None = None
        for info in ledgers:
            if info.entries:
                self.last_confirmed_entry = Position(info.ledger_id, info.entries - 1)
        self.number_of_entries = sum(i.entries for i in ledgers)
        self.total_size = sum(i.size for i in ledgers)
        self.entries_added_counter = 0
        self.stats = LedgerStats()

    def __repr__(self) -> str:
        return f"ManagedLedger({self.name!r}, last_confirmed={self.last_confirmed_entry})"

    @property
    def ledgers(self) -> list[LedgerInfo]:
        """A copy of the ledger list, oldest first (the last one is being written)."""
        return [replace(i) for i in self._ledgers]

    @property
    def current_ledger_id(self) -> int:
        return self._ledgers[-1].ledger_id

    # -- appending ---------------------------------------------------------------------------

    def add_entry(self, data: bytes) -> asyncio.Future[Position]:
        """Assign the next position now; the future resolves when the entry is durable."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Position] = loop.create_future()
        if self.state is not LedgerState.OPEN:
            fut.set_exception(self._refusal())
            return fut
        if self._current is not CurrentLedger.WRITABLE and not self._rollover():
            if self._current is CurrentLedger.BROKEN:
                self.stats.add_errors.record(1)
                fut.set_exception(
                    PersistenceError(
                        f"managed ledger {self.name}: a write failed and no new ledger can be"
                        " started yet (the ledger store is unreachable?)"
                    )
                )
                return fut
        pending = _PendingAdd(
            Position(self.current_ledger_id, self._cur_entries), data, fut, time.monotonic()
        )
        self.stats.entry_size.add(len(data))
        self._cur_entries += 1
        self._cur_bytes += len(data)
        if self._pending is None:
            self._pending = deque()
        self._pending.append(pending)
        if not self._batch:
            loop.call_soon(self._submit_batch)
        self._batch.append(pending)
        if (
            self._cur_entries >= self.config.max_entries_per_ledger
            or self._cur_bytes >= self.config.max_size_per_ledger_bytes
        ):
            self._current = CurrentLedger.FULL
            self._rollover()
        return fut

    def add_entries_listener(self, callback: Callable[[], None]) -> None:
        """callback() runs on the loop after each commit that made entries readable."""
        self._listeners.append(callback)

    def remove_entries_listener(self, callback: Callable[[], None]) -> None:
        if callback in self._listeners:
            self._listeners.remove(callback)

    def _submit_batch(self) -> None:
        batch, self._batch = self._batch, []
        if not batch:
            return
        writes = [EntryWrite(p.position.ledger_id, p.position.entry_id, p.data) for p in batch]
        committed = self.store.append(self.owner, writes)
        committed.add_done_callback(partial(self._on_committed, batch))

    def _on_committed(self, batch: list[_PendingAdd], f: asyncio.Future[None]) -> None:
        error = f.exception() if not f.cancelled() else PersistenceError("commit cancelled")
        if isinstance(error, ManagedLedgerFencedError):
            self.mark_fenced(error)
            return
        if error is not None:
            self._fail_pending(error)
            return
        for p in batch:
            p.committed = True
        self._drain()

    def _drain(self) -> None:
        """Confirm the committed, registered entries at the head of the pending queue."""
        pending = self._pending
        if pending is None:
            return
        cache = self._shared.cache
        added = False
        now = time.monotonic()
        stats = self.stats
        while pending and pending[0].committed:
            p = pending[0]
            if p.position.ledger_id in self._unregistered:
                break
            pending.popleft()
            info = self._by_id[p.position.ledger_id]
            info.entries += 1
            info.size += len(p.data)
            self.number_of_entries += 1
            self.total_size += len(p.data)
            self.entries_added_counter += 1
            stats.added.record(1, len(p.data))
            stats.add_latency_ms.add((now - p.added_at) * 1000)
            self.last_confirmed_entry = p.position
            cache.put(p.position, p.data)
            if not p.future.done():
                p.future.set_result(p.position)
            added = True
        if added:
            for callback in list(self._listeners):
                try:
                    callback()
                except Exception:
                    log.exception("entries listener of %s failed", self.name)

    def mark_fenced(self, error: ManagedLedgerFencedError) -> None:
        """A commit (of an entry or a cursor state) found another owner: refuse every write
        from now on, fail the unconfirmed adds (none of them was written, or will be), let
        the factory open the ledger afresh, and tell the topic (`fenced`)."""
        if self.state is not LedgerState.OPEN:
            return
        log.warning("%s: fenced by a newer owner, the ledger stops taking writes", self.name)
        self.state = LedgerState.FENCED
        self.fenced.set_result(error)
        self._fail_pending(error)
        for cursor in self.cursors.values():
            cursor.close()
        self._shared.on_close(self)

    def _refusal(self) -> BrokerError:
        if self.fenced.done():
            return ManagedLedgerFencedError(self.fenced.result().message)
        return PersistenceError(f"managed ledger {self.name} is closed")

    def _fail_pending(self, error: BaseException) -> None:
        """Fail every unconfirmed add and move to a new ledger, so no ledger has a gap: the
        current one takes nothing more (CurrentLedger.BROKEN)."""
        exc = error if isinstance(error, BrokerError) else PersistenceError(str(error))
        pending = self._pending or ()
        self.stats.add_errors.record(len(pending))
        for p in pending:
            if not p.future.done():
                p.future.set_exception(exc)
        if self._pending is not None:
            self._pending.clear()
        self._batch.clear()
        self._current = CurrentLedger.BROKEN

    def _rollover(self) -> bool:
        """Start a new ledger (the current one is FULL or BROKEN); False when no ledger id is
        at hand yet (a refill is under way: the next add tries again)."""
        try:
            new_id = self._shared.ids.take()
        except PersistenceError:
            log.debug("%s: no ledger id for a rollover yet, retrying on the next add", self.name)
            return False
        self._current = CurrentLedger.WRITABLE
        old = self._ledgers[-1]
        last_add = self._pending[-1].future if self._pending else None
        info = LedgerInfo(new_id)
        self._ledgers.append(info)
        self._by_id[new_id] = info
        self._unregistered |= {new_id}
        self._cur_entries = 0
        self._cur_bytes = 0
        self._spawn(self._register_rollover(old, last_add))
        return True

    async def _register_rollover(
        self, old: LedgerInfo, last_add: asyncio.Future[Position] | None
    ) -> None:
        rolled = time.monotonic()
        # The old ledger's entry count goes into the metadata only once it is final.
        if last_add is not None:
            await asyncio.wait([last_add])
        old.timestamp = now_ms()
        try:
            await self._write_info()
        except ManagedLedgerFencedError:
            return  # the ledger is fenced: its adds failed with it
        except Exception as e:
            log.warning("%s: cannot register the new ledger after a rollover: %s", self.name, e)
            self._fail_pending(e)
            return
        # Until now the new ledger's entries were held back, committed or not: a latency spike.
        log.debug("%s: ledger registered %.1f ms after rollover", self.name, _ms_since(rolled))
        self._drain()
        self.schedule_trim()

    async def set_property(self, key: str, value: str) -> None:
        """Set one property and return once the ledger node holds it (Pulsar's
        asyncSetProperty); on failure the property keeps its old value."""
        async with self._metadata_lock:
            before = dict(self.properties)
            self.properties[key] = value
            try:
                await self._put_info(self._ledgers)
            except BaseException:
                self.properties = before
                raise

    async def _write_info(self) -> None:
        async with self._metadata_lock:
            await self._put_info(self._ledgers)

    async def _put_info(self, ledgers: list[LedgerInfo]) -> None:
        """Write the ledger list (caller holds the metadata lock); CAS on the known version.

        The list stops at the first ledger whose entry count is not final yet: recovery
        recounts only the last listed ledger from the store, so every ledger before it must
        have its final count. Later ledgers stay unregistered (their entries unconfirmed)
        until a write after the earlier ones completed.
        """
        for i, info in enumerate(ledgers):
            if self._is_open_ended(info):
                ledgers = ledgers[: i + 1]
                break
        registered = {i.ledger_id for i in ledgers}
        try:
            self._metadata_version = await self._shared.metadata.put(
                ledger_path(self.name),
                encode_ledgers(ledgers, self.properties),
                self._metadata_version,
            )
        except BadVersionError as e:
            # Another broker opened the ledger since, or a write of ours whose answer was
            # lost did land: either way this view is stale and every later write would fail
            # the same check. Pulsar fences the ledger (handleBadVersion); the topic closes
            # and its next load reads the metadata afresh.
            fenced = ManagedLedgerFencedError(
                f"managed ledger {self.name}: its metadata changed behind this broker ({e})"
            )
            self.mark_fenced(fenced)
            raise fenced from e
        self._unregistered -= registered

    # -- reading -----------------------------------------------------------------------------

    async def read_entry(self, position: Position) -> Entry | None:
        """The durable entry at position, or None."""
        lac = self.last_confirmed_entry
        if lac is None or position > lac or position.entry_id < 0:
            return None
        entries = await self.read_spans(
            [EntrySpan(position.ledger_id, position.entry_id, position.entry_id)]
        )
        return entries[0] if entries else None

    async def read_spans(self, spans: list[EntrySpan]) -> list[Entry]:
        """Entries of the spans in order: from the cache, the rest in one store round trip."""
        cache = self._shared.cache
        found: dict[Position, bytes] = {}
        missing: list[EntrySpan] = []
        for span in spans:
            run_start: int | None = None
            for entry_id in range(span.first_entry, span.last_entry + 1):
                pos = Position(span.ledger_id, entry_id)
                data = cache.get(pos)
                if data is not None:
                    found[pos] = data
                    if run_start is not None:
                        missing.append(EntrySpan(span.ledger_id, run_start, entry_id - 1))
                        run_start = None
                elif run_start is None:
                    run_start = entry_id
            if run_start is not None:
                missing.append(EntrySpan(span.ledger_id, run_start, span.last_entry))
        if missing:
            try:
                stored = await self.store.read_entries(missing)
            except Exception:
                self.stats.read_errors.record(1)
                raise
            for ledger_id, entry_id, data in stored:
                found[Position(ledger_id, entry_id)] = data
        out: list[Entry] = []
        nbytes = 0
        for span in spans:
            for entry_id in range(span.first_entry, span.last_entry + 1):
                pos = Position(span.ledger_id, entry_id)
                data = found.get(pos)
                if data is not None:
                    out.append(Entry(pos, data))
                    nbytes += len(data)
        self.stats.read.record(len(out), nbytes)
        return out

    async def find_newest_matching(self, predicate: Callable[[bytes], bool]) -> Position | None:
        """The last entry for which predicate holds, by binary search (O(log n) reads).

        predicate must be monotonic: True for a prefix of the log (e.g. publish_time <= t).
        Entries trimmed during the search count as matching (they are older).
        """
        lac = self.last_confirmed_entry
        if lac is None:
            return None
        segments = [
            (
                i.ledger_id,
                min(i.entries, lac.entry_id + 1) if i.ledger_id == lac.ledger_id else i.entries,
            )
            for i in self._ledgers
            if i.entries and i.ledger_id <= lac.ledger_id
        ]

        def at(index: int) -> Position:
            for ledger_id, count in segments:
                if index < count:
                    return Position(ledger_id, index)
                index -= count
            raise IndexError(index)

        lo, hi = 0, sum(count for _, count in segments) - 1
        result: Position | None = None
        while lo <= hi:
            mid = (lo + hi) // 2
            pos = at(mid)
            entry = await self.read_entry(pos)
            if entry is None or predicate(entry.data):
                result, lo = pos, mid + 1
            else:
                hi = mid - 1
        return result

    # -- position arithmetic (used by cursors) --------------------------------------------

    def entries_in(self, ledger_id: int) -> int:
        """Durable entries of a ledger (0 if unknown)."""
        info = self._by_id.get(ledger_id)
        return info.entries if info is not None else 0

    def _is_open_ended(self, info: LedgerInfo) -> bool:
        """Whether more entries may still become durable in this ledger."""
        return info is self._ledgers[-1] or bool(
            self._pending and self._pending[0].position.ledger_id <= info.ledger_id
        )

    def normalize(self, position: Position) -> Position:
        """The position itself if an entry is or will be there, else the next ledger's start."""
        info = self._by_id.get(position.ledger_id)
        if info is not None and (position.entry_id < info.entries or self._is_open_ended(info)):
            return position
        for info in self._ledgers:
            if info.ledger_id > position.ledger_id and (info.entries or self._is_open_ended(info)):
                return Position(info.ledger_id, 0)
        return position

    def next_position(self, position: Position) -> Position:
        """The position of the entry after `position`, across ledger boundaries."""
        return self.normalize(Position(position.ledger_id, position.entry_id + 1))

    def first_position(self) -> Position:
        return self.normalize(Position(self._ledgers[0].ledger_id, 0))

    def end_position(self) -> Position:
        """Where the next entry will be confirmed: right after the last confirmed one. Seeks
        and start positions past it land on it (Pulsar clamps them the same way)."""
        lac = self.last_confirmed_entry
        return self.next_position(lac) if lac is not None else self.first_position()

    def estimated_size_after(self, position: Position) -> int:
        """Bytes of the durable entries after ``position`` (Pulsar's estimated backlog size):
        the ledgers after its own whole, its own at its average entry size, O(ledgers)."""
        total = 0
        for info in self._ledgers:
            if info.ledger_id > position.ledger_id:
                total += info.size
            elif info.ledger_id == position.ledger_id and info.entries > 0:
                after = info.entries - (position.entry_id + 1)
                total += info.size * max(after, 0) // info.entries
        return total

    def count_entries(self, after: Position, upto: Position) -> int:
        """Durable entries p with after < p <= upto, O(ledgers)."""
        total = 0
        for info in self._ledgers:
            if info.ledger_id < after.ledger_id or info.ledger_id > upto.ledger_id:
                continue
            lo = after.entry_id + 1 if info.ledger_id == after.ledger_id else 0
            hi = upto.entry_id if info.ledger_id == upto.ledger_id else info.entries - 1
            hi = min(hi, info.entries - 1)
            if hi >= lo:
                total += hi - lo + 1
        return total

    # -- cursors -----------------------------------------------------------------------------

    async def open_cursor(
        self, name: str, initial_position: InitialPosition = "latest"
    ) -> ManagedCursor:
        """The durable cursor `name`, created at initial_position if it does not exist."""
        async with self._cursor_lock:
            cursor = self.cursors.get(name)
            if cursor is not None:
                return cursor
            if initial_position == "earliest":
                first = self.first_position()
                mark_delete = Position(first.ledger_id, first.entry_id - 1)
            else:
                mark_delete = self.last_confirmed_entry or Position(self.current_ledger_id, -1)
            cursor = ManagedCursor(self, name, True, mark_delete)
            await self._shared.metadata.put(
                cursor_path(self.name, name),
                encode_cursor_info(cursor.state(), now_ms()),
                expected_version=None,
            )
            self.cursors[name] = cursor
            await cursor._persist()
            return cursor

    def new_non_durable_cursor(
        self, start: Position | InitialPosition = "latest", inclusive: bool = True, name: str = ""
    ) -> ManagedCursor:
        """A cursor that is never persisted and does not hold back trimming (readers)."""
        if start == "earliest":
            first = self.first_position()
            mark_delete = Position(first.ledger_id, first.entry_id - 1)
        elif start == "latest":
            mark_delete = self.last_confirmed_entry or Position(self.current_ledger_id, -1)
        else:
            end = self.end_position()
            if start > end or (start == end and not inclusive):
                start, inclusive = end, True
            mark_delete = start if not inclusive else Position(start.ledger_id, start.entry_id - 1)
        name = name or f"reader-{next(self._shared.reader_ids)}"
        return ManagedCursor(self, name, False, mark_delete)

    async def delete_cursor(self, name: str) -> None:
        async with self._cursor_lock:
            cursor = self.cursors.pop(name, None)
            if cursor is None:
                raise NotFoundError(f"cursor {name} not found on {self.name}")
            cursor.close()
            await self.store.append(self.owner, (), {name: None})
            try:
                await self._shared.metadata.delete(cursor_path(self.name, name))
            except MetadataNotFoundError:
                pass
        self.schedule_trim()

    async def recover_cursors(self) -> None:
        metadata = self._shared.metadata
        nodes = await metadata.get_children(ledger_path(self.name))
        states = await self.store.get_cursor_states(self.name)
        for node in nodes:
            name = cursor_name_from_node(node)
            state = states.get(name)
            cursor = ManagedCursor(self, name, True, self.first_position())
            if state is not None:
                cursor.restore_state(state)
            else:
                # Created but its first state write did not commit: use the node's snapshot.
                got = await metadata.get(cursor_path(self.name, name))
                if got is None or not got.value:
                    continue
                cursor.restore_state(decode_cursor_info(got.value))
            self.cursors[name] = cursor

    # -- trimming ----------------------------------------------------------------------------

    def schedule_trim(self) -> None:
        """Run trim() in the background, coalescing requests made while one runs. No task
        when nothing is trimmable now (every topic load asks: most have nothing to trim);
        whatever makes a ledger trimmable later (an ack, a rollover) asks again."""
        if self.state is not LedgerState.OPEN:
            return
        if self._trim_task is not None and not self._trim_task.done():
            self._trim_again = True
        elif self._trimmable():
            self._trim_task = self._spawn(self._trim_loop())

    async def _trim_loop(self) -> None:
        self._trim_again = True
        try:
            while self._trim_again and self.state is LedgerState.OPEN:
                self._trim_again = False
                try:
                    await self.trim()
                except ManagedLedgerFencedError:
                    return  # logged by mark_fenced; the ledger takes no more writes
                except Exception:
                    log.exception("%s: trim failed", self.name)
        finally:
            self._trim_task = None  # a finished task is not kept for the ledger's life

    async def trim(self) -> None:
        """Delete the ledgers every durable cursor has consumed, beyond retention."""
        async with self._metadata_lock:
            doomed = self._trimmable()
            if not doomed:
                return
            await self._put_info([i for i in self._ledgers if i.ledger_id not in doomed])
            for ledger_id in doomed:
                info = self._by_id.pop(ledger_id)
                self._ledgers.remove(info)
                self.number_of_entries -= info.entries
                self.total_size -= info.size
        for ledger_id in sorted(doomed):
            await self.store.delete_ledger(ledger_id)
        self._shared.cache.invalidate(doomed)

    def _trimmable(self) -> set[int]:
        """Pulsar's internalTrimLedgers: consumed ledgers, oldest first, while retention allows."""
        slowest = min(
            (min(c.mark_delete_position, c.persisted_mark_delete) for c in self.cursors.values()),
            default=None,
        )
        retention_bytes = self.config.retention_size_mb * _MB
        retention_ms = self.config.retention_time_minutes * 60_000
        now = now_ms()
        doomed: set[int] = set()
        size_to_delete = 0
        for info in self._ledgers[:-1]:
            if info.ledger_id in self._unregistered or self._is_open_ended(info):
                break
            consumed = slowest is None or slowest >= Position(info.ledger_id, info.entries - 1)
            if not consumed:
                break
            size_to_delete += info.size
            over_size = (
                self.config.retention_size_mb >= 0
                and self.total_size - size_to_delete >= retention_bytes
            )
            expired = (
                self.config.retention_time_minutes >= 0 and now - info.timestamp >= retention_ms
            )
            if not (over_size or expired):
                break
            doomed.add(info.ledger_id)
        return doomed

    # -- lifecycle ---------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        if self._tasks is None:
            self._tasks = set()
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self) -> None:
        """Wait for appends and acks in flight, then detach from the factory."""
        if self.state is LedgerState.CLOSED:
            return
        self.state = LedgerState.CLOSED
        self._submit_batch()
        if self._pending:
            await asyncio.wait([p.future for p in self._pending])
        for cursor in self.cursors.values():
            await cursor.flush()
            cursor.close()
        if self._tasks:
            await asyncio.wait(list(self._tasks))
        await self._snapshot_metadata()
        self._shared.on_close(self)

    async def _snapshot_metadata(self) -> None:
        """At a graceful close, leave fresh metadata for Pulsar's tools: the current ledger is
        closed (its count final, its close time set) in the ledger node, and each durable
        cursor's state is written to its node (ManagedCursorInfo). Per ack, the state goes to
        the store's commit instead; a failure here loses nothing (the next open recounts the
        ledger from the store, and the store's row holds the cursor's state)."""
        if self._shared.link is MetadataLink.DISCONNECTED:
            log.info("%s: metadata store disconnected, no metadata snapshot at close", self.name)
            return
        if not self._pending and not self._unregistered:
            self._ledgers[-1].timestamp = now_ms()
            try:
                await self._write_info()
            except (MetadataStoreError, ManagedLedgerFencedError) as e:
                # e.g. another broker took the ledger over: its metadata is not ours to write.
                log.warning("%s: cannot record the closed ledger: %s", self.name, e)
                return
        for cursor in self.cursors.values():
            try:
                await self._shared.metadata.put(
                    cursor_path(self.name, cursor.name),
                    encode_cursor_info(cursor.state(), now_ms()),
                    expected_version=None,
                )
            except MetadataStoreError as e:
                log.warning("%s: cannot snapshot cursor %s: %s", self.name, cursor.name, e)
