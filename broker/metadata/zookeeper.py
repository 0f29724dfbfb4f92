"""ZooKeeperMetadataStore: the cluster's metadata store, ZooKeeper through kazoo.

kazoo runs its own threads; nothing here blocks the event loop on ZooKeeper. Operations use
kazoo's asynchronous API and its completion callbacks (on kazoo's thread) settle an asyncio
future through loop.call_soon_threadsafe; starting and stopping the client, which kazoo only
offers blocking, run in a worker thread. Watch and connection-state callbacks cross onto the
loop the same way, so listeners always run on the loop.

Notifications follow Pulsar's ZKMetadataStore without persistent watches: get, exists and
get_children arm a one-shot watch on what they read (get and get_children of a missing node arm
an exists watch, so its creation is seen), and the watch fires one notification.

kazoo forgets every watch when its connection drops (even for a moment, within the session) and
does not set them again on the next connection, as ZooKeeper's Java client does: a cache kept by
watches would then never hear of a change again (a bundle owner whose session expired would be
answered to lookups for ever). So the store remembers which paths are watched, and once
connected again it notifies each of them, before it reports the reconnection.

Closing never waits on ZooKeeper longer than a bound: kazoo's stop runs in a daemon thread of
its own (with ZooKeeper unreachable it can take many seconds, and a thread of the loop's default
executor would hold the process's exit until it ends).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
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
    ConnectionState,
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
# How long close waits for kazoo to end the session; past it the session expires by itself.
_STOP_TIMEOUT_S = 5.0

_NOTIFICATION_TYPES = {
    EventType.CREATED: NotificationType.CREATED,
    EventType.CHANGED: NotificationType.MODIFIED,
    EventType.DELETED: NotificationType.DELETED,
    EventType.CHILD: NotificationType.CHILDREN_CHANGED,
}


class _Watch(enum.Enum):
    """Which kind of watch a read arms (kazoo keeps data and child watches apart)."""

    DATA = "data"  # get, exists: the node's creation, change or deletion
    CHILDREN = "children"  # get_children: a child created or deleted


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
        # A reconnection's notifications and event, waiting for their loop turn.
        self._reconnection: tuple[asyncio.Handle, SessionEvent] | None = None
        # The paths whose watches are armed (or may be): notified when a connection drops
        # them. Bounded by the paths the broker reads; a fired watch leaves the set.
        self._watched: dict[_Watch, set[str]] = {_Watch.DATA: set(), _Watch.CHILDREN: set()}
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
    def connection(self) -> ConnectionState:
        if self._closed:
            return ConnectionState.CLOSED
        if self._session is _Session.CONNECTED:
            return ConnectionState.CONNECTED
        return ConnectionState.DISCONNECTED

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
        self._flush_reconnection()  # told before whatever comes next
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
            self._reconnected(SessionEvent.RECONNECTED)
        elif self._session is _Session.LOST:
            self._reconnected(SessionEvent.SESSION_REESTABLISHED)

    def _reconnected(self, event: SessionEvent) -> None:
        """Connected again: the watches died with the old connection, so every path that was
        watched is notified (its readers read it again, which arms a new watch), then the
        event is told.

        One loop turn later, not now: a read answered on the old connection has its result
        on the loop already, and the task awaiting it must store what it read before the
        notification that makes it stale (both are queued in the order kazoo produced them,
        and the task resumes one turn after its result)."""
        self._session = _Session.CONNECTED
        self._reconnection = (self._loop.call_soon(self._tell_reconnected, event), event)

    def _flush_reconnection(self) -> None:
        """Tell a reconnection still waiting for its loop turn now, so that events keep
        their order."""
        if self._reconnection is not None:
            handle, event = self._reconnection
            handle.cancel()
            self._tell_reconnected(event)

    def _tell_reconnected(self, event: SessionEvent) -> None:
        self._reconnection = None
        if self._closed:
            return
        lost, self._watched = self._watched, {_Watch.DATA: set(), _Watch.CHILDREN: set()}
        for path in sorted(lost[_Watch.DATA]):
            self._notify(Notification(NotificationType.MODIFIED, path))
        for path in sorted(lost[_Watch.CHILDREN]):
            self._notify(Notification(NotificationType.CHILDREN_CHANGED, path))
        self._session_event(event)

    def _tell(self, session: _Session, event: SessionEvent) -> None:
        self._session = session
        self._session_event(event)

    def _on_watch(self, event: WatchedEvent) -> None:
        """kazoo's thread: a one-shot watch fired."""
        kind = _NOTIFICATION_TYPES.get(event.type)
        if kind is not None:
            self._call_on_loop(self._deliver, Notification(kind, event.path))

    def _deliver(self, notification: Notification) -> None:
        if self._closed:
            return
        # A one-shot watch fired: nothing is watched there until the next read.
        if notification.type is NotificationType.CHILDREN_CHANGED:
            self._watched[_Watch.CHILDREN].discard(notification.path)
        else:
            self._watched[_Watch.DATA].discard(notification.path)
            if notification.type is NotificationType.DELETED:
                self._watched[_Watch.CHILDREN].discard(notification.path)
        self._notify(notification)

    def _call_on_loop(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: nobody is left to tell
            pass

    async def _call(
        self, start: Callable[[], IAsyncResult], path: str, watch: _Watch | None = None
    ) -> Any:
        """Run one kazoo asynchronous call; its result arrives on the loop. ``watch``: the
        kind of watch the call arms on ``path`` (remembered as the answer arrives, in the
        order kazoo read it, so a connection lost afterwards is known to have dropped it)."""
        if self._closed:
            raise MetadataStoreError("metadata store is closed")
        future: asyncio.Future[Any] = self._loop.create_future()

        def settle(result: IAsyncResult) -> None:  # on the loop
            if watch is not None:
                self._watched[watch].add(path)
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
                value, stat = await self._call(
                    lambda: client.get_async(path, self._on_watch), path, _Watch.DATA
                )
                return GetResult(value, stat.version)
            except NoNodeError:
                pass
            # Watch for its creation; should it have been created meanwhile, read it.
            if await self._exists(path) is None:
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
                lambda: client.get_children_async(path, self._on_watch), path, _Watch.CHILDREN
            )
        except NoNodeError:
            await self._exists(path)
            return []
        return sorted(children)

    async def exists(self, path: str) -> bool:
        validate_path(path)
        return await self._exists(path) is not None

    async def _exists(self, path: str) -> Any:
        """kazoo's stat of ``path`` (None when absent), arming a watch on it either way."""
        client = self._client
        return await self._call(
            lambda: client.exists_async(path, self._on_watch), path, _Watch.DATA
        )

    async def close(self) -> None:
        """End the session: ZooKeeper deletes its ephemeral nodes at once. With ZooKeeper
        unreachable this waits at most a few seconds: the session then expires by itself,
        and kazoo's thread is left to end on its own (it never holds the process's exit)."""
        if self._closed:
            return
        reachable = self._session is _Session.CONNECTED
        self._closed = True
        if self._presumed_lost is not None:
            self._presumed_lost.cancel()
        stopped = _in_daemon_thread(self._loop, lambda: _stop(self._client))
        try:
            async with asyncio.timeout(_STOP_TIMEOUT_S):
                await stopped
        except TimeoutError:
            log.warning(
                "ZooKeeper session not closed within %gs (%s): its nodes go when it expires",
                _STOP_TIMEOUT_S,
                "connected" if reachable else "ZooKeeper unreachable",
            )
        except KazooException as exc:
            log.warning("ZooKeeper session not closed cleanly: %r", exc)


def _client(hosts: str, session_timeout_s: float) -> KazooClient:
    """A client that never stops reconnecting and tries at least every second, as ZooKeeper's
    Java client does (kazoo's default backoff grows to an hour between tries, so a broker would
    stay away long after a ZooKeeper outage ended)."""
    retry = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=_RECONNECT_MAX_DELAY_S)
    return KazooClient(hosts=hosts, timeout=session_timeout_s, connection_retry=retry)


def _stop(client: KazooClient) -> None:
    client.stop()
    client.close()


def _in_daemon_thread(
    loop: asyncio.AbstractEventLoop, fn: Callable[[], None]
) -> asyncio.Future[None]:
    """Run ``fn`` in a daemon thread of its own; the future settles on ``loop`` when it ends
    (or never, when the loop is gone first: nobody waits then)."""
    future: asyncio.Future[None] = loop.create_future()

    def settle(error: BaseException | None) -> None:
        if future.done():
            return
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)

    def run() -> None:
        error: BaseException | None = None
        try:
            fn()
        except BaseException as exc:  # handed to the loop, which raises it to the awaiter
            error = exc
        try:
            loop.call_soon_threadsafe(settle, error)
        except RuntimeError:  # the loop is closed: nobody is waiting
            pass

    threading.Thread(target=run, name="zookeeper stop", daemon=True).start()
    return future


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
