"""A real Spark standalone cluster for tests: a master and one worker, started from the pyspark
package's own ``spark-class`` (no Spark install beyond ``pip install pyspark``), both on
127.0.0.1 on free ports, the worker's files (one directory per application and executor) in a
temporary directory.

The worker offers one core and 1 GiB: a 2-core machine also runs the brokers, the driver and
the test. An application must ask for no more (``spark.executor.cores=1``,
``spark.cores.max=1``, executor memory under 1 GiB), or it waits for resources forever.

Each daemon runs in a process group of its own: the worker starts the executors' JVMs and
their Python workers as its children, in its group, so stopping the group at teardown stops
everything the cluster started, leftovers of a killed worker included. Import the
``spark_standalone`` fixture into a test module (one cluster per module).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.faultproxy import free_port

__all__ = ["SparkDaemon", "SparkStandalone", "spark_standalone"]

HOST = "127.0.0.1"
WORKER_CORES = 1
WORKER_MEMORY = "1g"
START_TIMEOUT_S = 120  # two JVMs starting on a busy 2-core machine
STOP_GRACE_S = 20
LOG_TAIL_CHARS = 3000


def spark_home() -> Path:
    """The pyspark package's directory: it carries bin/spark-class and the jars."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class SparkDaemon:
    """One ``spark-class`` process (it execs the JVM) in its own process group, output to
    ``log``."""

    def __init__(self, name: str, args: list[str], log: Path, env: dict[str, str]) -> None:
        self.name, self.log = name, log
        with open(log, "ab") as output:  # the child keeps its own descriptor
            self.process = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args],
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # its group: the daemon and all it starts
            )

    def check_running(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(
                f"Spark {self.name} exited with {self.process.returncode}:\n{self.tail()}"
            )

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-LOG_TAIL_CHARS:]

    def stop(self) -> None:
        """SIGTERM to the group (a worker stops its executors), SIGKILL to what is left."""
        group = self.process.pid  # start_new_session: the group's id is the daemon's pid
        self._signal(group, signal.SIGTERM)
        try:
            self.process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        self._signal(group, signal.SIGKILL)  # executors or Python workers left behind
        self.process.wait()

    @staticmethod
    def _signal(group: int, sig: signal.Signals) -> None:
        try:
            os.killpg(group, sig)
        except ProcessLookupError:  # the whole group is gone already
            pass


@dataclass
class SparkStandalone:
    """A running master and worker. ``master_url`` is what ``--master`` / ``.master()``
    takes; ``work_dir`` holds the worker's application directories (each executor runs
    in ``<work_dir>/<app id>/<executor id>``)."""

    master_url: str
    web_url: str
    work_dir: Path
    master: SparkDaemon
    worker: SparkDaemon

    def state(self) -> dict[str, Any]:
        """The master's web UI JSON: workers, active and completed applications."""
        return master_state(self.web_url)

    def logs(self) -> str:
        return "\n".join(
            f"--- Spark {d.name} ({d.log}), last lines:\n{d.tail()}"
            for d in (self.master, self.worker)
        )


def master_state(web_url: str) -> dict[str, Any]:
    """What a master's web UI at ``web_url`` serves as JSON (``/json/``)."""
    with urllib.request.urlopen(f"{web_url}/json/", timeout=10) as response:
        return dict(json.loads(response.read()))


def _environment(log_dir: Path) -> dict[str, str]:
    """The daemons' environment: this pyspark as SPARK_HOME, loopback only, and this python for
    the executors' Python workers (a driver may still choose another)."""
    return {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": HOST,
        "SPARK_LOG_DIR": str(log_dir),
        "PYSPARK_PYTHON": sys.executable,
    }


def _wait_for(cluster_check: Callable[[], Any], daemons: list[SparkDaemon], what: str) -> Any:
    """Poll ``cluster_check()`` until it returns something truthy; fail early when a daemon
    died, with its log, and after START_TIMEOUT_S with both logs."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        for daemon in daemons:
            daemon.check_running()
        try:
            found = cluster_check()
        except (OSError, urllib.error.URLError, ValueError):  # not serving (yet)
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            logs = "\n".join(d.tail() for d in daemons)
            raise RuntimeError(f"{what} not within {START_TIMEOUT_S}s:\n{logs}")
        time.sleep(0.2)


def start_standalone(workdir: Path) -> SparkStandalone:
    """Start a master, then a worker registered with it; return once the master lists the
    worker as ALIVE. Stops what it started if that fails."""
    work_dir, logs = workdir / "work", workdir / "logs"
    work_dir.mkdir(parents=True)
    logs.mkdir()
    env = _environment(logs)
    web_port = free_port()
    web_url = f"http://{HOST}:{web_port}"
    master = SparkDaemon(
        "master",
        ["org.apache.spark.deploy.master.Master", "--host", HOST,
         "--port", str(free_port()), "--webui-port", str(web_port)],
        logs / "master.log",
        env,
    )  # fmt: skip
    started: list[SparkDaemon] = [master]
    try:
        # The master binds the next port if its own was taken meanwhile: ask it for its URL.
        master_url = _wait_for(lambda: master_state(web_url).get("url"), started, "Spark master")
        worker = SparkDaemon(
            "worker",
            ["org.apache.spark.deploy.worker.Worker", master_url, "--host", HOST,
             "--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY,
             "--webui-port", str(free_port()), "--work-dir", str(work_dir)],
            logs / "worker.log",
            env,
        )  # fmt: skip
        started.append(worker)
        cluster = SparkStandalone(master_url, web_url, work_dir, master, worker)
        _wait_for(
            lambda: any(w["state"] == "ALIVE" for w in cluster.state()["workers"]),
            started,
            "a Spark worker registered with the master",
        )
    except BaseException:
        for daemon in reversed(started):
            daemon.stop()
        raise
    return cluster


@pytest.fixture(scope="module")
def spark_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandalone]:
    cluster = start_standalone(tmp_path_factory.mktemp("spark-standalone"))
    yield cluster
    cluster.worker.stop()  # first: its executors must not outlive it
    cluster.master.stop()
    print(cluster.logs())  # pytest shows it when a test of the module failed
