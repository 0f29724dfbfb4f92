"""The broker's stats task: every statsUpdateFrequencyInSecs, the counts of every loaded
topic (its producers, subscriptions, consumers and managed ledger with it) become the rates and
buckets of the interval that just ended, as Pulsar's BrokerService.updateRates does. One task
per broker, so the message path only counts, and reading the stats or /metrics resets nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pulsar_grpc.broker.topics.periodic import PeriodicTask

if TYPE_CHECKING:
    from pulsar_grpc.broker.topics.registry import TopicRegistry


class StatsTask(PeriodicTask):
    def __init__(self, topics: TopicRegistry, interval_s: float) -> None:
        super().__init__(interval_s)
        self._topics = topics

    def update(self) -> None:
        """One tick: every loaded topic's interval ends now."""
        for topic in self._topics.loaded_topics():
            topic.update_stats()

    async def tick(self) -> None:
        self.update()
