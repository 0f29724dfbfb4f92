"""`perf e2e --separate-processes`: the producers here, the consumers in a child process.

In one load process the producer and the consumer share a core and an event loop, so each
one's work shows up in the other's latency. Here the consumer runs alone in a child process,
as an application's would: it subscribes (at latest) and says so on stderr, the producers
then send payloads stamped with their send time (wall clock: both processes are on one
host), and the child records receive - send per message in its own HDR histogram. When the
producers are done this process writes the count they stored to the child's stdin; the child
stops once it has them (or after ``idle_timeout`` without a message) and prints its summary
as one JSON line on stdout. Its stats lines (pulsar-perf's "Throughput received") go to
stderr, passed through.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pulsar_grpc.broker.stalls import freeze_startup_heap
from pulsar_grpc.cli.perf.load import consume_stamped, produce_stamped
from pulsar_grpc.cli.perf.measure import measure, result
from pulsar_grpc.cli.perf.procs import wait_ready
from pulsar_grpc.cli.perf.spec import ConsumerLatency, LoadSpec
from pulsar_grpc.cli.perf.stats import LineStyle, Recorder, open_histogram_log

CONSUMER_READY = "perf e2e consumer subscribed"
# How long the child may take, after the producers finished, to receive what they stored.
_FINISH_GRACE_S = 60.0


def e2e_separate(
    spec: LoadSpec, produced: Recorder, histogram_file: str | None = None
) -> dict[str, Any]:
    """Produce here with ``produced`` timing send -> receipt, consume in a child process; the
    counts (sent, received, stale) and both sides' summaries (publish, end_to_end)."""
    with _consumer_process(spec, histogram_file) as consumer:
        publish, _ = measure(produced.label, produce_stamped, spec, produced)
        report = consumer.finish(produced.count)
    return {
        "sent": produced.count,
        "received": report["received"],
        "stale": report["stale"],
        "publish": publish,
        "end_to_end": report["end_to_end"],
    }


class _ConsumerProcess:
    """The running child: told the count to expect, it answers with its summary."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self._proc = proc

    def finish(self, sent: int) -> dict[str, Any]:
        """Tell the child how many messages were stored; its JSON summary once it has them."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(f"{sent}\n")
        self._proc.stdin.close()
        timer = threading.Timer(_FINISH_GRACE_S, self._proc.kill)
        timer.start()
        try:
            out = self._proc.stdout.read()
        finally:
            timer.cancel()
        if self._proc.wait() != 0 or not out.strip():
            raise RuntimeError(f"the consumer process failed (exit code {self._proc.returncode})")
        summary: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return summary


@contextmanager
def _consumer_process(spec: LoadSpec, histogram_file: str | None) -> Iterator[_ConsumerProcess]:
    """The child, subscribed; killed on exit if it is still running."""
    fields = dataclasses.asdict(spec)
    code = "from pulsar_grpc.cli.perf.separate import consumer_main; consumer_main()"
    cmd = [sys.executable, "-c", code, json.dumps(fields), histogram_file or ""]
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    try:
        wait_ready(proc, proc.stderr, re.compile(re.escape(CONSUMER_READY)), "consumer process")
        print(f"consumer process pid {proc.pid}", file=sys.stderr, flush=True)
        relay = threading.Thread(target=_relay, args=(proc.stderr,), daemon=True)
        relay.start()
        yield _ConsumerProcess(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None and not pipe.closed:
                pipe.close()


def _relay(stream: Any) -> None:
    """The child's stats lines, onto this process's stderr."""
    for line in stream:
        sys.stderr.write(line)


def consumer_main() -> None:
    """Entry of the consumer process: argv[1] the run's LoadSpec as JSON, argv[2] a
    --histogram-file path or ''. The expected count comes on stdin (EOF: the parent is gone,
    stop); the summary goes to stdout as one JSON line."""
    import uvloop

    fields = json.loads(sys.argv[1])
    fields.update(
        topics=tuple(fields["topics"]),
        consumer_latency=ConsumerLatency(fields["consumer_latency"]),
    )
    spec = LoadSpec(**fields)
    log = open_histogram_log(sys.argv[2]) if sys.argv[2] else None
    rec = Recorder("e2e receive", spec.size, LineStyle.RECEIVED, log[0] if log else None)

    def subscribed() -> None:
        print(CONSUMER_READY, file=sys.stderr, flush=True)

    async def main() -> dict[str, int]:
        expected = asyncio.get_running_loop().run_in_executor(None, _expected_from_stdin)
        return await consume_stamped(spec, rec, subscribed, expected)

    freeze_startup_heap()  # as the producing side: no generation-2 walks mid-run
    try:
        counts = uvloop.run(main())
        end_to_end = result("e2e receive", spec, rec)  # folds (and logs) the last interval
    finally:
        if log:
            log[1].close()
    print(rec.aggregated(), file=sys.stderr, flush=True)
    print(json.dumps({**counts, "end_to_end": end_to_end}), flush=True)


def _expected_from_stdin() -> int:
    line = sys.stdin.readline()
    return int(line) if line.strip() else 0
