"""Topics in Pulsar's admin API v2, beyond create, list and stats (the web service's own
routes): the partitioned ones of a namespace, more partitions, deletion of a plain or a
partitioned topic, unload, the last message id and the managed ledger's internal stats.

- ``GET  /admin/v2/persistent/{t}/{ns}/partitioned``: the partitioned topics' names;
- ``POST .../{topic}/partitions`` with the new count as body: upward only (409 "number of
  partitions must be more than existing N", as Pulsar; 409 for a topic that is not
  partitioned);
- ``DELETE .../{topic}/partitions[?force=true]``: the metadata marked deleted (no partition
  is loaded or created again meanwhile), every partition, then the metadata: a delete that
  failed on a partition is finished by a retry;
- ``DELETE .../{topic}[?force=true]``: 412 "Topic has active producers/subscriptions" while
  clients are connected, unless forced (they are then disconnected);
- ``PUT .../{topic}/unload``, ``GET .../{topic}/lastMessageId``, ``GET .../{topic}/internalStats``;
- ``GET .../{topic}/partitioned-stats?perPartition=``: the partitions' stats summed.

Changes need a tenant admin; reads a role that may look the topic up. A request about a topic
that another broker serves is redirected there (307), as Pulsar's validateTopicOwnership.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import web

from pulsar_grpc.broker import errors as e
from pulsar_grpc.broker.json_text import json_value
from pulsar_grpc.broker.lookup import LookupResult
from pulsar_grpc.broker.naming import NamespaceName, TopicName
from pulsar_grpc.broker.schema import schema_id
from pulsar_grpc.broker.security.authorization import TopicOperation
from pulsar_grpc.broker.service_parts import HasLedgers, HasResources, HasSchemas, HasTopics
from pulsar_grpc.broker.topics.cursor_admin import CursorAdmin
from pulsar_grpc.broker.topics.topic import PersistentTopic
from pulsar_grpc.broker.web.access import AdminAccess
from pulsar_grpc.broker.web.broker_client import BrokerClient
from pulsar_grpc.broker.web.partition_fanout import (
    Absent,
    FanoutPort,
    PartitionCall,
    on_each_partition,
)
from pulsar_grpc.broker.web.partitioned_stats import PartitionedStatsPort, partitioned_stats

__all__ = ["BASE", "TOPIC", "Right", "ServedHere", "TopicsAdmin", "forced", "topic_of"]

BASE = "/admin/v2/persistent/{tenant}/{namespace}"
TOPIC = BASE + "/{topic}"

# The web service's lookup of a topic for a request: answers when this broker serves it,
# raises a 307 to the broker that does otherwise.
ServedHere = Callable[[web.Request, TopicName], Awaitable[LookupResult]]


class TopicsPort(
    FanoutPort, PartitionedStatsPort, HasLedgers, HasResources, HasSchemas, HasTopics, Protocol
):
    """What the topics routes use: partitioned metadata, the ledgers, the schemas, the loaded
    topics, and the fan-out of a call or a stats read to each partition's owner."""


class Right(enum.Enum):
    """What a caller must be allowed to do for an admin call on a topic."""

    LOOKUP = "lookup"  # read its state: any role that may look it up
    CONSUME = "consume"  # read its messages (peek, examine)
    TENANT_ADMIN = "tenant-admin"  # change it


def topic_of(request: web.Request) -> TopicName:
    m = request.match_info
    return TopicName.get(f"persistent://{m['tenant']}/{m['namespace']}/{m['topic']}")


def forced(request: web.Request) -> bool:
    """Pulsar's ``force`` query parameter."""
    return request.query.get("force", "false").lower() == "true"


class TopicsAdmin:
    """The routes, and the topic deletions a namespace's forced delete uses too."""

    def __init__(
        self,
        service: TopicsPort,
        access: AdminAccess,
        served_here: ServedHere,
        broker_client: BrokerClient,
    ) -> None:
        self.service = service
        self.access = access
        self.served_here = served_here
        self.broker_client = broker_client  # to ask other brokers for their partitions' stats

    def add_routes(self, app: web.Application) -> None:
        app.add_routes(
            [
                web.get(BASE + "/partitioned", self.list_partitioned),
                web.post(TOPIC + "/partitions", self.update_partitions),
                web.delete(TOPIC + "/partitions", self.delete_partitioned_route),
                web.delete(TOPIC, self.delete_route),
                web.put(TOPIC + "/unload", self.unload),
                web.get(TOPIC + "/lastMessageId", self.last_message_id),
                web.get(TOPIC + "/internalStats", self.internal_stats),
                web.get(TOPIC + "/partitioned-stats", self.partitioned_stats),
            ]
        )

    # ------------------------------------------------------------ partitioned topics

    async def list_partitioned(self, request: web.Request) -> web.Response:
        ns = NamespaceName.get(f"{request.match_info['tenant']}/{request.match_info['namespace']}")
        await self.access.namespace_topics(request, ns)
        return web.json_response(await self.service.resources.list_partitioned_topics(ns))

    async def partitioned_stats(self, request: web.Request) -> web.Response:
        """Pulsar's GET .../partitioned-stats?perPartition= (default true, as Pulsar)."""
        topic = topic_of(request)
        await self.access.topic(request, topic, TopicOperation.LOOKUP)
        partitions = await self.service.resources.get_partitioned_metadata(
            topic.full_name, auto_create=False
        )
        if not partitions:
            raise e.TopicNotFoundError(f"Partitioned topic {topic} does not exist")
        gathered = await partitioned_stats(self.service, self.broker_client, topic, partitions)
        if request.query.get("perPartition", "true").lower() != "true":
            gathered["partitions"] = {}
        return web.json_response(gathered)

    async def update_partitions(self, request: web.Request) -> web.Response:
        topic = topic_of(request)
        await self.access.tenant_admin(request, topic.tenant)
        partitions = partition_count(await request.text())
        await self.service.resources.update_partitioned_topic(topic.full_name, partitions)
        return web.Response(status=204)

    async def delete_partitioned_route(self, request: web.Request) -> web.Response:
        topic = topic_of(request)
        await self.access.tenant_admin(request, topic.tenant)
        await self.delete_partitioned(topic, forced(request))
        return web.Response(status=204)

    async def delete_partitioned(self, topic: TopicName, force: bool) -> None:
        """Every partition, each where it is served, then the metadata, as Pulsar's
        internalDeletePartitionedTopic: the metadata is first marked deleted (so that nothing
        loads or recreates a partition meanwhile) and goes last, so a delete that fails on a
        partition leaves it, and a retry finishes the job. 404 when it is not partitioned,
        412 while any partition has clients unless ``force``."""
        resources = self.service.resources
        partitions = await resources.get_partitioned_metadata(topic.full_name, auto_create=False)
        if not partitions:
            raise e.TopicNotFoundError(f"Partitioned topic {topic} does not exist")
        if not force:
            gathered = await partitioned_stats(self.service, self.broker_client, topic, partitions)
            if any(_has_clients(stats) for stats in gathered["partitions"].values()):
                raise e.PreconditionFailedError("Topic has active producers/subscriptions")
        await resources.mark_partitioned_deleted(topic.full_name)

        async def delete(partition: TopicName) -> None:
            await self.delete_plain(partition, force=True)

        call = PartitionCall("DELETE", "", {"force": "true"}, absent=Absent.IGNORED)
        await on_each_partition(self.service, self.broker_client, topic, partitions, call, delete)
        await self.service.schemas.registry.delete_all(schema_id(topic))
        await resources.delete_partitioned_metadata(topic.full_name)

    # ------------------------------------------------------------ plain topics

    async def delete_route(self, request: web.Request) -> web.Response:
        topic = topic_of(request)
        await self.access.tenant_admin(request, topic.tenant)
        await self.served_here(request, topic)
        await self.delete_plain(topic, forced(request))
        return web.Response(status=204)

    async def delete_plain(self, topic: TopicName, force: bool) -> None:
        if not force:
            self._refuse_if_active(topic)
        await self.service.topics.delete_topic(topic.full_name)
        if not topic.is_partitioned:  # a partition shares its topic's schema
            # As Pulsar: a deleted topic's schema history is meaningless, so it goes too.
            await self.service.schemas.registry.delete_all(schema_id(topic))

    def _refuse_if_active(self, topic: TopicName) -> None:
        loaded = next(
            (t for t in self.service.topics.loaded_topics() if t.name == topic.full_name), None
        )
        if loaded is not None and _has_clients(loaded.stats()):
            raise e.PreconditionFailedError("Topic has active producers/subscriptions")

    # ------------------------------------------------------------ one topic

    async def unload(self, request: web.Request) -> web.Response:
        """Close the topic (each partition, for a partitioned one) where it is served; its
        clients reconnect. 404 for a topic that does not exist."""
        topic = topic_of(request)
        await self.access.tenant_admin(request, topic.tenant)
        resources = self.service.resources
        partitions = await resources.get_partitioned_metadata(topic.full_name, auto_create=False)
        if partitions:

            async def unload(partition: TopicName) -> None:
                await self.service.topics.unload_topic(partition.full_name)

            call = PartitionCall("PUT", "/unload", absent=Absent.IGNORED)
            await on_each_partition(
                self.service, self.broker_client, topic, partitions, call, unload
            )
            return web.Response(status=204)
        await self.served_here(request, topic)
        unloaded = await self.service.topics.unload_topic(topic.full_name)
        if not unloaded and not await self.service.ledgers.exists(
            topic.persistence_naming_encoding
        ):
            raise e.TopicNotFoundError(f"Topic {topic} not found")
        return web.Response(status=204)

    async def check(self, request: web.Request, topic: TopicName, right: Right) -> None:
        if right is Right.TENANT_ADMIN:
            await self.access.tenant_admin(request, topic.tenant)
        else:
            operation = TopicOperation.LOOKUP if right is Right.LOOKUP else TopicOperation.CONSUME
            await self.access.topic(request, topic, operation)

    async def loaded(
        self, request: web.Request, right: Right, topic: TopicName | None = None
    ) -> PersistentTopic:
        """The topic the request names (or ``topic``, a partition of it), loaded here (307
        to its owner; 404 if it does not exist), once the caller is found to have ``right``."""
        topic = topic or topic_of(request)
        await self.check(request, topic, right)
        return await self.served_topic(request, topic)

    async def served_topic(self, request: web.Request, topic: TopicName) -> PersistentTopic:
        """``topic``, loaded here (307 to its owner; 404 if it does not exist); the caller's
        rights were checked already."""
        await self.served_here(request, topic)
        return await self.service.topics.get_topic(topic, create=False)

    async def last_message_id(self, request: web.Request) -> web.Response:
        topic = await self.loaded(request, Right.LOOKUP)
        return web.json_response(await CursorAdmin(topic).last_message_id())

    async def internal_stats(self, request: web.Request) -> web.Response:
        topic = await self.loaded(request, Right.LOOKUP)
        return web.json_response(CursorAdmin(topic).internal_stats())


def _has_clients(stats: dict[str, Any]) -> bool:
    """Whether a topic's stats (TopicStats) show a producer or a consumer."""
    subscriptions = stats.get("subscriptions") or {}
    return bool(stats.get("publishers")) or any(s.get("consumers") for s in subscriptions.values())


def partition_count(body: str) -> int:
    """The number of partitions a create or update request's body gives (Pulsar's bare JSON
    integer: not a boolean, a fraction or a float that overflows)."""
    try:
        value = json_value(body.strip())
    except ValueError:
        value = None
    if type(value) is not int:
        raise e.InvalidArgumentError(
            f"body must be the number of partitions, got {body.strip()[:100]!r}"
        )
    return value
