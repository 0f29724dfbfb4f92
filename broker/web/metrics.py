"""Prometheus metrics with Pulsar's names and labels, read from the broker's stats at scrape
time.

Nothing on the message path touches Prometheus objects: producers, subscriptions, consumers
and managed ledgers count with plain integers, the broker's stats task turns the counts into
the rates and buckets of the last statsUpdateFrequencyInSecs (broker/topics/stats_task.py),
and this collector only reads those. So a scrape resets nothing and two scrapes in a row agree.

The families are Pulsar's (PrometheusMetricsGenerator, NamespaceStatsAggregator, TopicStats,
ManagedLedgerMetrics): per topic with labels ``cluster``, ``namespace``, ``topic`` (and
``subscription``), per namespace (``pulsar_topics_count``, ``pulsar_ml_*``), and the process'
own (``process_*``, ``python_gc_*``, prometheus-client's collectors, as Pulsar exports the
JVM's), with the stalls of the broker's event loop (broker/stalls.py): GC pauses per generation
(``python_gc_pause_seconds``, as the JVM's ``jvm_gc_collection_seconds``) and the event loop's
lag (``pulsar_broker_event_loop_lag_seconds``), each a histogram since start-up and the longest
of the last stats interval (``..._max``). What the public Grafana dashboards query is checked in
tests/e2e/test_dashboards.py.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, GCCollector, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from pulsar_grpc.broker.meters import ENTRY_LATENCY_BUCKETS_MS, ENTRY_SIZE_BUCKETS_BYTES, Buckets
from pulsar_grpc.broker.service_parts import HasConfig, HasStalls, HasTopics
from pulsar_grpc.broker.stalls import PauseMeter, StallMonitor

if TYPE_CHECKING:
    from pulsar_grpc.broker.ledger.stats import LedgerStats
    from pulsar_grpc.broker.topics import PersistentTopic

TOPIC_LABELS = ["cluster", "namespace", "topic"]
SUBSCRIPTION_LABELS = [*TOPIC_LABELS, "subscription"]
NAMESPACE_LABELS = ["cluster", "namespace"]

# Pulsar's names of the topic-level buckets, one per bound of meters.ENTRY_LATENCY_BUCKETS_MS /
# ENTRY_SIZE_BUCKETS_BYTES and one for what is over the last (sic: Pulsar spells the two
# overflow names differently).
WRITE_LATENCY_NAMES = (
    *(
        f"pulsar_storage_write_latency_le_{n}"
        for n in ("0_5", "1", "5", "10", "20", "50", "100", "200", "1000")
    ),
    "pulsar_storage_write_latency_overflow",
)
ENTRY_SIZE_NAMES = tuple(
    f"pulsar_entry_size_le_{n}"
    for n in ("128", "512", "1_kb", "2_kb", "4_kb", "16_kb", "100_kb", "1_mb", "overflow")
)


class MetricsPort(HasConfig, HasStalls, HasTopics, Protocol):
    """What /metrics reads: the loaded topics, the stall monitor and the stats settings."""


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


@dataclass
class _Namespace:
    """A namespace's sums: Pulsar's pulsar_topics_count and ManagedLedgerMetrics."""

    topics: int = 0
    sums: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    latency: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)


def _add(into: list[int], buckets: Buckets) -> None:
    if not into:
        into.extend(0 for _ in buckets.interval)
    for i, count in enumerate(buckets.interval):
        into[i] += count


def _quantiles(bounds: tuple[float, ...]) -> list[str]:
    """Pulsar's bucket labels, "0.0_0.5", "0.5_1.0"... (the overflow is a family of its own)."""
    lows = (0.0, *bounds[:-1])
    return [f"{float(lo)}_{float(hi)}" for lo, hi in zip(lows, bounds, strict=True)]


class BrokerCollector(Collector):
    def __init__(self, service: MetricsPort) -> None:
        self.service = service
        # This collector yields what they collect (the broker's registry holds it alone);
        # GCCollector insists on registering somewhere: a registry of its own.
        self._process = ProcessCollector(registry=None)
        self._gc = GCCollector(registry=CollectorRegistry(auto_describe=False))

    def collect(self) -> Iterator[Metric]:
        yield from self._topic_metrics()
        yield from self._process.collect()
        yield from self._gc.collect()
        if self.service.stalls is not None:
            yield from _stall_metrics(self.service.stalls)

    def _topic_metrics(self) -> Iterator[Metric]:
        cluster = self.service.config.clusterName
        t = TOPIC_LABELS
        gauges = {
            name: _gauge(name, doc, t)
            for name, doc in (
                ("pulsar_subscriptions_count", "Subscriptions"),
                ("pulsar_producers_count", "Producers"),
                ("pulsar_consumers_count", "Consumers"),
                ("pulsar_rate_in", "Messages/s published (last stats interval)"),
                ("pulsar_rate_out", "Messages/s dispatched (last stats interval)"),
                ("pulsar_throughput_in", "Bytes/s published (last stats interval)"),
                ("pulsar_throughput_out", "Bytes/s dispatched (last stats interval)"),
                ("pulsar_storage_size", "Bytes stored"),
                ("pulsar_storage_backlog_size", "Bytes not acked by the slowest subscription"),
                ("pulsar_msg_backlog", "Entries not acked, all subscriptions"),
                ("pulsar_storage_backlog_quota_limit", "The backlog quota's size limit (bytes)"),
                (
                    "pulsar_storage_backlog_quota_limit_time",
                    "The backlog quota's time limit (seconds)",
                ),
                (
                    "pulsar_storage_backlog_age_seconds",
                    "Age of the oldest unacked message (at the last backlog-quota check)",
                ),
                ("pulsar_storage_write_rate", "Entries/s written (last stats interval)"),
                ("pulsar_storage_read_rate", "Entries/s read (last stats interval)"),
                (
                    "pulsar_publish_rate_limit_times",
                    "Times a producer was held back by a publish rate (since the topic loaded)",
                ),
                *((n, "Entries written in the last stats interval") for n in WRITE_LATENCY_NAMES),
                ("pulsar_storage_write_latency_count", "Entries written, last stats interval"),
                ("pulsar_storage_write_latency_sum", "Their write latency in ms, summed"),
                *((n, "Entries of this size, last stats interval") for n in ENTRY_SIZE_NAMES),
                ("pulsar_entry_size_count", "Entries written, last stats interval"),
                ("pulsar_entry_size_sum", "Their size in bytes, summed"),
            )
        }
        counters = {
            name: CounterMetricFamily(name, doc, labels=t)
            for name, doc in (
                ("pulsar_in_messages", "Messages published (since the topic loaded)"),
                ("pulsar_in_bytes", "Bytes published (since the topic loaded)"),
                ("pulsar_out_messages", "Messages dispatched (since the topic loaded)"),
                ("pulsar_out_bytes", "Bytes dispatched (since the topic loaded)"),
            )
        }
        s = SUBSCRIPTION_LABELS
        sub_gauges = {
            name: _gauge(name, doc, s)
            for name, doc in (
                ("pulsar_subscription_back_log", "Entries not acked"),
                ("pulsar_subscription_msg_rate_out", "Messages/s dispatched"),
                ("pulsar_subscription_msg_throughput_out", "Bytes/s dispatched"),
                ("pulsar_subscription_msg_rate_redeliver", "Messages/s redelivered"),
                ("pulsar_subscription_unacked_messages", "Messages delivered, not acked"),
                ("pulsar_subscription_consumers_count", "Consumers"),
            )
        }
        namespaces: dict[str, _Namespace] = defaultdict(_Namespace)
        for topic in self.service.topics.loaded_topics():
            ns = str(topic.topic_name.namespace)
            values = [cluster, ns, topic.name]
            ledger = topic.ledger.stats
            rate_out, throughput_out = topic.rates_out()
            subs = topic.subscriptions.values()
            for name, value in (
                ("pulsar_subscriptions_count", len(subs)),
                ("pulsar_producers_count", len(topic.producers)),
                ("pulsar_consumers_count", sum(len(x.consumers) for x in subs)),
                ("pulsar_rate_in", topic.rate_in.msg_rate),
                ("pulsar_rate_out", rate_out),
                ("pulsar_throughput_in", topic.rate_in.byte_rate),
                ("pulsar_throughput_out", throughput_out),
                ("pulsar_storage_size", topic.ledger.total_size),
                ("pulsar_storage_backlog_size", topic.backlog_size()),
                ("pulsar_msg_backlog", sum(x.backlog() for x in subs)),
                ("pulsar_storage_backlog_quota_limit", topic.backlog.quotas.size.limit_size),
                ("pulsar_storage_backlog_quota_limit_time", topic.backlog.quotas.time.limit_time),
                ("pulsar_storage_backlog_age_seconds", topic.backlog.oldest_age_s),
                ("pulsar_storage_write_rate", ledger.added.msg_rate),
                ("pulsar_storage_read_rate", ledger.read.msg_rate),
                ("pulsar_publish_rate_limit_times", topic.publish_rate_limited_times),
                ("pulsar_storage_write_latency_count", ledger.add_latency_ms.interval_count),
                ("pulsar_storage_write_latency_sum", ledger.add_latency_ms.interval_sum),
                ("pulsar_entry_size_count", ledger.entry_size.interval_count),
                ("pulsar_entry_size_sum", ledger.entry_size.interval_sum),
                *zip(WRITE_LATENCY_NAMES, ledger.add_latency_ms.interval, strict=True),
                *zip(ENTRY_SIZE_NAMES, ledger.entry_size.interval, strict=True),
            ):
                gauges[name].add_metric(values, value)
            for name, value in (
                ("pulsar_in_messages", topic.rate_in.messages),
                ("pulsar_in_bytes", topic.rate_in.bytes),
                ("pulsar_out_messages", sum(x.rate_out.messages for x in subs)),
                ("pulsar_out_bytes", sum(x.rate_out.bytes for x in subs)),
            ):
                counters[name].add_metric(values, value)
            for sub_name, sub in topic.subscriptions.items():
                sub_values = [*values, sub_name]
                for name, value in (
                    ("pulsar_subscription_back_log", sub.backlog()),
                    ("pulsar_subscription_msg_rate_out", sub.rate_out.msg_rate),
                    ("pulsar_subscription_msg_throughput_out", sub.rate_out.byte_rate),
                    ("pulsar_subscription_msg_rate_redeliver", sub.redelivered.msg_rate),
                    (
                        "pulsar_subscription_unacked_messages",
                        sum(c.unacked_messages for c in sub.consumers),
                    ),
                    ("pulsar_subscription_consumers_count", len(sub.consumers)),
                ):
                    sub_gauges[name].add_metric(sub_values, value)
            _sum_ledger(namespaces[ns], topic, ledger)
        yield from gauges.values()
        yield from counters.values()
        yield from sub_gauges.values()
        yield from _namespace_metrics(
            cluster, namespaces, self.service.config.statsUpdateFrequencyInSecs
        )


def _sum_ledger(into: _Namespace, topic: PersistentTopic, ledger: LedgerStats) -> None:
    """Add one topic's managed ledger to its namespace's pulsar_ml_* sums."""
    into.topics += 1
    sums = into.sums
    sums["AddEntryBytesRate"] += ledger.added.byte_rate
    sums["AddEntryWithReplicasBytesRate"] += ledger.added.byte_rate  # one copy: no replicas
    sums["AddEntryMessagesRate"] += ledger.added.msg_rate
    sums["AddEntrySucceed"] += ledger.added.interval_messages
    sums["AddEntryErrors"] += ledger.add_errors.interval_messages
    sums["ReadEntriesRate"] += ledger.read.msg_rate
    sums["ReadEntriesBytesRate"] += ledger.read.byte_rate
    sums["ReadEntriesSucceeded"] += ledger.read.interval_messages
    sums["ReadEntriesErrors"] += ledger.read_errors.interval_messages
    sums["MarkDeleteRate"] += ledger.mark_deletes.msg_rate
    sums["StoredMessagesSize"] += topic.ledger.total_size
    sums["NumberOfMessagesInBacklog"] += sum(s.backlog() for s in topic.subscriptions.values())
    _add(into.latency, ledger.add_latency_ms)
    _add(into.sizes, ledger.entry_size)


def _namespace_metrics(
    cluster: str, namespaces: dict[str, _Namespace], period_s: float
) -> Iterator[Metric]:
    n = NAMESPACE_LABELS
    topics = _gauge("pulsar_topics_count", "Topics loaded", n)
    ml = {
        name: _gauge(f"pulsar_ml_{name}", f"Managed ledgers' {name} (last stats interval)", n)
        for name in (
            "AddEntryBytesRate",
            "AddEntryWithReplicasBytesRate",
            "AddEntryMessagesRate",
            "AddEntrySucceed",
            "AddEntryErrors",
            "ReadEntriesRate",
            "ReadEntriesBytesRate",
            "ReadEntriesSucceeded",
            "ReadEntriesErrors",
            "MarkDeleteRate",
            "StoredMessagesSize",
            "NumberOfMessagesInBacklog",
        )
    }
    # Pulsar's bucket families: per second over the interval, a "quantile" label per bucket
    # and the overflow as a family of its own.
    bucketed = (
        ("AddEntryLatencyBuckets", _quantiles(ENTRY_LATENCY_BUCKETS_MS), "latency"),
        ("EntrySizeBuckets", _quantiles(ENTRY_SIZE_BUCKETS_BYTES), "sizes"),
    )
    families = {
        name: (
            _gauge(f"pulsar_ml_{name}", f"Managed ledgers' {name} (per second)", [*n, "quantile"]),
            _gauge(f"pulsar_ml_{name}_OVERFLOW", f"Managed ledgers' {name} over the last", n),
        )
        for name, _, _ in bucketed
    }
    for ns, stats in namespaces.items():
        values = [cluster, ns]
        topics.add_metric(values, stats.topics)
        for name, gauge in ml.items():
            gauge.add_metric(values, stats.sums[name])
        for name, labels, attr in bucketed:
            counts: list[int] = getattr(stats, attr)
            family, overflow = families[name]
            for label, count in zip(labels, counts, strict=False):
                family.add_metric([*values, label], count / period_s)
            overflow.add_metric(values, counts[-1] / period_s if counts else 0.0)
    yield topics
    yield from ml.values()
    for family, overflow in families.values():
        yield family
        yield overflow


def _stall_metrics(stalls: StallMonitor) -> Iterator[Metric]:
    """GC pauses per generation and the event loop's lag: histograms, and the longest pause of
    the last stats interval."""
    families: list[tuple[str, str, list[str], list[tuple[list[str], PauseMeter]]]] = [
        (
            "python_gc_pause_seconds",
            "Garbage collections of the broker process, by duration",
            ["generation"],
            [([str(gen)], meter) for gen, meter in stalls.gc.items()],
        ),
        (
            "pulsar_broker_event_loop_lag_seconds",
            "How late the event loop ran a timer: how long it was held by something else",
            [],
            [([], stalls.lag)],
        ),
    ]
    for name, doc, labels, meters in families:
        histogram = HistogramMetricFamily(name, doc, labels=labels)
        longest = _gauge(f"{name}_max", f"{doc}: the longest of the last stats interval", labels)
        for values, meter in meters:
            histogram.add_metric(values, _buckets(meter), meter.sum)
            longest.add_metric(values, meter.interval_max)
        yield histogram
        yield longest


def _buckets(meter: PauseMeter) -> list[tuple[str, float]]:
    return [(le, float(n)) for le, n in meter.cumulative()]
