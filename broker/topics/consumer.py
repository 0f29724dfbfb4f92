"""A consumer attached to a subscription: permits, pending acks, timers."""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from pulsar_grpc.broker.ledger import Position
from pulsar_grpc.broker.meters import RateMeter
from pulsar_grpc.broker.topics.key_shared_policy import AUTO_SPLIT_IN_ORDER, KeySharedPolicy
from pulsar_grpc.broker.topics.redelivery_backoff import MultiplierRedeliveryBackoff
from pulsar_grpc.broker.topics.transport import ConsumerTransport, Delivery

# A message id as acked by a client: the entry's position and a batch index (-1 = whole entry).
AckId = tuple[Position, int]


class ConsumerOwner(Protocol):
    """The port a consumer forwards its client's requests through (Pulsar's Consumer forwards
    to its subscription the same way). A protocol rather than the subscription's class, so the
    consumer sits below the subscription that owns it instead of in an import circle with it;
    the subscription satisfies it structurally."""

    def consumer_flow(self, consumer: Consumer) -> None: ...

    async def acknowledge(
        self, consumer: Consumer, ids: Iterable[AckId], cumulative: bool
    ) -> asyncio.Future[None]: ...

    def negative_acknowledge(self, consumer: Consumer, positions: Iterable[Position]) -> None: ...

    def redeliver(self, consumer: Consumer) -> None: ...

    async def seek(
        self,
        on_reset: Callable[[], None],
        position: Position | None = None,
        publish_time: int | None = None,
        batch_index: int = 0,
    ) -> None: ...

    async def unsubscribe(self, consumer: Consumer) -> None: ...

    async def remove_consumer(self, consumer: Consumer) -> None: ...


class Tracking(enum.Enum):
    """Whether what a consumer is sent waits for its ack: a durable subscription's does; a
    reader's (non-durable) never acks, so tracking its deliveries would only grow."""

    PENDING_UNTIL_ACKED = enum.auto()
    UNTRACKED = enum.auto()


@dataclass(slots=True)
class PendingEntry:
    """An entry delivered to a consumer and not fully acked yet."""

    num_messages: int  # delivered and not acked yet (counted in unacked_messages)
    batch_size: int  # messages in the entry, acked ones included
    delivered_at: float
    sticky_hash: int | None = None


@dataclass(slots=True)
class ConsumerOptions:
    """What a client chose for this consumer (call parameters in the gRPC handler)."""

    name: str
    priority_level: int = 0
    ack_timeout_ms: int = 0
    negative_ack_delay_ms: int = 60_000
    max_redeliver_count: int = 0
    dead_letter_topic: str | None = None
    # Made on the dead-letter topic (from its earliest entry) before anything is written there.
    dead_letter_initial_subscription: str | None = None
    # Java's negativeAckRedeliveryBackoff (replaces negative_ack_delay_ms) and
    # ackTimeoutRedeliveryBackoff (added to ack_timeout_ms), by each entry's redelivery count.
    negative_ack_backoff: MultiplierRedeliveryBackoff | None = None
    ack_timeout_backoff: MultiplierRedeliveryBackoff | None = None
    # Key_Shared subscriptions only: the mode, delivery order and Sticky ranges it asked for.
    key_shared: KeySharedPolicy = AUTO_SPLIT_IN_ORDER
    # The consumer's properties (Pulsar's metadata), shown in its stats.
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(eq=False)
class Consumer:
    """Broker-side state of one consumer stream.

    ``permits`` may dip below zero: like Pulsar, an entry (a batch) is delivered whole, so the
    last entry that fits in the permits can overshoot them by less than one batch.
    """

    subscription: ConsumerOwner
    options: ConsumerOptions
    transport: ConsumerTransport
    client_address: str = ""
    consumer_id: int = 0
    permits: int = 0
    unacked_messages: int = 0
    pending: dict[Position, PendingEntry] = field(default_factory=dict)
    client_version: str = ""  # the call's user-agent (Pulsar's clientVersion)
    connected_since: float = field(default_factory=time.time)
    # Delivered to it (msgOutCounter, bytesOutCounter, msgRateOut...) and taken back from it
    # for redelivery (msgRateRedeliver); epoch ms of its last delivery and its last ack.
    rate_out: RateMeter = field(default_factory=RateMeter)
    redelivered: RateMeter = field(default_factory=RateMeter)
    last_consumed_ms: int = 0
    last_acked_ms: int = 0

    @property
    def name(self) -> str:
        return self.options.name

    # What a protocol handler does with its consumer: each asks the subscription, which owns
    # the cursor and the dispatcher (Pulsar's Consumer forwards to its subscription the same way).

    def flow(self, permits: int) -> None:
        """The client grants ``permits`` more messages (Pulsar's flowPermits): the consumer
        adds them to its own count, then tells its subscription, whose dispatcher may send."""
        if permits <= 0:
            return
        self.permits += permits
        self.subscription.consumer_flow(self)

    async def acknowledge(self, ids: Iterable[AckId], cumulative: bool) -> asyncio.Future[None]:
        """Apply acks; the future resolves once the state holding them is durable."""
        return await self.subscription.acknowledge(self, ids, cumulative)

    def negative_acknowledge(self, positions: Iterable[Position]) -> None:
        self.subscription.negative_acknowledge(self, positions)

    def redeliver_unacknowledged(self) -> None:
        """Hand back everything delivered to this consumer and not acked."""
        self.subscription.redeliver(self)

    async def seek(
        self,
        on_reset: Callable[[], None],
        position: Position | None = None,
        publish_time: int | None = None,
        batch_index: int = 0,
    ) -> None:
        """Reset the subscription's cursor (see the subscription's ``seek``)."""
        await self.subscription.seek(on_reset, position, publish_time, batch_index)

    async def unsubscribe(self) -> None:
        await self.subscription.unsubscribe(self)

    async def close(self) -> None:
        """Detach from the subscription; what it had pending goes to the others."""
        await self.subscription.remove_consumer(self)

    def sent(self, delivery: Delivery, sticky_hash: int | None, tracking: Tracking) -> None:
        """A dispatcher sent ``delivery`` to this consumer: it costs permits, and unless the
        subscription is a reader's (which never acks) it is pending until acked."""
        self.permits -= delivery.num_messages
        if tracking is Tracking.PENDING_UNTIL_ACKED:
            self.pending[delivery.position] = PendingEntry(
                delivery.num_messages, delivery.batch_size, time.monotonic(), sticky_hash
            )
            self.unacked_messages += delivery.num_messages

    def partially_acked(self, position: Position, still_unacked: int) -> None:
        """Some messages of a pending batch were acked: they no longer count as unacked."""
        entry = self.pending.get(position)
        if entry is not None and still_unacked < entry.num_messages:
            self.unacked_messages -= entry.num_messages - still_unacked
            entry.num_messages = still_unacked

    def release(self, position: Position) -> PendingEntry | None:
        """Forget a pending entry (acked or handed back for redelivery)."""
        entry = self.pending.pop(position, None)
        if entry is not None:
            self.unacked_messages -= entry.num_messages
        return entry

    def release_all(self) -> list[tuple[Position, int | None]]:
        """Forget every pending entry (the consumer left, or its subscription was reset), and
        say which they were, with their Key_Shared hashes, for whoever delivers them next."""
        released = [(position, entry.sticky_hash) for position, entry in self.pending.items()]
        self.unacked_messages -= sum(entry.num_messages for entry in self.pending.values())
        self.pending.clear()
        return released

    def expired(self, now: float, backoff_s: Callable[[Position], float]) -> list[Position]:
        """Positions pending for longer than the ack timeout plus their backoff (seconds)."""
        timeout = self.options.ack_timeout_ms / 1000
        # The backoff is asked for only once the timeout has passed (most entries have not).
        return [
            pos
            for pos, p in self.pending.items()
            if (waited := now - p.delivered_at) >= timeout and waited >= timeout + backoff_s(pos)
        ]
