"""The servers of a cluster on one machine, as child processes: ZooKeeper, PostgreSQL, brokers.

What `pulsar-grpc cluster` (`make cluster`) starts, and what the cluster tests start: the same
code, so what a reader tries by hand is what the tests exercise. ZooKeeper and PostgreSQL come
from their Debian packages (`make cluster-deps`) and run as plain child processes, never as
system services, with their data in a directory of the caller's. PostgreSQL refuses to run as
root, so under root it runs as the unprivileged `postgres` system user (created if missing).
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "BrokerProcess",
    "PostgresServer",
    "ServerNotInstalledError",
    "ZooKeeperServer",
    "free_port",
]

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")  # its manifest names the jars it needs
# slf4j's simple binding: the server logs to stderr (its log file) instead of nowhere.
SLF4J_SIMPLE_JAR = Path("/usr/share/java/slf4j-simple.jar")
# The user that runs PostgreSQL when the caller is root.
POSTGRES_USER = "postgres"
# `pulsar-grpc broker` prints this line once it serves; grpc= and http= are its internal
# listener's addresses.
BROKER_READY = re.compile(r"pulsar-grpc broker ready grpc=(\S+) http=(\S+)")


class ServerNotInstalledError(RuntimeError):
    """A server's Debian package (or Java) is missing; the message says what to install."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` right now (someone may take it before it is bound)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _wait_until(ready: Callable[[], bool], what: str, timeout: float, log: Path) -> None:
    """Poll ``ready()`` every 50 ms until it is true; a RuntimeError naming ``log`` after
    ``timeout`` seconds, or at once when ``ready()`` raises one (the process died)."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start within {timeout:g}s; see {log}")
        time.sleep(0.05)


def _stop_process(process: subprocess.Popen[bytes], grace_s: float) -> int:
    """SIGTERM, then SIGKILL after `grace_s`; the exit code."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.wait()


class ZooKeeperServer:
    """One standalone ZooKeeper on 127.0.0.1:<port> with its data and log under `workdir`.

    `tick_ms` is ZooKeeper's time unit: a client may ask for a session timeout of 2 to 20
    ticks (of `min_session_ms` to `max_session_ms` when given), so tests take a short tick to
    see a session expire quickly. It can be stopped and started again on the same port and
    data: a connection loss for its clients, their sessions intact.
    """

    def __init__(
        self,
        workdir: Path,
        port: int = 0,
        tick_ms: int = 2000,
        min_session_ms: int | None = None,
        max_session_ms: int | None = None,
    ) -> None:
        if not ZOOKEEPER_JAR.exists():
            raise ServerNotInstalledError(
                f"{ZOOKEEPER_JAR} is missing: install the Debian package zookeeper "
                "(make cluster-deps)"
            )
        self.workdir = workdir
        self.port = port or free_port()
        self.log = workdir / "zookeeper.log"
        self._process: subprocess.Popen[bytes] | None = None
        (workdir / "data").mkdir(parents=True, exist_ok=True)
        bounds = {"minSessionTimeout": min_session_ms, "maxSessionTimeout": max_session_ms}
        sessions = "".join(f"{k}={v}\n" for k, v in bounds.items() if v is not None)
        (workdir / "zoo.cfg").write_text(
            f"tickTime={tick_ms}\n"
            f"dataDir={workdir / 'data'}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            f"{sessions}"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr\n"
        )

    @property
    def hosts(self) -> str:
        """The connect string (metadataStoreUrl is zk:<hosts>[/chroot])."""
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> ZooKeeperServer:
        java = shutil.which("java")
        if java is None:
            raise ServerNotInstalledError("java is not on PATH: ZooKeeper needs a JRE (17+)")
        with open(self.log, "ab") as output:  # the child keeps its own descriptor
            self._process = subprocess.Popen(
                [
                    java,
                    "-Xmx256m",
                    f"-Dzookeeper.log.dir={self.workdir}",
                    "-cp",
                    f"{ZOOKEEPER_JAR}:{SLF4J_SIMPLE_JAR}",
                    "org.apache.zookeeper.server.ZooKeeperServerMain",
                    str(self.workdir / "zoo.cfg"),
                ],
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C meant for its parent must not stop it first
            )
        process = self._process

        def ready() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {process.returncode}; see {self.log}")
            return self.answers()

        try:
            _wait_until(ready, "ZooKeeper", timeout, self.log)
        except RuntimeError:
            self.stop()
            raise
        return self

    def answers(self) -> bool:
        """Whether the server serves requests: its ``srvr`` four-letter answer names its mode.
        (``ruok`` says imok as soon as the port is bound, before the server takes sessions: a
        client that connected then could wait out its whole connection timeout.)"""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"srvr")
                answer = b""
                while chunk := s.recv(4096):
                    answer += chunk
                return b"Mode:" in answer
        except OSError:
            return False

    def stop(self) -> None:
        if self._process is not None:
            _stop_process(self._process, grace_s=30)
            self._process = None


def _postgres_bin() -> Path:
    """The newest installed PostgreSQL's binaries (Debian keeps them off PATH)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    if initdb is None:
        raise ServerNotInstalledError(
            "PostgreSQL is not installed: install the Debian package postgresql (make cluster-deps)"
        )
    return Path(initdb).parent


def _postgres_user() -> str | None:
    """The user to run PostgreSQL as: None (the caller) unless the caller is root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(POSTGRES_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/bin/false", POSTGRES_USER],
            check=True,
        )
    return POSTGRES_USER


class PostgresServer:
    """A fresh PostgreSQL cluster on 127.0.0.1:<port> (no Unix socket), trust authentication,
    user ``postgres``; its files in a new temporary directory (under /tmp, which the server
    user can reach wherever the caller works), removed by `stop`. fsync is off unless asked
    for: what the tests kill is brokers, not the machine."""

    def __init__(self, port: int = 0, fsync: bool = False) -> None:
        self.bin = _postgres_bin()
        self.user = _postgres_user()
        self.port = port
        self.fsync = fsync
        self.dir = Path(tempfile.mkdtemp(prefix="pulsar-grpc-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "log"

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
        # A free port may be taken before the server binds it: try others (a fixed one once).
        for port in [self.port] if self.port else [free_port() for _ in range(3)]:
            options = (
                f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories=''"
                f" -c fsync={'on' if self.fsync else 'off'} -c max_connections=200"
            )
            # pg_ctl starts the server in a session of its own: a Ctrl-C does not reach it.
            done = self._run(
                str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
                "-w", "-t", "60", "-o", options, "start",
            )  # fmt: skip
            if done.returncode == 0:
                self.port = port
                return self
        log = self.log.read_text(errors="replace") if self.log.exists() else ""
        shutil.rmtree(self.dir, ignore_errors=True)
        raise RuntimeError(f"PostgreSQL did not start:\n{done.stdout}{done.stderr}\n{log}")

    def url(self, database: str = "postgres") -> str:
        """A ledgerStorageUrl for `database`."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A fresh, empty database `name`; its URL. (psql, not asyncpg: a caller may be
        inside an event loop.)"""
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


class BrokerProcess:
    """`pulsar-grpc broker --config <config>` as a child process, its output in `log`.

    It can be stopped (SIGTERM: it leaves the cluster cleanly), killed (SIGKILL: its
    ZooKeeper session, hence its bundles, lives on until the session timeout) and started
    again on the same configuration.
    """

    def __init__(self, config: Path, log: Path) -> None:
        self.config = config
        self.log = log
        self.grpc_url = ""  # the internal listener's, from the ready line
        self.http_url = ""
        self._process: subprocess.Popen[bytes] | None = None
        self._log_offset = 0  # where this start's output begins in the log

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """The process's id while started (a benchmark reads its CPU time), else None."""
        return self._process.pid if self._process is not None else None

    def start(self, timeout: float = 60) -> BrokerProcess:
        self.launch()
        return self.wait_ready(timeout)

    def launch(self) -> None:
        """Start the process without waiting for it to serve (brokers start side by side)."""
        self._log_offset = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as output:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "pulsar_grpc.cli.main", "broker",
                 "--config", str(self.config), "--log-level", "INFO"],
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # stopped by its parent, in order
            )  # fmt: skip

    def wait_ready(self, timeout: float = 60) -> BrokerProcess:
        """Wait for the launched broker's ready line (its addresses); killed if it does not
        come within `timeout` seconds."""
        process = self._process
        assert process is not None, "launch() first"

        def ready() -> bool:
            with open(self.log, "rb") as f:
                f.seek(self._log_offset)
                match = BROKER_READY.search(f.read().decode(errors="replace"))
            if match:
                self.grpc_url, self.http_url = match.group(1), match.group(2)
                return True
            if process.poll() is not None:
                raise RuntimeError(f"the broker exited with {process.returncode}; see {self.log}")
            return False

        try:
            _wait_until(ready, f"the broker ({self.config})", timeout, self.log)
        except RuntimeError:
            self.kill9()
            raise
        return self

    def send_signal(self, sig: signal.Signals) -> None:
        """Send `sig` to the running broker: SIGSTOP pauses it (its ZooKeeper session runs
        out while it is paused), SIGCONT resumes it."""
        assert self._process is not None and self._process.poll() is None, "not running"
        self._process.send_signal(sig)

    def kill9(self) -> None:
        """SIGKILL, as a crash: nothing is closed, nothing is given back."""
        if self._process is not None:
            if self._process.poll() is None:
                self._process.send_signal(signal.SIGKILL)
            self._process.wait()
            self._process = None

    def stop(self, grace_s: float = 30) -> int:
        """SIGTERM and wait (SIGKILL after `grace_s`); the exit code (0: a clean stop)."""
        if self._process is None:
            return 0
        code = _stop_process(self._process, grace_s)
        self._process = None
        return code
