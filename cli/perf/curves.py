"""`pulsar-grpc perf curves`: how cost grows (issue 13), against standalone broker child
processes (cli.perf.procs) with the SDK load of cli.perf.load in this process. The latency
(page cache), topics and size curves share one fresh broker; fsync and the backlog get theirs.

- ``latency``: publish latency (p50/p99/max) against the offered rate: an SDK producer paced
  at 10,000 msg/s, then stepping up until the achieved rate falls more than 5% short of the
  offered one, then one unpaced step ("max"); page cache, and with ``--sync`` fsync too (a
  fresh broker each).
- ``topics``: the same total offered rate spread over 1, 100, 1,000 and 10,000 topics, one SDK
  producer per topic in one client: the achieved rate and publish p99 in steady state (each
  topic's first write is made, and timed, before the clock starts).
- ``size``: produce throughput (msg/s and MB/s) from 10 B to 1 MB, SDK batches of up to 100
  messages and 128 KiB (Pulsar's batchingMaxBytes): a message over that is sent alone.
- ``backlog``: the read rate of a backlog from the broker's entry cache (drained right after it
  was written), from the store with the entry cache empty (the broker restarted on the same
  data; the OS page cache is still warm: dropping it needs root), and a live tail (a consumer
  in its own process keeping up with an unpaced producer, served from the entry cache).

The steps are short (seconds) so the whole default run takes about 4 minutes on 2 cores;
``--quick`` shrinks every step to a fraction of a second (the tests' mode).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Any

from pulsar_grpc.cli.perf.load import consume_sdk, produce_sdk, produce_warmed
from pulsar_grpc.cli.perf.measure import MODES, Runner, measure, succeeded
from pulsar_grpc.cli.perf.procs import standalone
from pulsar_grpc.cli.perf.raw import consume_raw
from pulsar_grpc.cli.perf.report import machine, table
from pulsar_grpc.cli.perf.separate import e2e_separate
from pulsar_grpc.cli.perf.spec import LoadSpec
from pulsar_grpc.cli.perf.stats import Recorder

HELD = 0.95  # a step whose achieved rate is below this share of the offered one did not hold
BATCH_BYTES = 128 * 1024  # Pulsar's batchingMaxBytes: the size curve's batches stop there
IN_FLIGHT_BYTES = 8 * 1024 * 1024  # the size curve's producer keeps this much unreceipted
# The backlog curve's broker caches the whole backlog, so "cached" is a read from memory.
BACKLOG_CACHE_MB = 512
OS_PAGE_CACHE = (
    "warm: the store's file was written just before the restart, and the OS page cache cannot "
    "be dropped without root (echo 3 > /proc/sys/vm/drop_caches), so 'cold' means the broker's "
    "entry cache is empty and every entry is read back from the store through SQLite"
)


class Curve(StrEnum):
    LATENCY = "latency"
    TOPICS = "topics"
    SIZE = "size"
    BACKLOG = "backlog"


@dataclass(frozen=True, slots=True)
class Plan:
    """Steps and their lengths: the default run, or ``--quick``'s tiny one."""

    step_s: float
    rates: tuple[int, ...]
    topic_counts: tuple[int, ...]
    topics_rate: int
    sizes: tuple[int, ...]
    backlog: int
    interval: float


DEFAULT_PLAN = Plan(
    step_s=4.0,
    rates=(10_000, 25_000, 50_000, 100_000, 150_000, 200_000, 250_000, 300_000, 400_000,
           500_000, 750_000, 1_000_000),
    topic_counts=(1, 100, 1_000, 10_000),
    topics_rate=10_000,
    sizes=(10, 100, 1_000, 10_000, 100_000, 1_000_000),
    backlog=1_000_000,
    interval=1.0,
)  # fmt: skip
QUICK_PLAN = Plan(
    step_s=0.6,
    rates=(1_000, 2_000, 4_000),
    topic_counts=(1, 10, 50),
    topics_rate=1_000,
    sizes=DEFAULT_PLAN.sizes,
    backlog=5_000,
    interval=0.3,
)


def add_parser(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = verbs.add_parser(
        "curves",
        help="how cost grows: latency against rate, throughput against topics and message "
        "size, backlog reads cold and cached against a live tail (own broker processes)",
    )
    p.add_argument(
        "--which", type=_curves, default=list(Curve), metavar="CURVES",
        help="comma list of latency, topics, size, backlog (default: all four)",
    )  # fmt: skip
    p.add_argument(
        "--sync", action="store_true",
        help="the latency curve also with journalSyncData=true (fsync), on a fresh broker",
    )  # fmt: skip
    p.add_argument("--quick", action="store_true", help="tiny steps (a test's run, about 20 s)")
    p.add_argument("--plot-dir", metavar="DIR", help="draw each curve to DIR/curve-<name>.png")
    p.add_argument("--json", action="store_true", help="print the curves' data as JSON")


def _curves(text: str) -> list[Curve]:
    try:
        chosen = [Curve(part.strip()) for part in text.split(",") if part.strip()]
        return list(dict.fromkeys(chosen)) or list(Curve)
    except ValueError:
        names = ", ".join(Curve)
        raise argparse.ArgumentTypeError(f"expected a comma list of {names}: {text!r}") from None


def run(args: argparse.Namespace) -> int:
    plan = QUICK_PLAN if args.quick else DEFAULT_PLAN
    base = LoadSpec(service_url="", topics=("",), interval=plan.interval, idle_timeout=5.0)
    report: dict[str, Any] = {"machine": machine(), "plan": dataclasses.asdict(plan)}
    curves: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    on_one_broker = [c for c in args.which if c is not Curve.BACKLOG]
    if on_one_broker:  # latency (page cache), topics and size share one fresh broker
        with standalone() as broker:
            spec = replace(base, service_url=broker.service_url)
            for curve in on_one_broker:
                curves[curve], curve_rows = _ON_ONE_BROKER[curve](spec, plan)
                rows += [{**r, "durability": "page-cache"} for r in curve_rows]
    if Curve.LATENCY in args.which and args.sync:
        with standalone(*MODES["fsync"]) as broker:
            fsync, fsync_rows = _latency_curve(replace(base, service_url=broker.service_url), plan)
        curves[Curve.LATENCY] = {"page-cache": curves[Curve.LATENCY], "fsync": fsync}
        rows += [{**r, "durability": "fsync"} for r in fsync_rows]
    elif Curve.LATENCY in args.which:
        curves[Curve.LATENCY] = {"page-cache": curves[Curve.LATENCY]}
    if Curve.BACKLOG in args.which:
        curves[Curve.BACKLOG], backlog_rows = _backlog_curve(base, plan)
        rows += [{**r, "durability": "page-cache"} for r in backlog_rows]
    report["machine"]["load_after"] = os.getloadavg()
    report["curves"] = curves
    if args.plot_dir:
        from pulsar_grpc.cli.perf.curve_plots import draw

        Path(args.plot_dir).mkdir(parents=True, exist_ok=True)
        report["plots"] = draw(curves, args.plot_dir)
    print(json.dumps(report, indent=2) if args.json else table(rows))
    return 0 if all(succeeded(r) for r in rows) else 1


def _step(label: str, spec: LoadSpec, **about: Any) -> dict[str, Any]:
    """One measured step of SDK produce, in steady state (every producer's first message is
    sent before the clock starts: a topic's first write opens its ledger); its per-interval
    series left out (the curve is the point), the producers' setup seconds in."""
    setup: dict[str, float] = {}
    row, _ = measure(label, partial(produce_warmed, setup=setup), spec)
    row.pop("series")
    return {**about, **row, **setup}


def _counted(label: str, runner: Runner, spec: LoadSpec) -> dict[str, Any]:
    row, _ = measure(label, runner, spec)
    row.pop("series")
    return row


# ---------------------------------------------------------------- the curves


def _latency_curve(spec: LoadSpec, plan: Plan) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Paced steps up the plan's rates until one does not hold, then one unpaced ("max")."""
    spec = replace(spec, topics=("curve-rate",), duration=plan.step_s)
    steps: list[dict[str, Any]] = []
    for rate in plan.rates:
        step = _step(f"rate {rate:,}", replace(spec, rate=rate), offered=rate)
        step["held"] = step["msg_per_s"] >= HELD * rate
        steps.append(step)
        if not step["held"]:
            break
    steps.append(_step("rate max", spec, offered=None, held=True))
    return steps, steps


def _topics_curve(spec: LoadSpec, plan: Plan) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The plan's total rate over more and more topics, one producer each, one client."""
    steps: list[dict[str, Any]] = []
    for count in plan.topic_counts:
        topics = tuple(f"curve-topics-{count}-{i}" for i in range(count))
        step_spec = replace(spec, topics=topics, rate=plan.topics_rate, duration=plan.step_s)
        step = _step(f"topics {count:,}", step_spec, topics=count, offered=plan.topics_rate)
        step.update(
            topic=f"curve-topics-{count}-*", held=step["msg_per_s"] >= HELD * plan.topics_rate
        )
        steps.append(step)
    return steps, steps


def _size_curve(spec: LoadSpec, plan: Plan) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Unpaced SDK produce per message size; batches of up to 100 messages and 128 KiB."""
    steps: list[dict[str, Any]] = []
    for size in plan.sizes:
        batch = max(1, min(spec.batch, BATCH_BYTES // size))
        step_spec = replace(
            spec,
            topics=(f"curve-size-{size}",),
            size=size,
            batch=batch,
            max_pending=max(batch, min(spec.max_pending, IN_FLIGHT_BYTES // size)),
            duration=plan.step_s,
        )
        steps.append(
            _step(
                f"size {size:,}",
                step_spec,
                size=size,
                batch=batch,
                over_batch_limit=size > BATCH_BYTES,
                max_pending=step_spec.max_pending,
            )
        )
    return steps, steps


_ON_ONE_BROKER = {
    Curve.LATENCY: _latency_curve,
    Curve.TOPICS: _topics_curve,
    Curve.SIZE: _size_curve,
}


def _backlog_curve(base: LoadSpec, plan: Plan) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Write a backlog; drain it from the entry cache at once (SDK and hand-driven consumer);
    restart the broker on the same data and drain it again from the store; then a live tail
    with producer and consumer in separate processes."""
    # Retention keeps what every subscription acknowledged: the restarted broker trims nothing.
    flags = (
        "--set", f"managedLedgerCacheSizeMB={BACKLOG_CACHE_MB}",
        "--set", "defaultRetentionTimeInMinutes=-1", "--set", "defaultRetentionSizeInMB=-1",
    )  # fmt: skip
    topic = ("curve-backlog",)
    out: dict[str, Any] = {"messages": plan.backlog, "os_page_cache": OS_PAGE_CACHE}
    with tempfile.TemporaryDirectory(prefix="pulsar-grpc-curves-") as data:
        with standalone(*flags, data=data) as broker:
            spec = replace(base, service_url=broker.service_url, topics=topic)
            written = replace(spec, messages=plan.backlog)
            out["write"] = _counted("backlog write", produce_sdk, written)
            out["cached"] = _drains(spec, out["write"]["messages"], "cached")
        with standalone(*flags, data=data) as broker:
            spec = replace(base, service_url=broker.service_url, topics=topic)
            out["cold"] = _drains(spec, out["write"]["messages"], "cold")
            tail = replace(spec, topics=("curve-tail",), duration=plan.step_s)
            produced = Recorder("tail produce", tail.size)
            live = e2e_separate(tail, produced)
            for side in ("publish", "end_to_end"):
                live[side].pop("series")
            out["live_tail"] = live
    rows = [out["write"], *out["cached"].values(), *out["cold"].values()]
    lost = live["sent"] - live["received"]  # counted as errors: the run then fails
    rows += [
        {**live["publish"], "run": "tail produce"},
        {
            **live["end_to_end"],
            "run": "tail consume",
            "errors": live["end_to_end"]["errors"] + lost,
        },
    ]
    return out, rows


def _drains(spec: LoadSpec, messages: int, how: str) -> dict[str, Any]:
    """The whole backlog read by the SDK consumer and by a hand-driven stream, each on a new
    subscription from the earliest message."""
    drain = replace(spec, messages=messages, duration=0)
    return {
        "sdk": _counted(f"{how} sdk", consume_sdk, replace(drain, subscription=f"{how}-sdk")),
        "raw": _counted(f"{how} raw", consume_raw, replace(drain, subscription=f"{how}-raw")),
    }
