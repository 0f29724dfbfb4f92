"""A persistent topic: its managed ledger, producers and subscriptions.

When its managed ledger is fenced (another broker opened it: that broker owns the topic now),
the topic stops serving at once, as an unload does: the registry forgets it and every producer
and consumer ends with ManagedLedgerFencedError (ServiceNotReady), so clients look the topic up
again and reach the new owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
from collections.abc import Mapping
from typing import Literal, Protocol

from pulsar_grpc.broker import entry_format
from pulsar_grpc.broker.cluster.id_generator import DistributedIdGenerator
from pulsar_grpc.broker.errors import (
    BrokerError,
    ManagedLedgerFencedError,
    ProducerBusyError,
    ServiceNotReadyError,
    SubscriptionNotFoundError,
    TooLargeError,
)
from pulsar_grpc.broker.ledger import ManagedCursor, ManagedLedger, Position
from pulsar_grpc.broker.meters import RateMeter, iso_utc
from pulsar_grpc.broker.naming import DEDUPLICATION_CURSOR, TopicName, check_subscription_name
from pulsar_grpc.broker.resources import NamespaceResources
from pulsar_grpc.broker.topics.backlog_hold import BacklogHold
from pulsar_grpc.broker.topics.backlog_quota import TopicQuotas
from pulsar_grpc.broker.topics.consumer import Consumer, ConsumerOptions
from pulsar_grpc.broker.topics.dedup import Deduplication
from pulsar_grpc.broker.topics.encryption_policy import EncryptionPolicy
from pulsar_grpc.broker.topics.producer import Producer, PublishReceipt
from pulsar_grpc.broker.topics.producer_access import ExclusiveAccess, ProducerAccessMode
from pulsar_grpc.broker.topics.rate_limit import RateLimit, Throttle
from pulsar_grpc.broker.topics.rate_policies import RateKind, TopicLimits, broker_default
from pulsar_grpc.broker.topics.settings import DedupSettings, TopicSettings
from pulsar_grpc.broker.topics.subscription import BrokerTopics, Subscription, SubType
from pulsar_grpc.broker.topics.transport import ConsumerTransport

_ids = itertools.count(1)
SYSTEM_PRODUCER = "pulsar.system"  # the producer name of broker-made entries (dead letters)


class TopicOwner(BrokerTopics, Protocol):
    """The port a topic reaches the broker's topics (its registry) through: what it reads and
    asks of it, and what its subscriptions do through it (BrokerTopics). A protocol rather than
    the registry's class, so the topic sits below the registry that owns it instead of in an
    import circle with it; the registry satisfies it structurally."""

    @property
    def settings(self) -> TopicSettings: ...

    @property
    def producer_names(self) -> DistributedIdGenerator: ...

    @property
    def publish_throttle(self) -> Throttle: ...

    @property
    def resources(self) -> NamespaceResources: ...

    def forget(self, topic: PersistentTopic) -> None: ...


class PersistentTopic:
    def __init__(
        self,
        registry: TopicOwner,
        topic_name: TopicName,
        ledger: ManagedLedger,
        dedup: Deduplication | None,
    ) -> None:
        self.registry = registry  # the broker's topics: a dead-letter topic is loaded there
        self.topic_name = topic_name
        self.name = topic_name.full_name
        self.partition = topic_name.partition_index
        self.ledger = ledger
        self.producers: dict[str, Producer] = {}
        self.subscriptions: dict[str, Subscription] = {}
        self._dedup = dedup
        self._dedup_change = asyncio.Lock()  # set_deduplication: one change at a time
        # Exclusive producers and the topic epoch (PIP-68), read back from the ledger's node.
        self.access = ExclusiveAccess(self.name, ledger, self.producers.keys, self._fence_producer)
        self._system_producer: Producer | None = None  # made at its first dead letter
        self._closed = False
        self._fencing: asyncio.Task[None] | None = None  # the close after a fence, kept alive
        # Rate limits (rate_policies.RatePolicies keeps them current): the publish rate of all
        # producers together, the dispatch rate of all subscriptions together, and the limit
        # each subscription gets on its own.
        # What was published (msgInCounter, msgRateIn...): a relative dispatch rate follows it.
        self.rate_in = RateMeter()
        self.publish_throttle = Throttle(broker_default(self.settings.rates, RateKind.PUBLISH))
        # Set (and replaced) when the limits change: producers held back wake to the new ones.
        # Made by the first producer held back: most topics never are (an Event is 0.7 KB).
        self._limits_changed: asyncio.Event | None = None
        self.dispatch_throttle = Throttle(
            broker_default(self.settings.rates, RateKind.DISPATCH), publish_rate=self.rate_in.rates
        )
        self.subscription_dispatch_limit: RateLimit = broker_default(
            self.settings.rates, RateKind.SUBSCRIPTION_DISPATCH
        )
        self.publish_rate_limited_times = 0  # Pulsar's publishRateLimitedTimes
        # The namespace's encryption_required (RatePolicies keeps it current too): the produce
        # path refuses unencrypted batches while it is REQUIRED.
        self.encryption = EncryptionPolicy.OPTIONAL
        self.publish_throttled_s = 0.0  # time producers' streams were not read, in total
        # Backlog quotas (RatePolicies keeps them current, backlog_quota_check applies them).
        self.backlog = BacklogHold()

    @classmethod
    async def load(
        cls,
        registry: TopicOwner,
        topic_name: TopicName,
        ledger: ManagedLedger,
        deduplication: bool | None = None,
    ) -> PersistentTopic:
        """``deduplication``: whether it is on (the namespace's deduplicationEnabled, else
        brokerDeduplicationEnabled: None says the latter)."""
        settings = registry.settings.dedup
        if deduplication is None:
            deduplication = settings.enabled
        dedup = await _recover_dedup(ledger, settings) if deduplication else None
        topic = cls(registry, topic_name, ledger, dedup)
        # An empty context: the callback would otherwise keep a copy of the loading call's
        # context (its CallContext, headers...) for the topic's whole life.
        ledger.fenced.add_done_callback(topic._on_fenced, context=contextvars.Context())
        for name, cursor in ledger.cursors.items():
            if name != DEDUPLICATION_CURSOR:
                topic.subscriptions[name] = Subscription(topic, name, cursor)
        # Ledgers every cursor had consumed before the restart (the dedup cursor's snapshot at
        # close moves it to the end) would otherwise wait for the next rollover or ack.
        ledger.schedule_trim()
        return topic

    # ------------------------------------------------------------ producers

    async def add_producer(
        self,
        name: str | None,
        client_address: str = "",
        schema_version: bytes = b"",
        client_version: str = "",
        access_mode: ProducerAccessMode = ProducerAccessMode.SHARED,
        topic_epoch: int | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Producer:
        """Register a producer under its access mode (see producer_access): a
        WaitForExclusive producer returns only once it holds the topic. ``topic_epoch`` is
        the epoch a reconnecting producer held the topic under."""
        self._check_open()
        self.backlog.check_admission(self.backlog_size())
        if name is None:
            name = self.registry.producer_names.next_id()
        self._check_name_free(name)  # first: a reconnect racing its old stream retries
        epoch = await self.access.admit(name, access_mode, topic_epoch)
        try:
            self._check_open()  # the topic may have begun closing while this waited
            self._check_name_free(name)
        except BaseException:
            self.access.released(name)
            raise
        producer = Producer(
            self,
            name,
            client_address,
            producer_id=next(_ids),
            schema_version=schema_version,
            client_version=client_version,
            access_mode=access_mode,
            topic_epoch=epoch,
            metadata=dict(metadata or {}),
        )
        self.producers[name] = producer
        return producer

    def _check_name_free(self, name: str) -> None:
        if name in self.producers:
            raise ProducerBusyError(
                f"producer with name '{name}' is already connected to topic {self.name}"
            )

    def _fence_producer(self, name: str, error: BrokerError) -> None:
        """End a producer another one fenced out: gone from the topic now, its stream ends
        with ``error`` once the receipts of what it had sent are written."""
        producer = self.producers.pop(name, None)
        if producer is not None:
            producer.end(error)

    def remove_producer(self, producer: Producer) -> None:
        if self.producers.get(producer.name) is producer:
            del self.producers[producer.name]
            self.access.released(producer.name)

    def last_sequence_id(self, producer_name: str) -> int:
        return self._dedup.last_sequence_id(producer_name) if self._dedup else -1

    @property
    def settings(self) -> TopicSettings:
        """The registry's current ones: a dynamic change it applies is seen at the next read."""
        return self.registry.settings

    @property
    def deduplication(self) -> bool:
        return self._dedup is not None

    async def set_deduplication(self, enabled: bool) -> None:
        """Turn deduplication on or off on the loaded topic, as Pulsar's checkDeduplicationStatus
        when the namespace policy changes. On: its state is recovered from the ``pulsar.dedup``
        cursor (created from the earliest entry, so the sequence ids already stored count)
        before it takes effect; batches published during the recovery are not checked. Off:
        it stops at once and its cursor is deleted, freeing the ledgers it held (also done to
        a cursor left from an earlier life of the topic). One change at a time."""
        async with self._dedup_change:
            if self._closed:
                return
            if enabled and self._dedup is None:
                dedup = await _recover_dedup(self.ledger, self.settings.dedup)
                if self._closed:  # unloaded while recovering: close() saw no dedup
                    dedup.stop()
                    return
                self._dedup = dedup
            elif not enabled:
                old, self._dedup = self._dedup, None
                if old is not None:
                    old.stop()
                if DEDUPLICATION_CURSOR in self.ledger.cursors:
                    await self.ledger.delete_cursor(DEDUPLICATION_CURSOR)

    def publish(
        self, producer: Producer, data: bytes, sequence_id: int, num_messages: int
    ) -> asyncio.Future[PublishReceipt]:
        loop = asyncio.get_running_loop()
        highest = sequence_id + max(num_messages, 1) - 1
        max_size = self.settings.publish.max_message_size
        if len(data) > max_size:
            raise TooLargeError(f"batch of {len(data)} bytes exceeds maxMessageSize {max_size}")
        dedup = self._dedup
        if dedup is not None and dedup.is_duplicate(producer.name, sequence_id):
            return _duplicate_receipt(
                dedup.original_stored(producer.name, sequence_id),
                PublishReceipt(sequence_id, highest, None, num_messages),
            )
        self.rate_in.record(num_messages, len(data))
        self.publish_throttle.consume(num_messages, len(data))
        self.registry.publish_throttle.consume(num_messages, len(data))
        stored = self.ledger.add_entry(data)
        if dedup is not None:
            dedup.accept(producer.name, highest, stored)
        receipt: asyncio.Future[PublishReceipt] = loop.create_future()

        def done(f: asyncio.Future[Position]) -> None:
            if f.cancelled() or f.exception() is not None:
                if dedup is not None:
                    dedup.failed()
            if receipt.done():
                return
            if f.cancelled():
                receipt.cancel()
            elif (exc := f.exception()) is not None:
                receipt.set_exception(exc)
            else:
                position = f.result()
                if dedup is not None:
                    dedup.persisted_entry(producer.name, highest, position)
                receipt.set_result(PublishReceipt(sequence_id, highest, position, num_messages))

        stored.add_done_callback(done)
        return receipt

    def publish_delay_s(self) -> float:
        """How long a producer should wait before sending more: this topic's publish rate
        and the broker's, whichever is further over its limit (0: not held back)."""
        return max(self.publish_throttle.delay()[0], self.registry.publish_throttle.delay()[0])

    async def hold_publish(self) -> None:
        """Return once the publish rates allow more and no producer_request_hold backlog
        quota is exceeded (at once when so already). A protocol handler calls it between a
        producer's requests and does not read the next one meanwhile, so its transport's flow
        control holds the client back. Limits changed meanwhile (raised, removed) apply at
        once: the wait is cut short and measured again."""
        await self._hold_for_rate()
        await self.backlog.wait_released()

    async def _hold_for_rate(self) -> None:
        wait = self.publish_delay_s()
        if wait <= 0:
            return
        loop = asyncio.get_running_loop()
        began = loop.time()
        try:
            while wait > 0:
                if self._limits_changed is None:
                    self._limits_changed = asyncio.Event()
                changed = self._limits_changed
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await changed.wait()
                wait = self.publish_delay_s()
        finally:
            self.publish_rate_limited_times += 1
            self.publish_throttled_s += loop.time() - began

    def set_rate_limits(self, limits: TopicLimits) -> None:
        """New limits, live: open producers and subscriptions are held to them at once."""
        self.publish_throttle.update(limits.publish)
        changed, self._limits_changed = self._limits_changed, None
        if changed is not None:
            changed.set()
        self.dispatch_throttle.update(limits.dispatch)
        self.subscription_dispatch_limit = limits.subscription_dispatch
        for subscription in self.subscriptions.values():
            subscription.dispatch_throttle.update(limits.subscription_dispatch)
        for subscription in self.subscriptions.values():
            if subscription.dispatcher is not None:
                subscription.dispatcher.trigger()

    def set_backlog_quotas(self, quotas: TopicQuotas) -> None:
        self.backlog.set_quotas(quotas)

    def end_producers(self, error: BrokerError) -> None:
        """End every producer with ``error`` (a producer_exception backlog quota exceeded):
        each stream ends once the receipts of what it had sent are written."""
        for producer in list(self.producers.values()):
            producer.end(error)

    async def publish_system(self, batch: bytes, schema_version: bytes = b"") -> Position:
        """Publish a broker-made batch (dead-letter messages), its messages written with this
        topic's ``schema_version`` of a schema (empty: none)."""
        if self._system_producer is None:
            self._system_producer = Producer(self, SYSTEM_PRODUCER)
        producer = (
            Producer(self, SYSTEM_PRODUCER, schema_version=schema_version)
            if schema_version
            else self._system_producer
        )
        receipt = await producer.publish(batch, 0, entry_format.info(batch).num_messages)
        assert receipt.position is not None
        return receipt.position

    async def last_message(self) -> tuple[Position, int] | None:
        """The newest entry and the index of its last message; None when there is none."""
        position = self.ledger.last_confirmed_entry
        if position is None:
            return None
        entry = await self.ledger.read_entry(position)
        if entry is None:
            return None
        return position, entry_format.info(entry.data).num_messages - 1

    # ------------------------------------------------------------ subscriptions

    async def subscribe(
        self,
        subscription_name: str,
        sub_type: SubType,
        options: ConsumerOptions,
        transport: ConsumerTransport,
        initial_position: Literal["earliest", "latest"] = "latest",
        durable: bool = True,
        start: Position | Literal["earliest", "latest"] | None = None,
        start_inclusive: bool = False,
        start_batch_index: int = -1,
        client_address: str = "",
        client_version: str = "",
    ) -> Consumer:
        self._check_open()
        if options.dead_letter_topic is not None:
            await self._check_dead_letter_topic(options.dead_letter_topic)
        if options.dead_letter_initial_subscription is not None:
            _check_initial_subscription(options.dead_letter_initial_subscription)
        subscription = self.subscriptions.get(subscription_name)
        if subscription is None:
            if durable:
                cursor = await self.ledger.open_cursor(subscription_name, initial_position)
            else:
                cursor = await self._reader_cursor(
                    start if start is not None else initial_position,
                    start_batch_index,
                    start_inclusive,
                )
            subscription = self.subscriptions.get(subscription_name) or Subscription(
                self, subscription_name, cursor
            )
            self.subscriptions[subscription_name] = subscription
        self._check_open()  # again: the topic may have begun closing while this waited
        consumer = Consumer(
            subscription,
            options,
            transport,
            client_address,
            consumer_id=next(_ids),
            client_version=client_version,
        )
        subscription.add_consumer(consumer, sub_type)
        return consumer

    async def _check_dead_letter_topic(self, name: str) -> None:
        """Refuse at subscribe time a dead-letter topic that can never be created: otherwise
        every message over the redelivery limit would bounce between redelivery and a failed
        dead-letter publish."""
        try:
            await self.registry.resources.check_topic_can_exist(TopicName.get(name))
        except BrokerError as exc:
            raise type(exc)(f"dead-letter topic {name}: {exc.message}") from exc

    async def _reader_cursor(
        self,
        start: Position | Literal["earliest", "latest"],
        batch_index: int,
        inclusive: bool,
    ) -> ManagedCursor:
        """A non-durable cursor; a start inside a batch hides the messages before it (and the
        start message itself unless inclusive), as Pulsar's client does for readers.
        Latest and inclusive: the last message comes first (Pulsar's reader, which seeks to
        the last message id in that case)."""
        if start == "latest" and inclusive:
            last = await self.last_message()
            if last is not None:
                start, batch_index = last
        if isinstance(start, str) or batch_index < 0:
            return self.ledger.new_non_durable_cursor(start, inclusive)
        entry = await self.ledger.read_entry(start)
        size = entry_format.info(entry.data).num_messages if entry else 0
        hidden = batch_index + (0 if inclusive else 1)
        if hidden >= size:
            return self.ledger.new_non_durable_cursor(start, inclusive=False)
        cursor = self.ledger.new_non_durable_cursor(start, inclusive=True)
        if hidden > 0:
            cursor.ack_batch_indexes(start, range(hidden), size)
        return cursor

    async def ensure_subscription(self, name: str) -> None:
        """A durable subscription ``name`` from the earliest entry, unless it exists (a
        dead-letter policy's initial subscription, made before the first dead letter)."""
        self._check_open()
        if name in self.subscriptions:
            return
        self.adopt_subscription(name, await self.ledger.open_cursor(name, "earliest"))

    def adopt_subscription(self, name: str, cursor: ManagedCursor) -> None:
        """Keep a durable subscription over ``cursor`` (just opened), unless a consumer
        subscribed by that name while it was opened: the topic is the one owner of its
        subscriptions map."""
        if name not in self.subscriptions:
            self.subscriptions[name] = Subscription(self, name, cursor)

    def get_subscription(self, name: str) -> Subscription:
        try:
            return self.subscriptions[name]
        except KeyError:
            raise SubscriptionNotFoundError(
                f"subscription {name} does not exist on {self.name}"
            ) from None

    async def remove_subscription(self, subscription: Subscription) -> None:
        """Drop a non-durable subscription once its last consumer is gone."""
        if self.subscriptions.get(subscription.name) is subscription:
            del self.subscriptions[subscription.name]
            await subscription.close()

    async def delete_subscription(self, subscription: Subscription) -> None:
        if self.subscriptions.get(subscription.name) is subscription:
            del self.subscriptions[subscription.name]
        if subscription.durable:
            await self.ledger.delete_cursor(subscription.name)

    # ------------------------------------------------------------ lifecycle

    def _check_open(self) -> None:
        """A closing topic refuses new producers and consumers with ServiceNotReady (Pulsar's
        fenced topic): retryable, the client comes back once the topic is loaded again."""
        if self._closed:
            raise ServiceNotReadyError(f"topic {self.name} is being closed")

    def _on_fenced(self, fenced: asyncio.Future[ManagedLedgerFencedError]) -> None:
        if self._closed:
            return
        self.registry.forget(self)  # so no one else closes it: this task does
        self._fencing = asyncio.get_running_loop().create_task(self.close(fenced.result()))

    async def close(self, reason: BrokerError | None = None) -> None:
        """Unload: every producer's and consumer's stream ends with ServiceNotReady (or
        ``reason``; the producers' after the receipts of what was accepted), deduplication
        takes its snapshot, then the ledger closes once what it accepted is durable."""
        self._closed = True
        unloaded = reason or ServiceNotReadyError(f"topic {self.name} was unloaded")
        self.access.close(unloaded)
        for producer in list(self.producers.values()):
            producer.end(unloaded)
        for subscription in list(self.subscriptions.values()):
            for consumer in list(subscription.consumers):
                consumer.transport.close(unloaded)
            await subscription.close()
        if self._dedup is not None:
            await self._dedup.close()
        await self.ledger.close()

    # ------------------------------------------------------------ stats

    def update_stats(self) -> None:
        """The stats task's tick (every statsUpdateFrequencyInSecs): the rates and buckets of
        the interval that ends now, for the topic, its producers, subscriptions, consumers and
        managed ledger."""
        self.rate_in.update()
        for producer in self.producers.values():
            producer.rate_in.update()
        for subscription in self.subscriptions.values():
            subscription.update_stats()
        self.ledger.stats.update()

    def rates_out(self) -> tuple[float, float]:
        """(msgRateOut, msgThroughputOut): the subscriptions' together, last interval."""
        rates = [s.rate_out.rates() for s in self.subscriptions.values()]
        return sum(r for r, _ in rates), sum(t for _, t in rates)

    def backlog_size(self) -> int:
        """Bytes not yet acked by the slowest durable subscription (Pulsar's backlogSize)."""
        cursors = [s.cursor for s in self.subscriptions.values() if s.durable]
        if not cursors:
            return 0
        slowest = min(c.mark_delete_position for c in cursors)
        return self.ledger.estimated_size_after(slowest)

    def stats(self) -> dict[str, object]:
        """Pulsar's TopicStats fields where they apply (the rates are those of the last stats
        interval, statsUpdateFrequencyInSecs), and the rate limits in effect."""
        rate_in = self.rate_in
        rate_out, throughput_out = self.rates_out()
        return {
            "msgRateIn": rate_in.msg_rate,
            "msgThroughputIn": rate_in.byte_rate,
            "msgRateOut": rate_out,
            "msgThroughputOut": throughput_out,
            "averageMsgSize": rate_in.average_size,
            "msgInCounter": rate_in.messages,
            "bytesInCounter": rate_in.bytes,
            "msgOutCounter": sum(s.rate_out.messages for s in self.subscriptions.values()),
            "bytesOutCounter": sum(s.rate_out.bytes for s in self.subscriptions.values()),
            "storageSize": self.ledger.total_size,
            "backlogSize": self.backlog_size(),
            "publishRateLimitedTimes": self.publish_rate_limited_times,
            "publishThrottledTimeMs": int(self.publish_throttled_s * 1000),
            "publishRateLimit": RateKind.PUBLISH.as_json(self.publish_throttle.limit),
            "dispatchRateLimit": RateKind.DISPATCH.as_json(self.dispatch_throttle.limit),
            "waitingPublishers": self.access.waiting,  # WaitForExclusive producers in line
            **self.backlog.stats(),
            "publishers": [
                {
                    "producerName": p.name,
                    "producerId": p.producer_id,
                    "address": p.client_address,
                    "clientVersion": p.client_version,
                    "accessMode": p.access_mode.value,
                    "metadata": dict(p.metadata),
                    "connectedSince": iso_utc(p.connected_since),
                    "msgRateIn": p.rate_in.msg_rate,
                    "msgThroughputIn": p.rate_in.byte_rate,
                    "averageMsgSize": p.rate_in.average_size,
                    "msgInCounter": p.rate_in.messages,
                    "bytesInCounter": p.rate_in.bytes,
                }
                for p in self.producers.values()
            ],
            "subscriptions": {name: s.stats() for name, s in self.subscriptions.items()},
        }


def _check_initial_subscription(name: str) -> None:
    """Refuse at subscribe time a dead-letter initial subscription that cannot be made."""
    try:
        check_subscription_name(name)
    except BrokerError as exc:
        raise type(exc)(f"dead-letter initial subscription: {exc.message}") from exc


async def _recover_dedup(ledger: ManagedLedger, settings: DedupSettings) -> Deduplication:
    return await Deduplication.recover(
        ledger, settings.entries_interval, settings.snapshot_frequency_s
    )


def _duplicate_receipt(
    original: asyncio.Future[Position] | None, receipt: PublishReceipt
) -> asyncio.Future[PublishReceipt]:
    """A duplicate is answered once its original is durable; if the original fails, so does
    the duplicate, and the client's next resend is stored."""
    answer: asyncio.Future[PublishReceipt] = asyncio.get_running_loop().create_future()
    if original is None:
        answer.set_result(receipt)
        return answer

    def follow(f: asyncio.Future[Position]) -> None:
        if answer.done():
            return
        if f.cancelled():
            answer.cancel()
        elif (exc := f.exception()) is not None:
            answer.set_exception(exc)
        else:
            answer.set_result(receipt)

    original.add_done_callback(follow)
    return answer
