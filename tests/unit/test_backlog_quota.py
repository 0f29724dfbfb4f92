"""The rules of backlog quotas, without a broker: Pulsar's BacklogQuota JSON, the precedence
topic > namespace > broker default per type, the retention rule (a quota must stay under the
retention), the broker's default from its properties, and where a size eviction stops."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pulsar_grpc.broker.errors import InvalidArgumentError, PreconditionFailedError
from pulsar_grpc.broker.ledger import Position
from pulsar_grpc.broker.ledger.info import LedgerInfo
from pulsar_grpc.broker.naming import TopicName
from pulsar_grpc.broker.topics.backlog_quota import (
    BacklogQuota,
    QuotaLevel,
    QuotaType,
    RetentionPolicy,
    check_fits_retention,
    fits_retention,
    resolve_quotas,
)
from pulsar_grpc.broker.topics.backlog_quota_check import size_eviction_target
from pulsar_grpc.broker.topics.settings import BacklogQuotaSettings
from tests.support import broker_config

TOPIC = TopicName.get("persistent://public/default/t")
DEFAULT = BacklogQuota(5000, -1, RetentionPolicy.PRODUCER_REQUEST_HOLD)


def test_pulsar_json_both_ways() -> None:
    quota = BacklogQuota.parse({"limitSize": 10, "limitTime": 20, "policy": "producer_exception"})
    assert quota == BacklogQuota(10, 20, RetentionPolicy.PRODUCER_EXCEPTION)
    assert quota.as_json() == {
        "limit": 10,
        "limitSize": 10,
        "limitTime": 20,
        "policy": "producer_exception",
    }
    # pulsar-admin before 2.9 sends the size as "limit".
    old = BacklogQuota.parse({"limit": 7, "policy": "consumer_backlog_eviction"})
    assert (old.limit_size, old.limit_time) == (7, -1)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"limitSize": 1}, "policy must be one of"),
        ({"limitSize": True, "policy": "producer_exception"}, "must be an integer"),
        ({"limitTime": 2**31, "policy": "producer_exception"}, "out of range"),
        ({"size": 1, "policy": "producer_exception"}, "unknown BacklogQuota field"),
        ("10M", "must be a JSON object"),
    ],
)
def test_bad_quotas_are_refused(body: Any, reason: str) -> None:
    with pytest.raises(InvalidArgumentError, match=reason):
        BacklogQuota.parse(body)


def test_quota_type_defaults_to_destination_storage() -> None:
    assert QuotaType.parse(None) is QuotaType.DESTINATION_STORAGE
    assert QuotaType.parse("message_age") is QuotaType.MESSAGE_AGE
    with pytest.raises(InvalidArgumentError, match="backlogQuotaType"):
        QuotaType.parse("disk")


def test_topic_beats_namespace_beats_default_per_type() -> None:
    ns_size = {"limitSize": 100, "policy": "producer_exception"}
    ns_age = {"limitTime": 60, "policy": "consumer_backlog_eviction"}
    topic_size = {"limitSize": 200, "policy": "producer_request_hold"}
    assert resolve_quotas(DEFAULT, None, TOPIC).size == DEFAULT
    policies: dict[str, Any] = {
        "backlog_quota_map": {"destination_storage": ns_size, "message_age": ns_age}
    }
    both = resolve_quotas(DEFAULT, policies, TOPIC)
    assert (both.size.limit_size, both.time.limit_time) == (100, 60)
    policies["topicPolicies"] = {
        TOPIC.full_name: {"backLogQuotaMap": {"destination_storage": topic_size}}
    }
    mixed = resolve_quotas(DEFAULT, policies, TOPIC)
    assert mixed.size == BacklogQuota(200, -1, RetentionPolicy.PRODUCER_REQUEST_HOLD)
    assert mixed.time.limit_time == 60  # the topic sets no time quota: the namespace's holds
    partition = TopicName.get("persistent://public/default/t-partition-3")
    assert resolve_quotas(DEFAULT, policies, partition).size.limit_size == 200


def test_a_quota_must_stay_under_the_retention() -> None:
    retention = {"retentionSizeInMB": 1, "retentionTimeInMinutes": 1}
    assert fits_retention(BacklogQuota(1024 * 1024 - 1, 59), retention)
    assert not fits_retention(BacklogQuota(1024 * 1024), retention)
    assert not fits_retention(BacklogQuota(-1, 60), retention)
    assert fits_retention(BacklogQuota(10**12, 10**6), None)
    assert fits_retention(BacklogQuota(10**12), {"retentionSizeInMB": -1})
    with pytest.raises(PreconditionFailedError, match=r"for topic\. Please increase"):
        check_fits_retention(BacklogQuota(1024 * 1024), retention, QuotaLevel.TOPIC)


def test_the_broker_default_comes_from_its_properties(tmp_path: Path) -> None:
    config = broker_config(
        tmp_path,
        backlogQuotaDefaultLimitBytes=1000,
        backlogQuotaDefaultLimitSecond=30,
        backlogQuotaDefaultRetentionPolicy="consumer_backlog_eviction",
    )
    settings = BacklogQuotaSettings.from_config(config)
    assert settings.default == BacklogQuota(1000, 30, RetentionPolicy.CONSUMER_BACKLOG_EVICTION)
    assert (settings.check_enabled, settings.check_interval_s) == (True, 60)  # Pulsar's
    gigabytes = broker_config(tmp_path, backlogQuotaDefaultLimitGB=0.5)
    assert BacklogQuotaSettings.from_config(gigabytes).default.limit_size == 512 * 1024**2


def test_size_eviction_keeps_the_newest_entries_under_the_target() -> None:
    ledger = SimpleNamespace(
        ledgers=[LedgerInfo(1, entries=10, size=1000), LedgerInfo(2, entries=10, size=1000)]
    )
    # 1500 bytes kept: all of ledger 2 and the last 5 entries of ledger 1.
    assert size_eviction_target(ledger, 1500) == Position(1, 4)  # type: ignore[arg-type]
    assert size_eviction_target(ledger, 1000) == Position(1, 9)  # type: ignore[arg-type]
    assert size_eviction_target(ledger, 250) == Position(2, 7)  # type: ignore[arg-type]
    assert size_eviction_target(ledger, 5000) is None  # type: ignore[arg-type]
