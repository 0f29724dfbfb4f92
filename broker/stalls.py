"""What holds the broker's event loop: garbage-collector pauses and event-loop lag.

A message's publish latency is its time in the event loop and the store's commit; a stall of
the loop delays every receipt due meanwhile, so a publish latency tail is first of all a list of
loop stalls. Two meters tell where they come from:

- **GC pauses**: every collection, timed through ``gc.callbacks`` (start to stop), per
  generation. A generation-2 collection walks every tracked object in the process, so it grows
  with the heap: the service freezes its start-up objects (``gc.freeze``) for that reason.
- **Event-loop lag**: a timer due every ``LAG_PERIOD_S``; how late it fires is how long the loop
  was busy or blocked with something else (a GC pause, a long callback, the GIL held by another
  thread). A stall of S shows as a lag of at least S - LAG_PERIOD_S.

Both count into :class:`PauseMeter` (cumulative buckets for /metrics, which Prometheus expects
of a histogram, and the longest pause of the last stats interval), and every pause over
``slow_s`` is logged at DEBUG, with its generation or as loop lag, so that a latency spike in
`perf produce --interval 1` can be matched with its cause (``--log-level DEBUG``).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import gc
import logging
import time
from typing import Any

__all__ = ["LAG_PERIOD_S", "PAUSE_BUCKETS_S", "PauseMeter", "StallMonitor", "freeze_startup_heap"]

log = logging.getLogger(__name__)

# Upper bounds (seconds) of the pause buckets; a last bucket counts what is over them.
PAUSE_BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0)
LAG_PERIOD_S = 0.01  # 100 wake-ups a second: negligible, and stalls over 10 ms show in full
GENERATIONS = (0, 1, 2)


def freeze_startup_heap() -> int:
    """Move every object alive now out of the collector's sight (``gc.freeze``); the count.

    For a process that just finished starting (a broker, the perf load), most of its tracked
    objects are modules, classes and functions that live as long as it does (~60,000 with
    grpc and the SDK imported), and every generation-2 collection walked them all: 20-80 ms of
    CPU each on the 2-core machine, in the middle of the traffic. Frozen, they are never walked
    again, and a collection costs what the objects made since cost. Garbage is collected first,
    so none of it is frozen.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


class PauseMeter:
    """Pauses counted into cumulative buckets, and the longest one of the last interval."""

    __slots__ = ("_window_max", "count", "counts", "interval_max", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(PAUSE_BUCKETS_S) + 1)
        self.count = 0
        self.sum = 0.0
        self.interval_max = 0.0  # the longest pause of the last full interval
        self._window_max = 0.0  # the longest of the interval under way

    def add(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(PAUSE_BUCKETS_S, seconds)] += 1
        self.count += 1
        self.sum += seconds
        if seconds > self._window_max:
            self._window_max = seconds

    def roll(self) -> None:
        """The interval under way ends now: its longest pause becomes the one reported."""
        self.interval_max, self._window_max = self._window_max, 0.0

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, count of pauses <= le) per bucket bound and +Inf, as a Prometheus histogram."""
        out: list[tuple[str, int]] = []
        total = 0
        for bound, n in zip((*PAUSE_BUCKETS_S, float("inf")), self.counts, strict=True):
            total += n
            out.append(("+Inf" if bound == float("inf") else repr(bound), total))
        return out


class StallMonitor:
    """Times the process' GC pauses and the loop's lag while started (one per broker)."""

    def __init__(self, interval_s: float, slow_s: float = 0.005) -> None:
        self.gc = {gen: PauseMeter() for gen in GENERATIONS}
        self.lag = PauseMeter()
        self._interval_s = interval_s
        self._slow_s = slow_s
        self._gc_started: float | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        gc.callbacks.append(self._on_gc)
        self._task = asyncio.get_running_loop().create_task(self._watch())

    async def close(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
            return
        if self._gc_started is None:  # installed during a collection
            return
        pause = time.perf_counter() - self._gc_started
        self._gc_started = None
        generation = info["generation"]
        self.gc[generation].add(pause)
        if pause >= self._slow_s:
            log.debug(
                "gc generation %d: %.1f ms, %d collected",
                generation,
                pause * 1000,
                info["collected"],
            )

    async def _watch(self) -> None:
        """Sleep LAG_PERIOD_S at a time; how much later than asked it wakes is the lag. The
        debug line also says how much CPU the loop's thread and the whole process used
        meanwhile: the loop's thread near the lag, it ran something long; the process near
        it, another thread held the GIL (the store's); both near nothing, the process waited
        for a core (other processes had them)."""
        window_end = time.perf_counter() + self._interval_s
        while True:
            asked = time.perf_counter() + LAG_PERIOD_S
            cpu = time.thread_time(), time.process_time()
            await asyncio.sleep(LAG_PERIOD_S)
            now = time.perf_counter()
            lag = max(now - asked, 0.0)
            self.lag.add(lag)
            if lag >= self._slow_s:
                log.debug(
                    "event loop lag %.1f ms (CPU meanwhile: its thread %.1f ms, process %.1f ms)",
                    lag * 1000,
                    (time.thread_time() - cpu[0]) * 1000,
                    (time.process_time() - cpu[1]) * 1000,
                )
            if now >= window_end:
                window_end = now + self._interval_s
                for meter in (self.lag, *self.gc.values()):
                    meter.roll()
