"""Bundle ownership in a cluster, as Pulsar's OwnershipCache keeps it.

A broker owns a bundle while it holds the EPHEMERAL node ``/namespace/<tenant>/<ns>/<lo>_<hi>``
(NamespaceEphemeralData JSON), so the ownership ends with its metadata session. Only a lookup
places an unowned bundle (the namespace service asks the leader's placement); the broker chosen
creates the node (:meth:`OwnershipCache.acquire`): ZooKeeper lets exactly one creator win, the
others read the winner's data. A Produce or Consume never takes a bundle.

Every broker keeps a cache of the owners it has read, kept fresh by the store's notifications
(a read arms a watch, so a deletion is heard and the next lookup reads again). A broker whose
session is lost stops serving what it owned at once (``on_lost``); when its session is back it
re-owns only what is still recorded as its own, and leaves the rest to the leader's placement.
"""

from __future__ import annotations

import asyncio
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
)
from pulsar_grpc.broker.naming import NamespaceBundle, NamespaceBundles, NamespaceName, TopicName

__all__ = [
    "OWNERSHIP_ROOT",
    "NamespaceEphemeralData",
    "NotOwnerError",
    "OwnershipCache",
    "bundle_path",
]

log = logging.getLogger(__name__)

OWNERSHIP_ROOT = "/namespace"
POLICIES_ROOT = "/admin/policies"


def bundle_path(bundle: NamespaceBundle) -> str:
    return f"{OWNERSHIP_ROOT}/{bundle.namespace}/{bundle.range_str}"


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
        found = await self.store.get(f"{POLICIES_ROOT}/{namespace}")
        spec = json.loads(found.value).get("bundles", {}) if found else {}
        if spec.get("boundaries"):
            bundles = NamespaceBundles.parse(namespace, spec["boundaries"])
        else:
            bundles = NamespaceBundles.with_count(namespace, int(spec.get("numBundles", 4)))
        self._bundles[namespace] = bundles
        return bundles

    async def bundle_of(self, topic: TopicName) -> NamespaceBundle:
        return (await self.bundles(topic.namespace)).bundle_for(topic)

    # ------------------------------------------------------------ ownership

    def owns(self, bundle: NamespaceBundle) -> bool:
        return bundle_path(bundle) in self._owned

    def owned(self) -> list[NamespaceBundle]:
        return list(self._owned.values())

    async def current_owner(self, bundle: NamespaceBundle) -> NamespaceEphemeralData | None:
        """The bundle's owner (``me`` when this broker), None when nobody owns it."""
        path = bundle_path(bundle)
        if path in self._owned:
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
        self._others[path] = owner
        return owner

    async def acquire(self, bundle: NamespaceBundle) -> NamespaceEphemeralData:
        """Take the bundle (Pulsar's tryAcquiringOwnership, once placement chose this broker);
        the owner when another broker was first."""
        path = bundle_path(bundle)
        while True:
            owner = await self.current_owner(bundle)
            if owner is not None:
                return owner
            try:
                await self.store.put(path, self._me_json, -1, CreateOption.EPHEMERAL)
            except BadVersionError:
                continue  # another broker was first: read its data
            self._owned[path] = bundle
            log.info("acquired bundle %s", bundle)
            return self.me

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
            self._lose([self._owned.pop(path)])

    def _on_session_event(self, event: SessionEvent) -> None:
        if event is SessionEvent.SESSION_LOST:
            self._others.clear()
            self._lost.extend(self._owned.values())
            owned, self._owned = list(self._owned.values()), {}
            if owned:
                log.warning("metadata session lost: no longer serving %d bundles", len(owned))
                self._lose(owned)
        elif event is SessionEvent.SESSION_REESTABLISHED:
            lost, self._lost = self._lost, []
            self._spawn(self._reown(lost))

    def _lose(self, bundles: list[NamespaceBundle]) -> None:
        self._spawn(self._on_lost(bundles))

    async def _reown(self, bundles: list[NamespaceBundle]) -> None:
        """Re-own what is still recorded as ours (a session presumed lost that lived on);
        what the expiry deleted is placed again by the next lookup."""
        for bundle in bundles:
            path = bundle_path(bundle)
            found = await self.store.get(path)
            if found is not None and found.value == self._me_json:
                self._owned[path] = bundle
                log.info("re-owned bundle %s", bundle)

    def _spawn(self, coro: Awaitable[None]) -> None:
        async def run() -> None:
            try:
                await coro
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
        for path in owned:
            try:
                await self.store.delete(path)
            except MetadataStoreError as exc:  # gone already, or the store is: the session ends
                log.info("could not release %s: %s", path, exc)
