"""Test harness: real brokers on loopback, on free ports, always stopped.

``BrokerThread`` runs an in-process broker on its own event loop in a thread, so tests (sync or
async, and subprocesses such as the Node.js client) talk to it over real gRPC without sharing
the test's loop; whatever escapes on that loop is recorded in ``errors`` for the fixtures to
fail the test with. ``StandaloneProcess`` runs `pulsar-grpc standalone` as a child process for what
only a process can show: kill -9 and restart on the same data directory.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

from pulsar_grpc.broker.config import ServiceConfiguration, load_config
from pulsar_grpc.broker.service import BrokerService
from tests.escaped import LoopErrors

T = TypeVar("T")

READY = re.compile(r"pulsar-grpc standalone ready grpc=grpc://(\S+) http=(\S+)")


def broker_config(data_dir: Path, **overrides: Any) -> ServiceConfiguration:
    values = {
        "dataDirectory": str(data_dir),
        "grpcServicePort": "0",
        "webServicePort": "0",
        # Rates over one-second stats intervals: tests wait for them, not a minute.
        "statsUpdateFrequencyInSecs": "1",
        **{k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in overrides.items()},
    }
    return load_config(None, {}, values)


class BrokerThread:
    def __init__(self, config: ServiceConfiguration) -> None:
        self.config = config
        self.errors = LoopErrors("the broker's event loop")
        self.loop = self.errors.install(asyncio.new_event_loop())
        self._thread = threading.Thread(target=self.loop.run_forever, name="broker", daemon=True)
        self.service: BrokerService | None = None

    def start(self) -> BrokerThread:
        self._thread.start()
        self.service = self.run(self._start())
        return self

    async def _start(self) -> BrokerService:
        service = BrokerService(self.config)
        await service.start()
        return service

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        """Run a coroutine on the broker's loop and wait for its result."""
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    async def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """The same, from an async test without blocking its loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    @property
    def grpc_address(self) -> str:
        assert self.service is not None
        url = self.service.namespaces.internal_urls().grpc_url
        assert url is not None, "the internal listener advertises no plaintext gRPC address"
        return url.removeprefix("grpc://")

    @property
    def service_url(self) -> str:
        return f"grpc://{self.grpc_address}"

    @property
    def http_url(self) -> str:
        assert self.service is not None and self.service.web is not None
        return self.service.web.http_url

    def stop(self) -> None:
        """Close the service, then the loop; a task the service left running is recorded in
        ``errors`` (it would otherwise be destroyed pending, after the test has ended)."""
        if self.service is not None:
            self.run(self.service.close())
            self.service = None
            self.run(self._cancel_leftover_tasks())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()

    async def _cancel_leftover_tasks(self) -> None:
        current = asyncio.current_task()
        leftover = [task for task in asyncio.all_tasks() if task is not current]
        for task in leftover:
            self.loop.call_exception_handler(
                {"message": "task still running after BrokerService.close()", "task": task}
            )
            task.cancel()
        await asyncio.gather(*leftover, return_exceptions=True)


@dataclass
class StandaloneProcess:
    data_dir: Path
    extra: tuple[str, ...] = ()
    proc: subprocess.Popen[str] | None = None
    grpc_address: str = ""
    http_url: str = ""
    # 0: a free port. Set by start(), so that starting again (after kill9) reuses the port
    # and clients reconnect to the address they had.
    grpc_port: int = 0

    def start(self, timeout: float = 30) -> StandaloneProcess:
        cmd = [
            sys.executable, "-m", "pulsar_grpc.cli.main", "standalone",
            "--data", str(self.data_dir),
            "--set", f"grpcServicePort={self.grpc_port}", "--set", "webServicePort=0",
            "--log-level", "WARNING", *self.extra,
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ.copy()
        )
        assert self.proc.stdout is not None
        lines = []
        timer = threading.Timer(timeout, self.proc.kill)
        timer.start()
        try:
            for line in self.proc.stdout:
                lines.append(line)
                match = READY.search(line)
                if match:
                    self.grpc_address, self.http_url = match.group(1), match.group(2)
                    self.grpc_port = int(self.grpc_address.rsplit(":", 1)[1])
                    break
        finally:
            timer.cancel()
        if not self.grpc_address:
            self.proc.kill()
            raise RuntimeError("standalone did not start:\n" + "".join(lines))
        threading.Thread(target=_drain_and_close, args=(self.proc.stdout,), daemon=True).start()
        return self

    @property
    def service_url(self) -> str:
        return f"grpc://{self.grpc_address}"

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.grpc_address = ""

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)


def _drain_and_close(output: IO[str]) -> None:
    """Read a process's output to its end, then close the pipe: the process may be killed and
    started again (a new pipe), so each pipe is closed by the thread that drains it."""
    with output:
        output.read()
