"""A real ZooKeeper server for tests: the Debian package's jars, a free port, temporary data.

``ZooKeeperServer`` runs ``java ... ZooKeeperServerMain zoo.cfg`` as a child process (no root,
no system service), waits until it answers ``ruok``, and can be stopped and started again on the
same port and data (a connection loss for its clients, with their sessions intact). The
``zookeeper`` fixture gives every test of the run the same server (import it, with
``zk_chroot``, into a test module); tests take a fresh chroot each (``zk_chroot``) so they
never see one another's nodes. A test that stops its server starts its own.

The tick is short (100 ms) so that a test can ask for a session timeout of a fraction of a
second and see it expire quickly (ZooKeeper allows 2 to 20 ticks unless told otherwise).
"""

from __future__ import annotations

import itertools
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.faultproxy import free_port

JAR = Path("/usr/share/java/zookeeper.jar")  # its manifest names the jars it needs
# slf4j's simple binding: the server logs to stderr (our log file) instead of nowhere.
LOGGING_JAR = Path("/usr/share/java/slf4j-simple.jar")
TICK_MS = 100
MIN_SESSION_TIMEOUT_MS = 2 * TICK_MS
MAX_SESSION_TIMEOUT_MS = 60_000


class ZooKeeperServer:
    """One standalone ZooKeeper on 127.0.0.1:<port> with its data under `workdir`."""

    def __init__(self, workdir: Path) -> None:
        if not JAR.exists():
            pytest.fail(
                f"{JAR} is missing: install the Debian package zookeeper (make cluster-deps)"
            )
        self.workdir = workdir
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None
        (workdir / "data").mkdir(parents=True, exist_ok=True)
        (workdir / "zoo.cfg").write_text(
            f"tickTime={TICK_MS}\n"
            f"dataDir={workdir / 'data'}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            f"minSessionTimeout={MIN_SESSION_TIMEOUT_MS}\n"
            f"maxSessionTimeout={MAX_SESSION_TIMEOUT_MS}\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr\n"
        )

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> ZooKeeperServer:
        java = shutil.which("java")
        if java is None:
            pytest.fail("java is not on PATH: ZooKeeper needs a JRE")
        log = self.workdir / "zookeeper.log"
        with open(log, "ab") as output:  # the child keeps its own descriptor
            self._process = subprocess.Popen(
                [
                    java,
                    "-Xmx256m",
                    f"-Dzookeeper.log.dir={self.workdir}",
                    "-cp",
                    f"{JAR}:{LOGGING_JAR}",
                    "org.apache.zookeeper.server.ZooKeeperServerMain",
                    str(self.workdir / "zoo.cfg"),
                ],
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + timeout
        while not self.answers():
            if self._process.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self._process.returncode}; see {log}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"ZooKeeper did not answer within {timeout}s; see {log}")
            time.sleep(0.05)
        return self

    def answers(self) -> bool:
        """Whether the server says imok to ruok (ZooKeeper's four-letter health check)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"ruok")
                return s.recv(16) == b"imok"
        except OSError:
            return False

    def stop(self) -> None:
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None


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
