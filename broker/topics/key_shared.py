"""Key_Shared: messages with the same key go to the same consumer.

Selection follows Pulsar's auto-split hash ranges (HashRangeAutoSplitStickyKeyConsumerSelector):
the key hash space 0..65535 is divided among consumers; a new consumer takes the upper half of
the largest range, and a departing consumer's range goes to the neighbour above it (or below,
for the last range).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.entry_format import EntryInfo
from broker.ledger import Entry, ManagedCursor, Position
from broker.topics.consumer import Consumer
from broker.topics.dispatcher import Dispatcher
from broker.topics.transport import Delivery

if TYPE_CHECKING:
    from broker.topics.subscription import Subscription

RANGE_SIZE = 1 << 16


def sticky_key_hash(key: bytes) -> int:
    """Hash of a message key into 0..65535; stable across restarts and languages (CRC32)."""
    return zlib.crc32(key) % RANGE_SIZE


def sticky_key(info: EntryInfo) -> bytes:
    """The key an entry is routed by (Pulsar's Commands.resolveStickyKey): its ordering key,
    else its partition key, else "<producer name>-<sequence id>", so that messages without a
    key spread over the consumers instead of all hashing to one."""
    if info.sticky_key:
        return info.sticky_key
    return f"{info.producer_name}-{info.sequence_id}".encode()


@dataclass(slots=True)
class HashRange:
    start: int  # inclusive
    end: int  # inclusive
    consumer: Consumer


class AutoSplitSelector:
    """Maps a key hash to a consumer. Pure state: no I/O, easy to test."""

    def __init__(self) -> None:
        self.ranges: list[HashRange] = []  # sorted by start, covering 0..65535 when not empty

    def add(self, consumer: Consumer) -> None:
        if not self.ranges:
            self.ranges.append(HashRange(0, RANGE_SIZE - 1, consumer))
            return
        largest = max(self.ranges, key=lambda r: (r.end - r.start, -r.start))
        if largest.start == largest.end:
            raise ValueError("no hash range left to split for a new Key_Shared consumer")
        middle = (largest.start + largest.end) // 2
        upper = HashRange(middle + 1, largest.end, consumer)
        largest.end = middle
        self.ranges.insert(self.ranges.index(largest) + 1, upper)

    def remove(self, consumer: Consumer) -> None:
        for i, r in enumerate(self.ranges):
            if r.consumer is consumer:
                del self.ranges[i]
                if not self.ranges:
                    return
                if i < len(self.ranges):
                    self.ranges[i].start = r.start
                else:
                    self.ranges[i - 1].end = r.end
                return

    def select(self, key_hash: int) -> Consumer | None:
        for r in self.ranges:
            if r.start <= key_hash <= r.end:
                return r.consumer
        return None


class KeySharedDispatcher(Dispatcher):
    """Routes each entry by the hash of its key (:func:`sticky_key`).

    An entry whose consumer has no permits waits in the replay set, and the entries read
    after it that hash to the same consumer wait too, so per-key order holds. The replay set is
    bounded: while it holds ``max_read_batch`` entries per consumer, no new entries are read.

    A consumer that joins takes keys whose earlier messages may still be unacked at another
    consumer. As in Pulsar (recently joined consumers), it gets no entry read after its join
    until every entry read before it is acked, so it can never overtake them.
    """

    def __init__(
        self, subscription: Subscription, cursor: ManagedCursor, max_read_batch: int
    ) -> None:
        super().__init__(subscription, cursor, max_read_batch)
        self.max_unacked_per_consumer = subscription.config.maxUnackedMessagesPerConsumer or None
        self.selector = AutoSplitSelector()
        # consumer -> the read position when it joined (Pulsar's recentlyJoinedConsumers)
        self.recently_joined: dict[Consumer, Position] = {}

    def add_consumer(self, consumer: Consumer) -> None:
        self.selector.add(consumer)
        if self.consumers:
            self.recently_joined[consumer] = self.cursor.read_position
        super().add_consumer(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        self.selector.remove(consumer)
        self.recently_joined.pop(consumer, None)
        super().remove_consumer(consumer)

    def _may_take(self, consumer: Consumer, position: Position) -> bool:
        """The join guard: entries at or after the join position wait until everything
        before it is acked (then the guard is dropped)."""
        joined_at = self.recently_joined.get(consumer)
        if joined_at is None or position < joined_at:
            return True
        if (
            self.subscription.topic.ledger.next_position(self.cursor.mark_delete_position)
            >= joined_at
        ):
            del self.recently_joined[consumer]
            return True
        return False

    def _replay_positions(self, n: int) -> list[Position]:
        ready = [
            pos for pos, h in sorted(self.replay.items()) if h is None or self._ready_for(h, pos)
        ]
        return ready[:n]

    def _ready_for(self, key_hash: int, position: Position) -> bool:
        consumer = self.selector.select(key_hash)
        return consumer is not None and self.ready(consumer) and self._may_take(consumer, position)

    def _may_read_new(self) -> bool:
        return len(self.replay) < self.max_read_batch * max(1, len(self.consumers))

    def _dispatch(self, entries: list[Entry]) -> None:
        batches: dict[int, tuple[Consumer, list[Delivery], list[int | None]]] = {}
        blocked_hashes: set[int] = {h for h in self.replay.values() if h is not None}
        for delivery, info in self._deliveries(entries):
            key_hash = sticky_key_hash(sticky_key(info))
            consumer = self.selector.select(key_hash)
            if consumer is None:
                self.replay[delivery.position] = key_hash
                continue
            _, planned, hashes = batches.setdefault(id(consumer), (consumer, [], []))
            budget = consumer.permits - sum(d.num_messages for d in planned)
            earlier_waiting = key_hash in blocked_hashes and any(
                p < delivery.position and h == key_hash for p, h in self.replay.items()
            )
            if (
                budget > 0
                and self.ready(consumer)
                and not earlier_waiting
                and self._may_take(consumer, delivery.position)
            ):
                planned.append(delivery)
                hashes.append(key_hash)
            else:
                self.replay[delivery.position] = key_hash
                blocked_hashes.add(key_hash)
        for consumer, planned, hashes in batches.values():
            if planned:
                self._send(consumer, planned, hashes)
