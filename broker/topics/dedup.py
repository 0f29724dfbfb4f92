"""Message deduplication by producer name and sequence id (brokerDeduplicationEnabled).

As in Pulsar's MessageDeduplication: the highest sequence id per producer name is kept in
memory, snapshotted into the properties of a dedicated cursor (``pulsar.dedup``), and rebuilt at
topic load from the snapshot plus the entries written after it — so it survives a restart, a
crash included.

A snapshot also moves that cursor's mark-delete to the last stored entry, and the cursor holds
every ledger after its mark-delete: so snapshots are taken every
``brokerDeduplicationEntriesInterval`` entries, on a timer (every
``brokerDeduplicationSnapshotFrequencyInSeconds``) and when the topic closes, each only if
something was stored since the last one. Without the timer, a topic that takes fewer entries
than the interval between restarts would never let go of a ledger.

Whether a topic deduplicates: its namespace's ``deduplicationEnabled`` policy when set, else
brokerDeduplicationEnabled (Pulsar's isDeduplicationEnabled). A change of either reaches the
loaded topics live (:meth:`PersistentTopic.set_deduplication`, called by RatePolicies).
"""

from __future__ import annotations

import asyncio
import logging
from enum import Enum
from typing import Any

from pulsar_grpc.broker import entry_format
from pulsar_grpc.broker.ledger import ManagedCursor, ManagedLedger, Position
from pulsar_grpc.broker.naming import DEDUPLICATION_CURSOR
from pulsar_grpc.broker.topics.settings import DedupSettings

log = logging.getLogger(__name__)

FIELD = "deduplicationEnabled"  # the namespace policy, in its Policies node


def deduplication_enabled(settings: DedupSettings, policies: dict[str, Any] | None) -> bool:
    """The namespace's policy when it is set, else the broker's default."""
    found = (policies or {}).get(FIELD)
    return found if isinstance(found, bool) else settings.enabled


class SnapshotState(Enum):
    """Whether the cursor's snapshot covers every entry stored so far."""

    CURRENT = "current"
    BEHIND = "behind"  # entries were stored (or replayed at load) after the last snapshot


class Deduplication:
    def __init__(
        self, cursor: ManagedCursor, entries_interval: int, snapshot_frequency_s: int
    ) -> None:
        self._cursor = cursor
        self._interval = entries_interval
        self._frequency_s = snapshot_frequency_s
        self.pushed: dict[str, int] = {}  # accepted, maybe not durable yet
        self.persisted: dict[str, int] = {}
        # Each producer's latest accepted entry until it is durable: it becomes durable after
        # all of that producer's earlier entries (the log confirms in order).
        self._storing: dict[str, asyncio.Future[Position]] = {}
        self._since_snapshot = 0
        self._last_stored: Position | None = None  # the snapshot's position when BEHIND
        self._timer: asyncio.TimerHandle | None = None
        self._stopped = False  # turned off (the namespace policy): no more snapshots

    @property
    def snapshot_state(self) -> SnapshotState:
        return SnapshotState.BEHIND if self._since_snapshot else SnapshotState.CURRENT

    @classmethod
    async def recover(
        cls, ledger: ManagedLedger, entries_interval: int, snapshot_frequency_s: int
    ) -> Deduplication:
        """Rebuild from the snapshot plus the entries after it, and start the snapshot timer.

        The replayed entries count as not snapshotted yet: the next snapshot (timer, interval
        or close) moves the cursor past them, so a topic restarted often still trims.
        """
        cursor = await ledger.open_cursor(DEDUPLICATION_CURSOR, "earliest")
        dedup = cls(cursor, entries_interval, snapshot_frequency_s)
        dedup.persisted.update(cursor.properties)
        while True:
            entries = await cursor.read_entries(500)
            if not entries:
                break
            for entry in entries:
                info = entry_format.info(entry.data)
                dedup._record(info.producer_name, info.sequence_id + info.num_messages - 1)
                dedup._stored(entry.position)
        dedup.pushed.update(dedup.persisted)
        dedup._schedule()
        return dedup

    def last_sequence_id(self, producer_name: str) -> int:
        return self.persisted.get(producer_name, -1)

    def is_duplicate(self, producer_name: str, sequence_id: int) -> bool:
        return sequence_id <= self.pushed.get(producer_name, -1)

    def original_stored(
        self, producer_name: str, sequence_id: int
    ) -> asyncio.Future[Position] | None:
        """For a duplicate: None when its original is durable, else a future that resolves
        (or fails) no earlier than the original does."""
        if sequence_id <= self.persisted.get(producer_name, -1):
            return None
        return self._storing.get(producer_name)

    def accept(
        self, producer_name: str, highest_sequence_id: int, stored: asyncio.Future[Position]
    ) -> None:
        self.pushed[producer_name] = max(self.pushed.get(producer_name, -1), highest_sequence_id)
        self._storing[producer_name] = stored

    def failed(self) -> None:
        """An accepted entry was not stored (nor any after it): forget what was pushed but not
        persisted, so the client's resend is stored (Pulsar's resetHighestSequenceIdPushed)."""
        self.pushed = dict(self.persisted)
        self._storing.clear()

    def persisted_entry(self, producer_name: str, highest: int, position: Position) -> None:
        self._record(producer_name, highest)
        if highest >= self.pushed.get(producer_name, -1):
            self._storing.pop(producer_name, None)
        self._stored(position)
        if self._since_snapshot >= self._interval:
            self.take_snapshot()

    def take_snapshot(self) -> asyncio.Future[None] | None:
        """Pulsar's takeSnapshot: the highest persisted sequence ids become the cursor's
        properties and its mark-delete moves to the last stored entry (freeing the ledgers
        before it). None when nothing was stored since the last snapshot."""
        if self._stopped or self._last_stored is None:
            return None
        if self.snapshot_state is SnapshotState.CURRENT:
            return None
        self._since_snapshot = 0
        written = self._cursor.mark_delete(self._last_stored, dict(self.persisted))
        written.add_done_callback(self._written)
        return written

    async def close(self) -> None:
        """At topic close (unload, shutdown): wait for the accepted entries, then snapshot, so
        the next load replays nothing and the ledgers consumed by then can be trimmed."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        storing = list(self._storing.values())
        if storing:
            await asyncio.wait(storing)
        written = self.take_snapshot()
        if written is not None:
            await asyncio.wait([written])  # a failure is logged: recovery replays instead

    def stop(self) -> None:
        """Turned off live (Pulsar's checkStatus when the namespace's deduplicationEnabled
        becomes false): no snapshot is taken from now on, so its cursor can be deleted; the
        receipts of entries accepted before still come back (the topic no longer asks it)."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self) -> None:
        """Pulsar's checkDeduplicationSnapshot timer; 0 turns it off."""
        if self._frequency_s > 0:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self._frequency_s, self._on_timer)

    def _on_timer(self) -> None:
        self.take_snapshot()
        self._schedule()

    def _written(self, written: asyncio.Future[None]) -> None:
        """A failed snapshot loses nothing (the entries after the previous one are replayed at
        load): it is logged, and the state stays BEHIND so the next timer tries again."""
        if not written.cancelled() and (exc := written.exception()) is not None:
            log.warning("deduplication snapshot on %s failed: %s", self._cursor, exc)
            self._since_snapshot = max(self._since_snapshot, 1)

    def _stored(self, position: Position) -> None:
        self._last_stored = position
        self._since_snapshot += 1

    def _record(self, producer_name: str, highest: int) -> None:
        if highest > self.persisted.get(producer_name, -1):
            self.persisted[producer_name] = highest
