"""A Key_Shared consumer's policy (Pulsar's KeySharedMeta) and the Sticky mode's selector.

In Sticky mode (Pulsar's HashRangeExclusiveStickyKeyConsumerSelector) each consumer declares
the key-hash ranges it takes; the broker never moves them. Ranges that overlap another
consumer's are refused, and a key whose hash is in no consumer's range is not delivered: it
waits until a consumer declaring its hash joins.
"""

from __future__ import annotations

import bisect
import enum
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from pulsar_grpc.broker.errors import ConsumerAssignError

RANGE_SIZE = 1 << 16


class KeySharedMode(enum.Enum):
    """Member names are Pulsar's (KeySharedMode in PulsarApi.proto, shown in its errors);
    values are the spelling of ``x-pulsar-key-shared-mode`` (pulsar-client's names)."""

    AUTO_SPLIT = "AutoSplit"
    STICKY = "Sticky"


class DeliveryOrder(enum.Enum):
    """Whether keys moved to a newly joined consumer keep their order (Pulsar's
    allowOutOfOrderDelivery false, the default) or may overtake earlier unacked messages."""

    IN_ORDER = "in_order"
    OUT_OF_ORDER = "out_of_order"


@dataclass(frozen=True, slots=True)
class KeySharedPolicy:
    mode: KeySharedMode = KeySharedMode.AUTO_SPLIT
    order: DeliveryOrder = DeliveryOrder.IN_ORDER
    # Sticky mode's ranges: (start, end) key hashes, both inclusive, within 0..65535.
    ranges: tuple[tuple[int, int], ...] = ()

    def same_dispatch(self, other: KeySharedPolicy) -> bool:
        """Pulsar's hasSameKeySharedPolicy: one dispatcher serves both."""
        return self.mode is other.mode and self.order is other.order

    def conflict_with(self, active: KeySharedPolicy) -> str | None:
        """Why a consumer of this policy cannot join a subscription whose connected
        consumers have ``active`` (Pulsar's checkForConsumerCompatibilityErrorWithDispatcher
        message), or None."""
        if self.mode is not active.mode:
            return (
                "Subscription is of different type. Active subscription key_shared mode of "
                f"'{active.mode.name}' is different than the connecting consumer's key_shared "
                f"mode '{self.mode.name}'."
            )
        if self.order is not active.order:
            if active.order is DeliveryOrder.OUT_OF_ORDER:
                return (
                    "Subscription is of different type. Active subscription allows out of "
                    "order delivery while the connecting consumer does not allow it."
                )
            return (
                "Subscription is of different type. Active subscription does not allow out "
                "of order delivery while the connecting consumer allows it."
            )
        return None


# Pulsar's default KeySharedMeta, and what a consumer that sends no policy gets.
AUTO_SPLIT_IN_ORDER = KeySharedPolicy()


class HasKeySharedPolicy(Protocol):
    """What a consumer chose (its options) as far as the Sticky selector reads it."""

    @property
    def key_shared(self) -> KeySharedPolicy: ...


class StickyConsumer(Protocol):
    """The port the Sticky selector reads a consumer through: its declared ranges and what
    Pulsar's errors name it by. A protocol rather than the consumer's class, so this policy
    module sits below the consumer that holds a policy instead of in a circle with it."""

    @property
    def subscription(self) -> object: ...

    @property
    def consumer_id(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def client_address(self) -> str: ...

    @property
    def options(self) -> HasKeySharedPolicy: ...


C = TypeVar("C", bound=StickyConsumer)


def describe(consumer: StickyConsumer) -> str:
    """A consumer as Pulsar's Consumer.toString() prints it in its errors."""
    return (
        f"Consumer{{subscription={consumer.subscription}, consumerId={consumer.consumer_id}, "
        f"consumerName={consumer.name}, address={consumer.client_address}}}"
    )


@dataclass(frozen=True, slots=True)
class _Owned(Generic[C]):
    start: int
    end: int
    consumer: C


class StickySelector(Generic[C]):
    """Maps a key hash to the consumer that declared a range holding it, or None."""

    def __init__(self) -> None:
        self._ranges: list[_Owned[C]] = []  # sorted by start, never overlapping
        self._starts: list[int] = []

    def add(self, consumer: C) -> None:
        """Take the consumer's declared ranges, or refuse it with Pulsar's reasons,
        changing nothing."""
        ranges = sorted(consumer.options.key_shared.ranges)
        if not ranges:
            raise ConsumerAssignError("Ranges for KeyShared policy must not be empty.")
        for i, (start, end) in enumerate(ranges):
            if start > end:
                raise ConsumerAssignError(
                    f"Fixed hash range start > end for range: [{start},{end}]"
                )
            if i + 1 < len(ranges) and ranges[i + 1][0] <= end:
                nxt = ranges[i + 1]
                raise ConsumerAssignError(
                    f"Consumer's own ranges conflict: [{start},{end}] overlaps with "
                    f"[{nxt[0]},{nxt[1]}]"
                )
        for start, end in ranges:
            if (other := self._overlapping(start, end)) is not None:
                raise ConsumerAssignError(f"Range conflict with consumer {describe(other)}")
        for start, end in ranges:
            i = bisect.bisect_left(self._starts, start)
            self._ranges.insert(i, _Owned(start, end, consumer))
            self._starts.insert(i, start)

    def remove(self, consumer: C) -> None:
        """Its ranges go with it: their keys wait for a consumer that declares them."""
        self._ranges = [r for r in self._ranges if r.consumer is not consumer]
        self._starts = [r.start for r in self._ranges]

    def select(self, key_hash: int) -> C | None:
        i = bisect.bisect_right(self._starts, key_hash) - 1
        return self._ranges[i].consumer if i >= 0 and key_hash <= self._ranges[i].end else None

    def _overlapping(self, start: int, end: int) -> C | None:
        """The owner of a range overlapping start..end: ranges do not overlap each other, so
        only the last one starting at or before ``end`` can."""
        i = bisect.bisect_right(self._starts, end) - 1
        return self._ranges[i].consumer if i >= 0 and self._ranges[i].end >= start else None
