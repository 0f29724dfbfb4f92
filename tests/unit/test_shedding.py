"""The leader's shedding decision (Pulsar's ThresholdShedder), on hand-computed cases: the
average of the brokers' usages plus the threshold marks a broker overloaded; it sheds its busiest
bundles worth (usage - average - threshold + 5%) of its throughput; never its only bundle, never
a bundle in its grace period, nothing under the minimum throughput; usages are weighted and
smoothed with the history percentage. And where a shed bundle goes: never back."""

from __future__ import annotations

import pytest

from pulsar_grpc.broker.cluster.placement import BrokerLoad, select_broker
from pulsar_grpc.broker.cluster.shedding import (
    BrokerUsage,
    ResourceWeights,
    SheddingRules,
    ThresholdShedder,
    find_bundles_to_unload,
    max_usage_with_weight,
    smoothed,
)
from pulsar_grpc.broker.config import ConfigError, ServiceConfiguration, load_config
from pulsar_grpc.broker.lookup import BrokerData

MB = 1024 * 1024
DEFAULT_RULES = SheddingRules.of(ServiceConfiguration())  # 10%, 10 MB/s


def hot(usage: float = 0.8, throughput_mb: float = 100, **bundles_mb: float) -> BrokerUsage:
    bundles = bundles_mb or {"b4": 40, "b1": 30, "b2": 20, "b3": 10}
    return BrokerUsage("hot", usage, throughput_mb * MB, {b: t * MB for b, t in bundles.items()})


def idle(name: str, usage: float = 0.2) -> BrokerUsage:
    return BrokerUsage(name, usage, 0.0, {f"{name}-only": 0.0})


def test_defaults_are_pulsars() -> None:
    config = ServiceConfiguration()
    assert DEFAULT_RULES == SheddingRules(0.10, 10 * MB)
    assert config.loadBalancerHistoryResourcePercentage == 0.9
    assert config.loadBalancerSheddingGracePeriodMinutes == 30
    assert config.loadBalancerSheddingIntervalMinutes == 1
    assert set(ResourceWeights.of(config).weights.values()) == {1.0}


def test_the_busiest_bundle_covering_the_excess_is_shed() -> None:
    # average (0.8 + 0.2 + 0.2) / 3 = 0.4; 0.8 >= 0.4 + 0.1: shed 0.8 - 0.4 - 0.1 + 0.05 =
    # 35% of 100 MB/s = 35 MB/s; the busiest bundle (40 MB/s) covers it alone.
    brokers = [hot(), idle("a"), idle("b")]
    assert find_bundles_to_unload(brokers, set(), DEFAULT_RULES) == {"hot": ["b4"]}


def test_bundles_in_their_grace_period_are_skipped() -> None:
    # Without b4: b1 (30) is not enough for 35 MB/s, b1 + b2 (50) is.
    brokers = [hot(), idle("a"), idle("b")]
    assert find_bundles_to_unload(brokers, {"b4"}, DEFAULT_RULES) == {"hot": ["b1", "b2"]}


def test_not_above_average_plus_threshold_sheds_nothing() -> None:
    # average (0.55 + 0.45 + 0.40) / 3 = 0.4667; 0.55 < 0.5667.
    brokers = [hot(usage=0.55), idle("a", 0.45), idle("b", 0.40)]
    assert find_bundles_to_unload(brokers, set(), DEFAULT_RULES) == {}
    # A smaller threshold (5%): 0.55 >= 0.5167, shed 0.55 - 0.4667 - 0.05 + 0.05 = 8.3% of
    # 100 MB/s = 8.3 MB/s: the busiest bundle; over the 10 MB/s minimum only when it is lowered.
    assert find_bundles_to_unload(brokers, set(), SheddingRules(0.05, 10 * MB)) == {}
    assert find_bundles_to_unload(brokers, set(), SheddingRules(0.05, 8 * MB)) == {"hot": ["b4"]}


def test_under_the_minimum_throughput_nothing_is_shed() -> None:
    # 35% of 20 MB/s = 7 MB/s < 10 MB/s.
    brokers = [hot(throughput_mb=20, x=10, y=10), idle("a"), idle("b")]
    assert find_bundles_to_unload(brokers, set(), DEFAULT_RULES) == {}
    assert find_bundles_to_unload(brokers, set(), SheddingRules(0.1, 5 * MB)) == {"hot": ["x"]}


def test_a_broker_never_sheds_its_only_bundle() -> None:
    brokers = [hot(only=100), idle("a"), idle("b")]
    assert find_bundles_to_unload(brokers, set(), DEFAULT_RULES) == {}


def test_nothing_without_load_or_brokers() -> None:
    assert find_bundles_to_unload([], set(), DEFAULT_RULES) == {}
    assert find_bundles_to_unload([idle("a", 0.0), idle("b", 0.0)], set(), DEFAULT_RULES) == {}


def test_several_overloaded_brokers_each_shed() -> None:
    # average (0.9 + 0.9 + 0.0 + 0.0) / 4 = 0.45: both shed 0.9 - 0.45 - 0.1 + 0.05 = 40%.
    other = BrokerUsage("hot2", 0.9, 100 * MB, {"c1": 50 * MB, "c2": 50 * MB})
    brokers = [hot(usage=0.9), other, idle("a", 0.0), idle("b", 0.0)]
    assert find_bundles_to_unload(brokers, set(), DEFAULT_RULES) == {
        "hot": ["b4"],
        "hot2": ["c1"],
    }


def test_usage_is_the_largest_weighted_resource() -> None:
    weights = ResourceWeights({"cpu": 0.5, "memory": 1.0, "bandwidthIn": 1.0})
    # cpu 50% * 0.5 = 0.25, memory 0.2, bandwidthIn 0.3.
    assert max_usage_with_weight({"cpu": 50, "memory": 20, "bandwidthIn": 30}, weights) == 0.3


def test_usage_is_smoothed_with_the_history_percentage() -> None:
    assert smoothed(None, 0.5, 0.9) == 0.5  # the first run takes the current value
    assert smoothed(0.5, 1.0, 0.9) == pytest.approx(0.55)
    shedder = ThresholdShedder(ServiceConfiguration())
    assert shedder.usage("a", {"cpu": 50}) == 0.5
    assert shedder.usage("a", {"cpu": 100}) == pytest.approx(0.55)
    assert shedder.usage("a", {"cpu": 100}) == pytest.approx(0.595)
    shedder.forget_others({"b"})  # "a" left the cluster: it starts afresh when back
    assert shedder.usage("a", {"cpu": 100}) == 1.0


def test_a_shed_bundle_never_goes_back_to_the_broker_it_left() -> None:
    def load(broker: str, rate: float) -> BrokerLoad:
        return BrokerLoad(broker, 0.0, rate, frozenset(), BrokerData({}))

    loads = [load("hot", 0.0), load("a", 500.0), load("b", 100.0)]
    assert select_broker(loads, {}, 85) == "hot"  # the least rate, were it not leaving it
    assert select_broker(loads, {}, 85, excluded="hot") == "b"
    assert select_broker([load("hot", 0.0)], {}, 85, excluded="hot") is None


def test_fractional_intervals_parse_and_bad_numbers_are_refused() -> None:
    values = {
        "loadBalancerSheddingIntervalMinutes": "0.02",
        "loadBalancerHistoryResourcePercentage": "0.5",
    }
    config = load_config(None, {}, values)
    assert config.loadBalancerSheddingIntervalMinutes == 0.02
    assert config.loadBalancerHistoryResourcePercentage == 0.5
    for bad in ("fast", "nan", "-1"):
        with pytest.raises(ConfigError, match="loadBalancerSheddingIntervalMinutes"):
            load_config(None, {}, {"loadBalancerSheddingIntervalMinutes": bad})


def test_the_broker_keeps_one_bundle_however_little_they_carry() -> None:
    # 35% of 100 MB/s to shed, but the bundles carry 1 MB/s each: all but one go.
    brokers = [hot(x=1, y=1, z=1), idle("a"), idle("b")]
    assert find_bundles_to_unload(brokers, set(), SheddingRules(0.1, 0)) == {"hot": ["x", "y"]}
