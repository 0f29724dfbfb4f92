"""A real Prometheus (Debian package ``prometheus``, installed by ``make test`` with the cluster
servers) started by a test on a free port, scraping given targets every second, queried through
its HTTP API."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from pulsar_grpc.cli.local_servers import ServerNotInstalledError, free_port


class PrometheusServer:
    def __init__(self, job: str, targets: list[str]) -> None:
        self.job = job
        self.targets = targets
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._dir = Path(tempfile.mkdtemp(prefix="prometheus-"))
        self._log = self._dir / "prometheus.log"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60) -> PrometheusServer:
        binary = shutil.which("prometheus")
        if binary is None:
            raise ServerNotInstalledError(
                "prometheus is not installed: install the Debian package prometheus "
                "(make cluster-deps)"
            )
        config = self._dir / "prometheus.yml"
        config.write_text(
            json.dumps(  # JSON is YAML
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "scrape_configs": [
                        {
                            "job_name": self.job,
                            "scrape_interval": "1s",
                            "scrape_timeout": "1s",
                            "static_configs": [{"targets": self.targets}],
                        }
                    ],
                }
            )
        )
        with self._log.open("wb") as log:
            self._process = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={self._dir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"prometheus did not start: {self._log.read_text()[-2000:]}")
            time.sleep(0.1)
        return self

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The result of an instant query (a vector's samples; a scalar's [time, value]); an
        AssertionError when Prometheus refuses the query."""
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                answer = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{promql!r}: {exc.code} {exc.read()[:500]!r}") from None
        assert answer["status"] == "success", (promql, answer)
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        shutil.rmtree(self._dir, ignore_errors=True)
