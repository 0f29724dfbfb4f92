"""The stall meters (broker/stalls.py): a blocked event loop shows as lag, every collection as a
GC pause of its generation, and a frozen start-up heap is out of the collector's walks."""

from __future__ import annotations

import asyncio
import gc
import time

from pulsar_grpc.broker.stalls import PauseMeter, StallMonitor, freeze_startup_heap


async def test_a_blocked_loop_shows_as_lag_and_a_collection_as_a_pause() -> None:
    monitor = StallMonitor(interval_s=3600)
    monitor.start()
    try:
        await asyncio.sleep(0.05)
        time.sleep(0.2)  # noqa: ASYNC251 -- something holding the loop is the point
        await asyncio.sleep(0.05)
        collections = monitor.gc[2].count
        gc.collect(2)
        assert monitor.gc[2].count == collections + 1
        assert monitor.gc[2].sum > 0
    finally:
        await monitor.close()
    buckets = dict(monitor.lag.cumulative())
    assert buckets["+Inf"] == monitor.lag.count > 1
    assert buckets["+Inf"] - buckets["0.1"] >= 1  # the 200 ms hold, over the 100 ms bound
    gc.collect(2)  # closed: no longer counted
    assert monitor.gc[2].count == collections + 1


def test_the_longest_pause_is_the_last_full_intervals() -> None:
    meter = PauseMeter()
    for pause in (0.001, 0.03, 0.002):
        meter.add(pause)
    assert meter.interval_max == 0.0  # the interval under way is not reported yet
    meter.roll()
    meter.add(0.004)
    assert meter.interval_max == 0.03
    meter.roll()
    assert meter.interval_max == 0.004
    assert dict(meter.cumulative())["0.005"] == 3
    assert meter.count == 4


def test_a_frozen_heap_is_out_of_the_collectors_walks() -> None:
    try:
        frozen = freeze_startup_heap()
        assert frozen > 1000  # this process' modules, classes, functions
        assert len(gc.get_objects()) < frozen / 10  # what a collection still walks
    finally:
        gc.unfreeze()
