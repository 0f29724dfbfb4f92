"""The broker's stats task: every statsUpdateFrequencyInSecs, the counts of every loaded
topic (its producers, subscriptions, consumers and managed ledger with it) become the rates and
buckets of the interval that just ended, as Pulsar's BrokerService.updateRates does. One task
per broker, so the message path only counts, and reading the stats or /metrics resets nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pulsar_grpc.broker.topics.registry import TopicRegistry

log = logging.getLogger(__name__)


class StatsTask:
    def __init__(self, topics: TopicRegistry, interval_s: float) -> None:
        self._topics = topics
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def update(self) -> None:
        """One tick: every loaded topic's interval ends now."""
        for topic in self._topics.loaded_topics():
            topic.update_stats()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                self.update()
            except Exception:  # a bug in one tick must not stop the stats for good
                log.exception("stats update failed")
