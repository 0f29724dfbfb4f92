"""A subscription: a cursor on the topic's ledger plus the consumers attached to it."""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol, TypeVar

from pulsar_grpc.broker import entry_format
from pulsar_grpc.broker.errors import ConsumerBusyError, InvalidArgumentError, NotAllowedError
from pulsar_grpc.broker.ledger import ManagedCursor, ManagedLedger, Position
from pulsar_grpc.broker.meters import RateMeter, iso_utc
from pulsar_grpc.broker.naming import TopicName
from pulsar_grpc.broker.topics.consumer import AckId, Consumer, PendingEntry
from pulsar_grpc.broker.topics.dispatcher import (
    Dispatcher,
    SharedDispatcher,
    SingleActiveConsumerDispatcher,
)
from pulsar_grpc.broker.topics.key_shared import KeySharedDispatcher
from pulsar_grpc.broker.topics.key_shared_policy import KeySharedPolicy
from pulsar_grpc.broker.topics.rate_limit import Kind, RateLimit, Throttle
from pulsar_grpc.broker.topics.rate_policies import RateKind
from pulsar_grpc.broker.topics.redelivery_backoff import by_delay
from pulsar_grpc.broker.topics.schema_carrier import SchemaCarrier
from pulsar_grpc.broker.topics.settings import TopicSettings
from pulsar_grpc.broker.topics.transport import Delivery

log = logging.getLogger(__name__)

T = TypeVar("T")
# Ack ids handled between two yields to the event loop (a few ms of work): a request of many
# ids is taken in slices, so that the other clients wait for one slice at most.
ACK_SLICE = 2048


class SubType(enum.Enum):
    Exclusive = "Exclusive"
    Failover = "Failover"
    Shared = "Shared"
    Key_Shared = "Key_Shared"


class SubscriptionState(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"  # topic unloaded or subscription deleted: its dispatcher is stopped


class ThrottleScope(enum.Enum):
    """Whose dispatch rate held a subscription back (Pulsar's stats name each)."""

    SUBSCRIPTION = "Subscription"
    TOPIC = "Topic"
    BROKER = "Broker"


class DeadLetterTopic(Protocol):
    """What a subscription does with its dead-letter topic: make the policy's initial
    subscription there, and publish the dead messages as the broker."""

    @property
    def topic_name(self) -> TopicName: ...

    async def ensure_subscription(self, name: str) -> None: ...

    async def publish_system(self, batch: bytes, schema_version: bytes = b"") -> Position: ...


class BrokerTopics(Protocol):
    """What a subscription needs of the broker's topics (the registry, reached through its
    topic): the broker-wide dispatch rate, and the dead-letter topic with its schemas."""

    @property
    def dispatch_throttle(self) -> Throttle: ...

    @property
    def schemas(self) -> SchemaCarrier: ...

    async def get_topic(self, name: str, create: bool = ...) -> DeadLetterTopic: ...


class SubscriptionOwner(Protocol):
    """The port a subscription reaches its topic through: exactly what it (and its dispatcher)
    reads and asks of it. A protocol rather than the topic's class, so the subscription sits
    below the topic that owns it instead of in an import circle with it; the topic satisfies
    it structurally."""

    @property
    def name(self) -> str: ...

    @property
    def topic_name(self) -> TopicName: ...

    @property
    def partition(self) -> int: ...

    @property
    def ledger(self) -> ManagedLedger: ...

    @property
    def settings(self) -> TopicSettings: ...

    @property
    def registry(self) -> BrokerTopics: ...

    @property
    def rate_in(self) -> RateMeter: ...

    @property
    def dispatch_throttle(self) -> Throttle: ...

    @property
    def subscription_dispatch_limit(self) -> RateLimit: ...

    async def remove_subscription(self, subscription: Subscription) -> None: ...

    async def delete_subscription(self, subscription: Subscription) -> None: ...


class Subscription:
    def __init__(
        self,
        topic: SubscriptionOwner,
        name: str,
        cursor: ManagedCursor,
    ) -> None:
        self.topic = topic
        self.name = name
        self.cursor = cursor
        self.type: SubType | None = None
        self.dispatcher: Dispatcher | None = None
        self.state = SubscriptionState.OPEN
        # Pulsar's InMemoryRedeliveryTracker: how often each entry was redelivered.
        self._redeliveries: dict[Position, int] = {}
        # Negative-ack timers: a dict as an ordered set (empty, 64 B to a set's 216; most
        # subscriptions of a broker with thousands have none).
        self._timers: dict[asyncio.TimerHandle, None] = {}
        # The last negative ack of each entry pending on a consumer, waiting for its delay:
        # the delivery it named and the timer that redelivers it (an earlier timer finds
        # itself replaced and skips the entry). A nack names a delivery, not an entry: a
        # batch whose messages were nacked in several requests is redelivered once, after
        # the last of them (Pulsar's NegativeAcksTracker keys its map by entry, batch index
        # discarded, and a later nack moves the deadline); an earlier delivery's nack never
        # takes back a later delivery of the entry.
        self._nacked: dict[tuple[Consumer, Position], tuple[PendingEntry, asyncio.TimerHandle]]
        self._nacked = {}
        self._ack_timeout_task: asyncio.Task[None] | None = None
        # Delivered (msgOutCounter, bytesOutCounter, msgRateOut...), redelivered
        # (msgRedeliverCounter, msgRateRedeliver); epoch ms of the last delivery and ack.
        self.rate_out = RateMeter()
        self.redelivered = RateMeter()
        self.last_consumed_ms = 0
        self.last_acked_ms = 0
        self.dead_letter_failures = 0  # entries sent back because the dead-letter publish failed
        # This subscription's own dispatch rate (the topic keeps it current); the topic's and
        # the broker's are shared with the other subscriptions.
        self.dispatch_throttle = Throttle(
            topic.subscription_dispatch_limit, publish_rate=topic.rate_in.rates
        )
        self._throttled_events: Counter[tuple[ThrottleScope, Kind]] = Counter()
        # The time its dispatcher waited for a dispatch rate: the waits that ended, and since
        # when it has been waiting now (None: it is not).
        self._throttled_s = 0.0
        self._throttled_since: float | None = None

    def __repr__(self) -> str:
        return f"{self.topic.name}/{self.name}"

    @property
    def consumers(self) -> Sequence[Consumer]:
        """The connected consumers, in join order: the dispatcher's list, the one copy."""
        return () if self.dispatcher is None else self.dispatcher.consumers

    @property
    def durable(self) -> bool:
        return self.cursor.durable

    # ------------------------------------------------------------ consumers

    def add_consumer(self, consumer: Consumer, sub_type: SubType) -> None:
        if self.type is not None and self.consumers and sub_type is not self.type:
            raise ConsumerBusyError(
                f"subscription {self.name} is of type {self.type.value}, not {sub_type.value}"
            )
        if sub_type is SubType.Exclusive and self.consumers:
            raise ConsumerBusyError(f"Exclusive consumer is already connected to {self.name}")
        policy = consumer.options.key_shared
        if sub_type is SubType.Key_Shared and self.consumers:
            conflict = policy.conflict_with(self.consumers[0].options.key_shared)
            if conflict is not None:
                raise ConsumerBusyError(conflict)
        if (
            self.dispatcher is None
            or sub_type is not self.type
            or (
                isinstance(self.dispatcher, KeySharedDispatcher)
                and not self.dispatcher.policy.same_dispatch(policy)
            )
        ):
            if self.dispatcher is not None:
                self.dispatcher.detach()
            self.dispatcher = self._new_dispatcher(sub_type, policy)
            self.type = sub_type
        # The dispatcher first: when it refuses the consumer (Key_Shared with no hash range
        # left, or Sticky ranges another consumer has), the subscription does not list a
        # consumer that gets nothing.
        self.dispatcher.add_consumer(consumer)
        if consumer.options.ack_timeout_ms > 0 and self._ack_timeout_task is None:
            self._ack_timeout_task = asyncio.get_running_loop().create_task(
                self._ack_timeout_loop()
            )

    def _new_dispatcher(self, sub_type: SubType, policy: KeySharedPolicy) -> Dispatcher:
        settings = self.topic.settings.dispatch
        if sub_type is SubType.Exclusive:
            return SingleActiveConsumerDispatcher(self, self.cursor, settings)
        if sub_type is SubType.Failover:
            return SingleActiveConsumerDispatcher(
                self, self.cursor, settings, settings.failover_delay_s
            )
        if sub_type is SubType.Shared:
            return SharedDispatcher(self, self.cursor, settings)
        return KeySharedDispatcher(self, self.cursor, settings, policy)

    async def remove_consumer(self, consumer: Consumer) -> None:
        if self.dispatcher is None or consumer not in self.dispatcher.consumers:
            return
        if self.state is SubscriptionState.CLOSED:
            # The closed dispatcher hands nothing over (it would read a closed ledger).
            self.dispatcher.drop_consumer(consumer)
            return
        self.dispatcher.remove_consumer(consumer)
        if not self.consumers:
            await self._stop_timers()
            if not self.durable:
                await self.topic.remove_subscription(self)

    def consumer_flow(self, consumer: Consumer) -> None:
        """``consumer`` added permits to its own count (Pulsar's consumerFlow)."""
        assert self.dispatcher is not None
        self.dispatcher.consumer_flow(consumer)

    # ------------------------------------------------------------ acks

    async def acknowledge(
        self, consumer: Consumer, ids: Iterable[AckId], cumulative: bool
    ) -> asyncio.Future[None]:
        """Apply acks; the returned future resolves once the state holding them is durable.

        A request the client may not send (cumulative on Shared or Key_Shared, an entry that
        does not exist yet, a batch index outside its batch) raises a BrokerError and changes
        nothing. Awaiting reads an entry only for a batch-index ack of an entry that no
        consumer has pending (its batch size is not known otherwise).
        """
        ids = list(ids)
        if not ids:
            return _gather([])
        if cumulative and self.type in (SubType.Shared, SubType.Key_Shared):
            raise NotAllowedError(
                f"cumulative ack is not allowed on a {self.type.value} subscription"
            )
        # A request of many ids (a client may send hundreds of thousands in one) is taken in
        # slices, yielding to the loop between them, so other clients wait a slice at most;
        # every id is checked before any is applied, so a refused ack still changes nothing.
        many = len(ids) > ACK_SLICE
        indexed: set[Position] = set()  # entries whose batch size the check needs
        for part in _slices(ids):
            for position, batch_index in part:
                self.cursor.check_ackable(position)
                if batch_index >= 0 and not self.cursor.is_deleted(position):
                    indexed.add(position)
            if many:
                await asyncio.sleep(0)
        sizes = await self._batch_sizes(consumer, indexed)
        for part in _slices(ids):
            for position, batch_index in part:
                size = sizes.get(position)
                if size is not None and batch_index >= size:
                    raise InvalidArgumentError(
                        f"batch index {batch_index} of {position} is outside its batch of {size}"
                    )
            if many:
                await asyncio.sleep(0)
        consumer.last_acked_ms = self.last_acked_ms = time.time_ns() // 1_000_000
        if cumulative:
            return self._ack_cumulative(consumer, max(ids), sizes)
        futures: list[asyncio.Future[None]] = []
        by_entry: dict[Position, list[int]] = {}
        whole: list[Position] = []
        for part in _slices(ids):
            for position, batch_index in part:
                if batch_index < 0 or position not in sizes:
                    whole.append(position)  # a whole entry, or one acked already
                else:
                    by_entry.setdefault(position, []).append(batch_index)
            if many:
                await asyncio.sleep(0)
        completed: list[Position] = []  # entries whose last unacked indexes these were
        for position, indexes in by_entry.items():
            size = sizes[position]
            futures.append(self.cursor.ack_batch_indexes(position, indexes, size))
            still_unacked = self.cursor.unacked_count(position, size)
            if still_unacked:
                self._partially_acked(position, still_unacked)
            else:
                completed.append(position)
        for entries in _slices(whole) if whole else ():
            futures.append(self.cursor.delete(entries))
            if many:
                await asyncio.sleep(0)
        for entries in _slices(whole + completed):
            self._forget(entries)
            if many:
                await asyncio.sleep(0)
        return _gather(futures)

    def _ack_cumulative(
        self, consumer: Consumer, ack: AckId, sizes: dict[Position, int]
    ) -> asyncio.Future[None]:
        position, batch_index = ack
        size = sizes.get(position)
        if size is not None and batch_index < size - 1:
            # Inside a batch: everything before the entry, and its indexes up to this one.
            done = self.cursor.mark_delete_before(position, range(batch_index + 1), size)
            self._partially_acked(position, self.cursor.unacked_count(position, size))
            self._forget([p for p in consumer.pending if p < position])
        else:
            done = self.cursor.mark_delete(position)
            self._forget([p for p in consumer.pending if p <= position])
        return done

    async def _batch_sizes(
        self, consumer: Consumer, positions: set[Position]
    ) -> dict[Position, int]:
        """Messages in each entry: known for entries pending on a consumer, read from the
        entry otherwise (after a reconnect, or while the entry waits for redelivery)."""
        sizes: dict[Position, int] = {}
        unknown: list[Position] = []
        holders = (consumer, *self.consumers)
        for part in _slices(list(positions)):
            for position in part:
                for c in holders:
                    pending = c.pending.get(position)
                    if pending is not None:
                        sizes[position] = pending.batch_size
                        break
                else:
                    unknown.append(position)
            if len(positions) > ACK_SLICE:
                await asyncio.sleep(0)
        for position in unknown:
            entry = await self.topic.ledger.read_entry(position)
            if entry is not None:
                sizes[position] = entry_format.info(entry.data).num_messages
        return sizes

    def _partially_acked(self, position: Position, still_unacked: int) -> None:
        for consumer in self.consumers:
            if position in consumer.pending:
                consumer.partially_acked(position, still_unacked)
                return

    def _forget(self, positions: Iterable[Position]) -> None:
        unblocked = False
        for position in positions:
            self._redeliveries.pop(position, None)
            for consumer in self.consumers:
                if consumer.release(position) is not None:
                    unblocked = True
                    break
        if unblocked and self.dispatcher is not None:
            self.dispatcher.trigger()

    # ------------------------------------------------------------ redelivery

    def redelivery_count(self, position: Position) -> int:
        return self._redeliveries.get(position, 0)

    def on_dispatched(self, consumer: Consumer, deliveries: list[Delivery]) -> None:
        """Count what a dispatcher just sent ``consumer``, against the dispatch rates too."""
        messages = sum(d.num_messages for d in deliveries)
        nbytes = sum(len(d.data) for d in deliveries)
        consumer.rate_out.record(messages, nbytes)
        self.rate_out.record(messages, nbytes)
        consumer.last_consumed_ms = self.last_consumed_ms = time.time_ns() // 1_000_000
        for _, throttle in self._dispatch_throttles():
            throttle.consume(messages, nbytes)

    # ------------------------------------------------------------ dispatch rate

    def _dispatch_throttles(self) -> tuple[tuple[ThrottleScope, Throttle], ...]:
        return (
            (ThrottleScope.SUBSCRIPTION, self.dispatch_throttle),
            (ThrottleScope.TOPIC, self.topic.dispatch_throttle),
            (ThrottleScope.BROKER, self.topic.registry.dispatch_throttle),
        )

    def dispatch_delay_s(self) -> float:
        """How long the dispatcher must wait before reading more (0: it may read now);
        each rate that holds it back counts one throttling event."""
        longest = 0.0
        for scope, throttle in self._dispatch_throttles():
            wait, kind = throttle.delay(need_one=True)
            if kind is not None:
                self._throttled_events[(scope, kind)] += 1
                longest = max(longest, wait)
        return longest

    def throttle_began(self) -> None:
        """The dispatcher waits for a dispatch rate (again: a wait re-armed goes on)."""
        if self._throttled_since is None:
            self._throttled_since = time.monotonic()

    def throttle_ended(self) -> None:
        if self._throttled_since is not None:
            self._throttled_s += time.monotonic() - self._throttled_since
            self._throttled_since = None

    def dispatch_allowance(self, kind: Kind) -> float | None:
        """Messages (or bytes) the dispatch rates allow now; None when none limits them."""
        found = [a for _, t in self._dispatch_throttles() if (a := t.available(kind)) is not None]
        return min(found) if found else None

    def throttle_stats(self) -> dict[str, int]:
        """Pulsar's SubscriptionStats dispatchThrottled*Events* counters, and the time the
        dispatcher waited for a dispatch rate (ours, as the topic's publishThrottledTimeMs)."""
        waited = self._throttled_s
        if self._throttled_since is not None:
            waited += time.monotonic() - self._throttled_since
        return {
            **{
                f"dispatchThrottled{'Msg' if kind is Kind.MESSAGES else 'Bytes'}EventsBy"
                f"{scope.value}Limit": self._throttled_events[(scope, kind)]
                for scope in ThrottleScope
                for kind in Kind
            },
            "dispatchThrottledTimeMs": int(waited * 1000),
        }

    def negative_acknowledge(self, consumer: Consumer, positions: Iterable[Position]) -> None:
        """Redeliver after the consumer's negative-ack delay, or its backoff's delay for each
        entry's redelivery count (broker-side, unlike Pulsar's client-side tracker, so a
        client in any language gets it for free).

        Only entries pending on ``consumer`` now count (one acked or already taken back has
        nothing left to redeliver), and each delivery is redelivered at most once: nacking
        more messages of a batch in a later request moves its redelivery to the later
        deadline instead of redelivering it again (see ``_nacked``).
        """
        wanted: dict[Position, PendingEntry] = {}
        for position in positions:
            pending = consumer.pending.get(position)
            if pending is None:
                continue
            wanted[position] = pending
        backoff = consumer.options.negative_ack_backoff
        if backoff is None:
            if wanted:
                self._nack_timer(consumer, wanted, consumer.options.negative_ack_delay_ms)
            return
        groups = by_delay(wanted, lambda p: backoff.next(self._redeliveries.get(p, 0)))
        for delay_ms, group in groups.items():
            self._nack_timer(consumer, {p: wanted[p] for p in group}, delay_ms)

    def _nack_timer(
        self, consumer: Consumer, wanted: dict[Position, PendingEntry], delay_ms: int
    ) -> None:
        """One timer that redelivers ``wanted`` after ``delay_ms``, unless a later nack of an
        entry took it over or the entry left the consumer meanwhile."""
        handle: asyncio.TimerHandle

        def fire() -> None:
            self._timers.pop(handle, None)
            due: list[Position] = []
            for position, pending in wanted.items():
                key = (consumer, position)
                latest = self._nacked.get(key)
                if latest is None or latest[1] is not handle:
                    continue  # a later nack of the same entry took it over
                del self._nacked[key]
                if consumer.pending.get(position) is pending:
                    due.append(position)
            if due:
                self.redeliver(consumer, due)

        handle = asyncio.get_running_loop().call_later(delay_ms / 1000, fire)
        self._timers[handle] = None
        for position, pending in wanted.items():
            self._nacked[(consumer, position)] = (pending, handle)

    def redeliver(self, consumer: Consumer, positions: Iterable[Position] | None = None) -> None:
        """Take entries back from a consumer and deliver them again, counting redeliveries;
        entries over the dead-letter policy's limit go to the dead-letter topic instead."""
        chosen = list(consumer.pending) if positions is None else list(positions)
        back: list[tuple[Position, int | None]] = []
        dead: list[tuple[Position, int | None]] = []
        policy = consumer.options
        for position in chosen:
            pending = consumer.release(position)
            if pending is None:
                continue
            count = self._redeliveries.get(position, 0)
            if policy.max_redeliver_count > 0 and count >= policy.max_redeliver_count:
                dead.append((position, pending.sticky_hash))
                continue
            self._redeliveries[position] = count + 1
            self.redelivered.record(pending.num_messages)
            consumer.redelivered.record(pending.num_messages)
            back.append((position, pending.sticky_hash))
        if back and self.dispatcher is not None:
            self.dispatcher.redeliver(back)
        if dead:
            topic_name = policy.dead_letter_topic or dead_letter_topic_name(self)
            task = asyncio.get_running_loop().create_task(
                self._dead_letter(topic_name, dead, policy.dead_letter_initial_subscription)
            )
            task.add_done_callback(_log_failure)

    async def _dead_letter(
        self,
        topic_name: str,
        dead: list[tuple[Position, int | None]],
        initial_subscription: str | None = None,
    ) -> None:
        """Publish each entry's unacked messages to the dead-letter topic, then ack it. The
        copy carries the dead-letter topic's version of the schema the messages were written
        with (registered there first). An entry that cannot be dead-lettered (its schema
        refused there included) goes back for redelivery (and is tried again on its next
        negative ack or ack timeout), so it is never left neither delivered nor dead.
        ``initial_subscription`` (the policy's): made on the dead-letter topic first, as
        Pulsar's client creates it with the dead-letter producer."""
        try:
            dlq = await self.topic.registry.get_topic(topic_name, create=True)
            if initial_subscription is not None:
                await dlq.ensure_subscription(initial_subscription)
        except Exception as exc:
            self._dead_letter_failed(topic_name, dead, exc)
            return
        for position, sticky_hash in dead:
            try:
                entries = await self.cursor.replay_entries([position])
                if not entries:
                    continue  # acked meanwhile
                version = entry_format.schema_version(entries[0].data)
                if version:
                    version = await self.topic.registry.schemas.carry_schema(
                        self.topic.topic_name, version, dlq.topic_name
                    )
                data = entry_format.dead_letter(
                    entries[0].data,
                    acked=self.cursor.acked_mask(
                        position, entry_format.info(entries[0].data).num_messages
                    ),
                    real_topic=self.topic.name,
                    real_subscription=self.name,
                    origin_position=position,
                    partition=self.topic.partition,
                )
                await dlq.publish_system(data, version)
            except Exception as exc:
                self._dead_letter_failed(topic_name, [(position, sticky_hash)], exc)
                continue
            self._redeliveries.pop(position, None)
            await self.cursor.delete([position])

    def _dead_letter_failed(
        self, topic_name: str, dead: list[tuple[Position, int | None]], error: BaseException
    ) -> None:
        self.dead_letter_failures += len(dead)
        log.warning(
            "%s: cannot publish %d entries to dead-letter topic %s, redelivering them: %s",
            self,
            len(dead),
            topic_name,
            error,
        )
        if self.dispatcher is not None:
            self.dispatcher.redeliver(dead)

    async def _ack_timeout_loop(self) -> None:
        """Pulsar's UnAckedMessageTracker: a tick of a quarter of the shortest timeout (at
        most 1 s, Pulsar's ackTimeoutTickTime) bounds how late a redelivery can be."""
        while True:
            timeouts = [
                c.options.ack_timeout_ms for c in self.consumers if c.options.ack_timeout_ms
            ]
            await asyncio.sleep(min([1.0, *(t / 4000 for t in timeouts)]))
            now = time.monotonic()
            for consumer in list(self.consumers):
                if consumer.options.ack_timeout_ms > 0:
                    expired = consumer.expired(now, self._ack_timeout_backoff_s(consumer))
                    if expired:
                        self.redeliver(consumer, expired)

    def _ack_timeout_backoff_s(self, consumer: Consumer) -> Callable[[Position], float]:
        """How much longer than the ack timeout an entry waits (Java's
        UnAckedMessageRedeliveryTracker: the backoff of its redelivery count; none without)."""
        backoff = consumer.options.ack_timeout_backoff
        if backoff is None:
            return _no_backoff
        return lambda position: backoff.next(self._redeliveries.get(position, 0)) / 1000

    async def _stop_timers(self) -> None:
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        self._nacked.clear()
        if self._ack_timeout_task is not None:
            self._ack_timeout_task.cancel()
            try:
                await self._ack_timeout_task
            except asyncio.CancelledError:
                pass
            self._ack_timeout_task = None

    # ------------------------------------------------------------ seek / unsubscribe

    async def seek(
        self,
        on_reset: Callable[[], None],
        position: Position | None = None,
        publish_time: int | None = None,
        batch_index: int = 0,
    ) -> None:
        """Reset the cursor (Pulsar's resetCursor): by message id, or to the first entry
        published at or after ``publish_time``.

        A message id inside a batch (``batch_index`` > 0) starts at that message: the
        batch's earlier messages count as acked. A position past the end lands at the end.

        Dispatch stops for the whole seek, and ``on_reset`` runs before it starts again, so a
        consumer's stream shows everything read before the seek, then the seek's answer, then
        the messages from the new position.
        """
        if publish_time is not None:
            before = await self.topic.ledger.find_newest_matching(
                lambda data: entry_format.info(data).publish_time < publish_time
            )
            target = (
                self.topic.ledger.next_position(before)
                if before is not None
                else self.topic.ledger.first_position()
            )
            skip, size = 0, 0
        else:
            assert position is not None
            target = position
            skip, size = max(batch_index, 0), 0
            if skip:
                entry = await self.topic.ledger.read_entry(target)
                size = entry_format.info(entry.data).num_messages if entry else 0
        dispatcher = self.dispatcher
        if dispatcher is not None:
            await dispatcher.pause()
            dispatcher.reset()
        self._redeliveries.clear()
        try:
            await self.cursor.reset_cursor(target, skip, size)
            on_reset()
        finally:
            if dispatcher is not None:
                dispatcher.resume()

    async def unsubscribe(self, consumer: Consumer) -> None:
        if any(c is not consumer for c in self.consumers):
            raise NotAllowedError(f"cannot unsubscribe {self.name}: other consumers are connected")
        await self.close()
        await self.topic.delete_subscription(self)

    async def close(self) -> None:
        self.state = SubscriptionState.CLOSED
        await self._stop_timers()
        if self.dispatcher is not None:
            await self.dispatcher.close()

    # ------------------------------------------------------------ stats

    def backlog(self) -> int:
        return self.cursor.get_number_of_entries_in_backlog()

    # ------------------------------------------------------------ stats

    def update_stats(self) -> None:
        """The stats task's tick, for this subscription and its consumers."""
        self.rate_out.update()
        self.redelivered.update()
        for consumer in self.consumers:
            consumer.rate_out.update()
            consumer.redelivered.update()

    def stats(self) -> dict[str, object]:
        """Pulsar's SubscriptionStats fields where they apply, its consumers' included."""
        return {
            "type": self.type.value if self.type else None,
            "msgBacklog": self.backlog(),
            "backlogSize": self.topic.ledger.estimated_size_after(self.cursor.mark_delete_position),
            "msgRateOut": self.rate_out.msg_rate,
            "msgThroughputOut": self.rate_out.byte_rate,
            "msgRateRedeliver": self.redelivered.msg_rate,
            "msgOutCounter": self.rate_out.messages,
            "bytesOutCounter": self.rate_out.bytes,
            "msgRedeliverCounter": self.redelivered.messages,
            "lastConsumedTimestamp": self.last_consumed_ms,
            "lastAckedTimestamp": self.last_acked_ms,
            "deadLetterPublishFailures": self.dead_letter_failures,
            **self.throttle_stats(),
            "dispatchRateLimit": RateKind.SUBSCRIPTION_DISPATCH.as_json(
                self.dispatch_throttle.limit
            ),
            "isDurable": self.durable,
            "unackedMessages": sum(c.unacked_messages for c in self.consumers),
            **(
                self.dispatcher.policy_stats()
                if isinstance(self.dispatcher, KeySharedDispatcher)
                else {}
            ),
            "consumers": [
                {
                    "consumerName": c.name,
                    "address": c.client_address,
                    "clientVersion": c.client_version,
                    "metadata": dict(c.options.metadata),
                    "connectedSince": iso_utc(c.connected_since),
                    "availablePermits": c.permits,
                    "unackedMessages": c.unacked_messages,
                    "msgRateOut": c.rate_out.msg_rate,
                    "msgThroughputOut": c.rate_out.byte_rate,
                    "msgRateRedeliver": c.redelivered.msg_rate,
                    "msgOutCounter": c.rate_out.messages,
                    "bytesOutCounter": c.rate_out.bytes,
                    "lastConsumedTimestamp": c.last_consumed_ms,
                    "lastAckedTimestamp": c.last_acked_ms,
                }
                for c in self.consumers
            ],
        }


def dead_letter_topic_name(subscription: Subscription) -> str:
    """Pulsar's default dead-letter topic: ``<topic>-<subscription>-DLQ``."""
    return f"{subscription.topic.name}-{subscription.name}-DLQ"


def _no_backoff(_: Position) -> float:
    return 0.0


def _slices(items: list[T]) -> Iterator[list[T]]:
    """``items`` in consecutive slices of ACK_SLICE (one slice when it is that short)."""
    if len(items) <= ACK_SLICE:
        yield items
        return
    for start in range(0, len(items), ACK_SLICE):
        yield items[start : start + ACK_SLICE]


def _gather(futures: list[asyncio.Future[None]]) -> asyncio.Future[None]:
    loop = asyncio.get_running_loop()
    if not futures:
        done: asyncio.Future[None] = loop.create_future()
        done.set_result(None)
        return done
    if len(futures) == 1:
        return futures[0]
    joined = asyncio.gather(*futures)
    result: asyncio.Future[None] = loop.create_future()

    def finish(f: asyncio.Future[list[None]]) -> None:
        if f.cancelled():
            result.cancel()
        elif f.exception() is not None:
            result.set_exception(f.exception())  # type: ignore[arg-type]
        else:
            result.set_result(None)

    joined.add_done_callback(finish)
    return result


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("dead-letter publish failed", exc_info=task.exception())
