"""Watches of topic ownership for clients (the WatchTopicOwnership RPC; not in Apache Pulsar).

A client's producers and consumers reconnect after a failure on a backoff timer that doubles up
to a minute (Pulsar's ConnectionHandler). When the failure is that their topic's owner went away,
the moment to reconnect is known precisely: when the bundle's ownership node changes. This module
tells clients that moment. It follows the bundles' ephemeral nodes
(``/namespace/<tenant>/<ns>/<range>``, see ownership.py) through the metadata store's
notifications, as Pulsar's TopicListWatcher (PIP-145) follows a namespace's topics, and hands each
watch the changes of the bundles holding its topics:

- OWNED: a broker created the node (it took the bundle: a lookup placed it, or a split made it);
- UNLOADING: the owner marked it disabled (an unload began; lookups answer ServiceNotReady);
- UNOWNED: the node is gone (an unload or a split released it, or its owner's metadata session
  ended: the owner died, or lost ZooKeeper for a whole session). Nobody places it until the next
  lookup (Pulsar's "assigned on next lookup"), so the client looks up at once, which places it.

It is its own listener on the store, beside OwnershipCache, and changes nothing there: it reads
each watched node itself, which arms the store's one-shot watch on it (ZooKeeper notifies only
about what was read since the last notification), and reads it again on every notification.
Reads of one node may overlap; the result of the read started last wins (one ZooKeeper session
answers in order). A watched namespace's policies are read the same way, so that a split moves
the watched topics onto the new bundles.

Memory is bounded by what clients watch, never by how fast they read: a watch holds at most
:data:`MAX_WATCHED_TOPICS` topics, and its undelivered changes are one slot per bundle (a newer
change replaces an older one not yet sent: the client needs the latest state, not the history).

The watches end (the client watches again, elsewhere if it can) when this broker's metadata
session is lost, since then it no longer hears about changes, and when the broker closes.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass

from pulsar_grpc.broker.cluster.ownership import (
    OWNERSHIP_ROOT,
    POLICIES_ROOT,
    NamespaceEphemeralData,
    bundle_path,
    policies_bundles,
)
from pulsar_grpc.broker.errors import BrokerError, InvalidArgumentError, ServiceNotReadyError
from pulsar_grpc.broker.metadata.store import (
    GetResult,
    MetadataStore,
    MetadataStoreError,
    Notification,
    NotificationType,
    SessionEvent,
)
from pulsar_grpc.broker.naming import NamespaceBundle, NamespaceBundles, NamespaceName, TopicName

__all__ = [
    "MAX_WATCHED_TOPICS",
    "BundleOwnership",
    "OwnershipEvent",
    "OwnershipState",
    "OwnershipWatchService",
    "TopicOwnershipWatch",
]

log = logging.getLogger(__name__)

# Topics one watch may name: a client with more watches the rest through a second call.
MAX_WATCHED_TOPICS = 10_000


class OwnershipState(enum.Enum):
    """Where a bundle's ownership node stands."""

    OWNED = "owned"
    UNLOADING = "unloading"  # the node says disabled
    UNOWNED = "unowned"  # no node


@dataclass(frozen=True)
class BundleOwnership:
    """A bundle's ownership as its node says: the owner's data while there is one."""

    state: OwnershipState
    owner: NamespaceEphemeralData | None = None

    @classmethod
    def of(cls, found: GetResult | None) -> BundleOwnership:
        if found is None:
            return cls(OwnershipState.UNOWNED)
        owner = NamespaceEphemeralData.from_json(found.value)
        state = OwnershipState.UNLOADING if owner.disabled else OwnershipState.OWNED
        return cls(state, owner)


@dataclass(frozen=True)
class OwnershipEvent:
    """What a watch hands its client: a bundle's ownership and the watched topics in it (as the
    client spelt them). ``initial``: from the state when the watch began, not a change."""

    bundle: NamespaceBundle
    ownership: BundleOwnership
    topics: tuple[str, ...]
    initial: bool = False


class WatchState(enum.Enum):
    OPEN = "open"
    ENDED = "ended"  # next() raises the reason once the changes already queued are gone


class TopicOwnershipWatch:
    """One client's watch: its topics by bundle, and the changes not yet sent (one per bundle).

    The service fills it; the RPC reads it with :meth:`next` and :meth:`close`\\ s it."""

    def __init__(self, service: OwnershipWatchService, topics: dict[str, TopicName]) -> None:
        self._service = service
        self.topics = topics  # as the client spelt them -> parsed
        # The watched topics of each bundle path (maintained by the service).
        self.by_path: dict[str, tuple[NamespaceBundle, tuple[str, ...]]] = {}
        self._pending: dict[str, OwnershipEvent] = {}
        self._changed = asyncio.Event()
        self._state = WatchState.OPEN
        self._end: BrokerError | None = None

    @property
    def namespaces(self) -> set[NamespaceName]:
        return {name.namespace for name in self.topics.values()}

    def tell(self, path: str, ownership: BundleOwnership, initial: bool = False) -> None:
        """Queue the bundle's new ownership for the client, replacing one not yet sent."""
        if self._state is not WatchState.OPEN or path not in self.by_path:
            return
        bundle, topics = self.by_path[path]
        self._pending.pop(path, None)  # re-queued last: the newest change goes out last
        self._pending[path] = OwnershipEvent(bundle, ownership, topics, initial)
        self._changed.set()

    def end(self, reason: BrokerError) -> None:
        """Stop the watch: :meth:`next` raises ``reason`` (the call ends with it)."""
        if self._state is WatchState.OPEN:
            self._state, self._end = WatchState.ENDED, reason
            self._pending.clear()
            self._changed.set()

    async def next(self) -> OwnershipEvent:
        """The oldest change not yet sent, waiting for one; the end's reason once ended."""
        while not self._pending:
            if self._end is not None:
                raise self._end
            self._changed.clear()
            await self._changed.wait()
        path = next(iter(self._pending))
        return self._pending.pop(path)

    def close(self) -> None:
        """The call is over: the service forgets the watch (and nodes nobody else watches)."""
        self.end(ServiceNotReadyError("the watch is closed"))
        self._service.forget(self)


class _Session(enum.Enum):
    CONNECTED = "connected"
    LOST = "lost"  # SessionLost heard: no notification can be trusted until re-established


class OwnershipWatchService:
    """Every watch of one broker, over its metadata store (see the module docstring)."""

    def __init__(self, store: MetadataStore, max_topics: int = MAX_WATCHED_TOPICS) -> None:
        self.store = store
        self.max_topics = max_topics
        self._watches: set[TopicOwnershipWatch] = set()
        # Each watched bundle path: who watches it, and its ownership as last read.
        self._watchers: dict[str, set[TopicOwnershipWatch]] = {}
        self._states: dict[str, BundleOwnership] = {}
        # Read order per path: a read's result counts only if no later-started read's did.
        self._read_seq = 0
        self._applied: dict[str, int] = {}
        # Each watched namespace's bundles as last read from its policies.
        self._bundles: dict[NamespaceName, NamespaceBundles] = {}
        self._session = _Session.CONNECTED
        self._tasks: set[asyncio.Task[None]] = set()
        store.register_listener(self._on_notification)
        store.register_session_listener(self._on_session_event)

    # ------------------------------------------------------------ watches

    async def watch(self, topics: Sequence[str]) -> TopicOwnershipWatch:
        """A watch of ``topics``' bundles, its first changes queued: each bundle's ownership
        now (``initial``). InvalidArgumentError for a bad list, ServiceNotReadyError while this
        broker's metadata session is lost (it would hear of no change)."""
        names = _parse_topics(topics, self.max_topics)
        if self._session is _Session.LOST:
            raise ServiceNotReadyError("this broker's metadata session is lost: watch elsewhere")
        watch = TopicOwnershipWatch(self, names)
        self._watches.add(watch)
        try:
            for namespace in watch.namespaces:
                if namespace not in self._bundles:
                    self._bundles[namespace] = await self._read_bundles(namespace)
            for path in await self._assign(watch):
                watch.tell(path, self._states[path], initial=True)
        except MetadataStoreError as exc:
            watch.close()
            raise ServiceNotReadyError(f"cannot read the metadata store: {exc}") from None
        except BaseException:
            watch.close()
            raise
        return watch

    def forget(self, watch: TopicOwnershipWatch) -> None:
        """Drop ``watch``, and the state of what nobody watches any more."""
        self._watches.discard(watch)
        for path in list(watch.by_path):
            self._unwatch(watch, path)
        watch.by_path.clear()
        watched = {ns for w in self._watches for ns in w.namespaces}
        for namespace in set(self._bundles) - watched:
            del self._bundles[namespace]

    async def _assign(self, watch: TopicOwnershipWatch) -> list[str]:
        """Map the watch's topics onto their namespaces' current bundles; read the nodes
        nobody watched yet. Returns the watch's paths whose topics changed."""
        grouped: dict[str, tuple[NamespaceBundle, list[str]]] = {}
        for spelt, name in watch.topics.items():
            bundle = self._bundles[name.namespace].bundle_for(name)
            grouped.setdefault(bundle_path(bundle), (bundle, []))[1].append(spelt)
        new = {path: (bundle, tuple(sorted(t))) for path, (bundle, t) in grouped.items()}
        old, watch.by_path = watch.by_path, new
        for path in set(old) - set(new):
            self._unwatch(watch, path)
        unread = []
        for path in new:
            if path not in self._watchers:
                self._watchers[path] = set()
                unread.append(path)
            self._watchers[path].add(watch)
        await asyncio.gather(*(self._read(path) for path in unread))
        if watch not in self._watches:  # closed meanwhile
            return []
        return [p for p in new if old.get(p) != new[p] and p in self._states]

    def _unwatch(self, watch: TopicOwnershipWatch, path: str) -> None:
        watchers = self._watchers.get(path)
        if watchers is None:
            return
        watchers.discard(watch)
        if not watchers:
            del self._watchers[path]
            self._states.pop(path, None)
            self._applied.pop(path, None)

    # ------------------------------------------------------------ reading the store

    async def _read(self, path: str, moved: bool = False) -> None:
        """Read a watched node (arming the store's watch on it) and tell its watchers when its
        ownership changed; ``moved``: the node was created or deleted since the last read, so
        its owner changed hands even if the same broker owns it again."""
        self._read_seq += 1
        seq = self._read_seq
        try:
            found = await self.store.get(path)
        except MetadataStoreError as exc:  # the session's loss ends the watches; else logged
            log.warning("ownership watch cannot read %s: %s", path, exc)
            return
        if path not in self._watchers or seq < self._applied.get(path, 0):
            return
        self._applied[path] = seq
        ownership = BundleOwnership.of(found)
        if not moved and self._states.get(path) == ownership:
            return
        self._states[path] = ownership
        for watch in list(self._watchers[path]):
            watch.tell(path, ownership)

    async def _read_bundles(self, namespace: NamespaceName) -> NamespaceBundles:
        found = await self.store.get(f"{POLICIES_ROOT}/{namespace}")  # arms its watch too
        return policies_bundles(namespace, found.value if found else b"{}")

    async def _policies_changed(self, namespace: NamespaceName) -> None:
        """A watched namespace's bundles may have changed (a split): move its watches'
        topics onto the new bundles and tell them each new bundle's ownership."""
        try:
            bundles = await self._read_bundles(namespace)
        except MetadataStoreError as exc:
            log.warning("ownership watch cannot read the policies of %s: %s", namespace, exc)
            return
        if namespace not in self._bundles or self._bundles[namespace] == bundles:
            return
        self._bundles[namespace] = bundles
        for watch in [w for w in self._watches if namespace in w.namespaces]:
            for path in await self._assign(watch):
                watch.tell(path, self._states[path])

    # ------------------------------------------------------------ notifications

    def _on_notification(self, notification: Notification) -> None:
        path = notification.path
        if path.startswith(f"{OWNERSHIP_ROOT}/") and path in self._watchers:
            moved = notification.type in (NotificationType.CREATED, NotificationType.DELETED)
            self._spawn(self._read(path, moved))
        elif path.startswith(f"{POLICIES_ROOT}/"):
            parts = path[len(POLICIES_ROOT) + 1 :].split("/")
            if len(parts) == 2 and (namespace := NamespaceName(*parts)) in self._bundles:
                self._spawn(self._policies_changed(namespace))

    def _on_session_event(self, event: SessionEvent) -> None:
        if event is SessionEvent.SESSION_LOST:
            # Its watches on the store are gone and changes go unheard: clients watch
            # through another broker (or here again once the session is back).
            self._session = _Session.LOST
            for watch in list(self._watches):
                watch.end(
                    ServiceNotReadyError("this broker lost its metadata session: watch again")
                )
        elif event is SessionEvent.SESSION_REESTABLISHED:
            self._session = _Session.CONNECTED
        elif event is SessionEvent.RECONNECTED:
            # The session lived on; read everything again in case a change slipped by.
            for path in list(self._watchers):
                self._spawn(self._read(path))

    def _spawn(self, coro: Awaitable[None]) -> None:
        async def run() -> None:
            try:
                await coro
            except Exception:
                log.exception("ownership watch task failed")

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """End every watch (the broker is closing: clients watch through another)."""
        for watch in list(self._watches):
            watch.end(ServiceNotReadyError("broker is shutting down"))
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _parse_topics(topics: Sequence[str], limit: int) -> dict[str, TopicName]:
    """The request's topics, parsed; InvalidArgumentError names what is wrong."""
    if not topics:
        raise InvalidArgumentError("a watch needs at least one topic")
    if len(topics) > limit:
        raise InvalidArgumentError(f"a watch may name at most {limit} topics, not {len(topics)}")
    names: dict[str, TopicName] = {}
    for topic in topics:
        if topic in names:
            raise InvalidArgumentError(f"topic {topic!r} is named twice in the watch")
        names[topic] = TopicName.get(topic)  # InvalidTopicNameError (INVALID_ARGUMENT)
    return names
