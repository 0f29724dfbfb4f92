"""The topic registry (the topics map of Pulsar's BrokerService): the one owner of this
broker's loaded topics.

A topic is loaded only where its bundle is owned (the namespace service says; a NotOwnerError
sends the client to the owner) and leaves when its bundle does: :meth:`TopicRegistry.unload_bundles`
closes its topics, whose producers and consumers end with ServiceNotReady, a status every client
retries after a fresh lookup.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from pulsar_grpc.broker.cluster.id_generator import DistributedIdGenerator
from pulsar_grpc.broker.errors import NotAllowedError, TopicNotFoundError
from pulsar_grpc.broker.ledger import ManagedLedgerFactory
from pulsar_grpc.broker.namespace_service import NamespaceService
from pulsar_grpc.broker.naming import NamespaceBundle, TopicName
from pulsar_grpc.broker.resources import NamespaceResources
from pulsar_grpc.broker.security.permissions import PolicyCache
from pulsar_grpc.broker.topics.rate_limit import Throttle
from pulsar_grpc.broker.topics.rate_policies import RatePolicies
from pulsar_grpc.broker.topics.schema_carrier import SchemaCarrier
from pulsar_grpc.broker.topics.settings import TopicSettings
from pulsar_grpc.broker.topics.topic import PersistentTopic

log = logging.getLogger(__name__)


class TopicRegistry:
    """Loaded topics by full name; a topic still loading is a pending future, so concurrent
    callers share one load."""

    def __init__(
        self,
        settings: TopicSettings,
        ledgers: ManagedLedgerFactory,
        resources: NamespaceResources,
        namespaces: NamespaceService,
        producer_names: DistributedIdGenerator,
        check_open: Callable[[], None],
        policies: PolicyCache,
        schemas: SchemaCarrier,
    ) -> None:
        # What the loaded topics read of the broker's configuration (PersistentTopic.settings):
        # replaced, never changed, and only by apply().
        self.settings = settings
        self.ledgers = ledgers
        self.resources = resources
        self.namespaces = namespaces
        self.producer_names = producer_names  # names producers that bring none, cluster-unique
        self._check_open = check_open  # the broker's: refuses loads once it is closing
        self.schemas = schemas  # a dead-letter topic takes its messages' schemas through it
        self._topics: dict[str, asyncio.Future[PersistentTopic]] = {}
        # The broker-wide rates, shared by every topic (brokerPublisherThrottlingMax*,
        # dispatchThrottlingRateIn*), and the per-topic ones kept current from the policies.
        self.publish_throttle = Throttle(settings.rates.broker_publish)
        self.dispatch_throttle = Throttle(settings.rates.broker_dispatch)
        self.rate_policies = RatePolicies(lambda: self.settings, policies, self.loaded_topics)

    def apply(self, settings: TopicSettings) -> None:
        """Take ``settings`` (a dynamic configuration change). When the rates changed, the
        broker-wide throttles take the new ones and every loaded topic's limits are resolved
        again (the per-topic properties are their defaults), which wakes held-back producers
        and dispatchers: open streams feel it at once, as in Pulsar. The other settings are
        read where they are used, so they hold from the next publish or new dispatcher."""
        old, self.settings = self.settings, settings
        if settings.rates != old.rates:
            self.publish_throttle.update(settings.rates.broker_publish)
            self.dispatch_throttle.update(settings.rates.broker_dispatch)
            self.rate_policies.reapply_all()

    async def get_topic(
        self, name: str | TopicName, create: bool = True, explicit: bool = False
    ) -> PersistentTopic:
        """The loaded topic, loading (and, when allowed, creating) it first.

        ``explicit`` is an admin's create: allowAutoTopicCreation does not apply to it.
        """
        self._check_open()
        topic_name = name if isinstance(name, TopicName) else TopicName.get(name)
        key = topic_name.full_name
        while (future := self._topics.get(key)) is not None:
            try:
                return await asyncio.shield(future)
            except TopicNotFoundError:
                # Someone else's load did not create it (e.g. a stats request); we may.
                if not (create or explicit):
                    raise
        future = asyncio.get_running_loop().create_future()
        self._topics[key] = future
        try:
            future.set_result(await self._load_topic(topic_name, create, explicit))
        except BaseException as exc:
            if self._topics.get(key) is future:  # close_all() may have taken it already
                del self._topics[key]
            future.set_exception(exc)
            future.exception()  # retrieved: waiting callers get it from their own await
            raise
        return future.result()

    async def _load_topic(self, topic: TopicName, create: bool, explicit: bool) -> PersistentTopic:
        await self.resources.check_topic_can_exist(topic)
        await self.namespaces.check_owner(topic)  # NotOwnerError names the owner
        ledger_name = topic.persistence_naming_encoding
        if topic.is_partitioned:
            base = TopicName.get(topic.partitioned_topic_name)
            partitions = await self.resources.get_partitioned_metadata(str(base), auto_create=False)
            if partitions and await self.resources.is_partitioned_deleted(str(base)):
                raise TopicNotFoundError(f"{topic}: partitioned topic {base} is being deleted")
            if partitions and topic.partition_index >= partitions:
                raise TopicNotFoundError(
                    f"{topic}: partitioned topic {base} has only {partitions} partitions"
                )
            known = partitions > 0
            if not known and not explicit:
                # A partition of no partitioned topic (deleted, say) is not created again
                # behind the user's back by a client still reconnecting to it.
                create = False
        else:
            partitions = await self.resources.get_partitioned_metadata(
                str(topic), auto_create=False
            )
            if partitions:
                raise NotAllowedError(
                    f"{topic} is a partitioned topic with {partitions} partitions: "
                    f"use {topic}-partition-<0..{partitions - 1}>"
                )
            known = False
        may_create = explicit or (create and self.settings.allow_auto_topic_creation)
        # Asked only when it matters: open() reads the same node, and a load is a few reads.
        if not (known or may_create) and not await self.ledgers.exists(ledger_name):
            raise TopicNotFoundError(f"topic {topic} does not exist")
        ledger = await self.ledgers.open(ledger_name)
        deduplication = await self.rate_policies.deduplication(topic)
        loaded = await PersistentTopic.load(self, topic, ledger, deduplication)
        try:
            await self.rate_policies.apply(loaded)
        except BaseException:
            await loaded.close()
            raise
        return loaded

    def loaded_topics(self) -> list[PersistentTopic]:
        """The topics loaded now (not those still loading, nor those that failed to)."""
        return [f.result() for f in self._topics.values() if f.done() and f.exception() is None]

    async def delete_topic(self, name: str) -> None:
        """Close the topic if loaded (once loaded, when it is still loading: else the load
        would leave a topic no one closes on a deleted ledger), then delete its ledger."""
        topic = TopicName.get(name)
        future = self._topics.pop(topic.full_name, None)
        if future is not None:
            await _close_when_loaded([future])
        if not await self.ledgers.exists(topic.persistence_naming_encoding):
            raise TopicNotFoundError(f"topic {topic} does not exist")
        await self.ledgers.delete(topic.persistence_naming_encoding)

    async def unload_topic(self, name: str) -> bool:
        """Close ``name`` if loaded here (Pulsar's topic unload): its clients reconnect and
        load it again, wherever its bundle is owned then. False when it was not loaded."""
        future = self._topics.pop(TopicName.get(name).full_name, None)
        if future is None:
            return False
        await _close_when_loaded([future])
        return True

    def forget(self, topic: PersistentTopic) -> None:
        """Drop ``topic`` if it is still the loaded one (its ledger was fenced: another broker
        owns it now), so the next request loads it again, which the ownership check sends to
        the owner; the bundle's ownership is checked in the store first, so that a broker that
        has not yet noticed its lost session does not take the topic back."""
        future = self._topics.get(topic.name)
        if future is not None and future.done() and future.exception() is None:
            if future.result() is topic:
                del self._topics[topic.name]
        self.namespaces.ownership_in_doubt(TopicName.get(topic.name))

    async def unload_bundles(self, bundles: list[NamespaceBundle]) -> None:
        """Stop serving ``bundles`` at once: their topics close, and their producers and
        consumers end with ServiceNotReady, which clients retry after a fresh lookup."""
        closing = [
            self._topics.pop(key)
            for key in list(self._topics)
            if any(b.includes(TopicName.get(key)) for b in bundles)
        ]
        if closing:
            log.info("unloading %d topics of %d bundles", len(closing), len(bundles))
            await _close_when_loaded(closing)

    async def close_all(self) -> None:
        """Close every topic, those still loading too (once loaded): a topic left open would
        keep its streams open until the server cancels them."""
        while self._topics:
            futures = list(self._topics.values())
            self._topics.clear()
            await _close_when_loaded(futures)
        await self.rate_policies.close()


async def _close_when_loaded(futures: list[asyncio.Future[PersistentTopic]]) -> None:
    """Close the topics of ``futures`` (not empty) once they have loaded, all at once (their
    last writes are committed together: a broker with thousands of topics stops in a second,
    not one commit per topic); those that failed to load have nothing to close. The first
    failure to close is raised once every topic has had its close."""
    await asyncio.wait(futures)
    closes = [
        future.result().close()
        for future in futures
        if not future.cancelled() and future.exception() is None
    ]
    for outcome in await asyncio.gather(*closes, return_exceptions=True):
        if isinstance(outcome, BaseException):
            raise outcome
