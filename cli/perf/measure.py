"""One measured load run, as every perf benchmark takes it: a fresh uvloop, a recorder, and
the run's summary row. ``perf all``, ``perf curves`` and bench/ build their tables from these."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from pulsar_grpc.broker.stalls import freeze_startup_heap
from pulsar_grpc.cli.perf.spec import LoadSpec
from pulsar_grpc.cli.perf.stats import Recorder

Runner = Callable[[LoadSpec, Recorder], Coroutine[Any, Any, None]]

# The broker's durability modes a benchmark compares: the flags of its standalone child.
MODES: dict[str, tuple[str, ...]] = {
    "page-cache": (),
    "fsync": ("--set", "journalSyncData=true"),
}


def measure(
    label: str, runner: Runner, spec: LoadSpec, recorder: Recorder | None = None
) -> tuple[dict[str, Any], Recorder]:
    """Run one load on a fresh uvloop and return its summary (and recorder, for a plot);
    ``recorder`` prints pulsar-perf's lines or logs histograms, the default this tool's lines."""
    import uvloop

    rec = recorder or Recorder(label, spec.size)
    freeze_startup_heap()  # no generation-2 walks of the imported modules mid-run
    try:
        uvloop.run(runner(spec, rec))
    except KeyboardInterrupt:  # Ctrl-C ends a run without a budget, as it ends pulsar-perf's
        rec.finish()
    return result(label, spec, rec), rec


def result(label: str, spec: LoadSpec, rec: Recorder) -> dict[str, Any]:
    """The summary row of one run: what ran against which topics, and the recorder's totals."""
    return {
        "run": label,
        "topic": ",".join(spec.topics),
        "partitions": spec.partitions,
        "rate_limit": spec.rate,
        **rec.summary(),
    }


def succeeded(row: dict[str, Any]) -> bool:
    """A run that moved messages and lost none."""
    return bool(row["messages"]) and not row["errors"]
