"""The MetadataStore contract: Pulsar's metadata-store API, async.

Semantics follow ZooKeeper so that a kazoo-backed store can sit behind the same interface:
absolute paths without a trailing slash, versions that start at 0 and grow by one per write,
expected_version -1 meaning "must not exist", parents created implicitly (as Pulsar's
metadata store does), and deleting a node that still has children refused.

What a cluster needs on top, in Pulsar's model (MetadataStoreExtended): ephemeral nodes that
live as long as the store's session (CreateOption.EPHEMERAL), notifications that keep caches
fresh (register_listener: Created / Modified / Deleted / ChildrenChanged per path, as Pulsar's
Notification) and session events (register_session_listener: Pulsar's SessionEvent). Listeners
are plain callables run on the event loop the store was opened on, never on a store thread.

Notification coverage follows ZooKeeper's watches, the weakest implementation: a store notifies
at least about the paths it has read through get / exists / get_children since their last
notification (the read arms a one-shot watch, as Pulsar's ZKMetadataStore does), which is what
a cache needs: it re-reads on a notification, and that re-arms the watch. Stores without
watches notify about every change. A store whose watches die with a connection (kazoo's do, and
it does not set them again on the new one) notifies every path it was watching once it is
connected again, before it reports RECONNECTED or SESSION_REESTABLISHED: what changed meanwhile
is unknown, so a notification means "read it again", never "this is what happened".

``connection`` says whether the store can be reached now; a broker that is stopping does not
wait on one that cannot (its ephemeral nodes go with its session anyway).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pulsar_grpc.broker.errors import MetadataError

__all__ = [
    "BadVersionError",
    "ConnectionState",
    "CreateOption",
    "GetResult",
    "MetadataNotFoundError",
    "MetadataStore",
    "MetadataStoreError",
    "Notification",
    "NotificationType",
    "SessionEvent",
    "release_at_close",
    "sequential_name",
    "validate_path",
]

log = logging.getLogger(__name__)


class MetadataStoreError(MetadataError):
    """Any failure of the metadata store (I/O, invalid path, node not empty)."""


class BadVersionError(MetadataStoreError):
    """The node's version is not the expected one (or it exists when -1 was expected)."""


class MetadataNotFoundError(MetadataStoreError):
    """The node does not exist (or it was expected to exist with a given version)."""


@dataclass(frozen=True, slots=True)
class GetResult:
    value: bytes
    version: int


class CreateOption(enum.Flag):
    """Pulsar's CreateOption: how put creates a node that does not exist yet."""

    NONE = 0
    # The node is deleted when the session of the store that created it ends (closed, expired).
    EPHEMERAL = enum.auto()


class NotificationType(enum.Enum):
    """Pulsar's NotificationType names."""

    CREATED = "Created"
    MODIFIED = "Modified"
    DELETED = "Deleted"
    CHILDREN_CHANGED = "ChildrenChanged"


@dataclass(frozen=True, slots=True)
class Notification:
    """A change at `path` (for CHILDREN_CHANGED: a child of `path` was created or deleted)."""

    type: NotificationType
    path: str


class SessionEvent(enum.Enum):
    """Pulsar's SessionEvent: what happened to the store's session with its server."""

    # The connection dropped; the session (and its ephemeral nodes) may still be alive.
    CONNECTION_LOST = "ConnectionLost"
    # Connected again within the session timeout: the ephemeral nodes are still there.
    RECONNECTED = "Reconnected"
    # The session expired, or the connection has been lost for a whole session timeout (so
    # the server has expired it, or will, even if it cannot say so): stop relying on the
    # ephemeral nodes and the watches of the session.
    SESSION_LOST = "SessionLost"
    # Connected again after SESSION_LOST: ephemeral nodes must be created again (those of a
    # session presumed lost may turn out to be still there: an owner reads before it writes).
    SESSION_REESTABLISHED = "SessionReestablished"


class ConnectionState(enum.Enum):
    """Whether a store's server can be reached now (a store without one always can)."""

    CONNECTED = "connected"
    # The connection is down (its session may live on, or be lost): calls wait or fail.
    DISCONNECTED = "disconnected"
    CLOSED = "closed"


NotificationListener = Callable[[Notification], None]
SessionListener = Callable[[SessionEvent], None]


def validate_path(path: str) -> None:
    """Reject paths ZooKeeper would reject, so both stores accept exactly the same names."""
    if not path.startswith("/"):
        raise MetadataStoreError(f"metadata path must start with '/': {path!r}")
    if path == "/":
        return
    if path.endswith("/") or "//" in path or "\0" in path:
        raise MetadataStoreError(f"invalid metadata path: {path!r}")
    for part in path.split("/")[1:]:
        if part in (".", ".."):
            raise MetadataStoreError(f"invalid metadata path: {path!r}")


def validate_writable(path: str) -> None:
    """validate_path, and the root, which exists always and cannot be written."""
    validate_path(path)
    if path == "/":
        raise MetadataStoreError("cannot write the root node")


def sequential_name(prefix: str, counter: int) -> str:
    """ZooKeeper's format: the counter as 10 digits (it wraps past 2**31 - 1, as there)."""
    return f"{prefix}{counter % 2**31:010d}"


def parent_of(path: str) -> str:
    """The parent path; '/' for top-level nodes."""
    head = path.rsplit("/", 1)[0]
    return head or "/"


class MetadataStore(ABC):
    """A hierarchical, versioned key-value store for broker metadata."""

    def __init__(self) -> None:
        self._listeners: list[NotificationListener] = []
        self._session_listeners: list[SessionListener] = []

    @property
    def connection(self) -> ConnectionState:
        """Whether the store can be reached now (see the module docstring)."""
        return ConnectionState.CONNECTED

    def register_listener(self, listener: NotificationListener) -> None:
        """Call `listener` on the event loop for each change (see the module docstring)."""
        self._listeners.append(listener)

    def register_session_listener(self, listener: SessionListener) -> None:
        """Call `listener` on the event loop for each session event."""
        self._session_listeners.append(listener)

    def _notify(self, notification: Notification) -> None:
        """Deliver to every listener; one listener's failure must not starve the others."""
        for listener in list(self._listeners):
            try:
                listener(notification)
            except Exception:
                log.exception("metadata listener failed on %s", notification)

    def _session_event(self, event: SessionEvent) -> None:
        log.info("metadata store session event: %s", event.value)
        for listener in list(self._session_listeners):
            try:
                listener(event)
            except Exception:
                log.exception("metadata session listener failed on %s", event.value)

    @abstractmethod
    async def get(self, path: str) -> GetResult | None:
        """The node's value and version, or None when it does not exist."""

    @abstractmethod
    async def put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None = None,
        options: CreateOption = CreateOption.NONE,
    ) -> int:
        """Create or update a node; returns its new version.

        expected_version: None = unconditional, -1 = must not exist, N = must be at version N;
        otherwise BadVersionError. Missing parents are created with an empty value (and are
        never ephemeral). `options` applies only when the node is created.
        """

    @abstractmethod
    async def put_sequential(
        self, prefix: str, value: bytes, options: CreateOption = CreateOption.NONE
    ) -> str:
        """Create a node named `prefix` + a 10-digit counter and return its path (ZooKeeper's
        sequential node, as Pulsar's CreateOption.Sequential): the counter grows with every
        child created under the parent, so concurrent creators never collide. Missing parents
        are created as put does.
        """

    @abstractmethod
    async def delete(self, path: str, expected_version: int | None = None) -> None:
        """Delete a leaf node; MetadataNotFoundError when absent, BadVersionError on mismatch."""

    @abstractmethod
    async def get_children(self, path: str) -> list[str]:
        """Sorted names (not paths) of the node's children; [] when none or absent."""

    @abstractmethod
    async def exists(self, path: str) -> bool:
        """Whether the node exists."""

    @abstractmethod
    async def close(self) -> None:
        """Release resources; the store is unusable afterwards."""

    async def delete_recursive(self, path: str) -> None:
        """Delete a node and everything below it (Pulsar's deleteRecursive); absent is fine."""
        for child in await self.get_children(path):
            await self.delete_recursive(f"{path.rstrip('/')}/{child}")
        if path != "/":
            try:
                await self.delete(path)
            except MetadataNotFoundError:
                pass


# How long a closing broker waits to give back an ephemeral node: giving it back only saves
# the others the wait for the session's end, so it is not worth holding a shutdown for.
RELEASE_TIMEOUT_S = 5.0


async def release_at_close(
    store: MetadataStore, what: str, release: Callable[[], Awaitable[object]]
) -> None:
    """Give back ``what`` (ephemeral nodes) as a broker closes, without waiting long: not at
    all when the store is known to be unreachable, else at most RELEASE_TIMEOUT_S. Whatever
    is not given back goes with the session; one line says so (never a traceback)."""
    if store.connection is not ConnectionState.CONNECTED:
        log.info(
            "%s left to the session's end: the metadata store is %s", what, store.connection.value
        )
        return
    try:
        async with asyncio.timeout(RELEASE_TIMEOUT_S):
            await release()
    except TimeoutError:
        log.info("%s not given back within %gs: left to the session's end", what, RELEASE_TIMEOUT_S)
    except MetadataStoreError as exc:  # gone already, or the session is
        log.info("could not give back %s: %s", what, exc)
