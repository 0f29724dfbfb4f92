"""Child processes of a benchmark: a standalone broker and the bare-stream server.

They run in their own processes so that on a 2-core machine the server and the load each get
a core, as they would on separate hosts; `perf all` and bench/ use them.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO

from pulsar_grpc.cli.perf.raw import CEILING_READY

READY = re.compile(r"pulsar-grpc standalone ready grpc=(grpc://\S+) http=(\S+)")
CEILING = re.compile(re.escape(CEILING_READY) + r"(\d+)")


@dataclass(frozen=True, slots=True)
class Broker:
    """A running standalone broker: its addresses and pid (to point a profiler at)."""

    service_url: str
    http_url: str
    pid: int


def wait_ready(
    proc: subprocess.Popen[str], stream: IO[str], ready: re.Pattern[str], what: str
) -> re.Match[str]:
    """Read ``stream`` (a pipe of ``proc``) until its ready line; a child that dies or says
    nothing ready within 30 s is killed and its output raised as RuntimeError."""
    timer = threading.Timer(30, proc.kill)
    timer.start()
    lines: list[str] = []
    match = None
    try:
        for line in stream:
            lines.append(line)
            if match := ready.search(line):
                break
    finally:
        timer.cancel()
    if match is None:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"{what} did not start:\n{''.join(lines)}")
    return match


@contextmanager
def child(cmd: list[str], ready: re.Pattern[str], what: str) -> Iterator[tuple[re.Match[str], int]]:
    """A child process that prints a ready line; stopped (SIGTERM, then kill) on exit."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    match = wait_ready(proc, proc.stdout, ready, what)
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
def standalone(*extra: str, data: str | None = None) -> Iterator[Broker]:
    """A standalone broker on free ports; ``extra`` are more command-line flags (``--set
    name=value``). Its data goes to a temporary directory, or to ``data`` when given (a
    benchmark that restarts the broker on what it wrote keeps the directory itself)."""
    with contextlib.ExitStack() as stack:
        if data is None:
            data = stack.enter_context(tempfile.TemporaryDirectory(prefix="pulsar-grpc-perf-"))
        cmd = [
            sys.executable, "-m", "pulsar_grpc.cli.main", "standalone", "--data", data,
            "--set", "grpcServicePort=0", "--set", "webServicePort=0",
            "--log-level", "WARNING", *extra,
        ]  # fmt: skip
        with child(cmd, READY, "broker " + " ".join(extra)) as (match, pid):
            yield Broker(match.group(1), match.group(2), pid)


@contextmanager
def ceiling_server() -> Iterator[tuple[str, int]]:
    """The bare-stream server in its own process, like the broker; yields its service URL
    and process id."""
    code = "from pulsar_grpc.cli.perf.raw import serve_ceiling; serve_ceiling()"
    with child([sys.executable, "-c", code], CEILING, "ceiling server") as (match, pid):
        yield f"grpc://127.0.0.1:{match.group(1)}", pid
