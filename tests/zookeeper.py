"""A real ZooKeeper server for tests: the product's (pulsar_grpc.cli.local_servers, what
`make cluster` runs), with a short tick, on a free port, with temporary data.

The ``zookeeper`` fixture gives every test of the run the same server (import it, with
``zk_chroot``, into a test module); tests take a fresh chroot each (``zk_chroot``) so they
never see one another's nodes. A test that stops its server starts its own.

The tick is short (100 ms) so that a test can ask for a session timeout of a fraction of a
second and see it expire quickly (ZooKeeper allows 2 to 20 ticks unless told otherwise).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from pulsar_grpc.cli import local_servers
from pulsar_grpc.cli.local_servers import ServerNotInstalledError
from tests.faultproxy import free_port

__all__ = ["ZooKeeperServer", "end_session", "free_port", "zk_chroot", "zookeeper"]

TICK_MS = 100
MIN_SESSION_TIMEOUT_MS = 2 * TICK_MS
MAX_SESSION_TIMEOUT_MS = 60_000


class ZooKeeperServer(local_servers.ZooKeeperServer):
    """The product's server with the tests' tick; a missing package fails the test, naming it."""

    def __init__(self, workdir: Path) -> None:
        try:
            super().__init__(
                workdir,
                tick_ms=TICK_MS,
                min_session_ms=MIN_SESSION_TIMEOUT_MS,
                max_session_ms=MAX_SESSION_TIMEOUT_MS,
            )
        except ServerNotInstalledError as exc:
            pytest.fail(str(exc))

    def start(self, timeout: float = 60) -> ZooKeeperServer:
        try:
            super().start(timeout)
        except ServerNotInstalledError as exc:
            pytest.fail(str(exc))
        return self


class _SharedServer:
    """The run's one server. Each test module that imports the fixture gets its own
    session-scoped instance of it (pytest keys fixtures by where they are defined); they all
    share this server, started by the first and stopped by the last to finish."""

    def __init__(self) -> None:
        self._server: ZooKeeperServer | None = None
        self._users = 0

    def acquire(self, factory: pytest.TempPathFactory) -> ZooKeeperServer:
        if self._server is None:
            self._server = ZooKeeperServer(factory.mktemp("zookeeper")).start()
        self._users += 1
        return self._server

    def release(self) -> None:
        self._users -= 1
        if self._users == 0 and self._server is not None:
            self._server.stop()
            self._server = None


_SHARED = _SharedServer()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    yield _SHARED.acquire(tmp_path_factory)
    _SHARED.release()


_CHROOTS = itertools.count()


@pytest.fixture
def zk_chroot() -> str:
    """A chroot no other test uses (the stores create it)."""
    return f"/test-{next(_CHROOTS)}"


def end_session(hosts: str, client_id: tuple[int, bytes]) -> None:
    """Close someone else's session, as an expiry does (blocking: run it in a thread)."""
    intruder = KazooClient(hosts=hosts, client_id=client_id)
    intruder.start(30)
    intruder.stop()
    intruder.close()
