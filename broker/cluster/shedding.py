"""Which bundles the leader sheds: Pulsar's ThresholdShedder, as pure functions of the load.

A broker's usage is the largest of its resources' usage (percent of the limit / 100) times the
resource's weight (Pulsar's getMaxResourceUsageWithWeight), smoothed over the leader's runs:
``history * previous + (1 - history) * current`` (the first run takes the current value). A
broker whose smoothed usage is at least the brokers' average plus the threshold sheds bundles,
busiest (message throughput in + out) first, until their throughput reaches
``(usage - average - threshold + 5%)`` of the broker's; at least one, never the broker's last
one (Pulsar would shed every bundle when they carry too little), never a bundle unloaded within
the grace period, and nothing when that throughput is under the minimum throughput threshold.
(Pulsar reads a bundle's throughput from its short-term data; here it is the bundle's lastStats
in its owner's report.)

:class:`ThresholdShedder` keeps the smoothed usages between runs; everything else is given.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from pulsar_grpc.broker.config import ServiceConfiguration

__all__ = [
    "ADDITIONAL_THRESHOLD_PERCENT_MARGIN",
    "BrokerUsage",
    "ResourceWeights",
    "SheddingRules",
    "ThresholdShedder",
    "find_bundles_to_unload",
    "max_usage_with_weight",
    "smoothed",
]

# Pulsar's ThresholdShedder.ADDITIONAL_THRESHOLD_PERCENT_MARGIN: shed a little more than the
# excess, so that the broker ends under the threshold.
ADDITIONAL_THRESHOLD_PERCENT_MARGIN = 0.05
_MB = 1024 * 1024


@dataclass(frozen=True)
class ResourceWeights:
    """loadBalancer<Resource>ResourceWeight, by the load report's resource names."""

    weights: Mapping[str, float]

    @classmethod
    def of(cls, config: ServiceConfiguration) -> ResourceWeights:
        return cls(
            {
                "cpu": config.loadBalancerCPUResourceWeight,
                "memory": config.loadBalancerMemoryResourceWeight,
                "directMemory": config.loadBalancerDirectMemoryResourceWeight,
                "bandwidthIn": config.loadBalancerBandwithInResourceWeight,
                "bandwidthOut": config.loadBalancerBandwithOutResourceWeight,
            }
        )


def max_usage_with_weight(percent_usages: Mapping[str, float], weights: ResourceWeights) -> float:
    """The largest usage (percent / 100) times its resource's weight; 0 without resources."""
    return max(
        (percent_usages.get(name, 0.0) / 100 * w for name, w in weights.weights.items()),
        default=0.0,
    )


def smoothed(previous: float | None, current: float, history: float) -> float:
    """Pulsar's updateAvgResourceUsage: ``history`` of the previous value, the rest current."""
    return current if previous is None else previous * history + (1 - history) * current


@dataclass(frozen=True)
class BrokerUsage:
    """One broker as the shedder sees it: its smoothed usage, its throughput (bytes/s in +
    out) and each of its bundles' throughput."""

    broker: str
    usage: float
    throughput: float
    bundles: Mapping[str, float]  # every bundle it reports; throughput 0 without stats


@dataclass(frozen=True)
class SheddingRules:
    threshold: float  # loadBalancerBrokerThresholdShedderPercentage / 100
    min_throughput: float  # loadBalancerBundleUnloadMinThroughputThreshold, in bytes/s

    @classmethod
    def of(cls, config: ServiceConfiguration) -> SheddingRules:
        return cls(
            config.loadBalancerBrokerThresholdShedderPercentage / 100,
            config.loadBalancerBundleUnloadMinThroughputThreshold * _MB,
        )


def find_bundles_to_unload(
    brokers: Iterable[BrokerUsage], recently_unloaded: Collection[str], rules: SheddingRules
) -> dict[str, list[str]]:
    """Pulsar's ThresholdShedder.findBundlesForUnloading: broker -> bundles to unload (see the
    module docstring); brokers with nothing to shed are left out."""
    brokers = list(brokers)
    if not brokers:
        return {}
    average = sum(b.usage for b in brokers) / len(brokers)
    if average == 0:
        return {}
    chosen: dict[str, list[str]] = {}
    for broker in brokers:
        if broker.usage < average + rules.threshold:
            continue
        share = broker.usage - average - rules.threshold + ADDITIONAL_THRESHOLD_PERCENT_MARGIN
        to_offload = broker.throughput * share
        if to_offload < rules.min_throughput or len(broker.bundles) <= 1:
            continue
        candidates = sorted(
            (
                (tp, bundle)
                for bundle, tp in broker.bundles.items()
                if bundle not in recently_unloaded
            ),
            key=lambda c: -c[0],
        )
        marked = 0.0
        # The broker keeps at least one bundle, however little the others carry.
        for throughput, bundle in candidates[: len(broker.bundles) - 1]:
            if chosen.get(broker.broker) and marked >= to_offload:
                break
            chosen.setdefault(broker.broker, []).append(bundle)
            marked += throughput
    return chosen


class ThresholdShedder:
    """The shedder's state across the leader's runs: each broker's smoothed usage (brokers
    that left are forgotten, so memory follows the cluster's size)."""

    def __init__(self, config: ServiceConfiguration) -> None:
        self.weights = ResourceWeights.of(config)
        self.history = config.loadBalancerHistoryResourcePercentage
        self.rules = SheddingRules.of(config)
        self._usage: dict[str, float] = {}

    def usage(self, broker: str, percent_usages: Mapping[str, float]) -> float:
        """Smooth this run's usage of ``broker`` into its history, and return it."""
        current = max_usage_with_weight(percent_usages, self.weights)
        value = self._usage[broker] = smoothed(self._usage.get(broker), current, self.history)
        return value

    def forget_others(self, brokers: Collection[str]) -> None:
        self._usage = {b: u for b, u in self._usage.items() if b in brokers}
