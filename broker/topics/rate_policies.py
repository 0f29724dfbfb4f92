"""Where a topic's rate limits come from, and how a change reaches the loaded topics.

Pulsar's precedence, for each of the three limits (publish rate, the topic's dispatch rate,
each subscription's dispatch rate): the topic's policy, else the namespace's (its Policies
keep one per cluster: ``publishMaxMessageRate``, ``topicDispatchRate``,
``subscriptionDispatchRate``, keyed by cluster name), else the broker's default property.

Pulsar keeps topic policies in a system topic; here they live in the namespace's Policies node
under ``topicPolicies`` (``{topic: {"publishRate": ..., "dispatchRate": ...,
"subscriptionDispatchRate": ...}}``, Pulsar's TopicPolicies field names), so one watched
node carries every rate of a namespace: a write from any broker notifies every broker (the
:class:`~pulsar_grpc.broker.security.permissions.PolicyCache` watch), and each re-reads the
limits of its loaded topics of that tenant and retunes their throttles in place, so open
streams feel the change at once. A partitioned topic's policy covers its partitions. The
namespace's encryption_required travels the same way (broker/topics/encryption_policy.py), and
so does its deduplicationEnabled (broker/topics/dedup.py), and the backlog quotas of the
namespace and the topic (broker/topics/backlog_quota.py).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pulsar_grpc.broker.cluster.ownership import POLICIES_ROOT
from pulsar_grpc.broker.config import ServiceConfiguration
from pulsar_grpc.broker.errors import InvalidArgumentError, MetadataError
from pulsar_grpc.broker.naming import TopicName
from pulsar_grpc.broker.topics.backlog_quota import TopicQuotas, resolve_quotas
from pulsar_grpc.broker.topics.dedup import deduplication_enabled
from pulsar_grpc.broker.topics.encryption_policy import EncryptionPolicy
from pulsar_grpc.broker.topics.rate_limit import UNLIMITED, RateLimit
from pulsar_grpc.broker.topics.settings import RateSettings, TopicSettings

if TYPE_CHECKING:
    from pulsar_grpc.broker.security.permissions import PolicyCache

log = logging.getLogger(__name__)

TOPIC_POLICIES = "topicPolicies"
# A period longer than a day is surely a mistake (Pulsar takes any int).
MAX_PERIOD_S = 86_400


class RateKind(enum.Enum):
    """The three limits: (namespace Policies field, TopicPolicies field)."""

    PUBLISH = ("publishMaxMessageRate", "publishRate")
    DISPATCH = ("topicDispatchRate", "dispatchRate")
    SUBSCRIPTION_DISPATCH = ("subscriptionDispatchRate", "subscriptionDispatchRate")

    @property
    def namespace_field(self) -> str:
        return self.value[0]

    @property
    def topic_field(self) -> str:
        return self.value[1]

    def parse(self, body: Any) -> RateLimit:
        """The body of a set request (Pulsar's PublishRate or DispatchRate JSON)."""
        return parse_publish_rate(body) if self is RateKind.PUBLISH else parse_dispatch_rate(body)

    def as_json(self, limit: RateLimit) -> dict[str, Any]:
        """Pulsar's JSON for ``limit``; -1 where a kind is not limited, as Pulsar's defaults."""
        messages, nbytes = limit.messages or -1, limit.bytes or -1
        if self is RateKind.PUBLISH:
            return {"publishThrottlingRateInMsg": messages, "publishThrottlingRateInByte": nbytes}
        return {
            "dispatchThrottlingRateInMsg": messages,
            "dispatchThrottlingRateInByte": nbytes,
            "relativeToPublishRate": limit.relative_to_publish,
            "ratePeriodInSecond": limit.period_s,
        }

    def normalize(self, body: Any) -> dict[str, Any]:
        """A valid body as it is stored: Pulsar's fields, the missing ones at their
        defaults, the given values as given (so a GET answers what was set)."""
        self.parse(body)  # refuses what is not valid
        return {**self.as_json(UNLIMITED), **body}


class JavaInt(enum.IntEnum):
    """The largest value of the Java type Pulsar declares a rate field with: Jackson refuses a
    number out of its range (400), so a rate this broker keeps is one Pulsar could hold."""

    INT = 2**31 - 1
    LONG = 2**63 - 1


def _int_field(body: dict[str, Any], name: str, default: int, java: JavaInt = JavaInt.INT) -> int:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{name} must be an integer, got {str(value)[:40]!r}")
    if not -java - 1 <= value <= java:
        raise InvalidArgumentError(
            f"{name} {str(value)[:40]} is out of range of a Java {java.name.lower()}"
        )
    return value


def _object(body: Any, what: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise InvalidArgumentError(f"{what} must be a JSON object")
    return body


def parse_publish_rate(body: Any) -> RateLimit:
    """Pulsar's PublishRate: ``{"publishThrottlingRateInMsg": n, "publishThrottlingRateInByte":
    n}`` (-1 or 0: no limit of that kind, as in Pulsar)."""
    body = _object(body, "a PublishRate")
    unknown = set(body) - {"publishThrottlingRateInMsg", "publishThrottlingRateInByte"}
    if unknown:
        raise InvalidArgumentError(f"unknown PublishRate field {sorted(unknown)[0][:40]!r}")
    return RateLimit(
        messages=max(0, _int_field(body, "publishThrottlingRateInMsg", -1)),
        bytes=max(0, _int_field(body, "publishThrottlingRateInByte", -1, JavaInt.LONG)),
    )


def parse_dispatch_rate(body: Any) -> RateLimit:
    """Pulsar's DispatchRate. ``relativeToPublishRate``: the limit is added to the topic's
    current publish rate (see :class:`~pulsar_grpc.broker.topics.rate_limit.Throttle`)."""
    body = _object(body, "a DispatchRate")
    known = {
        "dispatchThrottlingRateInMsg",
        "dispatchThrottlingRateInByte",
        "relativeToPublishRate",
        "ratePeriodInSecond",
    }
    unknown = set(body) - known
    if unknown:
        raise InvalidArgumentError(f"unknown DispatchRate field {sorted(unknown)[0][:40]!r}")
    relative = body.get("relativeToPublishRate", False)
    if not isinstance(relative, bool):
        raise InvalidArgumentError("relativeToPublishRate must be true or false")
    period = _int_field(body, "ratePeriodInSecond", 1)
    if not 1 <= period <= MAX_PERIOD_S:
        raise InvalidArgumentError(f"ratePeriodInSecond must be 1 to {MAX_PERIOD_S}, got {period}")
    return RateLimit(
        messages=max(0, _int_field(body, "dispatchThrottlingRateInMsg", -1)),
        bytes=max(0, _int_field(body, "dispatchThrottlingRateInByte", -1, JavaInt.LONG)),
        period_s=period,
        relative_to_publish=relative,
    )


@dataclass(frozen=True, slots=True)
class TopicLimits:
    publish: RateLimit = UNLIMITED
    dispatch: RateLimit = UNLIMITED
    subscription_dispatch: RateLimit = UNLIMITED


def broker_default(rates: RateSettings, kind: RateKind) -> RateLimit:
    """The broker's limit of ``kind``: what holds where no topic or namespace policy is set."""
    if kind is RateKind.PUBLISH:
        return rates.publish_per_topic
    if kind is RateKind.DISPATCH:
        return rates.dispatch_per_topic
    return rates.dispatch_per_subscription


def policy_topic_key(topic: TopicName) -> str:
    """The name a topic policy is kept under: a partition's is its partitioned topic's."""
    return topic.partitioned_topic_name if topic.is_partitioned else topic.full_name


def topic_rate(policies: dict[str, Any], topic: TopicName, kind: RateKind) -> RateLimit | None:
    entry = (policies.get(TOPIC_POLICIES) or {}).get(policy_topic_key(topic)) or {}
    found = entry.get(kind.topic_field)
    return None if found is None else kind.parse(found)


def namespace_rate(policies: dict[str, Any], cluster: str, kind: RateKind) -> RateLimit | None:
    found = (policies.get(kind.namespace_field) or {}).get(cluster)
    if found is None and kind is RateKind.DISPATCH:
        # Pulsar before 2.7 kept the topic dispatch rate as clusterDispatchRate (and still
        # writes both): a node written by it is read alike.
        found = (policies.get("clusterDispatchRate") or {}).get(cluster)
    return None if found is None else kind.parse(found)


def resolve(
    config: ServiceConfiguration, policies: dict[str, Any] | None, topic: TopicName
) -> TopicLimits:
    """:func:`resolve_limits` with the rates of ``config`` (the admin view's question, in
    broker/web/rate_admin.py; loaded topics are resolved with the registry's settings)."""
    return resolve_limits(RateSettings.from_config(config), policies, topic)


def resolve_limits(
    rates: RateSettings, policies: dict[str, Any] | None, topic: TopicName
) -> TopicLimits:
    """The limits that hold for ``topic`` given its namespace's Policies node."""
    policies = policies or {}

    def one(kind: RateKind) -> RateLimit:
        try:
            found = topic_rate(policies, topic, kind) or namespace_rate(
                policies, rates.cluster, kind
            )
        except InvalidArgumentError as exc:  # written by another tool: say so, use the default
            log.warning("%s of %s ignored: %s", kind.name.lower(), topic, exc.message)
            found = None
        return found if found is not None else broker_default(rates, kind)

    return TopicLimits(
        one(RateKind.PUBLISH), one(RateKind.DISPATCH), one(RateKind.SUBSCRIPTION_DISPATCH)
    )


class LimitedTopic(Protocol):
    """The port the policies reach a loaded topic through: its names, and the setters of the
    namespace-wide settings it keeps. A protocol rather than the topic's class, so this module
    sits below the topic (which imports its limits) instead of in an import circle with it."""

    encryption: EncryptionPolicy

    @property
    def name(self) -> str: ...

    @property
    def topic_name(self) -> TopicName: ...

    def set_rate_limits(self, limits: TopicLimits) -> None: ...

    def set_backlog_quotas(self, quotas: TopicQuotas) -> None: ...

    async def set_deduplication(self, enabled: bool) -> None: ...


class RatePolicies:
    """Applies the limits to topics as they load and again whenever their namespace's
    policies change; the one writer of every loaded topic's limits."""

    def __init__(
        self,
        settings: Callable[[], TopicSettings],
        cache: PolicyCache,
        loaded_topics: Callable[[], Sequence[LimitedTopic]],
    ) -> None:
        self._settings = settings  # the registry's current ones
        self._cache = cache
        self._loaded_topics = loaded_topics
        self._unwatch: dict[str, Callable[[], None]] = {}  # tenant -> stop watching
        self._tasks: set[asyncio.Task[None]] = set()
        # Bumped by every change notification: a read that overlapped one is done again.
        self._generation = 0

    async def _namespace_policies(self, topic: TopicName) -> dict[str, Any] | None:
        while True:
            generation = self._generation
            policies = await self._cache.get(f"{POLICIES_ROOT}/{topic.namespace}")
            if generation == self._generation:
                return policies

    async def deduplication(self, topic: TopicName) -> bool:
        """Whether ``topic`` deduplicates (asked before it loads, so it loads that way)."""
        policies = await self._namespace_policies(topic)
        return deduplication_enabled(self._settings().dedup, policies)

    async def apply(self, topic: LimitedTopic) -> None:
        """Set ``topic``'s limits, its backlog quotas and its namespace's encryption and
        deduplication policies (the other namespace-wide settings a topic keeps), and keep
        them current from now on."""
        tenant = topic.topic_name.tenant
        if tenant not in self._unwatch:
            self._unwatch[tenant] = self._cache.watch(tenant, lambda: self._changed(tenant))
        policies = await self._namespace_policies(topic.topic_name)
        settings = self._settings()
        topic.set_rate_limits(resolve_limits(settings.rates, policies, topic.topic_name))
        topic.set_backlog_quotas(
            resolve_quotas(settings.backlog_quota.default, policies, topic.topic_name)
        )
        topic.encryption = EncryptionPolicy.of(policies)
        await topic.set_deduplication(deduplication_enabled(settings.dedup, policies))

    def reapply_all(self) -> None:
        """Resolve every loaded topic's limits again (the broker's defaults changed)."""
        self._changed(None)

    def _changed(self, tenant: str | None) -> None:
        """Re-read the limits of ``tenant``'s loaded topics (None: of all)."""
        self._generation += 1
        task = asyncio.get_running_loop().create_task(self._reapply(tenant))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reapply(self, tenant: str | None) -> None:
        for topic in self._loaded_topics():
            if tenant is not None and topic.topic_name.tenant != tenant:
                continue
            try:
                await self.apply(topic)
            except MetadataError as exc:
                # The store is away (a lost session): the limits stay as they were, and the
                # session's return notifies again, which reads them then.
                log.warning("rate limits of %s not re-read: %s", topic.name, exc.message)
            except Exception:
                log.exception("could not apply the rate limits of %s", topic.name)

    async def close(self) -> None:
        for stop in self._unwatch.values():
            stop()
        self._unwatch.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
