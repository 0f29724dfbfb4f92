"""Token buckets, throttles, the rate meter and where a topic's limits come from, on a fake
clock (the end-to-end accuracy is in tests/e2e/test_rate_limits.py)."""

from __future__ import annotations

import pytest

from pulsar_grpc.broker.config import load_config
from pulsar_grpc.broker.errors import InvalidArgumentError
from pulsar_grpc.broker.meters import RateMeter
from pulsar_grpc.broker.naming import TopicName
from pulsar_grpc.broker.topics.rate_limit import Kind, RateLimit, Throttle
from pulsar_grpc.broker.topics.rate_policies import RateKind, resolve


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_throttle_holds_back_until_its_debt_is_paid() -> None:
    clock = Clock()
    throttle = Throttle(RateLimit(messages=100), clock)
    throttle.consume(100, 0)  # the full bucket: one period's burst
    assert throttle.delay() == (0.0, None)
    throttle.consume(50, 0)  # in debt by 50 messages: half a second at 100/s
    assert throttle.delay() == (pytest.approx(0.5), Kind.MESSAGES)
    clock.now += 0.25
    assert throttle.delay()[0] == pytest.approx(0.25)
    clock.now += 0.25
    assert throttle.delay() == (0.0, None)
    assert throttle.delay(need_one=True)[0] == pytest.approx(0.01)


def test_bytes_and_messages_hold_independently_and_the_longer_wait_wins() -> None:
    clock = Clock()
    throttle = Throttle(RateLimit(messages=1000, bytes=1000), clock)
    throttle.consume(1010, 3000)  # 10 messages and 2000 bytes in debt
    wait, kind = throttle.delay()
    assert (wait, kind) == (pytest.approx(2.0), Kind.BYTES)
    assert throttle.available(Kind.MESSAGES) == -10
    assert Throttle(RateLimit(), clock).available(Kind.MESSAGES) is None


def test_a_raised_limit_pays_a_debt_back_sooner_and_a_removed_one_frees_at_once() -> None:
    clock = Clock()
    throttle = Throttle(RateLimit(messages=10), clock)
    throttle.consume(30, 0)  # 20 in debt: 2 s at 10/s
    throttle.update(RateLimit(messages=100))
    assert throttle.delay()[0] == pytest.approx(0.2)
    throttle.update(RateLimit())
    assert throttle.delay() == (0.0, None)


def test_a_period_spreads_the_allowance() -> None:
    clock = Clock()
    throttle = Throttle(RateLimit(messages=100, period_s=10), clock)
    throttle.consume(110, 0)  # 10 in debt at 10 messages a second
    assert throttle.delay()[0] == pytest.approx(1.0)


def test_the_rate_meter_reports_the_last_stats_interval_until_the_next_tick() -> None:
    clock = Clock()
    meter = RateMeter(clock=clock)
    meter.record(10, 100)
    assert meter.rates() == (0.0, 0.0)  # no tick yet
    clock.now += 2
    meter.update()
    assert meter.rates() == (5.0, 50.0) and meter.average_size == 10.0
    meter.record(1000, 1000)  # counted, but the rates move only at the next tick
    clock.now += 0.5
    assert meter.rates() == (5.0, 50.0)
    clock.now += 0.5
    meter.update()
    assert meter.rates() == (1000.0, 1000.0)
    assert (meter.messages, meter.bytes) == (1010, 1100)
    clock.now += 1
    meter.update()
    assert meter.rates() == (0.0, 0.0) and meter.average_size == 0.0


def test_topic_policy_beats_namespace_policy_beats_broker_default() -> None:
    config = load_config(None, {}, {"maxPublishRatePerTopicInMessages": "7"})
    topic = TopicName.get("persistent://t/ns/x")
    assert resolve(config, None, topic).publish == RateLimit(messages=7)
    ns_rate = {"publishThrottlingRateInMsg": 50, "publishThrottlingRateInByte": -1}
    policies: dict[str, object] = {"publishMaxMessageRate": {config.clusterName: ns_rate}}
    assert resolve(config, policies, topic).publish == RateLimit(messages=50)
    other_cluster = {"publishMaxMessageRate": {"elsewhere": ns_rate}}
    assert resolve(config, other_cluster, topic).publish == RateLimit(messages=7)
    policies["topicPolicies"] = {
        "persistent://t/ns/x": {"publishRate": {"publishThrottlingRateInByte": 900}}
    }
    assert resolve(config, policies, topic).publish == RateLimit(bytes=900)
    # A partition follows its partitioned topic's policy.
    partition = TopicName.get("persistent://t/ns/x-partition-3")
    assert resolve(config, policies, partition).publish == RateLimit(bytes=900)


def test_a_dispatch_rate_written_by_older_pulsar_is_read() -> None:
    config = load_config(None, {}, {})
    legacy = {"clusterDispatchRate": {config.clusterName: {"dispatchThrottlingRateInMsg": 9}}}
    topic = TopicName.get("persistent://t/ns/x")
    assert resolve(config, legacy, topic).dispatch == RateLimit(messages=9)
    assert resolve(config, legacy, topic).subscription_dispatch == RateLimit()


def test_dispatch_rate_bodies_are_checked() -> None:
    kind = RateKind.DISPATCH
    assert kind.parse({"dispatchThrottlingRateInMsg": 5, "ratePeriodInSecond": 3}) == RateLimit(
        messages=5, period_s=3
    )
    bad_bodies: list[object] = [
        {"ratePeriodInSecond": 0},
        {"relativeToPublishRate": 1},
        {"x": 1},
        [],
    ]
    for bad in bad_bodies:
        with pytest.raises(InvalidArgumentError):
            kind.parse(bad)
    relative = kind.parse({"dispatchThrottlingRateInMsg": 5, "relativeToPublishRate": True})
    assert relative == RateLimit(messages=5, relative_to_publish=True)
    assert kind.as_json(relative)["relativeToPublishRate"] is True
    stored = kind.normalize({"dispatchThrottlingRateInByte": 10})
    assert stored == {
        "dispatchThrottlingRateInMsg": -1,
        "dispatchThrottlingRateInByte": 10,
        "relativeToPublishRate": False,
        "ratePeriodInSecond": 1,
    }


def test_a_relative_limit_adds_the_publish_rate_and_follows_it_each_second() -> None:
    clock = Clock()
    published = [200.0, 5000.0]  # messages/s, bytes/s

    def publish_rate() -> tuple[float, float]:
        return published[0], published[1]

    limit = RateLimit(messages=100, relative_to_publish=True)
    throttle = Throttle(limit, clock, publish_rate=publish_rate)
    assert throttle.effective() == RateLimit(messages=300)  # bytes stay unlimited
    throttle.consume(300 + 150, 0)  # the burst and 150 more: half a second at 300/s
    assert throttle.delay()[0] == pytest.approx(0.5)
    published[0] = 500.0
    clock.now += 0.5  # not re-read yet: paid back at 300/s
    assert throttle.delay() == (0.0, None)
    throttle.consume(300, 0)
    clock.now += 0.5  # a second since the last read: 600/s from now on
    assert throttle.delay()[0] == pytest.approx((300 - 150) / 600)
    # Without a publish rate to follow (the broker-wide throttle) the limit holds as set.
    assert Throttle(limit, clock).effective() == limit


def test_a_new_meter_measures_its_first_interval_from_when_it_was_made() -> None:
    clock = Clock()
    clock.now = 100.5
    meter = RateMeter(clock=clock)
    meter.record(50, 500)  # half a second of 100 messages a second
    clock.now = 101.0
    meter.update()
    assert meter.rates() == (100.0, 1000.0)
