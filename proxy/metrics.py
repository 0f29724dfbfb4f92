"""The proxy's counters, and their Prometheus names (Pulsar proxy's, where it has one).

The forwarding path only adds to plain integers (:class:`ProxyStats`); the collector turns them
into metric families when /metrics is read, as the broker's collector does.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class Direction(enum.Enum):
    """Which way forwarded bytes went."""

    CLIENT_TO_BROKER = "client_to_broker"
    BROKER_TO_CLIENT = "broker_to_client"


class LookupKind(enum.Enum):
    """The calls the proxy answers itself (with a broker's help)."""

    LOOKUP = "lookup"
    PARTITIONS_METADATA = "partitions_metadata"
    TOPICS_OF_NAMESPACE = "topics_of_namespace"


class Route(enum.Enum):
    """How the proxy knew where to forward a call."""

    NAMED = "header"  # the client named the broker (x-pulsar-proxy-to-broker-url)
    LOOKED_UP = "lookup"  # the proxy looked the topic up (a client knowing nothing of proxies)


class ProxyStats:
    """Counters of everything the proxy forwarded and answered; one owner: the proxy server."""

    def __init__(self) -> None:
        self.active_streams: Counter[str] = Counter()  # by method
        # Client connections (gRPC peers) with a stream open: forgotten at their last stream.
        self.peers: Counter[str] = Counter()
        self.streams: Counter[str] = Counter()  # opened, by method
        self.unary_calls: Counter[str] = Counter()  # forwarded, by method
        self.bytes: Counter[Direction] = Counter()
        self.messages: Counter[Direction] = Counter()
        self.lookups: Counter[LookupKind] = Counter()
        self.routes: Counter[Route] = Counter()
        self.rejected_lookups = 0

    def stream_opened(self, method: str, peer: str) -> None:
        self.streams[method] += 1
        self.active_streams[method] += 1
        self.peers[peer] += 1

    def stream_closed(self, method: str, peer: str) -> None:
        self.active_streams[method] -= 1
        self.peers[peer] -= 1
        if self.peers[peer] <= 0:
            del self.peers[peer]

    def forwarded(self, direction: Direction, size: int) -> None:
        self.bytes[direction] += size
        self.messages[direction] += 1


class ProxyCollector(Collector):
    """Reads :class:`ProxyStats` at scrape time."""

    def __init__(self, stats: ProxyStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        stats = self.stats
        active = GaugeMetricFamily(
            "pulsar_proxy_active_streams", "Client streams being forwarded", labels=["method"]
        )
        opened = CounterMetricFamily(
            "pulsar_proxy_new_streams", "Client streams opened", labels=["method"]
        )
        for method in sorted(set(stats.streams) | set(stats.active_streams)):
            active.add_metric([method], stats.active_streams[method])
            opened.add_metric([method], stats.streams[method])
        connections = GaugeMetricFamily(
            "pulsar_proxy_active_connections", "Client connections with a stream open"
        )
        connections.add_metric([], len(stats.peers))
        unary = CounterMetricFamily(
            "pulsar_proxy_unary_calls", "Unary calls forwarded to a broker", labels=["method"]
        )
        for method, count in sorted(stats.unary_calls.items()):
            unary.add_metric([method], count)
        binary_bytes = CounterMetricFamily(
            "pulsar_proxy_binary_bytes",
            "Bytes of forwarded messages, per direction",
            labels=["direction"],
        )
        binary_ops = CounterMetricFamily(
            "pulsar_proxy_binary_ops", "Forwarded messages, per direction", labels=["direction"]
        )
        for direction in Direction:
            binary_bytes.add_metric([direction.value], stats.bytes[direction])
            binary_ops.add_metric([direction.value], stats.messages[direction])
        lookups = CounterMetricFamily(
            "pulsar_proxy_lookup_requests", "Calls answered by the proxy", labels=["kind"]
        )
        for kind in LookupKind:
            lookups.add_metric([kind.value], stats.lookups[kind])
        routed = CounterMetricFamily(
            "pulsar_proxy_routed_calls",
            "Calls forwarded, by how the proxy knew the broker",
            labels=["by"],
        )
        for route in Route:
            routed.add_metric([route.value], stats.routes[route])
        rejected = CounterMetricFamily(
            "pulsar_proxy_rejected_lookup_requests",
            "Lookups refused over maxConcurrentLookupRequests",
        )
        rejected.add_metric([], stats.rejected_lookups)
        yield from (
            active,
            opened,
            connections,
            unary,
            binary_bytes,
            binary_ops,
            lookups,
            routed,
            rejected,
        )
