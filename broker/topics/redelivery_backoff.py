"""The redelivery backoff of Pulsar's Java client (``MultiplierRedeliveryBackoff``, PIP-106),
applied by the broker: a negatively acked or ack-timed-out entry waits longer each time it
comes back, by the entry's redelivery count, so a message that keeps failing stops costing
its consumer a redelivery every few seconds. Broker-side, as the nack delay and ack timeout
here, so a consumer in any gRPC language gets it by naming it in its Consume call."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from pulsar_grpc.broker.errors import InvalidArgumentError

# The Java builder's defaults (MultiplierRedeliveryBackoffBuilder).
DEFAULT_MIN_DELAY_MS = 10_000
DEFAULT_MAX_DELAY_MS = 600_000
DEFAULT_MULTIPLIER = 2.0
# A multiplier this large reaches any delay a long holds in one step: larger ones are refused
# rather than carried into float arithmetic with infinities.
MAX_MULTIPLIER = 1e6

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class MultiplierRedeliveryBackoff:
    """``min_delay_ms * multiplier ** redelivery_count``, capped at ``max_delay_ms``."""

    min_delay_ms: int = DEFAULT_MIN_DELAY_MS
    max_delay_ms: int = DEFAULT_MAX_DELAY_MS
    multiplier: float = DEFAULT_MULTIPLIER

    def __post_init__(self) -> None:
        # The Java builder's checks, in its words.
        if self.min_delay_ms < 0:
            raise InvalidArgumentError("min delay time must be >= 0")
        if self.max_delay_ms < self.min_delay_ms:
            raise InvalidArgumentError("maxDelayMs must be >= minDelayMs")
        if not (1 < self.multiplier <= MAX_MULTIPLIER):
            raise InvalidArgumentError(f"multiplier must be > 1 (and at most {MAX_MULTIPLIER:g})")

    @property
    def _max_power(self) -> int:
        """The count past which the delay is the maximum (Java's maxMultiplierPow)."""
        ratio = self.max_delay_ms / self.min_delay_ms
        return int(math.log(ratio) / math.log(self.multiplier)) + 1

    def next(self, redelivery_count: int) -> int:
        """The delay in ms before the redelivery of an entry redelivered ``redelivery_count``
        times already (Java's ``MultiplierRedeliveryBackoff.next``).

        >>> b = MultiplierRedeliveryBackoff(1000, 5000, 2.0)
        >>> [b.next(n) for n in range(5)]
        [1000, 2000, 4000, 5000, 5000]
        """
        if redelivery_count <= 0 or self.min_delay_ms <= 0:
            return self.min_delay_ms
        if redelivery_count > self._max_power:
            return self.max_delay_ms
        return min(int(self.min_delay_ms * self.multiplier**redelivery_count), self.max_delay_ms)


def by_delay(items: Iterable[T], delay_ms: Callable[[T], int]) -> dict[int, list[T]]:
    """``items`` grouped by their delay: one timer a distinct delay, not one an entry.

    >>> by_delay([1, 2, 3], lambda n: 10 if n < 3 else 20)
    {10: [1, 2], 20: [3]}
    """
    groups: dict[int, list[T]] = {}
    for item in items:
        groups.setdefault(delay_ms(item), []).append(item)
    return groups
