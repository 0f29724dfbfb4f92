"""The namespace service (Pulsar's NamespaceService): who owns a bundle, and lookups.

Standalone owns every topic. In a cluster (a shared metadata store) the bundle ownership cache
says which bundles this broker serves: a lookup of an unowned bundle takes it (first come, as
Pulsar without a leader's assignment). A leader's bundle placement plugs in here, where
:meth:`NamespaceService.lookup_topic` decides the owner.
"""

from __future__ import annotations

from collections.abc import Callable

from pulsar_grpc.broker.cluster.ownership import (
    LostCallback,
    NamespaceEphemeralData,
    OwnershipCache,
)
from pulsar_grpc.broker.errors import ServiceNotReadyError
from pulsar_grpc.broker.listeners import ListenerConfig
from pulsar_grpc.broker.lookup import BrokerData, LookupResult, lookup
from pulsar_grpc.broker.metadata import MetadataStore
from pulsar_grpc.broker.naming import NamespaceBundle, TopicName
from pulsar_grpc.broker.resources import NamespaceResources


class NamespaceService:
    """Bundle ownership and topic lookups for one broker.

    ``broker_data`` gives this broker's advertised addresses; it is read per lookup because the
    ports are known only once the servers are bound.
    """

    def __init__(
        self,
        listeners: ListenerConfig,
        broker_data: Callable[[], BrokerData],
        resources: NamespaceResources,
        clustered: bool,
    ) -> None:
        self.listeners = listeners
        self.broker_data = broker_data
        self.resources = resources
        self.clustered = clustered
        # Cluster mode only: which bundles this broker serves. None in standalone (owns all)
        # and in a cluster member until start_ownership.
        self.ownership: OwnershipCache | None = None

    def start_ownership(self, store: MetadataStore, on_lost: LostCallback) -> None:
        """Begin owning bundles (cluster mode, once the servers are bound: the ownership data
        carries their addresses). ``on_lost`` unloads the topics of bundles this broker loses."""
        me = NamespaceEphemeralData.of(self.broker_data(), self.listeners.internal_listener_name)
        self.ownership = OwnershipCache(store, me, on_lost)

    async def close(self) -> None:
        """Give up every owned bundle (their nodes go with the broker's session)."""
        if self.ownership is not None:
            await self.ownership.close()

    def owned_bundles(self) -> list[NamespaceBundle]:
        return self.ownership.owned() if self.ownership is not None else []

    def _ownership(self) -> OwnershipCache:
        if self.ownership is None:
            raise ServiceNotReadyError("broker is starting")
        return self.ownership

    async def check_owner(self, topic: TopicName) -> None:
        """Refuse a topic this broker does not own (NotOwnerError names the owner); standalone
        owns every topic."""
        if self.clustered:
            await self._ownership().check_owner(topic)

    async def lookup_topic(
        self, topic: str, requested: str | None, via: str | None
    ) -> LookupResult:
        """The owner's addresses for the chosen listener. Standalone owns every topic; in a
        cluster the bundle's owner answers, and an unowned bundle is taken by this broker."""
        name = TopicName.get(topic)
        if not self.clustered:
            return lookup(self.listeners, self.broker_data(), requested, via)
        ownership = self._ownership()
        await self.resources.check_topic_can_exist(name)
        owner = await ownership.owner(await ownership.bundle_of(name))
        return self.owner_lookup(owner, requested, via)

    def owner_lookup(
        self, owner: NamespaceEphemeralData, requested: str | None, via: str | None
    ) -> LookupResult:
        """A lookup answer with ``owner``'s addresses (this broker's when it is the owner)."""
        if self.ownership is not None and owner is self.ownership.me:
            return lookup(self.listeners, self.broker_data(), requested, via)
        return lookup(self.listeners, owner.broker_data(), requested, via)

    def internal_urls(self) -> LookupResult:
        """This broker's addresses on the internal listener (what `standalone` prints)."""
        return lookup(
            self.listeners, self.broker_data(), self.listeners.internal_listener_name, None
        )
