"""MultiplierRedeliveryBackoff.next as Java's computes it (PIP-106)."""

from __future__ import annotations

import pytest

from pulsar_grpc.broker.errors import InvalidArgumentError
from pulsar_grpc.broker.topics.redelivery_backoff import MultiplierRedeliveryBackoff


def test_next_grows_by_the_multiplier_and_stops_at_the_maximum() -> None:
    backoff = MultiplierRedeliveryBackoff(min_delay_ms=1000, max_delay_ms=60_000, multiplier=2)
    assert [backoff.next(n) for n in range(8)] == [
        1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000
    ]  # fmt: skip


def test_java_defaults_and_edges() -> None:
    default = MultiplierRedeliveryBackoff()
    assert (default.min_delay_ms, default.max_delay_ms, default.multiplier) == (
        10_000,
        600_000,
        2.0,
    )
    assert default.next(-1) == 10_000
    assert default.next(2**31 - 1) == 600_000  # no float overflow for a huge count
    assert MultiplierRedeliveryBackoff(0, 100, 3).next(5) == 0  # min 0: always 0, as Java
    assert MultiplierRedeliveryBackoff(100, 100, 1.5).next(3) == 100
    assert MultiplierRedeliveryBackoff(1000, 10_000, 1.5).next(3) == 3375  # (long) truncates


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((-1, 10, 2), "min delay time must be >= 0"),
        ((10, 5, 2), "maxDelayMs must be >= minDelayMs"),
        ((10, 50, 1), "multiplier must be > 1"),
    ],
)
def test_what_the_java_builder_refuses(args: tuple[int, int, float], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        MultiplierRedeliveryBackoff(*args)
