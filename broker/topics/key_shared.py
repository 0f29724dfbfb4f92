"""Key_Shared: messages with the same key go to the same consumer.

By default selection follows Pulsar's auto-split hash ranges
(HashRangeAutoSplitStickyKeyConsumerSelector): the key hash space 0..65535 is divided among
consumers; a new consumer takes the upper half of the largest range, and a departing
consumer's range goes to the neighbour above it (or below, for the last range). A subscription
whose consumers ask for Sticky mode uses the ranges they declare (key_shared_policy.py).
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import mmh3

from pulsar_grpc.broker.entry_format import EntryInfo
from pulsar_grpc.broker.errors import ConsumerAssignError
from pulsar_grpc.broker.ledger import Entry, ManagedCursor, Position
from pulsar_grpc.broker.topics.consumer import Consumer
from pulsar_grpc.broker.topics.dispatcher import Dispatcher, DispatchOwner
from pulsar_grpc.broker.topics.key_shared_policy import (
    RANGE_SIZE,
    DeliveryOrder,
    KeySharedMode,
    KeySharedPolicy,
    StickySelector,
)
from pulsar_grpc.broker.topics.transport import Delivery

if TYPE_CHECKING:
    from pulsar_grpc.broker.topics.settings import DispatchSettings


def sticky_key_hash(key: bytes) -> int:
    """Hash of a message key into 0..65535, Pulsar's: Murmur3_32Hash (x86, seed 0, made
    non-negative) modulo the range size, so that Sticky ranges a Pulsar user declares take
    the keys they take on Pulsar."""
    return (mmh3.hash(key, 0, signed=False) & 0x7FFFFFFF) % RANGE_SIZE


def sticky_key(info: EntryInfo) -> bytes:
    """The key an entry is routed by (Pulsar's Commands.resolveStickyKey): its ordering key,
    else its partition key, else "<producer name>-<sequence id>", so that messages without a
    key spread over the consumers instead of all hashing to one."""
    if info.sticky_key:
        return info.sticky_key
    return f"{info.producer_name}-{info.sequence_id}".encode()


@dataclass(slots=True, eq=False)
class HashRange:
    start: int  # inclusive
    end: int  # inclusive
    consumer: Consumer


class Selector(Protocol):
    def add(self, consumer: Consumer) -> None: ...
    def remove(self, consumer: Consumer) -> None: ...
    def select(self, key_hash: int) -> Consumer | None: ...


class AutoSplitSelector:
    """Maps a key hash to a consumer. Pure state: no I/O, easy to test.

    Up to 65,536 consumers (one hash each), so every operation stays logarithmic: ranges are
    found by their start and by their end, the largest by a heap (entries that no longer
    match a range are dropped when they surface), and a key's range by bisecting the starts,
    sorted again only after the ranges changed.
    """

    def __init__(self) -> None:
        self._by_start: dict[int, HashRange] = {}
        self._by_end: dict[int, HashRange] = {}
        self._by_consumer: dict[int, HashRange] = {}  # id(consumer) -> its range
        self._largest: list[tuple[int, int, int]] = []  # (-size, start, end): largest first
        self._sorted: list[HashRange] | None = []
        self._starts: list[int] = []

    @property
    def ranges(self) -> list[HashRange]:
        """The ranges sorted by start, covering 0..65535 when not empty."""
        if self._sorted is None:
            self._sorted = sorted(self._by_start.values(), key=lambda r: r.start)
            self._starts = [r.start for r in self._sorted]
        return self._sorted

    def add(self, consumer: Consumer) -> None:
        """Give ``consumer`` the upper half of the largest range (the lowest of equals), as
        Pulsar does; refuse it, changing nothing, when every range is a single hash."""
        if not self._by_start:
            self._put(HashRange(0, RANGE_SIZE - 1, consumer))
            return
        largest = self._peek_largest()
        if largest.start == largest.end:
            raise ConsumerAssignError(
                f"no hash range left to split: all {RANGE_SIZE} key hashes already have a "
                "Key_Shared consumer of their own"
            )
        middle = (largest.start + largest.end) // 2
        upper = HashRange(middle + 1, largest.end, consumer)
        del self._by_end[largest.end]
        largest.end = middle
        self._index(largest)
        self._put(upper)

    def remove(self, consumer: Consumer) -> None:
        """The departing range goes to the neighbour above it, or below for the last one."""
        gone = self._by_consumer.pop(id(consumer), None)
        if gone is None:
            return
        del self._by_start[gone.start], self._by_end[gone.end]
        self._sorted = None
        if (above := self._by_start.pop(gone.end + 1, None)) is not None:
            above.start = gone.start
            self._index(above)
        elif (below := self._by_end.pop(gone.start - 1, None)) is not None:
            below.end = gone.end
            self._index(below)

    def select(self, key_hash: int) -> Consumer | None:
        ranges = self.ranges
        i = bisect.bisect_right(self._starts, key_hash) - 1
        return ranges[i].consumer if i >= 0 else None

    def _put(self, r: HashRange) -> None:
        self._by_consumer[id(r.consumer)] = r
        self._index(r)

    def _index(self, r: HashRange) -> None:
        """(Re-)register a new or resized range."""
        self._by_start[r.start] = r
        self._by_end[r.end] = r
        self._sorted = None
        if len(self._largest) > 2 * len(self._by_start) + 16:  # mostly stale: rebuild
            self._largest = [(q.start - q.end, q.start, q.end) for q in self._by_start.values()]
            heapq.heapify(self._largest)
        else:
            heapq.heappush(self._largest, (r.start - r.end, r.start, r.end))

    def _peek_largest(self) -> HashRange:
        while True:
            _, start, end = self._largest[0]
            r = self._by_start.get(start)
            if r is not None and r.end == end:
                return r
            heapq.heappop(self._largest)


class KeySharedDispatcher(Dispatcher):
    """Routes each entry by the hash of its key (:func:`sticky_key`).

    An entry whose consumer has no permits waits in the replay set, and the entries read
    after it that hash to the same consumer wait too, so per-key order holds. The replay set is
    bounded: while it holds ``max_read_batch`` entries per consumer, no new entries are read.

    A consumer that joins takes keys whose earlier messages may still be unacked at another
    consumer. As in Pulsar (recently joined consumers), it gets no entry read after its join
    until every entry read before it is acked, so it can never overtake them; unless the
    policy allows out-of-order delivery, which skips that rule, as Pulsar's does.
    """

    def __init__(
        self,
        subscription: DispatchOwner,
        cursor: ManagedCursor,
        settings: DispatchSettings,
        policy: KeySharedPolicy,
    ) -> None:
        super().__init__(subscription, cursor, settings)
        self.max_unacked_per_consumer = settings.max_unacked_per_consumer
        self.policy = policy
        self.selector: Selector = (
            StickySelector() if policy.mode is KeySharedMode.STICKY else AutoSplitSelector()
        )
        # consumer -> the read position when it joined (Pulsar's recentlyJoinedConsumers)
        self.recently_joined: dict[Consumer, Position] = {}

    def policy_stats(self) -> dict[str, object]:
        """Pulsar's SubscriptionStats fields of a Key_Shared subscription."""
        return {
            "keySharedMode": self.policy.mode.name,
            "allowOutOfOrderDelivery": self.policy.order is DeliveryOrder.OUT_OF_ORDER,
        }

    def add_consumer(self, consumer: Consumer) -> None:
        self.selector.add(consumer)
        if self.consumers and self.policy.order is DeliveryOrder.IN_ORDER:
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
            budget = self.budget(consumer) - sum(d.num_messages for d in planned)
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
