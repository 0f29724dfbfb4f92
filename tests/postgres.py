"""A real PostgreSQL server for tests: a temporary cluster on a free loopback port.

PostgreSQL refuses to run as root, so when the tests run as root the server runs as the
unprivileged `postgres` system user the Debian package creates (or one created here), owning a
fresh temporary directory. `initdb` with trust authentication on 127.0.0.1 only (no Unix
socket); fsync off unless asked for, since these tests kill brokers, not the machine.

One server serves the whole session (``postgres_server``; a test module imports it with
``postgres_url``); each test gets a database of its own (``postgres_url``), so tests never see
each other's tables.
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faultproxy import free_port

__all__ = ["PostgresServer", "postgres_server", "postgres_url"]

# The user that runs the server when the tests run as root.
SERVER_USER = "postgres"
_databases = itertools.count()


def _bin_dir() -> Path:
    """The newest installed PostgreSQL's binaries (Debian keeps them off PATH)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: p.parts[-3])
    if not found:
        initdb = shutil.which("initdb")
        if initdb is None:
            pytest.fail("PostgreSQL is not installed: run `make cluster-deps`")
        return Path(initdb).parent
    return found[-1].parent


def _server_user() -> str | None:
    """None when the tests run unprivileged (the server then runs as the same user)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/bin/false", SERVER_USER],
            check=True,
        )
    return SERVER_USER


class PostgresServer:
    def __init__(self, fsync: bool = False) -> None:
        self.fsync = fsync
        self.bin = _bin_dir()
        self.user = _server_user()
        self.port = 0
        # Under /tmp, not pytest's tmp_path: the server user must be able to reach it.
        self.dir = Path(tempfile.mkdtemp(prefix="pulsar-grpc-pg-"))
        self.data = self.dir / "data"

    def _run(self, *cmd: str) -> subprocess.CompletedProcess[str]:
        prefix = ["runuser", "-u", self.user, "--"] if self.user else []
        return subprocess.run(
            [*prefix, *cmd], capture_output=True, text=True, timeout=120, check=False
        )

    def start(self) -> PostgresServer:
        if self.user:
            shutil.chown(self.dir, self.user)
        done = self._run(
            str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
            "--auth=trust", "-E", "UTF8", "--no-sync",
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed:\n{done.stdout}{done.stderr}")
        for _ in range(3):  # the free port may be taken before the server binds it
            self.port = free_port()
            options = (
                f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories=''"
                f" -c fsync={'on' if self.fsync else 'off'} -c max_connections=200"
            )
            done = self._run(
                str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "log"),
                "-w", "-t", "60", "-o", options, "start",
            )  # fmt: skip
            if done.returncode == 0:
                return self
        log = (self.dir / "log").read_text(errors="replace")
        raise RuntimeError(f"PostgreSQL did not start:\n{done.stdout}{done.stderr}\n{log}")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A fresh, empty database; its URL. (psql, not asyncpg: fixtures that need one may
        run inside a test's event loop.)"""
        name = f"test_{os.getpid()}_{next(_databases)}"
        done = self._run(
            str(self.bin / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
            "-v", "ON_ERROR_STOP=1", "-c", f'CREATE DATABASE "{name}"',
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"cannot create a database:\n{done.stdout}{done.stderr}")
        return self.url(name)

    def stop(self) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)


class _Shared:
    """The session's one server. Each test module imports the fixture, which gives pytest one
    session fixture per module: they share this server, and the last one stops it."""

    server: PostgresServer | None = None
    users = 0


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    if _Shared.server is None:
        _Shared.server = PostgresServer().start()
    _Shared.users += 1
    try:
        yield _Shared.server
    finally:
        _Shared.users -= 1
        if _Shared.users == 0:
            _Shared.server.stop()
            _Shared.server = None


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    return postgres_server.create_database()
