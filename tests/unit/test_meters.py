"""The stats' buckets: Pulsar's bounds (a value equal to a bound counts in that bucket, above
the last in the overflow), reported per stats interval."""

from __future__ import annotations

from pulsar_grpc.broker.meters import ENTRY_LATENCY_BUCKETS_MS, ENTRY_SIZE_BUCKETS_BYTES, Buckets


def test_values_fall_at_or_under_a_bound_and_over_the_last_into_overflow() -> None:
    sizes = Buckets(ENTRY_SIZE_BUCKETS_BYTES)
    for value in (1, 128, 129, 1024, 1048576, 1048577):
        sizes.add(value)
    sizes.update()
    #                       128 512 1k 2k 4k 16k 100k 1m overflow
    assert sizes.interval == (2, 1, 1, 0, 0, 0, 0, 1, 1)
    assert sizes.interval_count == 6
    assert sizes.interval_sum == 1 + 128 + 129 + 1024 + 1048576 + 1048577


def test_buckets_report_the_last_interval_only() -> None:
    latency = Buckets(ENTRY_LATENCY_BUCKETS_MS)
    latency.add(0.2)
    latency.add(3.0)
    latency.update()
    assert latency.interval == (1, 0, 1, 0, 0, 0, 0, 0, 0, 0)
    latency.add(2000.0)  # counted, reported only after the next tick
    assert latency.interval_count == 2
    latency.update()
    assert latency.interval == (0,) * 9 + (1,)
    assert latency.interval_sum == 2000.0
    latency.update()
    assert latency.interval_count == 0 and latency.interval_sum == 0
