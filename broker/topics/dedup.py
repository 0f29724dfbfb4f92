"""Message deduplication by producer name and sequence id (brokerDeduplicationEnabled).

As in Pulsar's MessageDeduplication: the highest sequence id per producer name is kept in
memory, snapshotted every ``snapshot_interval`` entries into the properties of a dedicated
cursor (``pulsar.dedup``), and rebuilt at topic load from the snapshot plus the entries written
after it — so it survives a restart, a crash included.
"""

from __future__ import annotations

import asyncio

from broker import entry_format
from broker.ledger import ManagedCursor, ManagedLedger, Position

CURSOR_NAME = "pulsar.dedup"


class Deduplication:
    def __init__(self, cursor: ManagedCursor, snapshot_interval: int = 1000) -> None:
        self._cursor = cursor
        self._interval = snapshot_interval
        self.pushed: dict[str, int] = {}  # accepted, maybe not durable yet
        self.persisted: dict[str, int] = {}
        # Each producer's latest accepted entry until it is durable: it becomes durable after
        # all of that producer's earlier entries (the log confirms in order).
        self._storing: dict[str, asyncio.Future[Position]] = {}
        self._since_snapshot = 0

    @classmethod
    async def recover(cls, ledger: ManagedLedger) -> Deduplication:
        cursor = await ledger.open_cursor(CURSOR_NAME, "earliest")
        dedup = cls(cursor)
        dedup.persisted.update(cursor.properties)
        while True:
            entries = await cursor.read_entries(500)
            if not entries:
                break
            for entry in entries:
                info = entry_format.info(entry.data)
                dedup._record(info.producer_name, info.sequence_id + info.num_messages - 1)
        dedup.pushed.update(dedup.persisted)
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
        self._since_snapshot += 1
        if self._since_snapshot >= self._interval:
            self._since_snapshot = 0
            self._cursor.mark_delete(position, dict(self.persisted))

    def _record(self, producer_name: str, highest: int) -> None:
        if highest > self.persisted.get(producer_name, -1):
            self.persisted[producer_name] = highest
