"""Bundle unload and split on the broker that owns the bundle (Pulsar's
NamespaceService.unloadNamespaceBundle and splitAndOwnBundle).

Unload, as OwnedBundle.handleUnloadRequest: the ownership node is marked disabled (lookups
answer ServiceNotReady "being unloaded", which clients retry), the bundle's topics close (their
producers and consumers end with ServiceNotReady once what they accepted is durable), then the
node is deleted and the next lookup places the bundle again.

Split: the boundaries come from the split algorithm; this broker owns the new bundles' nodes,
writes the namespace's policies with a compare-and-set (retried when another split came
first), then deletes the parent's node. Topics stay loaded: they now belong to the halves,
still here. ``unload`` then unloads the halves.

A standalone broker owns every bundle: an unload closes the topics (they load again on the next
request) and a split only rewrites the policies.

Who answers for a bundle (this broker, another, nobody) is the admin API's to decide; these
operations run where the bundle is owned.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from pulsar_grpc.broker.cluster.ownership import NamespaceEphemeralData, OwnershipCache
from pulsar_grpc.broker.cluster.split import SplitAlgorithm, split_boundaries
from pulsar_grpc.broker.config import ServiceConfiguration
from pulsar_grpc.broker.errors import (
    InvalidArgumentError,
    PreconditionFailedError,
    ServiceNotReadyError,
)
from pulsar_grpc.broker.metadata.store import BadVersionError
from pulsar_grpc.broker.namespace_service import NamespaceService
from pulsar_grpc.broker.naming import NamespaceBundle, NamespaceBundles, NamespaceName, TopicName
from pulsar_grpc.broker.resources import NamespaceResources
from pulsar_grpc.broker.topics.registry import TopicRegistry

__all__ = ["BundleOwner", "BundleService", "Owner", "SplitRefusedError"]

log = logging.getLogger(__name__)

# Another split of the same namespace may win the policies' compare-and-set: read and retry.
_SPLIT_ATTEMPTS = 5


class SplitRefusedError(PreconditionFailedError):
    """A split the namespace's state rules out (a bundle too small, no boundary found, too many
    bundles): Pulsar answers 412 Precondition Failed."""


class BundleOwner(enum.Enum):
    """Who answers an admin request for a bundle: this broker does it, another broker gets a
    redirect, nobody means there is nothing to unload (a split takes the bundle first)."""

    THIS_BROKER = "this broker"
    OTHER_BROKER = "another broker"
    NOBODY = "nobody"


@dataclass(frozen=True)
class Owner:
    """A bundle's owner as BundleService.owner found it."""

    kind: BundleOwner
    data: NamespaceEphemeralData | None = None  # the other broker's addresses


class BundleService:
    """Unload and split of the bundles this broker owns."""

    def __init__(
        self,
        config: ServiceConfiguration,
        resources: NamespaceResources,
        namespaces: NamespaceService,
        topics: TopicRegistry,
    ) -> None:
        self.config = config
        self.resources = resources
        self.namespaces = namespaces
        self.topics = topics

    @property
    def _ownership(self) -> OwnershipCache | None:
        """None for a standalone broker, which owns every bundle."""
        if not self.namespaces.clustered:
            return None
        ownership = self.namespaces.ownership
        if ownership is None:
            raise ServiceNotReadyError("broker is starting")
        return ownership

    async def bundle(self, ns: NamespaceName, range_str: str) -> NamespaceBundle:
        """The namespace's bundle ``range_str``; PreconditionFailedError (412, as Pulsar's
        validateNamespaceBundleRange) when the namespace has no such bundle."""
        bundle = NamespaceBundle.parse(ns, range_str)
        bundles, _ = await self.resources.get_bundles(ns)
        if bundle not in bundles.bundles:
            raise PreconditionFailedError(f"Invalid bundle range {range_str}: not a bundle of {ns}")
        return bundle

    async def owner(self, bundle: NamespaceBundle, take: bool) -> Owner:
        """Who owns ``bundle``; ``take``: an unowned bundle is taken by this broker first (as
        a lookup would), else it is reported as owned by nobody."""
        ownership = self._ownership
        if ownership is None:
            return Owner(BundleOwner.THIS_BROKER)
        data = await (ownership.acquire(bundle) if take else ownership.current_owner(bundle))
        if data is None:
            return Owner(BundleOwner.NOBODY)
        if data is ownership.me:
            return Owner(BundleOwner.THIS_BROKER)
        return Owner(BundleOwner.OTHER_BROKER, data)

    async def unload(self, bundle: NamespaceBundle) -> None:
        """Unload an owned bundle (see the module docstring)."""
        ownership = self._ownership
        if ownership is None:
            await self.topics.unload_bundles([bundle])
            return
        await ownership.disable(bundle)
        try:
            await self.topics.unload_bundles([bundle])
        except Exception:
            await ownership.enable(bundle)  # still served here rather than by nobody
            raise
        await ownership.release(bundle)
        log.info("unloaded bundle %s", bundle)

    async def split(
        self,
        bundle: NamespaceBundle,
        algorithm: SplitAlgorithm | None,
        positions: Iterable[int] = (),
        unload: bool = False,
    ) -> NamespaceBundles:
        """Split an owned bundle; returns the namespace's new bundles."""
        algorithm = algorithm or SplitAlgorithm(self.config.defaultNamespaceBundleSplitAlgorithm)
        positions = list(positions)
        if algorithm is SplitAlgorithm.SPECIFIED_POSITIONS_DIVIDE and not positions:
            raise SplitRefusedError(
                "With specified_positions_divide split algorithm, splitBoundaries must not be empty"
            )
        topics = []
        if algorithm is SplitAlgorithm.TOPIC_COUNT_EQUALLY_DIVIDE:
            topics = [
                TopicName.get(t) for t in await self.resources.list_topics(str(bundle.namespace))
            ]
        try:
            boundaries = split_boundaries(algorithm, bundle, topics, positions)
        except InvalidArgumentError as exc:
            raise SplitRefusedError(exc.message) from None
        for _ in range(_SPLIT_ATTEMPTS):
            bundles, version = await self.resources.get_bundles(bundle.namespace)
            if bundle not in bundles.bundles:
                raise SplitRefusedError(f"bundle {bundle} is no longer a bundle of its namespace")
            maximum = self.config.loadBalancerNamespaceMaximumBundles
            if len(bundles) + len(boundaries) > maximum:
                raise SplitRefusedError(
                    f"namespace {bundle.namespace} has {len(bundles)} bundles: splitting "
                    f"{bundle} would exceed loadBalancerNamespaceMaximumBundles={maximum}"
                )
            new = bundles.split_at(bundle, boundaries)
            if await self._write_split(bundle, new, version):
                break
        else:
            raise ServiceNotReadyError(f"could not split {bundle}: its namespace kept changing")
        log.info("split bundle %s at %s", bundle, [f"0x{b:08x}" for b in boundaries])
        if unload:
            for part in _parts(bundle, new):
                await self.unload(part)
        return new

    async def _write_split(
        self, bundle: NamespaceBundle, new: NamespaceBundles, version: int
    ) -> bool:
        """Own the parts, write the policies (compare-and-set), give the parent up; False (the
        parts given up again) when another writer changed the policies first. The parts are
        given up on any failure too: none stays owned outside the namespace's bundles."""
        ownership = self._ownership
        parts = _parts(bundle, new)
        acquired: list[NamespaceBundle] = []
        written = False
        try:
            if ownership is not None:
                for part in parts:
                    await ownership.own_new(part)
                    acquired.append(part)
            written = await self.resources.set_bundles(new, version)
        except BadVersionError:
            pass  # a part is owned already: a concurrent split of the same bundle
        finally:
            if not written and ownership is not None:
                for part in acquired:
                    await ownership.release(part)
        if not written:
            return False
        if ownership is not None:
            ownership.bundles_changed(new)
            await ownership.release(bundle)
        return True


def _parts(bundle: NamespaceBundle, bundles: NamespaceBundles) -> list[NamespaceBundle]:
    """The bundles of ``bundles`` that lie inside ``bundle`` (its parts after a split)."""
    return [b for b in bundles if bundle.lower <= b.lower and b.upper <= bundle.upper]
