"""Test harness for the PIP-1 proxy: an in-process proxy on its own event loop in a thread
(``ProxyThread``, as ``BrokerThread`` runs a broker), a ``proxy_factory`` fixture that stops
every proxy it started, and ``ProxyProcess`` for what only a process shows (kill -9, restart).

    proxy = proxy_factory(metadataStoreUrl=f"zk:{zookeeper.hosts}{chroot}")
    async with Client(proxy.service_url) as client: ...
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import pytest

from pulsar_grpc.proxy import ProxyConfiguration, ProxyService, load_proxy_config
from tests.escaped import LoopErrors, fail_if_any
from tests.support import _drain_and_close

T = TypeVar("T")

READY = re.compile(r"pulsar-grpc proxy ready grpc=(\S+) http=(\S*)")


def proxy_config(**overrides: Any) -> ProxyConfiguration:
    """A proxy on loopback, free ports, plus ``overrides`` (proxy.conf properties)."""
    values = {
        "bindAddress": "127.0.0.1",
        "grpcServicePort": "0",
        "webServicePort": "0",
        **{k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in overrides.items()},
    }
    return load_proxy_config(None, {}, values)


class ProxyThread:
    """A ProxyService on its own loop in a thread; loop errors land in ``errors``."""

    def __init__(self, config: ProxyConfiguration) -> None:
        self.config = config
        self.errors = LoopErrors("the proxy's event loop")
        self.loop = self.errors.install(asyncio.new_event_loop())
        self._thread = threading.Thread(target=self.loop.run_forever, name="proxy", daemon=True)
        self.service: ProxyService | None = None

    def start(self) -> ProxyThread:
        self._thread.start()
        self.service = self.run(self._start())
        return self

    async def _start(self) -> ProxyService:
        service = ProxyService(self.config)
        await service.start()
        return service

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    @property
    def proxy(self) -> ProxyService:
        assert self.service is not None
        return self.service

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.proxy.grpc_port}"

    @property
    def service_url(self) -> str:
        return f"grpc://{self.grpc_address}"

    @property
    def tls_address(self) -> str:
        return f"127.0.0.1:{self.proxy.grpc_port_tls}"

    @property
    def web_url(self) -> str:
        url = self.proxy.web_url
        assert url is not None, "the proxy has no web port"
        return url

    def stop(self) -> None:
        if self.service is not None:
            self.run(self.service.close())
            self.service = None
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()


@pytest.fixture
def proxy_factory() -> Iterator[Any]:
    """``proxy_factory(**properties)`` starts an in-process proxy; all are stopped after."""
    started: list[ProxyThread] = []

    def make(**overrides: Any) -> ProxyThread:
        proxy = ProxyThread(proxy_config(**overrides)).start()
        started.append(proxy)
        return proxy

    yield make
    for proxy in started:
        proxy.stop()
    fail_if_any([error for proxy in started for error in proxy.errors.check()])


class ProxyProcess:
    """`pulsar-grpc proxy` as a child process on a proxy.conf written from ``properties``."""

    def __init__(self, conf: Path, **properties: Any) -> None:
        self.conf = conf
        self.properties = {
            "bindAddress": "127.0.0.1",
            "grpcServicePort": "0",
            "webServicePort": "0",
            **{k: str(v) for k, v in properties.items()},
        }
        self.proc: subprocess.Popen[str] | None = None
        self.service_url = ""
        self.web_url = ""

    def start(self, timeout: float = 30) -> ProxyProcess:
        self.conf.write_text("".join(f"{k}={v}\n" for k, v in self.properties.items()))
        cmd = [
            sys.executable, "-m", "pulsar_grpc.cli.main", "proxy",
            "--config", str(self.conf), "--log-level", "WARNING",
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ.copy()
        )
        assert self.proc.stdout is not None
        timer = threading.Timer(timeout, self.proc.kill)
        timer.start()
        lines = []
        try:
            for line in self.proc.stdout:
                lines.append(line)
                match = READY.search(line)
                if match:
                    self.service_url, self.web_url = match.group(1), match.group(2)
                    break
        finally:
            timer.cancel()
        if not self.service_url:
            self.proc.kill()
            raise RuntimeError("the proxy did not start:\n" + "".join(lines))
        # Same port on a restart: clients reconnect to the address they have.
        self.properties["grpcServicePort"] = self.service_url.rsplit(":", 1)[1]
        threading.Thread(target=_drain_and_close, args=(self.proc.stdout,), daemon=True).start()
        return self

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.terminate()
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.status == 200
        return str(response.read().decode())


def metric(text: str, name: str, labels: str = "") -> float:
    prefix = f"{name}{{{labels}}}" if labels else name
    for line in text.splitlines():
        if line.startswith(prefix + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{prefix} not in the metrics")
