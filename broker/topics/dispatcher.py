"""Dispatchers move entries from a subscription's cursor to its consumers (Pulsar's
``Dispatcher``), one class per subscription type.

The read loop is shared: it reads entries for redelivery first (the replay set, ordered by
position), then new entries, never more than the ready consumers' permits ask for, and stops
when no consumer can take more or the cursor is caught up; a flow, an ack that unblocks a
consumer, new entries or a redelivery start it again. Only one read is in flight at a time.
Reads in flight when the consumers change (seek, failover) are discarded through ``_epoch``.

Dispatch rates (the subscription's, the topic's, the broker's) are applied here, before each
read: while one is spent, the loop stops and a timer starts it again once the rate allows one
more message, and a read asks for no more than the rates allow now. Entries wait in the
ledger, never in memory, and none is dropped.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Protocol

from pulsar_grpc.broker import entry_format
from pulsar_grpc.broker.ledger import Entry, ManagedCursor, ManagedLedger, Position
from pulsar_grpc.broker.topics.consumer import Consumer, Tracking
from pulsar_grpc.broker.topics.rate_limit import Kind
from pulsar_grpc.broker.topics.transport import Delivery

if TYPE_CHECKING:
    from pulsar_grpc.broker.topics.settings import DispatchSettings

log = logging.getLogger(__name__)

# Pulsar's dispatcherMaxReadSizeBytes default: a read asks for no more entries than this many
# bytes' worth at the average entry size seen, so huge permits never read (and queue) a hundred
# entries of megabytes each at once.
MAX_READ_BYTES = 5 << 20


class ReplaySet(dict[Position, int | None]):
    """Entries waiting to be delivered again: position -> sticky hash (None when the
    dispatcher does not route by key), taken in position order.

    A heap of the positions sits beside the dict, so taking the first ``n`` costs
    O(n log R) for R waiting entries: sorting all of them for every read made draining a
    redelivery of R entries cost O(R^2 log R) on the event loop. Positions removed from the
    dict stay in the heap until they reach its top (or it is rebuilt, past twice the dict)."""

    __slots__ = ("_heap",)

    def __init__(self) -> None:
        super().__init__()
        self._heap: list[Position] = []

    def __setitem__(self, position: Position, sticky_hash: int | None) -> None:
        if position not in self:
            heapq.heappush(self._heap, position)
            if len(self._heap) > 2 * len(self) + 64:
                self._heap = sorted(self.keys() | {position})
        super().__setitem__(position, sticky_hash)

    def clear(self) -> None:
        super().clear()
        self._heap.clear()

    def first(self, n: int) -> list[Position]:
        """The ``n`` lowest positions waiting, in order; they stay in the set."""
        heap = self._heap
        out: list[Position] = []
        while heap and len(out) < n:
            position = heapq.heappop(heap)
            if position in self and (not out or out[-1] != position):
                out.append(position)
        for position in out:
            heapq.heappush(heap, position)
        return out


class DispatchTopic(Protocol):
    """What a dispatcher reads of its subscription's topic: the ledger it waits on for new
    entries, and the partition a Failover subscription picks its active consumer by."""

    @property
    def ledger(self) -> ManagedLedger: ...

    @property
    def partition(self) -> int: ...


class DispatchOwner(Protocol):
    """The port a dispatcher (Key_Shared's too) reaches its subscription through: the dispatch
    rates it waits on, the redelivery counts it stamps, and where it reports what it sent. A
    protocol rather than the subscription's class, so the dispatchers sit below the
    subscription that owns them instead of in an import circle with it; the subscription
    satisfies it structurally."""

    @property
    def topic(self) -> DispatchTopic: ...

    @property
    def durable(self) -> bool: ...

    def redelivery_count(self, position: Position) -> int: ...

    def on_dispatched(self, consumer: Consumer, deliveries: list[Delivery]) -> None: ...

    def dispatch_delay_s(self) -> float: ...

    def dispatch_allowance(self, kind: Kind) -> float | None: ...

    def throttle_began(self) -> None: ...

    def throttle_ended(self) -> None: ...


class Dispatcher(ABC):
    def __init__(
        self, subscription: DispatchOwner, cursor: ManagedCursor, settings: DispatchSettings
    ) -> None:
        self.subscription = subscription
        self.cursor = cursor
        self.consumers: list[Consumer] = []
        self.max_read_batch = settings.max_read_batch_size
        # Pulsar applies maxUnackedMessagesPerConsumer to Shared and Key_Shared only.
        self.max_unacked_per_consumer: int | None = None
        self.replay = ReplaySet()
        self._reading = False
        self._paused = False
        self._epoch = 0
        self._avg_messages_per_entry = 1.0
        self._avg_entry_bytes: float | None = None  # unknown until the first read (of one)
        self._task: asyncio.Task[None] | None = None
        # Pending while a dispatch rate holds reads back: it starts the read loop again.
        self._throttle_timer: asyncio.TimerHandle | None = None
        # New durable entries wake the read loop up (Pulsar's asyncReadOrWait).
        subscription.topic.ledger.add_entries_listener(self.trigger)

    # ------------------------------------------------------------- consumers

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        # A transport that filled up stops dispatch to its consumer (ready()); drained, it
        # starts the read loop again.
        consumer.transport.on_writable(self.trigger)

    def remove_consumer(self, consumer: Consumer) -> None:
        """Hand the departed consumer's unacked entries to the others."""
        self.drop_consumer(consumer)
        for position, sticky_hash in consumer.release_all():
            self.replay[position] = sticky_hash
        self.trigger()

    def drop_consumer(self, consumer: Consumer) -> None:
        """Forget a consumer without handing anything on (its subscription is closed)."""
        self.consumers.remove(consumer)

    def consumer_flow(self, consumer: Consumer) -> None:
        """``consumer`` was granted permits (it keeps its own count): maybe read."""
        self.trigger()

    def redeliver(self, positions: list[tuple[Position, int | None]]) -> None:
        for position, sticky_hash in positions:
            self.replay[position] = sticky_hash
        self.trigger()

    def reset(self) -> None:
        """Forget everything in flight (seek): later reads start from the cursor anew."""
        self._epoch += 1
        self.replay.clear()
        for consumer in self.consumers:
            consumer.release_all()

    def ready(self, consumer: Consumer) -> bool:
        limit = self.max_unacked_per_consumer
        return (
            consumer.permits > 0
            and (limit is None or consumer.unacked_messages < limit)
            and consumer.transport.writable()
        )

    def budget(self, consumer: Consumer) -> int:
        """Messages ``consumer`` may be sent now: its permits, and no more than its unacked
        limit leaves room for (Pulsar's getMaxEntriesInThisBatch). ``ready`` only says whether
        it may be served at all: without this bound one read could carry it past the limit."""
        limit = self.max_unacked_per_consumer
        if limit is None:
            return consumer.permits
        return min(consumer.permits, limit - consumer.unacked_messages)

    # ------------------------------------------------------------- read loop

    async def pause(self) -> None:
        """Stop dispatching and wait for a read in flight to finish (the cursor is about to
        move under it)."""
        self._paused = True
        self._epoch += 1
        task = self._task
        if task is not None and not task.done():
            await asyncio.shield(task)

    def resume(self) -> None:
        self._paused = False
        self.trigger()

    def trigger(self) -> None:
        if not self._reading and not self._paused and self.consumers:
            self._reading = True
            self._task = asyncio.get_running_loop().create_task(self._read_loop())

    def detach(self) -> None:
        """Stop reacting to new entries and discard reads in flight."""
        self._epoch += 1
        self.subscription.topic.ledger.remove_entries_listener(self.trigger)
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
            self._throttle_timer = None
            self.subscription.throttle_ended()

    async def close(self) -> None:
        self.detach()
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _read_loop(self) -> None:
        try:
            while not self._paused:
                permits = self._permits_for_read()
                if permits <= 0:
                    return
                wait = self.subscription.dispatch_delay_s()
                if wait > 0:
                    self._read_after(wait)
                    return
                n = max(1, min(self.max_read_batch, int(permits / self._avg_messages_per_entry)))
                size = self._avg_entry_bytes
                n = 1 if size is None else max(1, min(n, int(MAX_READ_BYTES / max(size, 1))))
                n = self._rate_allowed(n)
                epoch = self._epoch
                replay = self._replay_positions(n)
                if replay:
                    entries = await self.cursor.replay_entries(replay)
                    for position in replay:
                        self.replay.pop(position, None)
                elif self._may_read_new() and self.cursor.has_more_entries():
                    entries = await self.cursor.read_entries(n)
                else:
                    return
                if epoch != self._epoch:
                    continue
                if entries:
                    self._dispatch(entries)
        except Exception:
            log.exception("dispatcher of %s failed", self.subscription)
        finally:
            self._reading = False
            self._task = None  # not kept while idle (most subscriptions of a broker are)

    def _read_after(self, wait_s: float) -> None:
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
        self.subscription.throttle_began()
        self._throttle_timer = asyncio.get_running_loop().call_later(wait_s, self._rate_refilled)

    def _rate_refilled(self) -> None:
        self._throttle_timer = None
        self.subscription.throttle_ended()
        self.trigger()

    def _rate_allowed(self, n: int) -> int:
        """At most ``n`` entries, and no more than the dispatch rates allow now (at least
        one: the rates are in credit, and what one entry overshoots is paid back next)."""
        messages = self.subscription.dispatch_allowance(Kind.MESSAGES)
        if messages is not None:
            n = min(n, max(1, int(messages / self._avg_messages_per_entry)))
        nbytes = self.subscription.dispatch_allowance(Kind.BYTES)
        if nbytes is not None:
            size = self._avg_entry_bytes
            n = 1 if size is None else min(n, max(1, int(nbytes / max(size, 1))))
        return n

    def _permits_for_read(self) -> int:
        return sum(c.permits for c in self.consumers if self.ready(c))

    def _replay_positions(self, n: int) -> list[Position]:
        return self.replay.first(n) if self.replay else []

    def _may_read_new(self) -> bool:
        return True

    def _deliveries(self, entries: list[Entry]) -> list[tuple[Delivery, entry_format.EntryInfo]]:
        out = []
        total = 0
        for entry in entries:
            info = entry_format.info(entry.data)
            acked = self.cursor.acked_mask(entry.position, info.num_messages)
            num = info.num_messages - acked.bit_count() if acked else info.num_messages
            total += info.num_messages
            delivery = Delivery(
                position=entry.position,
                data=entry.data,
                redelivery_count=self.subscription.redelivery_count(entry.position),
                acked_indexes=acked,
                num_messages=num,
                batch_size=info.num_messages,
            )
            out.append((delivery, info))
        if entries:
            # Up at once, down slowly: an underestimate is what makes a read too large (more
            # entries than the permits or the dispatch rate take, read for nothing).
            per_entry, avg = total / len(entries), self._avg_messages_per_entry
            self._avg_messages_per_entry = (
                per_entry if per_entry > avg else 0.8 * avg + 0.2 * per_entry
            )
            mean = sum(len(entry.data) for entry in entries) / len(entries)
            size = self._avg_entry_bytes
            self._avg_entry_bytes = mean if size is None or mean > size else 0.8 * size + 0.2 * mean
        return out

    def _send(self, consumer: Consumer, batch: list[Delivery], hashes: list[int | None]) -> None:
        tracking = Tracking.PENDING_UNTIL_ACKED if self.subscription.durable else Tracking.UNTRACKED
        for delivery, sticky_hash in zip(batch, hashes, strict=True):
            consumer.sent(delivery, sticky_hash, tracking)
        self.subscription.on_dispatched(consumer, batch)
        consumer.transport.send_messages(batch)

    @abstractmethod
    def _dispatch(self, entries: list[Entry]) -> None:
        """Hand entries to consumers; what cannot be placed goes back to ``replay``."""


class SingleActiveConsumerDispatcher(Dispatcher):
    """Exclusive and Failover: every entry goes to the one active consumer.

    The active consumer is chosen among those of the highest priority (the lowest
    ``priority_level``), sorted by name (Pulsar's AbstractDispatcherSingleActiveConsumer). On a
    non-partitioned topic it is the first of them; on partition ``p`` of a partitioned topic it
    is number ``p % n`` of the ``n`` of them, so a Failover subscription's consumers share the
    partitions instead of one consumer taking all. When it changes, everything unacked is
    redelivered to the new one: on Failover only after ``switch_delay_s`` (Pulsar's
    activeConsumerFailoverDelayTimeMillis), during which nothing is dispatched and the acks
    the previous consumer still sends are applied, so the redelivery skips what they acked.
    """

    def __init__(
        self,
        subscription: DispatchOwner,
        cursor: ManagedCursor,
        settings: DispatchSettings,
        switch_delay_s: float = 0.0,
    ) -> None:
        super().__init__(subscription, cursor, settings)
        self.active: Consumer | None = None
        self.switch_delay_s = switch_delay_s
        # Pending while a switch waits out the delay; the one owner of that waiting state.
        self._switch_timer: asyncio.TimerHandle | None = None

    def add_consumer(self, consumer: Consumer) -> None:
        super().add_consumer(consumer)
        self._elect(newcomer=consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        super().remove_consumer(consumer)
        self._elect(newcomer=None)

    def detach(self) -> None:
        self._cancel_switch()
        super().detach()

    def _choose_active(self) -> Consumer | None:
        if not self.consumers:
            return None
        ordered = sorted(self.consumers, key=lambda c: (c.options.priority_level, c.name))
        partition = self.subscription.topic.partition
        if partition < 0:
            return ordered[0]
        top = ordered[0].options.priority_level
        highest = [c for c in ordered if c.options.priority_level == top]
        return highest[partition % len(highest)]

    def _elect(self, newcomer: Consumer | None) -> None:
        """Choose the active consumer again after a join or a departure and tell the
        consumers (Pulsar's ActiveConsumerChange): all of them when the active one changes,
        else only a newcomer, which learns that it is a standby.

        A change of a Failover subscription from one active consumer to another waits
        ``switch_delay_s`` before the redelivery (as Pulsar's scheduleReadOnActiveConsumer,
        whether the previous one left or a higher one joined); a first active consumer has
        nothing in flight to wait for and is served at once."""
        new_active = self._choose_active()
        if new_active is self.active:
            if newcomer is not None and newcomer is not new_active:
                newcomer.transport.send_active_change(False)
            return
        previous, self.active = self.active, new_active
        for consumer in self.consumers:
            consumer.transport.send_active_change(consumer is new_active)
        self._epoch += 1  # a read in flight was for the previous consumer
        self._cancel_switch()
        if self.switch_delay_s > 0 and previous is not None and new_active is not None:
            loop = asyncio.get_running_loop()
            self._switch_timer = loop.call_later(self.switch_delay_s, self._complete_switch)
        else:
            self._complete_switch()

    def _cancel_switch(self) -> None:
        if self._switch_timer is not None:
            self._switch_timer.cancel()
            self._switch_timer = None

    def _complete_switch(self) -> None:
        """Hand everything unacked to the active consumer: forget what any consumer still
        holds and read again from the first unacked entry."""
        self._switch_timer = None
        for consumer in self.consumers:
            consumer.release_all()
        self._epoch += 1
        self.cursor.rewind()
        self.replay.clear()
        self.trigger()

    def _permits_for_read(self) -> int:
        active = self.active
        if active is None or self._switch_timer is not None or not self.ready(active):
            return 0
        return active.permits

    def _dispatch(self, entries: list[Entry]) -> None:
        active = self.active
        deliveries = [d for d, _ in self._deliveries(entries)]
        budget = active.permits if active is not None and self.ready(active) else 0
        taken = 0
        for delivery in deliveries:
            if budget <= 0:
                break
            budget -= delivery.num_messages
            taken += 1
        for delivery in deliveries[taken:]:
            self.replay[delivery.position] = None
        if active is not None and taken:
            self._send(active, deliveries[:taken], [None] * taken)


class SharedDispatcher(Dispatcher):
    """Shared: entries go round robin to the consumers that have permits, highest priority
    first (Pulsar's PersistentDispatcherMultipleConsumers): a consumer of a lower priority
    (a higher ``priority_level``) gets an entry only when no consumer of a higher one can
    take it."""

    def __init__(
        self, subscription: DispatchOwner, cursor: ManagedCursor, settings: DispatchSettings
    ) -> None:
        super().__init__(subscription, cursor, settings)
        self.max_unacked_per_consumer = settings.max_unacked_per_consumer
        # priority level -> the consumer served last at that level (where round robin resumes)
        self._last_served: dict[int, Consumer] = {}

    def remove_consumer(self, consumer: Consumer) -> None:
        level = consumer.options.priority_level
        if self._last_served.get(level) is consumer:
            del self._last_served[level]
        super().remove_consumer(consumer)

    def _dispatch(self, entries: list[Entry]) -> None:
        budgets = {c: b for c in self.consumers if self.ready(c) and (b := self.budget(c)) > 0}
        batches: dict[Consumer, list[Delivery]] = {}
        order = {c: i for i, c in enumerate(self.consumers)}
        for delivery, _ in self._deliveries(entries):
            consumer = self._next_consumer(budgets, order)
            if consumer is None:
                self.replay[delivery.position] = None
                continue
            batches.setdefault(consumer, []).append(delivery)
            budgets[consumer] -= delivery.num_messages
            if budgets[consumer] <= 0:
                del budgets[consumer]
        for consumer, batch in batches.items():
            self._send(consumer, batch, [None] * len(batch))

    def _next_consumer(
        self, budgets: dict[Consumer, int], order: dict[Consumer, int]
    ) -> Consumer | None:
        """At the highest priority level that still has permits, the next consumer in join
        order (``order``) after the one served last at that level."""
        if not budgets:
            return None
        level = min(c.options.priority_level for c in budgets)
        # ``budgets`` is built from ``self.consumers``: already in join order.
        group = [c for c in budgets if c.options.priority_level == level]
        last = self._last_served.get(level)
        after = order.get(last, -1) if last is not None else -1
        chosen = next((c for c in group if order[c] > after), group[0])
        self._last_served[level] = chosen
        return chosen
