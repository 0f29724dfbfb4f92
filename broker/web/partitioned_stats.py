"""A partitioned topic's stats, gathered from each partition's owner (Pulsar's
PersistentTopicsBase.internalGetPartitionedStats).

Each partition is looked up on the internal listener, as Pulsar's admin client does for a
partition this broker does not own: served here, its stats are read locally; owned elsewhere (or
placed elsewhere by the lookup, when its bundle had no owner), they are asked of that broker's
admin API over HTTP with this broker's own credentials (:mod:`.broker_client`), following its
redirects. The partitions are fetched concurrently, a bounded
number at a time, each within a bounded time.

Pulsar leaves a partition that failed out of the answer; here the whole request fails with 503
and a reason naming each partition that failed, so that a caller never mistakes a partial answer
for the topic's stats.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Protocol

import aiohttp
from yarl import URL

from pulsar_grpc.broker import errors as e
from pulsar_grpc.broker.lookup import LookupResult
from pulsar_grpc.broker.naming import TopicName
from pulsar_grpc.broker.service_parts import HasIdentity, HasListeners, HasNamespaces, HasTopics
from pulsar_grpc.broker.web.broker_client import REASON_CHARS, BrokerClient, refusal

__all__ = [
    "PartitionStatsError",
    "aggregate",
    "names_this_broker",
    "owner_stats",
    "partitioned_stats",
]

# At most this many partitions are being fetched at once (a topic may have thousands).
CONCURRENT_PARTITIONS = 16
# One partition's stats from another broker, redirects included.
OWNER_TIMEOUT_S = 10.0


class PartitionedStatsPort(HasIdentity, HasListeners, HasNamespaces, HasTopics, Protocol):
    """What gathering a topic's stats uses: lookups, this broker's addresses and its topics."""


class PartitionStatsError(e.ServiceNotReadyError):
    """The stats of one or more partitions could not be had (their owner failed, refused or
    could not be reached): 503, naming the partitions."""


def names_this_broker(service: HasIdentity, result: LookupResult) -> bool:
    """Whether the lookup ``result`` names this broker (its web addresses on the listener)."""
    mine = service.broker_data().listeners.get(result.listener)
    return mine is not None and (mine.http_url, mine.https_url) == (
        result.http_url,
        result.http_url_tls,
    )


async def partitioned_stats(
    service: PartitionedStatsPort, broker_client: BrokerClient, topic: TopicName, partitions: int
) -> dict[str, Any]:
    """``{"metadata": {"partitions": n}, "partitions": {name: TopicStats}}``, every partition's
    stats from its owner; PartitionStatsError if any of them could not be had."""
    names = [topic.get_partition(i) for i in range(partitions)]
    limit = asyncio.Semaphore(CONCURRENT_PARTITIONS)
    timeout = aiohttp.ClientTimeout(total=OWNER_TIMEOUT_S)
    async with broker_client.session(timeout) as http:

        async def one(partition: TopicName) -> dict[str, Any] | str:
            async with limit:
                try:
                    return await _partition_stats(service, broker_client, http, partition)
                except e.BrokerError as exc:
                    return exc.message
                except (aiohttp.ClientError, TimeoutError) as exc:
                    return f"its owner could not be reached: {exc!r}"

        answers = await asyncio.gather(*(one(p) for p in names))
    failed = [f"{p}: {a}" for p, a in zip(names, answers, strict=True) if isinstance(a, str)]
    if failed:
        raise PartitionStatsError(
            f"stats of {len(failed)} of {partitions} partitions of {topic} failed: "
            + "; ".join(failed)
        )
    parts = {str(p): a for p, a in zip(names, answers, strict=True) if isinstance(a, dict)}
    return {
        **aggregate(list(parts.values())),
        "metadata": {"partitions": partitions},
        "partitions": parts,
    }


async def owner_stats(
    service: PartitionedStatsPort, broker_client: BrokerClient, topic: TopicName
) -> dict[str, Any]:
    """One non-partitioned topic's (or partition's) stats from its owner, read here when this
    broker serves it: for a caller that cannot follow a redirect to another broker (the
    console's page, whose requests stay on its own origin). 503 when the owner fails."""
    timeout = aiohttp.ClientTimeout(total=OWNER_TIMEOUT_S)
    async with broker_client.session(timeout) as http:
        try:
            return await _partition_stats(service, broker_client, http, topic)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise e.ServiceNotReadyError(
                f"the owner of {topic} could not be reached: {exc!r}"
            ) from None


# Summed over the partitions (Pulsar's PartitionedTopicStatsImpl.add), topic and subscription.
_TOPIC_SUMS = (
    "msgRateIn",
    "msgThroughputIn",
    "msgRateOut",
    "msgThroughputOut",
    "msgInCounter",
    "bytesInCounter",
    "msgOutCounter",
    "bytesOutCounter",
    "storageSize",
    "backlogSize",
)
_SUBSCRIPTION_SUMS = (
    "msgBacklog",
    "backlogSize",
    "msgRateOut",
    "msgThroughputOut",
    "msgRateRedeliver",
    "msgOutCounter",
    "bytesOutCounter",
    "msgRedeliverCounter",
    "unackedMessages",
)
_SUBSCRIPTION_LATEST = ("lastConsumedTimestamp", "lastAckedTimestamp")


def aggregate(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The partitioned topic's own TopicStats: rates, counters and sizes summed over its
    partitions, averageMsgSize over the sums, every publisher, and each subscription summed
    over its partitions (its consumers listed, its timestamps the latest)."""
    totals: dict[str, Any] = {k: sum(p.get(k, 0) for p in parts) for k in _TOPIC_SUMS}
    rate_in = totals["msgRateIn"]
    totals["averageMsgSize"] = totals["msgThroughputIn"] / rate_in if rate_in > 0 else 0.0
    totals["publishers"] = [pub for p in parts for pub in p.get("publishers", [])]
    subscriptions: dict[str, dict[str, Any]] = {}
    for part in parts:
        for name, sub in part.get("subscriptions", {}).items():
            into = subscriptions.get(name)
            if into is None:
                subscriptions[name] = {**sub, "consumers": list(sub.get("consumers", []))}
                continue
            for key in _SUBSCRIPTION_SUMS:
                into[key] = into.get(key, 0) + sub.get(key, 0)
            for key in _SUBSCRIPTION_LATEST:
                into[key] = max(into.get(key, 0), sub.get(key, 0))
            into["consumers"].extend(sub.get("consumers", []))
    totals["subscriptions"] = subscriptions
    return totals


async def _partition_stats(
    service: PartitionedStatsPort,
    broker_client: BrokerClient,
    http: aiohttp.ClientSession,
    partition: TopicName,
) -> dict[str, Any]:
    listener = service.listeners.internal_listener_name
    result = await service.namespaces.lookup_topic(partition.full_name, listener, None)
    if not result.redirect and names_this_broker(service, result):
        return (await service.topics.get_topic(partition, create=False)).stats()
    base = broker_client.web_url(result.http_url, result.http_url_tls)
    if base is None:
        raise e.ServiceNotReadyError("its owner has no web address")
    return await _stats_from(http, base, result, partition)


async def _stats_from(
    http: aiohttp.ClientSession, base: str, result: LookupResult, partition: TopicName
) -> dict[str, Any]:
    """GET the partition's stats from the broker ``result`` names (the owner, or the broker to
    ask next: its redirects are followed, carrying the lookup's authoritative flag)."""
    url = (
        URL(base)
        .with_path(f"/admin/v2/{partition.rest_path}/stats", encoded=True)
        .with_query(authoritative=str(result.authoritative).lower(), listenerName=result.listener)
    )
    async with http.get(url) as response:
        text = await response.text()
        if response.status != 200:
            raise e.ServiceNotReadyError(
                f"{response.url.host}:{response.url.port} answered "
                + refusal(response.status, text)
            )
    try:
        stats = json.loads(text)
    except ValueError:
        stats = None
    if not isinstance(stats, dict):
        raise e.ServiceNotReadyError(f"its owner answered no stats: {text[:REASON_CHARS]!r}")
    return stats
