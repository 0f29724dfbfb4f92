"""Prometheus metrics read from the broker's counters at scrape time.

Nothing on the message path touches Prometheus objects: producers, subscriptions and consumers
keep plain integer counters, and this collector turns them into Pulsar's metric names (and rates
over the time since the previous scrape) only when /metrics is read.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from pulsar_grpc.broker.service import BrokerService


class RateTracker:
    """Rates from counter deltas, per key, over at least one second."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, tuple[int, ...], tuple[float, ...]]] = {}

    def rates(self, key: str, counters: tuple[int, ...]) -> tuple[float, ...]:
        now = time.monotonic()
        previous = self._last.get(key)
        if previous is None:
            self._last[key] = (now, counters, tuple(0.0 for _ in counters))
            return tuple(0.0 for _ in counters)
        then, old, last_rates = previous
        if now - then < 1.0:
            return last_rates
        rates = tuple(
            (new - before) / (now - then) for new, before in zip(counters, old, strict=True)
        )
        self._last[key] = (now, counters, rates)
        return rates

    def keep(self, keys: Iterable[str]) -> None:
        """Forget every key but ``keys`` (those gone for good: memory stays bounded)."""
        kept = set(keys)
        self._last = {k: v for k, v in self._last.items() if k in kept}


class BrokerCollector(Collector):
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.rates = RateTracker()

    def collect(self) -> Iterator[Metric]:
        cluster = self.service.config.clusterName
        labels = ["cluster", "namespace", "topic"]
        sub_labels = [*labels, "subscription"]
        rate_in = GaugeMetricFamily("pulsar_rate_in", "Messages/s published", labels=labels)
        rate_out = GaugeMetricFamily("pulsar_rate_out", "Messages/s dispatched", labels=labels)
        tp_in = GaugeMetricFamily("pulsar_throughput_in", "Bytes/s published", labels=labels)
        tp_out = GaugeMetricFamily("pulsar_throughput_out", "Bytes/s dispatched", labels=labels)
        msgs_in = CounterMetricFamily("pulsar_in_messages", "Messages published", labels=labels)
        msgs_out = CounterMetricFamily("pulsar_out_messages", "Messages dispatched", labels=labels)
        storage = GaugeMetricFamily("pulsar_storage_size", "Bytes stored", labels=labels)
        backlog = GaugeMetricFamily("pulsar_msg_backlog", "Entries not acked", labels=labels)
        producers = GaugeMetricFamily("pulsar_producers_count", "Producers", labels=labels)
        subs = GaugeMetricFamily("pulsar_subscriptions_count", "Subscriptions", labels=labels)
        rate_limited = GaugeMetricFamily(
            "pulsar_publish_rate_limit_times",
            "Times a producer was held back by a publish rate (since the topic loaded)",
            labels=labels,
        )
        sub_backlog = GaugeMetricFamily(
            "pulsar_subscription_back_log", "Entries not acked", labels=sub_labels
        )
        sub_rate = GaugeMetricFamily(
            "pulsar_subscription_msg_rate_out", "Messages/s dispatched", labels=sub_labels
        )
        sub_unacked = GaugeMetricFamily(
            "pulsar_subscription_unacked_messages",
            "Messages delivered, not acked",
            labels=sub_labels,
        )
        sub_consumers = GaugeMetricFamily(
            "pulsar_subscription_consumers_count", "Consumers", labels=sub_labels
        )
        for topic in self.service.topics.loaded_topics():
            ns = str(topic.topic_name.namespace)
            values = [cluster, ns, topic.name]
            out_msgs = sum(s.msg_out_counter for s in topic.subscriptions.values())
            out_bytes = sum(s.bytes_out_counter for s in topic.subscriptions.values())
            r_in, r_out, b_in, b_out = self.rates.rates(
                topic.name, (topic.msg_in_counter, out_msgs, topic.bytes_in_counter, out_bytes)
            )
            rate_in.add_metric(values, r_in)
            rate_out.add_metric(values, r_out)
            tp_in.add_metric(values, b_in)
            tp_out.add_metric(values, b_out)
            msgs_in.add_metric(values, topic.msg_in_counter)
            msgs_out.add_metric(values, out_msgs)
            storage.add_metric(values, topic.ledger.total_size)
            backlog.add_metric(values, sum(s.backlog() for s in topic.subscriptions.values()))
            producers.add_metric(values, len(topic.producers))
            subs.add_metric(values, len(topic.subscriptions))
            rate_limited.add_metric(values, topic.publish_rate_limited_times)
            for name, sub in topic.subscriptions.items():
                sub_values = [*values, name]
                (rate,) = self.rates.rates(f"{topic.name}/{name}", (sub.msg_out_counter,))
                sub_backlog.add_metric(sub_values, sub.backlog())
                sub_rate.add_metric(sub_values, rate)
                sub_unacked.add_metric(sub_values, sum(c.unacked_messages for c in sub.consumers))
                sub_consumers.add_metric(sub_values, len(sub.consumers))
        yield from (
            rate_in,
            rate_out,
            tp_in,
            tp_out,
            msgs_in,
            msgs_out,
            storage,
            backlog,
            producers,
            subs,
            rate_limited,
            sub_backlog,
            sub_rate,
            sub_unacked,
            sub_consumers,
        )
