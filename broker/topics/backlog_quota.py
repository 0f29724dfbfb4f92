"""Backlog quotas (Pulsar's BacklogQuota): how much a topic's slowest subscription may lag, and
what happens past it. Pure values and rules here; the check that measures topics and acts is
broker/topics/backlog_quota_check.py, the hold producers wait on is broker/topics/backlog_hold.py.

Two kinds (Pulsar's BacklogQuotaType): ``destination_storage`` limits the bytes not yet
acknowledged by the slowest durable subscription (``limitSize``), ``message_age`` the age of the
oldest unacknowledged message, by its publish time (``limitTime``, seconds). Each has a policy
(Pulsar's RetentionPolicy) for when it is exceeded: ``producer_request_hold``,
``producer_exception`` or ``consumer_backlog_eviction``.

Precedence, per kind: the topic's quota (its TopicPolicies ``backLogQuotaMap``, kept with the
other topic policies, see broker/topics/rate_policies.py), else the namespace's (its Policies
``backlog_quota_map``), else the broker's default (``backlogQuotaDefaultLimitBytes`` /
``backlogQuotaDefaultLimitGB``, ``backlogQuotaDefaultLimitSecond``,
``backlogQuotaDefaultRetentionPolicy``).
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Any

from pulsar_grpc.broker.errors import InvalidArgumentError, PreconditionFailedError
from pulsar_grpc.broker.naming import TopicName

log = logging.getLogger(__name__)

NAMESPACE_FIELD = "backlog_quota_map"  # Pulsar's Policies field
TOPIC_FIELD = "backLogQuotaMap"  # Pulsar's TopicPolicies field (its spelling)
TOPIC_POLICIES = "topicPolicies"  # where topic policies live (broker/topics/rate_policies.py)
RETENTION_FIELD = "retention_policies"  # Pulsar's Policies field for retention
TOPIC_RETENTION_FIELD = "retentionPolicies"  # Pulsar's TopicPolicies field for retention
JAVA_LONG_MAX = 2**63 - 1
JAVA_INT_MAX = 2**31 - 1


class QuotaType(enum.Enum):
    """Pulsar's BacklogQuotaType."""

    DESTINATION_STORAGE = "destination_storage"
    MESSAGE_AGE = "message_age"

    @classmethod
    def parse(cls, text: str | None) -> QuotaType:
        """A ``backlogQuotaType`` query parameter; absent: destination_storage, as Pulsar."""
        if text is None or text == "":
            return cls.DESTINATION_STORAGE
        try:
            return cls(text)
        except ValueError:
            raise InvalidArgumentError(
                f"backlogQuotaType must be one of {[t.value for t in cls]}, got {text[:40]!r}"
            ) from None


class RetentionPolicy(enum.Enum):
    """Pulsar's BacklogQuota.RetentionPolicy: what a topic over its quota does."""

    PRODUCER_REQUEST_HOLD = "producer_request_hold"
    PRODUCER_EXCEPTION = "producer_exception"
    CONSUMER_BACKLOG_EVICTION = "consumer_backlog_eviction"

    @classmethod
    def parse(cls, text: Any) -> RetentionPolicy:
        try:
            return cls(text)
        except (ValueError, TypeError):
            raise InvalidArgumentError(
                f"policy must be one of {[p.value for p in cls]}, got {str(text)[:40]!r}"
            ) from None


@dataclass(frozen=True, slots=True)
class BacklogQuota:
    """One quota: ``limit_size`` bytes, ``limit_time`` seconds (-1: no limit of that kind, as
    Pulsar's defaults) and the policy applied past it."""

    limit_size: int = -1
    limit_time: int = -1
    policy: RetentionPolicy = RetentionPolicy.PRODUCER_REQUEST_HOLD

    def limit(self, kind: QuotaType) -> int:
        """The limit of ``kind``; 0 or less: not limited."""
        return self.limit_size if kind is QuotaType.DESTINATION_STORAGE else self.limit_time

    def as_json(self) -> dict[str, Any]:
        """Pulsar's BacklogQuota JSON (its deprecated ``limit`` is ``limitSize``)."""
        return {
            "limit": self.limit_size,
            "limitSize": self.limit_size,
            "limitTime": self.limit_time,
            "policy": self.policy.value,
        }

    @classmethod
    def parse(cls, body: Any) -> BacklogQuota:
        """A set request's body (Pulsar's BacklogQuota JSON); ``limit`` is the old name of
        ``limitSize`` (pulsar-admin before 2.9 sends it)."""
        if not isinstance(body, dict):
            raise InvalidArgumentError("a BacklogQuota must be a JSON object")
        unknown = set(body) - {"limit", "limitSize", "limitTime", "policy"}
        if unknown:
            raise InvalidArgumentError(f"unknown BacklogQuota field {sorted(unknown)[0][:40]!r}")
        size = body.get("limitSize")
        if size is None:
            size = body.get("limit")
        return cls(
            limit_size=_integer(size, "limitSize", JAVA_LONG_MAX),
            limit_time=_integer(body.get("limitTime"), "limitTime", JAVA_INT_MAX),
            policy=RetentionPolicy.parse(body.get("policy")),
        )


def _integer(value: Any, name: str, most: int) -> int:
    if value is None:
        return -1
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{name} must be an integer, got {str(value)[:40]!r}")
    if not -most - 1 <= value <= most:
        raise InvalidArgumentError(f"{name} {str(value)[:40]} is out of range")
    return value


@dataclass(frozen=True, slots=True)
class TopicQuotas:
    """The quota of each kind that holds for one topic."""

    size: BacklogQuota
    time: BacklogQuota

    def of(self, kind: QuotaType) -> BacklogQuota:
        return self.size if kind is QuotaType.DESTINATION_STORAGE else self.time

    @property
    def limited(self) -> bool:
        return self.size.limit_size > 0 or self.time.limit_time > 0


UNLIMITED = TopicQuotas(BacklogQuota(), BacklogQuota())


def policy_topic_key(topic: TopicName) -> str:
    """A partition's policies are its partitioned topic's."""
    return topic.partitioned_topic_name if topic.is_partitioned else topic.full_name


def topic_entry(policies: dict[str, Any], topic: TopicName) -> dict[str, Any]:
    """The topic's own policies in its namespace's node (empty when none)."""
    return (policies.get(TOPIC_POLICIES) or {}).get(policy_topic_key(topic)) or {}


def resolve_quotas(
    default: BacklogQuota, policies: dict[str, Any] | None, topic: TopicName
) -> TopicQuotas:
    """The quotas that hold for ``topic`` given its namespace's Policies node."""
    policies = policies or {}
    mine = topic_entry(policies, topic).get(TOPIC_FIELD) or {}
    theirs = policies.get(NAMESPACE_FIELD) or {}

    def one(kind: QuotaType) -> BacklogQuota:
        for level in (mine, theirs):
            found = level.get(kind.value)
            if found is None:
                continue
            try:
                return BacklogQuota.parse(found)
            except InvalidArgumentError as exc:  # written by another tool: say so, go on
                log.warning("backlog quota %s of %s ignored: %s", kind.value, topic, exc.message)
        return default

    return TopicQuotas(one(QuotaType.DESTINATION_STORAGE), one(QuotaType.MESSAGE_AGE))


def fits_retention(quota: BacklogQuota, retention: dict[str, Any] | None) -> bool:
    """Pulsar's checkBacklogQuota: a size quota must stay under the retention size, a time
    quota under the retention time (a backlog is kept whatever retention says, so a quota
    larger than retention would keep more than retention allows). No retention: fits."""
    if not retention:
        return True
    size_mb = retention.get("retentionSizeInMB") or 0
    minutes = retention.get("retentionTimeInMinutes") or 0
    if size_mb > 0 and quota.limit_size >= size_mb * 1024 * 1024:
        return False
    return not (minutes > 0 and quota.limit_time >= minutes * 60)


class QuotaLevel(enum.Enum):
    """Which level a quota is set at: the words of Pulsar's refusal."""

    NAMESPACE = "namespace"
    TOPIC = "topic"


def check_fits_retention(
    quota: BacklogQuota, retention: dict[str, Any] | None, level: QuotaLevel
) -> None:
    """Refuse (412, Pulsar's message) a quota that :func:`fits_retention` does not take."""
    if not fits_retention(quota, retention):
        raise PreconditionFailedError(
            f"Backlog Quota exceeds configured retention quota for {level.value}. "
            "Please increase retention quota and retry"
        )


def retention_of(policies: dict[str, Any], topic: TopicName | None) -> dict[str, Any] | None:
    """The retention a quota is checked against: the topic's own, else its namespace's."""
    if topic is not None:
        found = topic_entry(policies, topic).get(TOPIC_RETENTION_FIELD)
        if found:
            return dict(found)
    found = policies.get(RETENTION_FIELD)
    return dict(found) if found else None
