"""Which bundles the leader splits: Pulsar's BundleSplitterTask, as a pure function.

A bundle is split when it has at least 2 topics and is over any threshold: more than
loadBalancerNamespaceBundleMaxTopics topics, more than MaxSessions producers + consumers (0: no
limit), more than MaxMsgRate messages/s (in + out), more than MaxBandwidthMbytes MB/s (in +
out). A namespace is left alone once its bundles, plus those this run already splits, reach
loadBalancerNamespaceMaximumBundles. (Pulsar reads the rates from the leader's long-term bundle
data; here from the bundle's lastStats in its owner's report.)
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pulsar_grpc.broker.config import ServiceConfiguration

__all__ = ["BundleStats", "SplitLimits", "find_bundles_to_split", "namespace_of"]

log = logging.getLogger(__name__)
_MIB = 1024 * 1024


@dataclass(frozen=True)
class BundleStats:
    """Pulsar's NamespaceBundleStats, the fields the split decision reads."""

    topics: int
    sessions: int  # producerCount + consumerCount
    msg_rate: float  # msgRateIn + msgRateOut
    msg_throughput: float  # msgThroughputIn + msgThroughputOut, bytes/s

    @classmethod
    def from_json(cls, stats: Mapping[str, float]) -> BundleStats:
        return cls(
            topics=int(stats.get("topics", 0)),
            sessions=int(stats.get("producerCount", 0)) + int(stats.get("consumerCount", 0)),
            msg_rate=float(stats.get("msgRateIn", 0.0)) + float(stats.get("msgRateOut", 0.0)),
            msg_throughput=float(stats.get("msgThroughputIn", 0.0))
            + float(stats.get("msgThroughputOut", 0.0)),
        )


@dataclass(frozen=True)
class SplitLimits:
    max_topics: int
    max_sessions: int
    max_msg_rate: float
    max_bandwidth: float  # bytes/s
    max_bundles: int

    @classmethod
    def of(cls, config: ServiceConfiguration) -> SplitLimits:
        return cls(
            config.loadBalancerNamespaceBundleMaxTopics,
            config.loadBalancerNamespaceBundleMaxSessions,
            config.loadBalancerNamespaceBundleMaxMsgRate,
            config.loadBalancerNamespaceBundleMaxBandwidthMbytes * _MIB,
            config.loadBalancerNamespaceMaximumBundles,
        )

    def exceeded_by(self, stats: BundleStats) -> bool:
        return (
            stats.topics > self.max_topics
            or (self.max_sessions > 0 and stats.sessions > self.max_sessions)
            or stats.msg_rate > self.max_msg_rate
            or stats.msg_throughput > self.max_bandwidth
        )


def namespace_of(bundle: str) -> str:
    """``tenant/ns`` of a bundle name ``tenant/ns/0x..._0x...``."""
    return bundle.rpartition("/")[0]


def find_bundles_to_split(
    reports: Iterable[tuple[str, Mapping[str, BundleStats]]],
    bundle_counts: Mapping[str, int],
    limits: SplitLimits,
) -> dict[str, str]:
    """Bundle -> its owner, for the bundles to split. ``reports``: (broker, its lastStats);
    ``bundle_counts``: namespace -> its current number of bundles."""
    chosen: dict[str, str] = {}
    splitting: dict[str, int] = {}
    for broker, last_stats in reports:
        for bundle, stats in last_stats.items():
            if stats.topics < 2 or not limits.exceeded_by(stats):
                continue
            namespace = namespace_of(bundle)
            count = bundle_counts.get(namespace, 0) + splitting.get(namespace, 0)
            if count >= limits.max_bundles:
                log.warning(
                    "cannot split bundle %s: namespace %s has %d bundles already",
                    bundle,
                    namespace,
                    count,
                )
                continue
            log.info("bundle %s is to be split: %s", bundle, stats)
            chosen[bundle] = broker
            splitting[namespace] = splitting.get(namespace, 0) + 1
    return chosen
