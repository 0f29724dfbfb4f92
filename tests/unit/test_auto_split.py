"""The leader's automatic split decision (Pulsar's BundleSplitterTask), on hand-computed cases:
a bundle of at least 2 topics over any threshold (topics, sessions, message rate, bandwidth) is
split, while its namespace stays under the maximum number of bundles."""

from __future__ import annotations

from pulsar_grpc.broker.cluster.auto_split import (
    BundleStats,
    SplitLimits,
    find_bundles_to_split,
)
from pulsar_grpc.broker.config import ServiceConfiguration

MIB = 1024 * 1024
LIMITS = SplitLimits(
    max_topics=2, max_sessions=1000, max_msg_rate=30000, max_bandwidth=100 * MIB, max_bundles=4
)
NS = "public/default"


def stats(topics: int = 2, sessions: int = 0, rate: float = 0.0, mb: float = 0.0) -> BundleStats:
    return BundleStats(topics, sessions, rate, mb * MIB)


def split(bundle_stats: dict[str, BundleStats], bundles: int = 1) -> dict[str, str]:
    return find_bundles_to_split([("broker", bundle_stats)], {NS: bundles}, LIMITS)


def test_defaults_are_pulsars() -> None:
    assert SplitLimits.of(ServiceConfiguration()) == SplitLimits(1000, 1000, 30000, 100 * MIB, 128)


def test_each_threshold_alone_splits_a_bundle() -> None:
    assert split({f"{NS}/a": stats(topics=3)}) == {f"{NS}/a": "broker"}
    assert split({f"{NS}/a": stats(sessions=1001)}) == {f"{NS}/a": "broker"}
    assert split({f"{NS}/a": stats(rate=30001)}) == {f"{NS}/a": "broker"}
    assert split({f"{NS}/a": stats(mb=101)}) == {f"{NS}/a": "broker"}


def test_at_the_thresholds_nothing_is_split() -> None:
    assert split({f"{NS}/a": stats(topics=2, sessions=1000, rate=30000, mb=100)}) == {}


def test_a_bundle_of_one_topic_is_never_split() -> None:
    assert split({f"{NS}/a": stats(topics=1, sessions=5000, rate=1e6, mb=1000)}) == {}


def test_no_session_limit_when_it_is_zero() -> None:
    limits = SplitLimits(1000, 0, 30000, 100 * MIB, 128)
    found = find_bundles_to_split([("b", {f"{NS}/a": stats(sessions=10**6)})], {NS: 1}, limits)
    assert found == {}


def test_the_namespace_maximum_counts_the_splits_of_this_run() -> None:
    hot = {f"{NS}/a": stats(topics=3), f"{NS}/b": stats(topics=3)}
    # 3 bundles, maximum 4: one split (3 < 4), then 3 + 1 = 4 is the maximum.
    assert split(hot, bundles=3) == {f"{NS}/a": "broker"}
    assert split(hot, bundles=4) == {}
    # Over two brokers' reports the count carries on; another namespace has its own.
    reports = [("x", {f"{NS}/a": stats(topics=3)}), ("y", {"t/other/c": stats(topics=3)})]
    found = find_bundles_to_split(reports, {NS: 2, "t/other": 3}, LIMITS)
    assert found == {f"{NS}/a": "x", "t/other/c": "y"}


def test_stats_read_from_the_report_json() -> None:
    raw = {
        "msgRateIn": 10.0,
        "msgRateOut": 20.0,
        "msgThroughputIn": 100.0,
        "msgThroughputOut": 200.0,
        "consumerCount": 3,
        "producerCount": 2,
        "topics": 4,
        "cacheSize": 0,
    }
    assert BundleStats.from_json(raw) == BundleStats(4, 5, 30.0, 300.0)
