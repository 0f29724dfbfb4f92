"""Meters the stats are made of: counts taken on the message path (integer additions, no
locks, no Prometheus objects) that the broker's stats task turns into per-interval figures
every statsUpdateFrequencyInSecs, as Pulsar's stats do (broker/topics/stats_task.py). Readers
(TopicStats, /metrics, the load report, a dispatch rate relative to the publish rate) get the
figures of the last interval, so reading changes nothing and two reads between ticks agree.
"""

from __future__ import annotations

import bisect
import functools
import time
from collections.abc import Callable

Clock = Callable[[], float]

# Pulsar's ManagedLedgerMBeanImpl buckets: upper bounds of the add-entry latency (ms) and of the
# entry size (bytes); one more bucket counts what is over the last bound ("overflow").
ENTRY_LATENCY_BUCKETS_MS = (0.5, 1.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 1000.0)
ENTRY_SIZE_BUCKETS_BYTES = (128, 512, 1024, 2048, 4096, 16384, 102400, 1048576)


class RateMeter:
    """Messages and bytes counted as they pass, and their rates over the last stats interval.

    The counts are totals since the meter was made (Pulsar's msgInCounter, bytesOutCounter...);
    the rates (msgRateIn, msgThroughputOut...) are what the broker's stats task computed at
    its last tick, every statsUpdateFrequencyInSecs, from the counts' growth over the time
    since the tick before, as Pulsar does. So recording is two integer additions on the
    message path, and reading the rates (stats, /metrics, a relative dispatch rate) changes
    nothing: two reads between ticks agree. A meter made between two ticks measures its first
    interval from when it was made."""

    __slots__ = (
        "_at",
        "_clock",
        "_seen",
        "byte_rate",
        "bytes",
        "interval_messages",
        "messages",
        "msg_rate",
    )

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self.messages = 0
        self.bytes = 0
        self.msg_rate = 0.0
        self.byte_rate = 0.0
        self.interval_messages = 0  # counted in the last interval
        self._clock = clock
        self._at = clock()
        self._seen = (0, 0)  # the counts at the last tick

    def record(self, messages: int, nbytes: int = 0) -> None:
        self.messages += messages
        self.bytes += nbytes

    def update(self) -> None:
        """The stats task's tick: the rates of the interval that ends now."""
        now = self._clock()
        elapsed = now - self._at
        if elapsed <= 0:
            return
        seen_messages, seen_bytes = self._seen
        self.interval_messages = self.messages - seen_messages
        self.msg_rate = self.interval_messages / elapsed
        self.byte_rate = (self.bytes - seen_bytes) / elapsed
        self._at = now
        self._seen = (self.messages, self.bytes)

    def rates(self) -> tuple[float, float]:
        """(messages/s, bytes/s) of the last stats interval; 0 before the first tick."""
        return self.msg_rate, self.byte_rate

    @property
    def average_size(self) -> float:
        """Bytes per message over the last interval (Pulsar's averageMsgSize); 0 when idle."""
        return self.byte_rate / self.msg_rate if self.msg_rate > 0 else 0.0


class Buckets:
    """How many values fell at or under each bound (and over the last), with their sum: the
    counts of the last stats interval, as Pulsar's StatsBuckets (its /metrics shows those)."""

    __slots__ = ("_counts", "_seen", "_seen_sum", "_sum", "bounds", "interval", "interval_sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self._counts = [0] * (len(bounds) + 1)
        self._sum = 0.0
        # Tuples, and all-zero ones shared by the meters of the same bounds: a broker holds
        # two of these per topic, most of them idle (their intervals stay the zeros).
        zeros = _zeros(len(bounds) + 1)
        self._seen: tuple[int, ...] = zeros
        self._seen_sum = 0.0
        self.interval: tuple[int, ...] = zeros
        self.interval_sum = 0.0

    def add(self, value: float) -> None:
        self._counts[bisect.bisect_left(self.bounds, value)] += 1
        self._sum += value

    def update(self) -> None:
        """The stats task's tick: the interval that ends now becomes the one reported."""
        if self._sum == self._seen_sum and sum(self._counts) == sum(self._seen):
            self.interval = _zeros(len(self._counts))  # nothing new: no new tuples
        else:
            self.interval = tuple(
                now - before for now, before in zip(self._counts, self._seen, strict=True)
            )
            self._seen = tuple(self._counts)
        self.interval_sum = self._sum - self._seen_sum
        self._seen_sum = self._sum

    @property
    def interval_count(self) -> int:
        return sum(self.interval)


@functools.cache
def _zeros(length: int) -> tuple[int, ...]:
    return (0,) * length


def iso_utc(ts: float) -> str:
    """A stats timestamp (connectedSince) as Pulsar writes it: ISO 8601, UTC, seconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
