"""The namespace service (Pulsar's NamespaceService): who owns a bundle, and lookups.

Standalone owns every topic. In a cluster (a shared metadata store) the bundle ownership cache
says which bundles this broker serves, and a lookup of an unowned bundle is placed as Pulsar's
NamespaceService.searchForCandidateBroker places it:

- an authoritative lookup (the leader sent the client here): this broker takes the bundle;
- on the leader: placement picks the least-loaded broker; this broker takes the bundle and
  answers Connect, or answers Redirect to the chosen broker with authoritative set;
- on another broker: Redirect to the leader, not authoritative (the leader decides);
- no leader known (or the leader has no load report): this broker picks by itself, as the
  leader would.

A lookup of an owned bundle answers Connect with the owner's addresses. Every redirect carries
the addresses of the listener the client chose (PIP-95: never the internal listener's when the
client came through another).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from pulsar_grpc.broker.cluster.leader import LeaderBroker, LeaderElection
from pulsar_grpc.broker.cluster.ownership import (
    LostCallback,
    NamespaceEphemeralData,
    OwnershipCache,
)
from pulsar_grpc.broker.cluster.placement import BundlePlacement
from pulsar_grpc.broker.errors import ServiceNotReadyError
from pulsar_grpc.broker.listeners import ListenerConfig
from pulsar_grpc.broker.lookup import BrokerData, LookupResult, lookup
from pulsar_grpc.broker.metadata import MetadataStore
from pulsar_grpc.broker.naming import NamespaceBundle, TopicName
from pulsar_grpc.broker.resources import NamespaceResources

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClusterRole:
    """A cluster member's part in placing bundles: its name in the cluster (host:webport),
    the leader election, and the placement the leader (or a broker without one) runs."""

    broker_id: str
    election: LeaderElection
    placement: BundlePlacement


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
        # Cluster mode only, from start_placement: where unowned bundles go.
        self.role: ClusterRole | None = None

    def start_ownership(self, store: MetadataStore, on_lost: LostCallback) -> None:
        """Begin owning bundles (cluster mode, once the servers are bound: the ownership data
        carries their addresses). ``on_lost`` unloads the topics of bundles this broker loses."""
        me = NamespaceEphemeralData.of(self.broker_data(), self.listeners.internal_listener_name)
        self.ownership = OwnershipCache(store, me, on_lost)

    def start_placement(self, role: ClusterRole) -> None:
        """Begin answering lookups of unowned bundles (once this broker's load report is
        written and it takes part in the election)."""
        self.role = role

    def leader(self) -> LeaderBroker | None:
        """The current leader as this broker knows it; None when unknown or standalone."""
        return self.role.election.leader if self.role is not None else None

    async def active_brokers(self) -> list[str]:
        """The cluster's brokers (those with a load report); [] standalone."""
        return await self.role.placement.active_brokers() if self.role is not None else []

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

    def ownership_in_doubt(self, topic: TopicName) -> None:
        """``topic``'s managed ledger was fenced by another broker: in a cluster, check that
        its bundle is still this broker's, and let it go if not (OwnershipCache.revalidate)."""
        if self.ownership is not None:
            self.ownership.revalidate(topic)

    async def check_owner(self, topic: TopicName) -> None:
        """Refuse a topic this broker does not own (NotOwnerError names the owner); standalone
        owns every topic."""
        if self.clustered:
            await self._ownership().check_owner(topic)

    async def lookup_topic(
        self, topic: str, requested: str | None, via: str | None, authoritative: bool = False
    ) -> LookupResult:
        """The owner's addresses for the chosen listener, or where to ask next (see the module
        docstring). Standalone owns every topic."""
        name = TopicName.get(topic)
        if not self.clustered:
            return lookup(self.listeners, self.broker_data(), requested, via)
        ownership = self._ownership()
        await self.resources.check_topic_can_exist(name)
        bundle = await ownership.bundle_of(name)
        owner = await ownership.current_owner(bundle)
        if owner is None:
            return await self._place(bundle, requested, via, authoritative)
        return self.owner_lookup(owner, requested, via)

    async def _place(
        self, bundle: NamespaceBundle, requested: str | None, via: str | None, authoritative: bool
    ) -> LookupResult:
        """Pulsar's searchForCandidateBroker for an unowned bundle."""
        role = self.role
        if role is None:
            raise ServiceNotReadyError("broker is starting")
        if authoritative:  # the leader chose this broker
            return await self._take(bundle, requested, via)
        if not role.election.is_leader:
            leader = role.election.leader
            found = await role.placement.load(leader.broker_id) if leader is not None else None
            if found is not None:
                return self._redirect(found.data, requested, via, authoritative=False)
            log.warning("no active leader: placing bundle %s on this broker's own view", bundle)
        candidate = await role.placement.select(str(bundle))
        if candidate is None:
            raise ServiceNotReadyError(f"no broker is available to own bundle {bundle}")
        if candidate.broker_id == role.broker_id:
            return await self._take(bundle, requested, via)
        return self._redirect(candidate.data, requested, via, authoritative=True)

    async def _take(
        self, bundle: NamespaceBundle, requested: str | None, via: str | None
    ) -> LookupResult:
        """Own the bundle (another broker may have been first: then it is the answer)."""
        owner = await self._ownership().acquire(bundle)
        return self.owner_lookup(owner, requested, via)

    def _redirect(
        self, to: BrokerData, requested: str | None, via: str | None, authoritative: bool
    ) -> LookupResult:
        return replace(
            lookup(self.listeners, to, requested, via), redirect=True, authoritative=authoritative
        )

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
