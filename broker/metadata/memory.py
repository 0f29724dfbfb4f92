"""MemoryMetadataStore: the `memory:<name>` store, for fast tests of cluster behaviour.

As Pulsar's LocalMemoryMetadataStore, stores opened with the same name in one process share one
tree, so several brokers (each on its own thread and event loop) can form a cluster without a
ZooKeeper. Each store is a client with its own session: its ephemeral nodes go when it closes or
when a test calls expire_session(), which is what a ZooKeeper session expiry does; a test's
lose_connection() and reconnect() are a connection that drops and comes back within the session
(the nodes stay; calls in between fail, as they would time out). Every store on the tree is
notified of every change, on its own event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from dataclasses import dataclass, field

from pulsar_grpc.broker.metadata.store import (
    BadVersionError,
    ConnectionState,
    CreateOption,
    GetResult,
    MetadataNotFoundError,
    MetadataStore,
    MetadataStoreError,
    Notification,
    NotificationType,
    SessionEvent,
    parent_of,
    sequential_name,
    validate_path,
    validate_writable,
)

__all__ = ["MemoryMetadataStore"]


@dataclass(slots=True)
class _Node:
    value: bytes
    version: int = 0
    owner: int | None = None  # the session id of an ephemeral node
    children: set[str] = field(default_factory=set)
    # Children ever created here: the next sequential child's number (ZooKeeper's cversion).
    created_children: int = 0


class _Tree:
    """One named tree shared by the stores of a process; every access holds `lock`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.nodes: dict[str, _Node] = {"/": _Node(b"")}
        self.clients: set[MemoryMetadataStore] = set()

    def broadcast(self, changes: list[Notification]) -> None:
        """Hand the changes to every open store, each on its own loop (lock held)."""
        for client in self.clients:
            client.deliver(changes)

    def add(self, path: str, value: bytes, owner: int | None) -> list[Notification]:
        self.nodes[path] = _Node(value, owner=owner)
        parent = self.nodes[parent_of(path)]
        parent.children.add(path.rsplit("/", 1)[1])
        parent.created_children += 1
        return [
            Notification(NotificationType.CREATED, path),
            Notification(NotificationType.CHILDREN_CHANGED, parent_of(path)),
        ]

    def create(self, path: str, value: bytes, owner: int | None) -> list[Notification]:
        """Create `path` and its missing parents (empty, persistent)."""
        missing = []
        parent = parent_of(path)
        while parent not in self.nodes:
            missing.append(parent)
            parent = parent_of(parent)
        if self.nodes[parent].owner is not None:
            raise MetadataStoreError(f"{parent} is ephemeral: it cannot have children")
        changes: list[Notification] = []
        for p in reversed(missing):
            changes += self.add(p, b"", None)
        return changes + self.add(path, value, owner)

    def remove(self, path: str) -> list[Notification]:
        del self.nodes[path]
        parent = parent_of(path)
        self.nodes[parent].children.discard(path.rsplit("/", 1)[1])
        return [
            Notification(NotificationType.DELETED, path),
            Notification(NotificationType.CHILDREN_CHANGED, parent),
        ]

    def drop_session(self, session: int) -> list[Notification]:
        """Delete a session's ephemeral nodes (leaves: create refuses children under them)."""
        changes: list[Notification] = []
        for path in [p for p, n in self.nodes.items() if n.owner == session]:
            changes += self.remove(path)
        return changes


_TREES: dict[str, _Tree] = {}
_TREES_LOCK = threading.Lock()
_SESSION_IDS = itertools.count(1)


class MemoryMetadataStore(MetadataStore):
    """A client of the process-wide in-memory tree called `name`; open it on an event loop."""

    def __init__(self, name: str) -> None:
        super().__init__()
        with _TREES_LOCK:
            self._tree = _TREES.setdefault(name, _Tree())
        self._loop = asyncio.get_running_loop()
        self._session = next(_SESSION_IDS)
        self._open = True
        self._connected = ConnectionState.CONNECTED
        with self._tree.lock:
            self._tree.clients.add(self)

    def deliver(self, changes: list[Notification]) -> None:
        """Called by the tree from whichever thread changed it."""
        try:
            self._loop.call_soon_threadsafe(self._deliver_on_loop, changes)
        except RuntimeError:  # its loop is closed: nobody is left to tell
            pass

    def _deliver_on_loop(self, changes: list[Notification]) -> None:
        if self._open:
            for change in changes:
                self._notify(change)

    def _check_open(self) -> None:
        if not self._open:
            raise MetadataStoreError("metadata store is closed")
        if self._connected is ConnectionState.DISCONNECTED:
            raise MetadataStoreError("connection to the metadata store lost")

    @property
    def connection(self) -> ConnectionState:
        return self._connected if self._open else ConnectionState.CLOSED

    def lose_connection(self) -> None:
        """The connection drops; the session (and its nodes) lives on: ConnectionLost."""
        self._check_open()
        self._connected = ConnectionState.DISCONNECTED
        self._loop.call_soon_threadsafe(self._session_event, SessionEvent.CONNECTION_LOST)

    def reconnect(self) -> None:
        """Back within the session: Reconnected."""
        self._connected = ConnectionState.CONNECTED
        self._loop.call_soon_threadsafe(self._session_event, SessionEvent.RECONNECTED)

    async def get(self, path: str) -> GetResult | None:
        validate_path(path)
        self._check_open()
        with self._tree.lock:
            node = self._tree.nodes.get(path)
            return None if node is None else GetResult(node.value, node.version)

    async def put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None = None,
        options: CreateOption = CreateOption.NONE,
    ) -> int:
        validate_writable(path)
        self._check_open()
        tree = self._tree
        with tree.lock:
            node = tree.nodes.get(path)
            if node is not None:
                if expected_version is not None and expected_version != node.version:
                    raise BadVersionError(
                        f"{path} is at version {node.version}, expected {expected_version}"
                    )
                node.value = bytes(value)
                node.version += 1
                tree.broadcast([Notification(NotificationType.MODIFIED, path)])
                return node.version
            if expected_version is not None and expected_version != -1:
                raise BadVersionError(
                    f"{path} does not exist (expected version {expected_version})"
                )
            owner = self._session if CreateOption.EPHEMERAL in options else None
            tree.broadcast(tree.create(path, bytes(value), owner))
            return 0

    async def put_sequential(
        self, prefix: str, value: bytes, options: CreateOption = CreateOption.NONE
    ) -> str:
        validate_writable(prefix + "0")
        self._check_open()
        tree = self._tree
        owner = self._session if CreateOption.EPHEMERAL in options else None
        with tree.lock:
            parent = tree.nodes.get(parent_of(prefix))
            path = sequential_name(prefix, 0 if parent is None else parent.created_children)
            tree.broadcast(tree.create(path, bytes(value), owner))
            return path

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        validate_path(path)
        self._check_open()
        tree = self._tree
        with tree.lock:
            node = tree.nodes.get(path)
            if node is None or path == "/":
                raise MetadataNotFoundError(f"{path} does not exist")
            if expected_version is not None and expected_version != node.version:
                raise BadVersionError(
                    f"{path} is at version {node.version}, expected {expected_version}"
                )
            if node.children:
                raise MetadataStoreError(f"{path} has children")
            tree.broadcast(tree.remove(path))

    async def get_children(self, path: str) -> list[str]:
        validate_path(path)
        self._check_open()
        with self._tree.lock:
            node = self._tree.nodes.get(path)
            return [] if node is None else sorted(node.children)

    async def exists(self, path: str) -> bool:
        validate_path(path)
        self._check_open()
        with self._tree.lock:
            return path in self._tree.nodes

    def expire_session(self) -> None:
        """What a ZooKeeper session expiry does: the ephemeral nodes go (everyone is told),
        this store hears SessionLost, then works on in a new session (SessionReestablished).
        Callable from any thread; the events arrive on the store's loop after the deletions."""
        self._check_open()
        with self._tree.lock:
            self._tree.broadcast(self._tree.drop_session(self._session))
            self._session = next(_SESSION_IDS)
        for event in (SessionEvent.SESSION_LOST, SessionEvent.SESSION_REESTABLISHED):
            self._loop.call_soon_threadsafe(self._session_event, event)

    async def close(self) -> None:
        if not self._open:
            return
        self._open = False
        with self._tree.lock:
            self._tree.clients.discard(self)
            self._tree.broadcast(self._tree.drop_session(self._session))
