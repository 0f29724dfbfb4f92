"""Bundle ownership in a cluster, as Pulsar's OwnershipCache keeps it.

A broker owns a bundle while it holds the EPHEMERAL node ``/namespace/<tenant>/<ns>/<lo>_<hi>``
(NamespaceEphemeralData JSON), so the ownership ends with its metadata session. Only a lookup
places an unowned bundle (the namespace service asks the leader's placement); the broker chosen
creates the node (:meth:`OwnershipCache.acquire`): ZooKeeper lets exactly one creator win, the
others read the winner's data. A Produce or Consume never takes a bundle.

Every broker keeps a cache of the owners it has read, kept fresh by the store's notifications
(a read arms a watch, so a deletion is heard and the next lookup reads again). A connection to
the store that dropped took its watches along, so the cache is emptied when it is back (the
store also notifies every path it watched): a lookup must never answer an owner read on a
connection whose watches are gone, as that owner may be long gone too (it would refuse the
client, and the client, looking up again, would be sent back to it). A broker whose
session is lost stops serving what it owned at once (``on_lost``); when its session is back it
re-owns only what is still recorded as its own, and leaves the rest to the leader's placement.

An unload (Pulsar's OwnedBundle.handleUnloadRequest) first marks the node ``disabled``: while
the bundle's topics close, lookups on every broker and topic loads here answer ServiceNotReady
("being unloaded"), which clients retry; then the node is deleted and the next lookup places the
bundle again. A split owns the new bundles' nodes before the policies name them, and an unowned
bundle is taken only while the namespace's policies still have it (a broker that has not yet
heard of a split must not take the parent again).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from pulsar_grpc.broker.cluster import advertised_listener, broker_data_of
from pulsar_grpc.broker.errors import ServiceNotReadyError
from pulsar_grpc.broker.listeners import GRPC, GRPC_TLS, HTTP, HTTPS
from pulsar_grpc.broker.lookup import BrokerData
from pulsar_grpc.broker.metadata.store import (
    BadVersionError,
    CreateOption,
    MetadataStore,
    MetadataStoreError,
    Notification,
    NotificationType,
    SessionEvent,
    release_at_close,
)
from pulsar_grpc.broker.naming import NamespaceBundle, NamespaceBundles, NamespaceName, TopicName

__all__ = [
    "OWNERSHIP_ROOT",
    "NamespaceEphemeralData",
    "NotOwnerError",
    "OwnershipCache",
    "bundle_path",
    "policies_bundles",
]

log = logging.getLogger(__name__)

OWNERSHIP_ROOT = "/namespace"
POLICIES_ROOT = "/admin/policies"


def bundle_path(bundle: NamespaceBundle) -> str:
    return f"{OWNERSHIP_ROOT}/{bundle.namespace}/{bundle.range_str}"


def policies_bundles(namespace: NamespaceName, policies: bytes) -> NamespaceBundles:
    """The bundles a namespace's policies JSON names (``bundles.boundaries``, else an even
    split into ``bundles.numBundles``), as Pulsar's BundlesData."""
    spec = json.loads(policies).get("bundles") or {}
    if spec.get("boundaries"):
        return NamespaceBundles.parse(namespace, spec["boundaries"])
    return NamespaceBundles.with_count(namespace, int(spec.get("numBundles", 4)))


@dataclass(frozen=True)
class NamespaceEphemeralData:
    """The owner's addresses, as Pulsar's NamespaceEphemeralData JSON (plus ``protocols``, the
    owner's protocol handlers' advertised data, so that a handler can read its own)."""

    native_url: str | None
    native_url_tls: str | None
    http_url: str | None
    http_url_tls: str | None
    advertised_listeners: dict[str, dict[str, str]]
    protocols: dict[str, str] = field(default_factory=dict)
    disabled: bool = False

    @classmethod
    def of(cls, data: BrokerData, internal_listener: str) -> NamespaceEphemeralData:
        internal = data.listeners[internal_listener]
        return cls(
            native_url=internal.url(GRPC),
            native_url_tls=internal.url(GRPC_TLS),
            http_url=internal.url(HTTP),
            http_url_tls=internal.url(HTTPS),
            advertised_listeners={
                name: advertised_listener(lst) for name, lst in data.listeners.items()
            },
            protocols=dict(data.protocols),
        )

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "nativeUrl": self.native_url,
                "nativeUrlTls": self.native_url_tls,
                "httpUrl": self.http_url,
                "httpUrlTls": self.http_url_tls,
                "disabled": self.disabled,
                "advertisedListeners": self.advertised_listeners,
                "protocols": self.protocols,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> NamespaceEphemeralData:
        data = json.loads(raw)
        return cls(
            native_url=data.get("nativeUrl"),
            native_url_tls=data.get("nativeUrlTls"),
            http_url=data.get("httpUrl"),
            http_url_tls=data.get("httpUrlTls"),
            advertised_listeners=data.get("advertisedListeners") or {},
            protocols=data.get("protocols") or {},
            disabled=bool(data.get("disabled", False)),
        )

    def broker_data(self) -> BrokerData:
        """The owner's addresses in the shape lookups answer from."""
        return broker_data_of(self.advertised_listeners, self.protocols)


def _being_unloaded(bundle: NamespaceBundle) -> ServiceNotReadyError:
    return ServiceNotReadyError(f"namespace bundle {bundle} is being unloaded")


class NotOwnerError(ServiceNotReadyError):
    """The topic's bundle is owned by another broker: a retryable refusal that names the owner,
    so the protocol handler can tell the client where to go (in its own terms)."""

    def __init__(self, bundle: NamespaceBundle, owner: NamespaceEphemeralData) -> None:
        super().__init__(f"bundle {bundle} is owned by {owner.native_url or owner.http_url}")
        self.bundle = bundle
        self.owner = owner


LostCallback = Callable[[list[NamespaceBundle]], Awaitable[None]]


class OwnershipCache:
    """Which broker owns which bundle, for one broker (``me``).

    One owner per piece of state: ``_owned`` (bundles this broker holds the node of) and
    ``_others`` (owners read from the store, dropped on any notification about their node).
    """

    def __init__(self, store: MetadataStore, me: NamespaceEphemeralData, on_lost: LostCallback):
        self.store = store
        self.me = me
        self._me_json = me.to_json()
        self._on_lost = on_lost
        self._owned: dict[str, NamespaceBundle] = {}
        # Owned bundles being unloaded (their node says disabled): no topic of theirs loads.
        self._unloading: set[str] = set()
        self._others: dict[str, NamespaceEphemeralData] = {}
        self._bundles: dict[NamespaceName, NamespaceBundles] = {}
        # Bundles owned when the session was lost: re-owned if still recorded as ours.
        self._lost: list[NamespaceBundle] = []
        self._tasks: set[asyncio.Task[None]] = set()
        store.register_listener(self._on_notification)
        store.register_session_listener(self._on_session_event)

    # ------------------------------------------------------------ bundles

    async def bundles(self, namespace: NamespaceName) -> NamespaceBundles:
        """The namespace's bundles from its policies (``bundles.boundaries``, else an even
        split into ``bundles.numBundles``)."""
        known = self._bundles.get(namespace)
        if known is not None:
            return known
        bundles = await self._read_bundles(namespace)
        self._bundles[namespace] = bundles
        return bundles

    async def _read_bundles(self, namespace: NamespaceName) -> NamespaceBundles:
        found = await self.store.get(f"{POLICIES_ROOT}/{namespace}")
        return policies_bundles(namespace, found.value if found else b"{}")

    def bundles_changed(self, bundles: NamespaceBundles) -> None:
        """This broker has just written ``bundles`` (a split): use them without waiting for
        the store's notification."""
        self._bundles[bundles.namespace] = bundles

    async def bundle_of(self, topic: TopicName) -> NamespaceBundle:
        return (await self.bundles(topic.namespace)).bundle_for(topic)

    # ------------------------------------------------------------ ownership

    def owns(self, bundle: NamespaceBundle) -> bool:
        return bundle_path(bundle) in self._owned

    def owned(self) -> list[NamespaceBundle]:
        return list(self._owned.values())

    def is_active(self, bundle: NamespaceBundle) -> bool:
        """Whether an owned bundle is served (not being unloaded)."""
        return bundle_path(bundle) in self._owned and bundle_path(bundle) not in self._unloading

    async def acquire(self, bundle: NamespaceBundle) -> NamespaceEphemeralData:
        """Take the bundle (Pulsar's tryAcquiringOwnership, once placement chose this broker);
        the owner when another broker was first. ServiceNotReadyError while it is being
        unloaded, or when it has just been split (a broker that has not heard of the split
        yet must not take the parent again)."""
        path = bundle_path(bundle)
        while True:
            found_owner = await self.current_owner(bundle)
            if found_owner is not None:
                return found_owner
            if bundle not in (await self._read_bundles(bundle.namespace)).bundles:
                self._bundles.pop(bundle.namespace, None)
                raise ServiceNotReadyError(f"namespace bundle {bundle} has just been split")
            try:
                await self.store.put(path, self._me_json, -1, CreateOption.EPHEMERAL)
            except BadVersionError:
                continue  # another broker was first: read its data
            self._owned[path] = bundle
            log.info("acquired bundle %s", bundle)
            return self.me

    async def current_owner(self, bundle: NamespaceBundle) -> NamespaceEphemeralData | None:
        """The bundle's owner, None when nobody owns it (nothing is taken);
        ServiceNotReadyError while it is being unloaded."""
        path = bundle_path(bundle)
        if path in self._owned:
            if path in self._unloading:
                raise _being_unloaded(bundle)
            return self.me
        cached = self._others.get(path)
        if cached is not None:
            return cached
        found = await self.store.get(path)  # arms a watch: a change drops the cache entry
        if found is None:
            return None
        if found.value == self._me_json:  # ours, e.g. from a session presumed lost
            self._owned[path] = bundle
            return self.me
        owner = NamespaceEphemeralData.from_json(found.value)
        if owner.disabled:
            raise _being_unloaded(bundle)  # not cached: the next change is the deletion
        self._others[path] = owner
        return owner

    async def own_new(self, bundle: NamespaceBundle) -> None:
        """Own ``bundle`` (a split's new bundle, which nobody can own yet); BadVersionError
        when another broker holds it."""
        path = bundle_path(bundle)
        await self.store.put(path, self._me_json, -1, CreateOption.EPHEMERAL)
        self._owned[path] = bundle

    async def disable(self, bundle: NamespaceBundle) -> None:
        """Mark an owned bundle as being unloaded (Pulsar's disableOwnership): its node says
        ``disabled``, so lookups everywhere answer ServiceNotReady until it is released."""
        path = bundle_path(bundle)
        if path not in self._owned:
            raise ServiceNotReadyError(f"namespace bundle {bundle} is not owned by this broker")
        self._unloading.add(path)
        try:
            await self._rewrite(bundle, dataclasses.replace(self.me, disabled=True).to_json())
        except BaseException:
            self._unloading.discard(path)
            raise

    async def enable(self, bundle: NamespaceBundle) -> None:
        """Serve a bundle again whose unload failed part-way (Pulsar re-enables it too)."""
        await self._rewrite(bundle, self._me_json)
        self._unloading.discard(bundle_path(bundle))

    async def _rewrite(self, bundle: NamespaceBundle, value: bytes) -> None:
        path = bundle_path(bundle)
        found = await self.store.get(path)
        if found is None:
            raise ServiceNotReadyError(f"namespace bundle {bundle} is no longer owned")
        await self.store.put(path, value, found.version)

    async def release(self, bundle: NamespaceBundle) -> None:
        """Give an owned bundle up (its topics are closed): delete its node, so that the next
        lookup places it again. Not an ownership loss: nothing more is unloaded."""
        path = bundle_path(bundle)
        self._owned.pop(path, None)
        self._unloading.discard(path)
        try:
            await self.store.delete(path)
        except MetadataStoreError as exc:  # gone already (the session ended): nothing to give
            log.info("could not release %s: %s", path, exc)

    async def check_owner(self, topic: TopicName) -> NamespaceBundle:
        """Raise NotOwnerError when another broker owns the topic's bundle, and
        ServiceNotReadyError when nobody does: only a lookup places a bundle (through the
        leader), so the client must look the topic up."""
        bundle = await self.bundle_of(topic)
        owner = await self.current_owner(bundle)
        if owner is None:
            raise ServiceNotReadyError(
                f"bundle {bundle} is not owned by any broker: look the topic up"
            )
        if owner is not self.me:
            raise NotOwnerError(bundle, owner)
        return bundle

    def revalidate(self, topic: TopicName) -> None:
        """Check in the store, soon, that this broker still owns ``topic``'s bundle: its
        managed ledger was fenced, so another broker opened it, and this broker's session may
        have expired without its knowing yet (a paused process). Unless the node is still
        ours, the bundle is lost at once (its topics close), so that this broker does not load
        the topic again and fence the new owner back."""
        self._spawn(self.recheck(topic))

    async def recheck(self, topic: TopicName) -> None:
        """:meth:`revalidate`'s check, awaited."""
        bundle = await self.bundle_of(topic)
        path = bundle_path(bundle)
        if path not in self._owned:
            return
        ours = (self._me_json, dataclasses.replace(self.me, disabled=True).to_json())
        try:
            found = await self.store.get(path)
        except MetadataStoreError as exc:  # e.g. the session expired: nothing is ours then
            log.warning("cannot read the owner of %s after a fence: %s", bundle, exc)
            found = None
        if (found is None or found.value not in ours) and path in self._owned:
            log.warning("bundle %s is no longer this broker's (its ledger was fenced)", bundle)
            self._unloading.discard(path)
            self._lose([self._owned.pop(path)])

    # ------------------------------------------------------------ notifications

    def _on_notification(self, notification: Notification) -> None:
        path = notification.path
        if path.startswith(f"{POLICIES_ROOT}/"):
            parts = path[len(POLICIES_ROOT) + 1 :].split("/")
            if len(parts) == 2:  # a namespace's policies (its bundles may have changed)
                self._bundles.pop(NamespaceName(*parts), None)
            return
        if not path.startswith(f"{OWNERSHIP_ROOT}/"):
            return
        self._others.pop(path, None)
        if notification.type is NotificationType.DELETED and path in self._owned:
            self._unloading.discard(path)
            self._lose([self._owned.pop(path)])

    def _on_session_event(self, event: SessionEvent) -> None:
        if event is SessionEvent.SESSION_LOST:
            self._others.clear()
            self._lost.extend(b for p, b in self._owned.items() if p not in self._unloading)
            self._unloading.clear()
            owned, self._owned = list(self._owned.values()), {}
            if owned:
                log.warning("metadata session lost: no longer serving %d bundles", len(owned))
                self._lose(owned)
        elif event is SessionEvent.RECONNECTED:
            self._others.clear()  # read on the connection that dropped, without watches now
        elif event is SessionEvent.SESSION_REESTABLISHED:
            self._others.clear()
            lost, self._lost = self._lost, []
            self._spawn(self._reown(lost))

    def _lose(self, bundles: list[NamespaceBundle]) -> None:
        self._spawn(self._on_lost(bundles))

    async def _reown(self, bundles: list[NamespaceBundle]) -> None:
        """Re-own what is still recorded as ours (a session presumed lost that lived on);
        what the expiry deleted is placed again by the next lookup."""
        for bundle in bundles:
            path = bundle_path(bundle)
            try:
                found = await self.store.get(path)
            except MetadataStoreError as exc:  # lost again: the next lookup places it
                log.warning("cannot re-own %s: %s", bundle, exc)
                continue
            if found is not None and found.value == self._me_json:
                self._owned[path] = bundle
                log.info("re-owned bundle %s", bundle)

    def _spawn(self, coro: Awaitable[None]) -> None:
        async def run() -> None:
            try:
                await coro
            except MetadataStoreError as exc:  # the store is away: a lookup sorts it out
                log.warning("ownership task failed: %s", exc)
            except Exception:
                log.exception("ownership task failed")

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Let go of every bundle (the broker has closed their topics): other brokers can take
        them at once instead of when this broker's session ends."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        owned, self._owned = list(self._owned), {}
        if owned:
            await release_at_close(self.store, f"{len(owned)} bundles", lambda: self._delete(owned))

    async def _delete(self, paths: list[str]) -> None:
        """Delete the nodes side by side (one round trip for all, within the release bound)."""

        async def one(path: str) -> None:
            try:
                await self.store.delete(path)
            except MetadataStoreError as exc:  # gone already (an expired session took it)
                log.info("could not release %s: %s", path, exc)

        await asyncio.gather(*(one(path) for path in paths))
