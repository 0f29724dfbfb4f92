"""Measuring a perf run: counts, HDR latency histograms, stats lines, budgets and pacing.

Everything here runs on the one event loop of the load process, next to the load itself, so
the measuring must cost little per message: latencies are counted in a plain dict (µs ->
count) and folded into HDR histograms only when a stats line is printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogWriter

# Latencies are recorded in µs, up to 10 minutes, with 3 significant digits.
_HDR_MAX_US = 600_000_000
PERCENTILES = (50.0, 95.0, 99.0, 99.9)


def now_us() -> int:
    """Monotonic µs: for latencies measured within this process."""
    return time.perf_counter_ns() // 1000


def wall_us() -> int:
    """Wall-clock µs since the epoch: the send stamp carried in e2e payloads, comparable
    across processes on one host."""
    return time.time_ns() // 1000


def _bucket(us: int) -> int:
    """``us`` cut to the 11 significant bits an HDR histogram with 3 digits keeps anyway,
    so the dict of pending latencies stays small."""
    shift = us.bit_length() - 11
    return us if shift <= 0 else (us >> shift) << shift


class LineStyle(StrEnum):
    """The shape of the stats line: this tool's own (``perf all``, ``ceiling``), or
    pulsar-perf's throughput line, whose first words say which side it measures."""

    OWN = ""
    PRODUCED = "produced"
    RECEIVED = "received"


@dataclass(slots=True)
class Recorder:
    """Counts completed messages and their latencies; prints a stats line per interval and
    keeps each interval's figures (``series``) for ``--plot`` and ``--json``; with
    ``histogram_log``, writes each interval's latency histogram there (``--histogram-file``)."""

    label: str
    size: int
    style: LineStyle = LineStyle.OWN
    histogram_log: HistogramLogWriter | None = None
    count: int = 0
    errors: int = 0
    pending: dict[int, int] = field(default_factory=dict)  # latency µs -> count, not yet folded
    total: HdrHistogram = field(default_factory=lambda: HdrHistogram(1, _HDR_MAX_US, 3))
    series: list[dict[str, Any]] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    finished: float = 0.0
    _last_count: int = 0
    _last_errors: int = 0
    _last_time: float = 0.0

    def add(self, latency_us: int, n: int = 1) -> None:
        """``n`` messages completed, each after ``latency_us``."""
        self.count += n
        key = _bucket(latency_us)
        self.pending[key] = self.pending.get(key, 0) + n

    def add_group(self, sent_us: list[int], ok: bool) -> None:
        """Messages sent at ``sent_us`` got their receipt now (or failed, if not ``ok``)."""
        if not ok:
            self.errors += len(sent_us)
            return
        received = now_us()
        pending = self.pending
        for sent in sent_us:
            key = _bucket(received - sent)
            pending[key] = pending.get(key, 0) + 1
        self.count += len(sent_us)

    def start(self) -> None:
        self.started = self._last_time = time.perf_counter()

    def finish(self, at: float | None = None) -> None:
        """Stop the clock (at ``at``: a consumer that waited in vain stops at its last message)."""
        if not self.finished:
            self.finished = at or time.perf_counter()

    def line(self) -> str:
        """The stats line of the interval since the previous one (latencies of that interval)."""
        interval = HdrHistogram(1, _HDR_MAX_US, 3)
        weighted = 0
        for value, n in self.pending.items():
            interval.record_value(max(1, value), n)
            weighted += value * n
        # The mean from the few distinct values here: hdrh's get_mean_value walks its whole
        # counts array in Python, ~30 ms that held the load's event loop every stats line.
        mean_us = weighted / interval.get_total_count() if self.pending else 0.0
        self.pending.clear()
        self.total.add(interval)
        # Not past the end of the run, nor before the previous line (a consumer's clock may
        # stop at its last message, before the line that follows it).
        now = max(self._last_time, min(time.perf_counter(), self.finished or float("inf")))
        elapsed = max(now - self._last_time, 1e-9)
        rate = (self.count - self._last_count) / elapsed
        failures = (self.errors - self._last_errors) / elapsed
        self._last_count, self._last_errors, self._last_time = self.count, self.errors, now
        if self.histogram_log is not None:
            ended = time.time()
            # Interval_Max in ms (hdrh floors it: the default ratio, to seconds, would print 0)
            self.histogram_log.output_interval_histogram(interval, ended - elapsed, ended, 1000.0)
        lat = latency_ms(interval, mean_us) if interval.get_total_count() else None
        point = {"t": round(now - self.started, 3), "msg_per_s": round(rate, 1)}
        self.series.append(
            {**point, "mb_per_s": round(rate * self.size / 1e6, 3), "latency_ms": lat}
        )
        if self.style is not LineStyle.OWN:
            return pulsar_perf_line(
                self.style, self.count, rate, rate * self.size, failures, interval, mean_us
            )
        text = (
            f"{self.label:<12} {now - self.started:6.1f}s  {rate:>11,.0f} msg/s "
            f"{rate * self.size / 1e6:7.1f} MB/s"
        )
        if lat:
            text += "  latency ms " + format_latency(lat)
        return text + (f"  errors {self.errors}" if self.errors else "")

    def summary(self) -> dict[str, Any]:
        """Totals of the whole run; folds what the last interval left."""
        if self.pending or self.count > self._last_count:
            self.line()
        elapsed = max((self.finished or time.perf_counter()) - self.started, 1e-9)
        return {
            "messages": self.count,
            "errors": self.errors,
            "seconds": round(elapsed, 3),
            "msg_per_s": round(self.count / elapsed, 1),
            "mb_per_s": round(self.count * self.size / elapsed / 1e6, 2),
            "latency_ms": latency_ms(self.total) if self.total.get_total_count() else None,
            "series": self.series,
        }

    def aggregated(self) -> str:
        """pulsar-perf's two closing lines: the whole run's throughput and latency (after
        :meth:`summary`, which folds the last interval in)."""
        elapsed = max((self.finished or time.perf_counter()) - self.started, 1e-9)
        rate = self.count / elapsed
        verb = "sent" if self.style is LineStyle.PRODUCED else "received"
        h, empty = self.total, not self.total.get_total_count()

        def ms(us: float) -> str:
            return f"{0.0 if empty else us / 1000:.3f}"

        percentiles = " - ".join(
            f"{name}: {ms(h.get_value_at_percentile(p))}"
            for name, p in (("med", 50), ("95pct", 95), ("99pct", 99), ("99.9pct", 99.9),
                            ("99.99pct", 99.99), ("99.999pct", 99.999))
        )  # fmt: skip
        return (
            f"Aggregated throughput stats --- {self.count} records {verb} --- {rate:.3f} msg/s "
            f"--- {rate * self.size * 8 / 1024 / 1024:.3f} Mbit/s\n"
            f"Aggregated latency stats --- Latency: mean: {ms(h.get_mean_value())} ms - "
            f"{percentiles} - Max: {ms(h.get_max_value())}"
        )

    async def report_every(self, seconds: float) -> None:
        """Print a stats line every ``seconds`` until cancelled."""
        while True:
            await asyncio.sleep(seconds)
            print(self.line(), file=sys.stderr, flush=True)


def latency_ms(h: HdrHistogram, mean_us: float | None = None) -> dict[str, float]:
    """mean (``mean_us`` when the caller knows it), percentiles and max of a histogram of µs,
    in ms. The percentiles come from one pass over the counts (get_value_at_percentile walks
    them once per percentile, in Python: tens of ms per stats line, on the load's loop)."""
    mean = h.get_mean_value() if mean_us is None else mean_us
    out = {"mean": round(mean / 1000, 3)}
    values = h.get_percentile_to_value_dict(list(PERCENTILES))
    for p in PERCENTILES:
        out[f"p{p:g}"] = round(values[p] / 1000, 3)
    out["max"] = round(h.get_max_value() / 1000, 3)
    return out


def pulsar_perf_line(
    style: LineStyle,
    total: int,
    rate: float,
    bytes_rate: float,
    failures: float,
    h: HdrHistogram,
    mean_us: float,
) -> str:
    """pulsar-perf's interval line (PerformanceProducer / PerformanceConsumer): the running
    total, msg/s, Mbit/s, failures (producers), and the interval's latency in ms."""
    empty = not h.get_total_count()

    def ms(us: float) -> str:
        return f"{0.0 if empty else us / 1000:.3f}"

    line = f"Throughput {style.value}: {total:,} msg --- {rate:.1f} msg/s --- "
    line += f"{bytes_rate * 8 / 1024 / 1024:.3f} Mbit/s"
    if style is LineStyle.PRODUCED:
        line += f" --- failure {failures:.1f} msg/s"
    names = (("med", 50.0), ("95pct", 95.0), ("99pct", 99.0), ("99.9pct", 99.9),
             ("99.99pct", 99.99))  # fmt: skip
    values = h.get_percentile_to_value_dict([p for _, p in names])
    percentiles = " - ".join(f"{name}: {ms(values.get(p, 0))}" for name, p in names)
    return (
        f"{line} --- Latency: mean: {ms(mean_us)} ms - {percentiles} - Max: {ms(h.get_max_value())}"
    )


def open_histogram_log(path: str) -> tuple[HistogramLogWriter, Any]:
    """A writer of HdrHistogram's log format on ``path`` with pulsar-perf's header (format
    version, legend), and the file to close at the end; OSError if it cannot be created."""
    out = open(path, "w")
    writer = HistogramLogWriter(out)
    writer.output_log_format_version()
    writer.output_legend()
    return writer, out


def format_latency(lat: dict[str, float]) -> str:
    return " ".join(f"{k} {v:.2f}" for k, v in lat.items())


class Budget:
    """Messages the producers of one run may still send: a count and/or a deadline."""

    def __init__(self, messages: int, duration: float) -> None:
        self._left = messages if messages > 0 else None
        self._deadline = time.monotonic() + duration if duration > 0 else None

    def take(self, wanted: int) -> int:
        """Up to ``wanted`` messages to send now; 0 means the run is over."""
        if self._deadline is not None and time.monotonic() >= self._deadline:
            return 0
        if self._left is None:
            return wanted
        n = min(wanted, self._left)
        self._left -= n
        return n


class Pacer:
    """Spreads sends evenly at ``rate`` messages/s (no catching up after a stall)."""

    def __init__(self, rate: float) -> None:
        self._interval = 1.0 / rate
        self._next = time.monotonic()

    async def wait(self, n: int) -> None:
        now = time.monotonic()
        self._next = max(self._next, now - 0.1) + n * self._interval
        delay = self._next - now
        if delay > 0:
            await asyncio.sleep(delay)


async def with_reporters(recorders: list[Recorder], interval: float, work: list[Any]) -> None:
    """Run ``work`` (coroutines) while printing stats lines; stop every clock still running
    when it ends (a consumer may have stopped its own earlier, at its last message)."""
    loop = asyncio.get_running_loop()
    for rec in recorders:
        rec.start()
    reporters = [loop.create_task(rec.report_every(interval)) for rec in recorders]
    try:
        await asyncio.gather(*work)
    finally:
        for rec in recorders:
            rec.finish()
        for reporter in reporters:
            reporter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reporter
