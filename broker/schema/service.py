"""Schemas as topics use them (Pulsar's AbstractTopic addSchema, hasSchema,
addSchemaIfIdleOrCheckCompatible and ServerCnx's producer checks), for any protocol handler:

- a producer's schema is found or registered under the namespace's strategy before the
  producer is added; without a schema it is refused on a topic with one when validation is
  enforced; with auto-update off only a schema the topic already holds is accepted;
- a consumer's schema is registered when the topic has none and is idle (no producer, no
  consumer, no data), else checked: it must read what the topic holds.

A partitioned topic's partitions share one registry: the schema id is the partitioned topic's
(Pulsar's ``TopicName.getSchemaName``), ``tenant/ns/<encoded local name>``.
"""

from __future__ import annotations

from pulsar_grpc.broker.errors import IncompatibleSchemaError, TopicNotFoundError
from pulsar_grpc.broker.naming import TopicName
from pulsar_grpc.broker.schema.data import (
    SchemaInfo,
    StoredSchema,
    decode_version,
    encode_version,
)
from pulsar_grpc.broker.schema.policies import SchemaPolicies
from pulsar_grpc.broker.schema.registry import SchemaRegistry
from pulsar_grpc.broker.topics import PersistentTopic

# What a producer or consumer declares: a definition, the version GetOrCreateSchema answered
# (for a definition too large to travel with the call), or nothing (bytes).
Declared = SchemaInfo | int | None


def schema_id(topic: TopicName) -> str:
    base = topic.partitioned_topic
    return f"{base.namespace}/{base.encoded_local_name}"


class TopicSchemas:
    """The registry and the namespaces' schema policies, applied to topics."""

    def __init__(self, registry: SchemaRegistry, policies: SchemaPolicies) -> None:
        self.registry = registry
        self.policies = policies

    async def add_schema(self, topic: TopicName, info: SchemaInfo) -> int:
        """The version of ``info`` for ``topic``, registering it if allowed and compatible."""
        ns = topic.namespace
        if await self.policies.allow_auto_update(ns):
            strategy = await self.policies.strategy(ns)
            return await self.registry.put_if_absent(schema_id(topic), info, strategy)
        version = await self.registry.find_version(schema_id(topic), info)
        if version is None:
            raise IncompatibleSchemaError("Schema not found and schema auto updating is disabled.")
        return version

    async def producer_schema(self, topic: TopicName, declared: Declared) -> int | None:
        """The version a producer's entries carry (None: no schema), refusing the producer
        with IncompatibleSchemaError as Pulsar does."""
        if declared is None:
            if await self.registry.latest(
                schema_id(topic)
            ) is not None and await self.policies.validation_enforced(topic.namespace):
                raise IncompatibleSchemaError(
                    "Producers cannot connect or send message without a schema to topics "
                    f"with a schema ({topic.partitioned_topic_name} enforces schema validation)"
                )
            return None
        return await self.add_schema(topic, await self._definition(topic, declared))

    async def consumer_schema(self, topic: PersistentTopic, declared: Declared) -> None:
        """Pulsar's addSchemaIfIdleOrCheckCompatible, before the consumer is added."""
        if declared is None:
            return
        name = topic.topic_name
        info = await self._definition(name, declared)
        has_schema = await self.registry.latest(schema_id(name)) is not None
        if has_schema or not _idle(topic):
            strategy = await self.policies.strategy(name.namespace)
            await self.registry.check_consumer(schema_id(name), info, strategy)
        else:
            await self.add_schema(name, info)

    async def carry_schema(self, source: TopicName, version: bytes, target: TopicName) -> bytes:
        """``target``'s version of ``source``'s schema ``version`` (the topics layer's
        SchemaCarrier: a dead-letter topic registers the schema its messages were written
        with, under its own namespace's strategy and auto-update setting, as Pulsar's
        client's AUTO_PRODUCE_BYTES producer makes it do)."""
        stored = await self.get(source, decode_version(version))
        return encode_version(await self.add_schema(target, stored.info))

    async def get(self, topic: TopicName, version: int | None = None) -> StoredSchema:
        """The latest schema, or ``version``: TopicNotFoundError when there is none (Pulsar's
        answer to CommandGetSchema), also for a deleted one."""
        if version is None:
            stored = await self.registry.latest(schema_id(topic))
        else:
            stored = await self.registry.get(schema_id(topic), version)
        if stored is None or stored.deleted:
            which = "a schema" if version is None else f"schema version {version}"
            raise TopicNotFoundError(f"Topic not found or no-schema: {topic} has no {which}")
        return stored

    async def _definition(self, topic: TopicName, declared: SchemaInfo | int) -> SchemaInfo:
        if isinstance(declared, SchemaInfo):
            return declared
        stored = await self.registry.get(schema_id(topic), declared)
        if stored is None or stored.deleted:
            raise IncompatibleSchemaError(
                f"{topic.partitioned_topic_name} has no schema version {declared} "
                "(register the schema with GetOrCreateSchema first)"
            )
        return stored.info


def _idle(topic: PersistentTopic) -> bool:
    """No producer, no consumer, no data: a consumer's schema may become the topic's."""
    consumers = sum(len(s.consumers) for s in topic.subscriptions.values())
    return not topic.producers and not consumers and topic.ledger.total_size == 0
