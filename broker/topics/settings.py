"""The settings topics, subscriptions and dispatchers use: small frozen objects, each built from
the broker's configuration in one place (``from_config``), as ManagedLedgerConfig is for the
managed ledger.

Why not the ServiceConfiguration itself: it holds 114 properties, most of them none of a topic's
business, and a part handed the whole of it could read (or be changed through) any of them. A
frozen object per concern says what each part depends on; a dynamic change (Pulsar's dynamic
configuration) reaches a topic only as a new object its owner, the topic registry, hands it
(:meth:`TopicRegistry.apply`), so what open streams see, and when, is decided in one place.

Field names are snake_case; each comment names the broker.conf property it comes from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pulsar_grpc.broker.topics.backlog_quota import BacklogQuota, RetentionPolicy
from pulsar_grpc.broker.topics.rate_limit import RateLimit

if TYPE_CHECKING:
    from pulsar_grpc.broker.config import ServiceConfiguration


@dataclass(frozen=True, slots=True)
class PublishSettings:
    """What a topic checks of each batch published to it."""

    max_message_size: int  # maxMessageSize
    max_messages_per_batch: int  # maxMessagesPerBatch

    @classmethod
    def from_config(cls, config: ServiceConfiguration) -> PublishSettings:
        return cls(config.maxMessageSize, config.maxMessagesPerBatch)


@dataclass(frozen=True, slots=True)
class DedupSettings:
    """Message deduplication: the broker's default and how its state is snapshotted."""

    enabled: bool  # brokerDeduplicationEnabled: where the namespace sets no policy
    entries_interval: int  # brokerDeduplicationEntriesInterval
    snapshot_frequency_s: int  # brokerDeduplicationSnapshotFrequencyInSeconds

    @classmethod
    def from_config(cls, config: ServiceConfiguration) -> DedupSettings:
        return cls(
            config.brokerDeduplicationEnabled,
            config.brokerDeduplicationEntriesInterval,
            config.brokerDeduplicationSnapshotFrequencyInSeconds,
        )


@dataclass(frozen=True, slots=True)
class DispatchSettings:
    """How a subscription's dispatcher reads and hands out entries."""

    max_read_batch_size: int  # dispatcherMaxReadBatchSize
    failover_delay_s: float  # activeConsumerFailoverDelayTimeMillis
    max_unacked_per_consumer: int | None  # maxUnackedMessagesPerConsumer, 0 (None): no limit

    @classmethod
    def from_config(cls, config: ServiceConfiguration) -> DispatchSettings:
        return cls(
            config.dispatcherMaxReadBatchSize,
            config.activeConsumerFailoverDelayTimeMillis / 1000,
            config.maxUnackedMessagesPerConsumer or None,
        )


@dataclass(frozen=True, slots=True)
class RateSettings:
    """The broker's rate limits, all of them dynamic (broker/dynamic_config.py): the per-topic
    and per-subscription defaults (a namespace or topic policy beats them) and the broker-wide
    rates every topic shares."""

    cluster: str  # clusterName: whose entry of a namespace's rate policies applies
    publish_per_topic: RateLimit  # maxPublishRatePerTopicIn{Messages,Bytes}
    dispatch_per_topic: RateLimit  # dispatchThrottlingRatePerTopicIn{Msg,Byte}
    dispatch_per_subscription: RateLimit  # dispatchThrottlingRatePerSubscriptionIn{Msg,Byte}
    broker_publish: RateLimit  # brokerPublisherThrottlingMax{Message,Byte}Rate
    broker_dispatch: RateLimit  # dispatchThrottlingRateIn{Msg,Byte}

    @classmethod
    def from_config(cls, config: ServiceConfiguration) -> RateSettings:
        return cls(
            config.clusterName,
            RateLimit(
                config.maxPublishRatePerTopicInMessages, config.maxPublishRatePerTopicInBytes
            ),
            RateLimit(
                config.dispatchThrottlingRatePerTopicInMsg,
                config.dispatchThrottlingRatePerTopicInByte,
            ),
            RateLimit(
                config.dispatchThrottlingRatePerSubscriptionInMsg,
                config.dispatchThrottlingRatePerSubscriptionInByte,
            ),
            RateLimit(
                config.brokerPublisherThrottlingMaxMessageRate,
                config.brokerPublisherThrottlingMaxByteRate,
            ),
            RateLimit(config.dispatchThrottlingRateInMsg, config.dispatchThrottlingRateInByte),
        )


@dataclass(frozen=True, slots=True)
class BacklogQuotaSettings:
    """The broker's backlog-quota properties (built from the configuration in one place)."""

    check_enabled: bool  # backlogQuotaCheckEnabled
    check_interval_s: int  # backlogQuotaCheckIntervalInSeconds
    default: BacklogQuota  # backlogQuotaDefault{LimitBytes,LimitGB,LimitSecond,RetentionPolicy}

    @classmethod
    def from_config(cls, config: ServiceConfiguration) -> BacklogQuotaSettings:
        size = config.backlogQuotaDefaultLimitBytes
        if config.backlogQuotaDefaultLimitGB > 0:  # Pulsar's older property wins when set
            size = int(config.backlogQuotaDefaultLimitGB * 1024**3)
        return cls(
            config.backlogQuotaCheckEnabled,
            config.backlogQuotaCheckIntervalInSeconds,
            BacklogQuota(
                size,
                config.backlogQuotaDefaultLimitSecond,
                RetentionPolicy(config.backlogQuotaDefaultRetentionPolicy),
            ),
        )


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """Everything a loaded topic and its subscriptions read of the broker's configuration;
    the registry holds the current one and replaces it on a dynamic change."""

    allow_auto_topic_creation: bool  # allowAutoTopicCreation
    publish: PublishSettings
    dedup: DedupSettings
    dispatch: DispatchSettings
    rates: RateSettings
    backlog_quota: BacklogQuotaSettings

    @classmethod
    def from_config(cls, config: ServiceConfiguration) -> TopicSettings:
        return cls(
            config.allowAutoTopicCreation,
            PublishSettings.from_config(config),
            DedupSettings.from_config(config),
            DispatchSettings.from_config(config),
            RateSettings.from_config(config),
            BacklogQuotaSettings.from_config(config),
        )
