"""The MetadataStore contract, run unchanged against every implementation.

Embedded (SQLite), in-memory (`memory:<name>`) and ZooKeeper (a real server from the Debian
package, one per test run, a fresh chroot per test). What only one implementation has (the
embedded file surviving a reopen, a ZooKeeper connection loss) is at the end.
"""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from pulsar_grpc.broker.errors import MetadataError
from pulsar_grpc.broker.metadata import (
    BadVersionError,
    ConnectionState,
    CreateOption,
    EmbeddedMetadataStore,
    GetResult,
    MemoryMetadataStore,
    MetadataNotFoundError,
    MetadataStore,
    MetadataStoreError,
    Notification,
    NotificationType,
    SessionEvent,
    ZooKeeperMetadataStore,
    open_metadata_store,
)
from tests.faultproxy import FaultProxy
from tests.zookeeper import ZooKeeperServer, end_session, zk_chroot, zookeeper

__all__ = ["zk_chroot", "zookeeper"]  # fixtures, imported to be found

Opener = Callable[[], Awaitable[MetadataStore]]
_MEMORY_NAMES = itertools.count()
WAIT_S = 20


@pytest.fixture(params=["embedded", "memory", "zookeeper"])
async def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opener]:
    """Opens clients of one backend (each its own session); closes those still open."""
    opened: list[MetadataStore] = []
    if request.param == "zookeeper":
        server: ZooKeeperServer = request.getfixturevalue("zookeeper")
        url = f"zk:{server.hosts}{request.getfixturevalue('zk_chroot')}"
    elif request.param == "memory":
        url = f"memory:contract-{next(_MEMORY_NAMES)}"
    else:
        url = ""

    async def open_one() -> MetadataStore:
        store = await open_metadata_store(url, tmp_path)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        await store.close()


@pytest.fixture
async def store(open_store: Opener) -> MetadataStore:
    return await open_store()


class Recorder:
    """What a store's listeners received, with a wait for the one a test expects."""

    def __init__(self, store: MetadataStore) -> None:
        self.notifications: list[Notification] = []
        self.sessions: list[SessionEvent] = []
        self._changed = asyncio.Event()
        store.register_listener(self._on_notification)
        store.register_session_listener(self._on_session)

    def _on_notification(self, notification: Notification) -> None:
        asyncio.get_running_loop()  # listeners run on the loop, never on a store's thread
        self.notifications.append(notification)
        self._changed.set()

    def _on_session(self, event: SessionEvent) -> None:
        asyncio.get_running_loop()
        self.sessions.append(event)
        self._changed.set()

    async def wait(self, done: Callable[[], bool], what: str) -> None:
        async def until() -> None:
            while not done():
                self._changed.clear()
                await self._changed.wait()

        try:
            await asyncio.wait_for(until(), WAIT_S)
        except TimeoutError:
            pytest.fail(f"no {what} within {WAIT_S}s: {self.notifications} {self.sessions}")

    async def notified(self, kind: NotificationType, path: str) -> None:
        expected = Notification(kind, path)
        await self.wait(lambda: expected in self.notifications, str(expected))


# ------------------------------------------------------------ the contract


async def test_put_get_versions(store: MetadataStore) -> None:
    assert await store.get("/a/b") is None
    assert await store.put("/a/b", b"one") == 0
    assert await store.get("/a/b") == GetResult(b"one", 0)
    assert await store.put("/a/b", b"two") == 1
    assert await store.get("/a/b") == GetResult(b"two", 1)


async def test_parents_created_implicitly(store: MetadataStore) -> None:
    await store.put("/x/y/z", b"v")
    assert await store.exists("/x")
    assert await store.exists("/x/y")
    assert await store.get("/x/y") == GetResult(b"", 0)
    assert await store.get_children("/") == ["x"]
    assert await store.get_children("/x") == ["y"]


async def test_expected_version(store: MetadataStore) -> None:
    assert await store.put("/n", b"a", expected_version=-1) == 0
    with pytest.raises(BadVersionError):
        await store.put("/n", b"b", expected_version=-1)
    with pytest.raises(BadVersionError):
        await store.put("/n", b"b", expected_version=5)
    assert await store.put("/n", b"b", expected_version=0) == 1
    with pytest.raises(BadVersionError):
        await store.put("/missing", b"b", expected_version=0)
    assert await store.get("/n") == GetResult(b"b", 1)


async def test_delete(store: MetadataStore) -> None:
    with pytest.raises(MetadataNotFoundError):
        await store.delete("/nope")
    await store.put("/p/c", b"v")
    with pytest.raises(MetadataStoreError):
        await store.delete("/p")  # has children, as in ZooKeeper
    with pytest.raises(BadVersionError):
        await store.delete("/p/c", expected_version=3)
    await store.delete("/p/c", expected_version=0)
    assert not await store.exists("/p/c")
    assert await store.exists("/p")
    await store.delete("/p")
    assert await store.get_children("/") == []


async def test_delete_recursive(store: MetadataStore) -> None:
    await store.put("/r/a/1", b"")
    await store.put("/r/b", b"")
    await store.put("/rr", b"")
    await store.delete_recursive("/r")
    assert await store.get_children("/") == ["rr"]


async def test_children_sorted_and_not_grandchildren(store: MetadataStore) -> None:
    for name in ["c", "a", "b"]:
        await store.put(f"/p/{name}", b"")
    await store.put("/p/a/deep", b"")
    await store.put("/px", b"")
    assert await store.get_children("/p") == ["a", "b", "c"]
    assert await store.get_children("/nothing") == []


@pytest.mark.parametrize("path", ["a", "/a/", "//a", "/a//b", "/a/./b", ""])
async def test_invalid_paths(store: MetadataStore, path: str) -> None:
    with pytest.raises(MetadataStoreError):
        await store.put(path, b"")


async def test_root_is_not_writable(store: MetadataStore) -> None:
    with pytest.raises(MetadataStoreError):
        await store.put("/", b"x")
    assert await store.exists("/")


async def test_concurrent_cas_only_one_wins(store: MetadataStore) -> None:
    await store.put("/c", b"0")
    results = await asyncio.gather(
        *(store.put("/c", str(i).encode(), expected_version=0) for i in range(5)),
        return_exceptions=True,
    )
    assert sum(1 for r in results if r == 1) == 1
    assert sum(1 for r in results if isinstance(r, BadVersionError)) == 4


async def test_concurrent_creates_only_one_wins(store: MetadataStore) -> None:
    results = await asyncio.gather(
        *(store.put("/once", str(i).encode(), expected_version=-1) for i in range(5)),
        return_exceptions=True,
    )
    assert results.count(0) == 1
    assert sum(1 for r in results if isinstance(r, BadVersionError)) == 4


async def test_closed_store_refuses(open_store: Opener) -> None:
    s = await open_store()
    await s.close()
    with pytest.raises(MetadataStoreError):
        await s.get("/a")


async def test_ephemeral_node_goes_with_its_session(open_store: Opener) -> None:
    owner = await open_store()
    await owner.put("/brokers/b1", b"load", options=CreateOption.EPHEMERAL)
    await owner.put("/brokers/kept", b"")
    assert await owner.get("/brokers/b1") == GetResult(b"load", 0)
    await owner.close()
    other = await open_store()
    assert await other.get_children("/brokers") == ["kept"]  # the parent is not ephemeral


async def test_ephemeral_node_seen_by_others_while_its_session_lives(open_store: Opener) -> None:
    owner = await open_store()
    await owner.put("/leader", b"me", expected_version=-1, options=CreateOption.EPHEMERAL)
    if not isinstance(owner, EmbeddedMetadataStore):  # one client per file: nobody to ask
        other = await open_store()
        assert await other.get("/leader") == GetResult(b"me", 0)
        with pytest.raises(BadVersionError):
            await other.put("/leader", b"you", expected_version=-1)
    assert await owner.put("/leader", b"me again") == 1  # an update keeps it ephemeral


async def test_notifications_for_what_was_read(store: MetadataStore) -> None:
    seen = Recorder(store)
    assert not await store.exists("/n/a")  # arms a watch for its creation
    await store.put("/n/a", b"1")
    await seen.notified(NotificationType.CREATED, "/n/a")

    assert await store.get_children("/n") == ["a"]
    assert await store.get("/n/a") == GetResult(b"1", 0)
    await store.put("/n/a", b"2")
    await seen.notified(NotificationType.MODIFIED, "/n/a")

    await store.put("/n/b", b"")
    await seen.notified(NotificationType.CHILDREN_CHANGED, "/n")

    assert await store.get("/n/a") == GetResult(b"2", 1)
    await store.delete("/n/a")
    await seen.notified(NotificationType.DELETED, "/n/a")


# Not the embedded store: it has one client per file (the data-directory lock).
@pytest.mark.parametrize("open_store", ["memory", "zookeeper"], indirect=True)
async def test_notified_of_another_clients_changes(open_store: Opener) -> None:
    reader = await open_store()
    writer = await open_store()
    seen = Recorder(reader)
    assert await reader.get("/cfg") is None
    await writer.put("/cfg", b"v1")
    await seen.notified(NotificationType.CREATED, "/cfg")
    assert await reader.get("/cfg") == GetResult(b"v1", 0)  # what a cache does: read again
    await writer.put("/cfg", b"v2")
    await seen.notified(NotificationType.MODIFIED, "/cfg")
    await writer.put("/lb/b1", b"", options=CreateOption.EPHEMERAL)
    assert await reader.get_children("/lb") == ["b1"]
    await writer.close()  # the ephemeral node goes: its parent's children changed
    await seen.notified(NotificationType.CHILDREN_CHANGED, "/lb")
    assert await reader.get_children("/lb") == []


@pytest.mark.allow_broker_errors  # the failure is logged with its traceback, on purpose
async def test_a_failing_listener_does_not_starve_the_others(store: MetadataStore) -> None:
    def broken(notification: Notification) -> None:
        raise RuntimeError("listener bug")

    store.register_listener(broken)
    seen = Recorder(store)
    assert not await store.exists("/x")
    await store.put("/x", b"")
    await seen.notified(NotificationType.CREATED, "/x")


def test_errors_are_metadata_errors() -> None:
    assert issubclass(BadVersionError, MetadataStoreError)
    assert issubclass(MetadataNotFoundError, MetadataStoreError)
    assert issubclass(MetadataStoreError, MetadataError)


# ------------------------------------------------------------ session expiry


async def test_memory_session_expiry(tmp_path: Path) -> None:
    url = f"memory:expiry-{next(_MEMORY_NAMES)}"
    owner = await open_metadata_store(url, tmp_path)
    other = await open_metadata_store(url, tmp_path)
    assert isinstance(owner, MemoryMetadataStore)
    seen = Recorder(owner)
    await owner.put("/owned", b"", options=CreateOption.EPHEMERAL)
    owner.expire_session()
    await seen.wait(
        lambda: seen.sessions == [SessionEvent.SESSION_LOST, SessionEvent.SESSION_REESTABLISHED],
        "SessionLost then SessionReestablished",
    )
    assert not await other.exists("/owned")
    await owner.put("/owned", b"again", options=CreateOption.EPHEMERAL)  # the new session's
    await owner.close()
    assert not await other.exists("/owned")
    await other.close()


async def test_zookeeper_session_expiry(zookeeper: ZooKeeperServer, zk_chroot: str) -> None:
    owner = await ZooKeeperMetadataStore.connect(zookeeper.hosts, zk_chroot)
    other = await ZooKeeperMetadataStore.connect(zookeeper.hosts, zk_chroot)
    try:
        seen = Recorder(owner)
        await owner.put("/owned", b"", options=CreateOption.EPHEMERAL)
        watched = Recorder(other)
        assert await other.exists("/owned")
        client_id = owner.client_id
        assert client_id is not None
        await asyncio.to_thread(end_session, zookeeper.hosts, client_id)
        await watched.notified(NotificationType.DELETED, "/owned")
        await seen.wait(
            lambda: SessionEvent.SESSION_REESTABLISHED in seen.sessions,
            "SessionReestablished",
        )
        assert SessionEvent.SESSION_LOST in seen.sessions
        assert seen.sessions.index(SessionEvent.SESSION_LOST) < seen.sessions.index(
            SessionEvent.SESSION_REESTABLISHED
        )
        await owner.put("/owned", b"again", options=CreateOption.EPHEMERAL)
        assert await other.get("/owned") == GetResult(b"again", 0)
    finally:
        await owner.close()
        await other.close()


async def test_zookeeper_connection_loss_and_reconnect(tmp_path: Path) -> None:
    """A server restart within the session timeout: ConnectionLost, then Reconnected, and the
    session's ephemeral node survives."""
    server = ZooKeeperServer(tmp_path / "zk").start()
    try:
        store = await ZooKeeperMetadataStore.connect(
            server.hosts, "/restart", session_timeout_s=20, operation_timeout_s=2
        )
        seen = Recorder(store)
        await store.put("/mine", b"", options=CreateOption.EPHEMERAL)
        await asyncio.to_thread(server.stop)
        await seen.wait(lambda: SessionEvent.CONNECTION_LOST in seen.sessions, "ConnectionLost")
        with pytest.raises(MetadataStoreError, match="ZooKeeper"):
            await store.get("/mine")
        await asyncio.to_thread(server.start)
        await seen.wait(lambda: SessionEvent.RECONNECTED in seen.sessions, "Reconnected")
        assert SessionEvent.SESSION_LOST not in seen.sessions
        assert await store.get("/mine") == GetResult(b"", 0)
        await store.close()
    finally:
        server.stop()


async def test_zookeeper_session_presumed_lost_past_the_timeout(tmp_path: Path) -> None:
    """Pulsar's ZKSessionWatcher rule: disconnected for a whole session timeout is SessionLost
    at once, without waiting for a server that cannot be reached; connecting again after it is
    SessionReestablished."""
    server = ZooKeeperServer(tmp_path / "zk").start()
    try:
        store = await ZooKeeperMetadataStore.connect(server.hosts, session_timeout_s=1)
        seen = Recorder(store)
        await asyncio.to_thread(server.stop)
        await seen.wait(lambda: SessionEvent.SESSION_LOST in seen.sessions, "SessionLost")
        assert seen.sessions == [SessionEvent.CONNECTION_LOST, SessionEvent.SESSION_LOST]
        await asyncio.to_thread(server.start)
        await seen.wait(
            lambda: SessionEvent.SESSION_REESTABLISHED in seen.sessions, "SessionReestablished"
        )
        assert seen.sessions.count(SessionEvent.SESSION_LOST) == 1
        assert SessionEvent.RECONNECTED not in seen.sessions
        await store.put("/after", b"")
        await store.close()
    finally:
        server.stop()


async def test_zookeeper_unreachable_is_a_clear_error(tmp_path: Path) -> None:
    from tests.zookeeper import free_port

    with pytest.raises(MetadataStoreError, match="cannot connect to ZooKeeper"):
        await ZooKeeperMetadataStore.connect(f"127.0.0.1:{free_port()}", session_timeout_s=1)


# ------------------------------------------------------------ embedded only


async def test_embedded_persists_across_reopen(tmp_path: Path) -> None:
    s = EmbeddedMetadataStore(tmp_path)
    await s.put("/managed-ledgers/t", b"info")
    await s.put("/managed-ledgers/t", b"info2")
    await s.close()
    s = EmbeddedMetadataStore(tmp_path)
    assert await s.get("/managed-ledgers/t") == GetResult(b"info2", 1)
    await s.close()
    assert (tmp_path / "metadata.db").exists()


async def test_embedded_writes_together_fail_alone_and_survive_a_reopen(tmp_path: Path) -> None:
    """Writes that arrive together are committed together (one fsync for a restart's
    thousands of topic loads): one refused among them (a stale version) fails alone, and
    the others are all there after a reopen."""
    s = EmbeddedMetadataStore(tmp_path)
    await s.put("/g/stale", b"0")
    await s.put("/g/stale", b"1")
    results = await asyncio.gather(
        *(s.put(f"/g/n{i:02}", b"v") for i in range(50)),
        s.put("/g/stale", b"x", expected_version=0),
        s.delete("/g/absent"),
        *(s.put(f"/g/m{i:02}", b"v") for i in range(50)),
        return_exceptions=True,
    )
    assert results[:50] == [0] * 50 and results[52:] == [0] * 50
    assert isinstance(results[50], BadVersionError)
    assert isinstance(results[51], MetadataNotFoundError)
    await s.close()
    s = EmbeddedMetadataStore(tmp_path)
    children = await s.get_children("/g")
    assert children == sorted(
        [f"n{i:02}" for i in range(50)] + [f"m{i:02}" for i in range(50)] + ["stale"]
    )
    assert await s.get("/g/stale") == GetResult(b"1", 1)
    await s.close()


async def test_embedded_drops_a_killed_predecessors_ephemeral_nodes(tmp_path: Path) -> None:
    crashed = EmbeddedMetadataStore(tmp_path)  # never closed before its successor opens
    await crashed.put("/brokers/me", b"", options=CreateOption.EPHEMERAL)
    await crashed.put("/kept", b"")
    successor = EmbeddedMetadataStore(tmp_path)
    try:
        assert await successor.get_children("/brokers") == []
        assert await successor.exists("/kept")
    finally:
        await crashed.close()
        await successor.close()


async def test_embedded_opens_a_file_from_before_ephemeral_nodes(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "metadata.db") as old:
        old.executescript(
            "CREATE TABLE nodes (path TEXT PRIMARY KEY, parent TEXT NOT NULL,"
            " value BLOB NOT NULL, version INTEGER NOT NULL);"
            "INSERT INTO nodes VALUES ('/a', '/', x'76', 3);"
        )
    old.close()
    s = EmbeddedMetadataStore(tmp_path)
    try:
        assert await s.get("/a") == GetResult(b"v", 3)
        await s.put("/e", b"", options=CreateOption.EPHEMERAL)
        assert await s.get_children("/") == ["a", "e"]
    finally:
        await s.close()
    s = EmbeddedMetadataStore(tmp_path)
    try:
        assert await s.get_children("/") == ["a"]
    finally:
        await s.close()


async def test_sequential_nodes(open_store: Opener) -> None:
    first = await open_store()
    a = await first.put_sequential("/counters/id-", b"a")
    b = await first.put_sequential("/counters/id-", b"b", CreateOption.EPHEMERAL)
    assert a.startswith("/counters/id-") and len(a) == len("/counters/id-") + 10
    assert int(a[-10:]) < int(b[-10:])
    assert await first.get(a) == GetResult(b"a", 0)
    created = await asyncio.gather(*(first.put_sequential("/counters/c-", b"") for _ in range(5)))
    assert len(set(created)) == 5
    await first.delete(a)
    c = await first.put_sequential("/counters/id-", b"c")
    assert int(c[-10:]) > int(b[-10:])  # never reuses a number, even after a delete
    await first.close()
    second = await open_store()
    assert b.rsplit("/", 1)[1] not in await second.get_children("/counters")  # was ephemeral
    assert await second.exists(c)


async def test_ephemeral_nodes_have_no_children(store: MetadataStore) -> None:
    """ZooKeeper's rule, so that a session's end never leaves orphans behind."""
    await store.put("/eph", b"", options=CreateOption.EPHEMERAL)
    with pytest.raises(MetadataStoreError):
        await store.put("/eph/child", b"")
    with pytest.raises(MetadataStoreError):
        await store.put_sequential("/eph/seq-", b"")
    assert await store.get_children("/eph") == []


async def test_zookeeper_a_change_missed_while_disconnected_is_notified_once_back(
    zookeeper: ZooKeeperServer, zk_chroot: str
) -> None:
    """kazoo forgets every watch when its connection drops, even within the session, and does
    not set them again: the store notifies each path it was watching once it is connected
    again (before Reconnected), so a cache reads again instead of keeping, for ever, a node
    deleted while it was away (a bundle owner whose session expired meanwhile)."""
    port = int(zookeeper.hosts.rsplit(":", 1)[1])
    async with FaultProxy(port) as link:
        reader = await ZooKeeperMetadataStore.connect(link.address, zk_chroot, session_timeout_s=20)
        writer = await ZooKeeperMetadataStore.connect(zookeeper.hosts, zk_chroot)
        try:
            seen = Recorder(reader)
            await writer.put("/owners/b1", b"broker-1")
            assert await reader.get("/owners/b1") == GetResult(b"broker-1", 0)
            assert await reader.get_children("/owners") == ["b1"]
            link.refusing = True
            link.cut()
            await seen.wait(lambda: SessionEvent.CONNECTION_LOST in seen.sessions, "ConnectionLost")
            await writer.delete("/owners/b1")  # while the reader cannot hear of it
            link.refusing = False
            await seen.wait(lambda: SessionEvent.RECONNECTED in seen.sessions, "Reconnected")
            assert Notification(NotificationType.MODIFIED, "/owners/b1") in seen.notifications
            assert Notification(NotificationType.CHILDREN_CHANGED, "/owners") in seen.notifications
            assert SessionEvent.SESSION_LOST not in seen.sessions
            assert await reader.get("/owners/b1") is None  # what the cache reads again
            await writer.put("/owners/b1", b"broker-2")  # and the new watch hears the next one
            await seen.notified(NotificationType.CREATED, "/owners/b1")
        finally:
            await reader.close()
            await writer.close()


async def test_zookeeper_close_with_zookeeper_unreachable_is_bounded(
    zookeeper: ZooKeeperServer, zk_chroot: str
) -> None:
    """A store whose ZooKeeper does not answer closes within a few seconds (its session then
    expires by itself) and says so in one line; nothing waits on kazoo's thread."""
    port = int(zookeeper.hosts.rsplit(":", 1)[1])
    async with FaultProxy(port) as link:
        store = await ZooKeeperMetadataStore.connect(link.address, zk_chroot, session_timeout_s=20)
        await store.put("/mine", b"", options=CreateOption.EPHEMERAL)
        link.blackhole()
        async with asyncio.timeout(30):
            await store.close()
        assert store.connection is ConnectionState.CLOSED
