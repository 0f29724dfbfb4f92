"""ZooKeeperMetadataStore: the cluster's metadata store, ZooKeeper through kazoo.

kazoo runs its own threads; nothing here blocks the event loop on ZooKeeper. Operations use
kazoo's asynchronous API and its completion callbacks (on kazoo's thread) settle an asyncio
future through loop.call_soon_threadsafe; starting and stopping the client, which kazoo only
offers blocking, run in a worker thread. Watch and connection-state callbacks cross onto the
loop the same way, so listeners always run on the loop.

Notifications follow Pulsar's ZKMetadataStore without persistent watches: get, exists and
get_children arm a one-shot watch on what they read (get and get_children of a missing node arm
an exists watch, so its creation is seen), and the watch fires one notification.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError as ZkBadVersionError,
)
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import EventType, KazooState, WatchedEvent
from kazoo.retry import KazooRetry

from pulsar_grpc.broker.metadata.store import (
    BadVersionError,
    CreateOption,
    GetResult,
    MetadataNotFoundError,
    MetadataStore,
    MetadataStoreError,
    Notification,
    NotificationType,
    SessionEvent,
    validate_path,
    validate_writable,
)

__all__ = ["ZooKeeperMetadataStore"]

log = logging.getLogger(__name__)

# Pulsar's defaults: metadataStoreSessionTimeoutMillis and metadataStoreOperationTimeoutSeconds.
DEFAULT_SESSION_TIMEOUT_S = 30.0
DEFAULT_OPERATION_TIMEOUT_S = 30.0
_RECONNECT_MAX_DELAY_S = 1.0

_NOTIFICATION_TYPES = {
    EventType.CREATED: NotificationType.CREATED,
    EventType.CHANGED: NotificationType.MODIFIED,
    EventType.DELETED: NotificationType.DELETED,
    EventType.CHILD: NotificationType.CHILDREN_CHANGED,
}


class _Session(enum.Enum):
    """The session as this store last told its listeners (the loop owns it)."""

    CONNECTED = "connected"
    CONNECTION_LOST = "connection lost"  # told ConnectionLost; the session may still live
    LOST = "lost"  # told SessionLost


_CONNECTION_ERRORS = (
    ConnectionLoss,
    ConnectionClosedError,
    SessionExpiredError,
    OperationTimeoutError,
)

# What the contract's methods turn into their own errors; any other refusal is a
# MetadataStoreError naming kazoo's.
_ANSWERED_BY_CALLERS = (NoNodeError, NodeExistsError, ZkBadVersionError)


class ZooKeeperMetadataStore(MetadataStore):
    """A kazoo session with `hosts` ("h:p,h:p"), every path under `chroot` ("" for none).

    Build it with ``await ZooKeeperMetadataStore.connect(...)``, on the loop that will use it.
    """

    def __init__(
        self,
        hosts: str,
        chroot: str = "",
        session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S,
        operation_timeout_s: float = DEFAULT_OPERATION_TIMEOUT_S,
    ) -> None:
        super().__init__()
        self._hosts = hosts
        self._session_timeout_s = session_timeout_s
        self._operation_timeout_s = operation_timeout_s
        self._loop = asyncio.get_running_loop()
        self._client = _client(hosts + chroot, session_timeout_s)
        self._session = _Session.CONNECTED
        # Pulsar's ZKSessionWatcher: disconnected for a whole session timeout means the
        # session is lost, whether or not ZooKeeper can tell us yet (it may be unreachable).
        self._presumed_lost: asyncio.TimerHandle | None = None
        self._client.add_listener(self._on_state_change)
        self._closed = False

    @classmethod
    async def connect(
        cls,
        hosts: str,
        chroot: str = "",
        session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S,
        operation_timeout_s: float = DEFAULT_OPERATION_TIMEOUT_S,
    ) -> ZooKeeperMetadataStore:
        """Create the chroot if missing, then open the session (MetadataStoreError if ZooKeeper
        does not answer within the session timeout)."""
        if chroot:
            await asyncio.to_thread(_ensure_chroot, hosts, chroot, session_timeout_s)
        store = cls(hosts, chroot, session_timeout_s, operation_timeout_s)
        try:
            await asyncio.to_thread(store._client.start, session_timeout_s)
        except KazooTimeoutError:
            await store.close()
            raise MetadataStoreError(
                f"cannot connect to ZooKeeper at {hosts} within {session_timeout_s:g}s"
            ) from None
        return store

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        """ZooKeeper's (session id, password) of the current session; None when not connected.
        A second client that connects with it and closes ends the session (how tests expire
        one, as ZooKeeper's own tests do)."""
        client_id: tuple[int, bytes] | None = self._client.client_id
        return client_id

    # ------------------------------------------------------------ kazoo -> loop bridges

    def _on_state_change(self, state: str) -> None:
        """kazoo's thread; must not block (kazoo holds its state lock)."""
        self._call_on_loop(self._state_changed, state)

    def _state_changed(self, state: str) -> None:
        """kazoo's SUSPENDED / LOST / CONNECTED, in Pulsar's SessionEvent terms."""
        if self._closed:
            return
        if state == KazooState.SUSPENDED:
            if self._session is _Session.CONNECTED:
                self._tell(_Session.CONNECTION_LOST, SessionEvent.CONNECTION_LOST)
                self._presumed_lost = self._loop.call_later(
                    self._session_timeout_s, self._tell, _Session.LOST, SessionEvent.SESSION_LOST
                )
            return
        if self._presumed_lost is not None:
            self._presumed_lost.cancel()
            self._presumed_lost = None
        if state == KazooState.LOST:
            if self._session is not _Session.LOST:
                self._tell(_Session.LOST, SessionEvent.SESSION_LOST)
        elif self._session is _Session.CONNECTION_LOST:
            self._tell(_Session.CONNECTED, SessionEvent.RECONNECTED)
        elif self._session is _Session.LOST:
            self._tell(_Session.CONNECTED, SessionEvent.SESSION_REESTABLISHED)

    def _tell(self, session: _Session, event: SessionEvent) -> None:
        self._session = session
        self._session_event(event)

    def _on_watch(self, event: WatchedEvent) -> None:
        """kazoo's thread: a one-shot watch fired."""
        kind = _NOTIFICATION_TYPES.get(event.type)
        if kind is not None:
            self._call_on_loop(self._deliver, Notification(kind, event.path))

    def _deliver(self, notification: Notification) -> None:
        if not self._closed:
            self._notify(notification)

    def _call_on_loop(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: nobody is left to tell
            pass

    async def _call(self, start: Callable[[], IAsyncResult], path: str) -> Any:
        """Run one kazoo asynchronous call; its result arrives on the loop."""
        if self._closed:
            raise MetadataStoreError("metadata store is closed")
        future: asyncio.Future[Any] = self._loop.create_future()

        def settle(result: IAsyncResult) -> None:  # on the loop
            if future.done():
                return
            if result.successful():
                future.set_result(result.value)
            else:
                future.set_exception(result.exception)

        start().rawlink(lambda result: self._call_on_loop(settle, result))
        try:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for drops a cancellation that
            # arrives together with the answer, and the caller then runs on after its cancel.
            async with asyncio.timeout(self._operation_timeout_s):
                return await future
        except TimeoutError:
            raise MetadataStoreError(
                f"ZooKeeper operation on {path} timed out after {self._operation_timeout_s:g}s "
                f"(connection to {self._hosts} lost?)"
            ) from None
        except _CONNECTION_ERRORS as e:
            raise MetadataStoreError(
                f"ZooKeeper connection lost ({type(e).__name__}) during an operation on {path}"
            ) from e
        except NotEmptyError:
            raise MetadataStoreError(f"{path} has children") from None
        except _ANSWERED_BY_CALLERS:
            raise
        except KazooException as e:  # e.g. no children for ephemerals, no auth
            raise MetadataStoreError(f"ZooKeeper refused an operation on {path}: {e!r}") from e

    # ------------------------------------------------------------ the contract

    async def get(self, path: str) -> GetResult | None:
        validate_path(path)
        client = self._client
        while True:
            try:
                value, stat = await self._call(lambda: client.get_async(path, self._on_watch), path)
                return GetResult(value, stat.version)
            except NoNodeError:
                pass
            # Watch for its creation; should it have been created meanwhile, read it.
            if await self._call(lambda: client.exists_async(path, self._on_watch), path) is None:
                return None

    async def put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None = None,
        options: CreateOption = CreateOption.NONE,
    ) -> int:
        validate_writable(path)
        data = bytes(value)
        client = self._client
        ephemeral = CreateOption.EPHEMERAL in options

        async def create() -> int:
            await self._call(
                lambda: client.create_async(path, data, ephemeral=ephemeral, makepath=True), path
            )
            return 0

        async def update(version: int) -> int:
            stat = await self._call(lambda: client.set_async(path, data, version), path)
            return int(stat.version)

        try:
            if expected_version == -1:
                return await create()
            if expected_version is not None:
                return await update(expected_version)
            while True:  # unconditional: update, or create; a racing create/delete retries
                try:
                    return await update(-1)
                except NoNodeError:
                    pass
                try:
                    return await create()
                except NodeExistsError:
                    pass
        except NodeExistsError:
            raise BadVersionError(f"{path} already exists (expected version -1)") from None
        except NoNodeError:
            raise BadVersionError(
                f"{path} does not exist (expected version {expected_version})"
            ) from None
        except ZkBadVersionError:
            raise BadVersionError(f"{path} is not at version {expected_version}") from None

    async def put_sequential(
        self, prefix: str, value: bytes, options: CreateOption = CreateOption.NONE
    ) -> str:
        validate_writable(prefix + "0")
        data = bytes(value)
        ephemeral = CreateOption.EPHEMERAL in options
        path: str = await self._call(
            lambda: self._client.create_async(
                prefix, data, ephemeral=ephemeral, sequence=True, makepath=True
            ),
            prefix,
        )
        return path

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        validate_path(path)
        version = -1 if expected_version is None else expected_version
        try:
            await self._call(lambda: self._client.delete_async(path, version), path)
        except NoNodeError:
            raise MetadataNotFoundError(f"{path} does not exist") from None
        except ZkBadVersionError:
            raise BadVersionError(f"{path} is not at version {expected_version}") from None

    async def get_children(self, path: str) -> list[str]:
        validate_path(path)
        client = self._client
        try:
            children = await self._call(
                lambda: client.get_children_async(path, self._on_watch), path
            )
        except NoNodeError:
            await self._call(lambda: client.exists_async(path, self._on_watch), path)
            return []
        return sorted(children)

    async def exists(self, path: str) -> bool:
        validate_path(path)
        stat = await self._call(lambda: self._client.exists_async(path, self._on_watch), path)
        return stat is not None

    async def close(self) -> None:
        """End the session: ZooKeeper deletes its ephemeral nodes at once."""
        if self._closed:
            return
        self._closed = True
        if self._presumed_lost is not None:
            self._presumed_lost.cancel()
        await asyncio.to_thread(_stop, self._client)


def _client(hosts: str, session_timeout_s: float) -> KazooClient:
    """A client that never stops reconnecting and tries at least every second, as ZooKeeper's
    Java client does (kazoo's default backoff grows to an hour between tries, so a broker would
    stay away long after a ZooKeeper outage ended)."""
    retry = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=_RECONNECT_MAX_DELAY_S)
    return KazooClient(hosts=hosts, timeout=session_timeout_s, connection_retry=retry)


def _stop(client: KazooClient) -> None:
    client.stop()
    client.close()


def _ensure_chroot(hosts: str, chroot: str, timeout_s: float) -> None:
    """Create the chroot with a short-lived session outside it (a worker thread's job)."""
    client = _client(hosts, timeout_s)
    try:
        client.start(timeout_s)
        client.ensure_path(chroot)
    except KazooTimeoutError:
        raise MetadataStoreError(
            f"cannot connect to ZooKeeper at {hosts} within {timeout_s:g}s"
        ) from None
    finally:
        _stop(client)
