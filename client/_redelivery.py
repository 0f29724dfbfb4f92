"""The redelivery backoff a consumer asks the broker for: Pulsar's Java client's
``MultiplierRedeliveryBackoff`` (pulsar-client for Python has none). The broker applies it,
so the SDK only checks it and names it in the Consume call's parameters."""

from __future__ import annotations

from dataclasses import dataclass

from ._headers import Header
from ._stream import Params

# The broker refuses a larger multiplier (it reaches any delay in one step anyway).
MAX_MULTIPLIER = 1e6


@dataclass(frozen=True, slots=True)
class MultiplierRedeliveryBackoff:
    """A redelivered message waits ``min_delay_ms * multiplier ** redelivery_count``, at most
    ``max_delay_ms`` (the Java builder's defaults and checks).

    >>> MultiplierRedeliveryBackoff(min_delay_ms=1000, max_delay_ms=60_000)
    MultiplierRedeliveryBackoff(min_delay_ms=1000, max_delay_ms=60000, multiplier=2.0)
    """

    min_delay_ms: int = 10_000
    max_delay_ms: int = 600_000
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if self.min_delay_ms < 0:
            raise ValueError("min delay time must be >= 0")
        if self.max_delay_ms < self.min_delay_ms:
            raise ValueError("maxDelayMs must be >= minDelayMs")
        if not 1 < self.multiplier <= MAX_MULTIPLIER:
            raise ValueError(f"multiplier must be > 1 (and at most {MAX_MULTIPLIER:g})")


def backoff_params(
    negative_ack: MultiplierRedeliveryBackoff | None,
    ack_timeout: MultiplierRedeliveryBackoff | None,
) -> Params:
    """The Consume call's x-pulsar-*-backoff-* parameters for the backoffs given."""
    params: Params = {}
    if negative_ack is not None:
        params[Header.NEGATIVE_ACK_BACKOFF_MIN_DELAY_MS] = negative_ack.min_delay_ms
        params[Header.NEGATIVE_ACK_BACKOFF_MAX_DELAY_MS] = negative_ack.max_delay_ms
        params[Header.NEGATIVE_ACK_BACKOFF_MULTIPLIER] = f"{negative_ack.multiplier:.6f}"
    if ack_timeout is not None:
        params[Header.ACK_TIMEOUT_BACKOFF_MIN_DELAY_MS] = ack_timeout.min_delay_ms
        params[Header.ACK_TIMEOUT_BACKOFF_MAX_DELAY_MS] = ack_timeout.max_delay_ms
        params[Header.ACK_TIMEOUT_BACKOFF_MULTIPLIER] = f"{ack_timeout.multiplier:.6f}"
    return params
