"""Child processes of a benchmark: a standalone broker and the bare-stream server.

They run in their own processes so that on a 2-core machine the server and the load each get
a core, as they would on separate hosts; `perf all` and bench/ use them.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pulsar_grpc.cli.perf.raw import CEILING_READY

READY = re.compile(r"pulsar-grpc standalone ready grpc=(grpc://\S+) http=(\S+)")
CEILING = re.compile(re.escape(CEILING_READY) + r"(\d+)")


@dataclass(frozen=True, slots=True)
class Broker:
    """A running standalone broker: its addresses and pid (to point a profiler at)."""

    service_url: str
    http_url: str
    pid: int


@contextmanager
def child(cmd: list[str], ready: re.Pattern[str], what: str) -> Iterator[tuple[re.Match[str], int]]:
    """A child process that prints a ready line; stopped (SIGTERM, then kill) on exit."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    timer = threading.Timer(30, proc.kill)
    timer.start()
    lines: list[str] = []
    match = None
    try:
        for line in proc.stdout:
            lines.append(line)
            if match := ready.search(line):
                break
    finally:
        timer.cancel()
    if match is None:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"{what} did not start:\n{''.join(lines)}")
    print(f"{what} pid {proc.pid}", file=sys.stderr, flush=True)
    drain = threading.Thread(target=proc.stdout.read, daemon=True)  # keep its pipe drained
    drain.start()
    try:
        yield match, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        drain.join(5)
        proc.stdout.close()


@contextmanager
def standalone(*extra: str) -> Iterator[Broker]:
    """A standalone broker on free ports with a temporary data directory; ``extra`` are
    more command-line flags (``--set name=value``)."""
    with tempfile.TemporaryDirectory(prefix="pulsar-grpc-perf-") as data:
        cmd = [
            sys.executable, "-m", "pulsar_grpc.cli.main", "standalone", "--data", data,
            "--set", "grpcServicePort=0", "--set", "webServicePort=0",
            "--log-level", "WARNING", *extra,
        ]  # fmt: skip
        with child(cmd, READY, "broker " + " ".join(extra)) as (match, pid):
            yield Broker(match.group(1), match.group(2), pid)


@contextmanager
def ceiling_server() -> Iterator[str]:
    """The bare-stream server in its own process, like the broker; yields its service URL."""
    code = "from cli.perf.raw import serve_ceiling; serve_ceiling()"
    with child([sys.executable, "-c", code], CEILING, "ceiling server") as (match, _):
        yield f"grpc://127.0.0.1:{match.group(1)}"
