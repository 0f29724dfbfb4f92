"""`pulsar-grpc perf`: throughput and latency of a broker, in the spirit of pulsar-perf.

``produce`` / ``consume`` load a running broker; ``ceiling`` measures a bare grpc.aio stream
with the same batching and no broker behind it; ``all`` starts its own standalone broker (and
the bare server) as child processes, so the broker and the load each get a core, and reports
everything in one table. Progress lines go to stderr, the summary (table or --json) to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from cli.perf.load import (
    CEILING_READY,
    LoadSpec,
    Recorder,
    consume_raw,
    consume_sdk,
    produce_raw,
    produce_sdk,
)

Runner = Callable[[LoadSpec, Recorder], Coroutine[Any, Any, None]]
READY = re.compile(r"pulsar-grpc standalone ready grpc=(grpc://\S+) http=")
CEILING = re.compile(re.escape(CEILING_READY) + r"(\d+)")
MODES = {"page-cache": (), "fsync": ("--set", "journalSyncData=true")}


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("perf", help="measure throughput and latency (like pulsar-perf)")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    produce = verbs.add_parser("produce", help="produce to a running broker")
    _add_load_flags(produce, topic=True)
    produce.add_argument(
        "--raw", action="store_true", help="hand-built ProduceRequests on one stream, no SDK"
    )
    consume = verbs.add_parser("consume", help="consume (and ack) from a running broker")
    _add_load_flags(consume, topic=True)
    consume.add_argument(
        "--raw", action="store_true", help="hand-driven Consume stream (permits, acks), no SDK"
    )
    consume.add_argument("--subscription", "-s", default="perf-sub")
    consume.add_argument("--receiver-queue", type=int, default=10_000)
    consume.add_argument(
        "--idle-timeout", type=float, default=10.0, help="stop after this long without a message"
    )
    ceiling = verbs.add_parser("ceiling", help="a bare grpc.aio stream, same batching, no broker")
    _add_load_flags(ceiling, topic=False)
    everything = verbs.add_parser(
        "all", help="start a standalone broker; ceiling, produce, consume, latency; one table"
    )
    _add_load_flags(everything, topic=False)
    everything.add_argument(
        "--latency-rate", type=float, default=50_000, help="msg/s of the fixed-rate latency run"
    )
    everything.add_argument(
        "--sync", action="store_true", help="also run with journalSyncData=true (fsync)"
    )
    p.set_defaults(run=run)


def _add_load_flags(p: argparse.ArgumentParser, topic: bool) -> None:
    if topic:
        p.add_argument("--service-url", "-u", default="grpc://127.0.0.1:50051")
        p.add_argument("--topic", "-t", default="perf")
    p.add_argument("--size", type=int, default=100, help="payload bytes (default 100)")
    p.add_argument("--batch", type=int, default=100, help="messages per batch (default 100)")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--messages", "-m", type=int, default=0, help="messages per run")
    budget.add_argument("--duration", "-d", type=float, default=0, help="seconds per run")
    if topic:
        p.add_argument("--rate", "-r", type=float, default=0, help="msg/s, 0 = as fast as possible")
    p.add_argument("--producers", "-p", type=int, default=1, help="producers (streams)")
    p.add_argument(
        "--max-pending", type=int, default=10_000, help="messages in flight per producer"
    )
    p.add_argument(
        "--batch-delay-ms", type=float, default=1.0, help="SDK batching_max_publish_delay_ms"
    )
    p.add_argument("--interval", type=float, default=2.0, help="seconds between stats lines")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(args: argparse.Namespace) -> int:
    if args.size < 1 or args.batch < 1 or args.producers < 1 or args.max_pending < args.batch:
        print("pulsar-grpc perf: --size, --batch, --producers must be >= 1 and "
              "--max-pending >= --batch", file=sys.stderr)  # fmt: skip
        return 2
    if args.verb == "all":
        return _run_all(args)
    spec = _spec(args, getattr(args, "service_url", ""), getattr(args, "topic", "ceiling"))
    if args.verb == "ceiling":
        with _ceiling_server() as url:
            result = _measure("ceiling", produce_raw, replace(spec, service_url=url))
    elif args.verb == "produce":
        runner = produce_raw if args.raw else produce_sdk
        result = _measure("produce raw" if args.raw else "produce", runner, spec)
    else:
        runner = consume_raw if args.raw else consume_sdk
        result = _measure("consume raw" if args.raw else "consume", runner, spec)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(_table([result]))
    return 0 if result["messages"] and not result["errors"] else 1


def _spec(args: argparse.Namespace, service_url: str, topic: str) -> LoadSpec:
    """The run's settings; with no budget at all, 10 s."""
    return LoadSpec(
        service_url=service_url,
        topic=topic,
        size=args.size,
        batch=args.batch,
        messages=args.messages,
        duration=args.duration or (0 if args.messages else 10.0),
        rate=getattr(args, "rate", 0),
        producers=args.producers,
        max_pending=args.max_pending,
        batch_delay_ms=args.batch_delay_ms,
        subscription=getattr(args, "subscription", "perf-sub"),
        receiver_queue=getattr(args, "receiver_queue", 10_000),
        idle_timeout=getattr(args, "idle_timeout", 10.0),
        interval=args.interval,
    )


def _measure(label: str, runner: Runner, spec: LoadSpec) -> dict[str, Any]:
    """Run one load on a fresh uvloop and return its summary."""
    import uvloop

    rec = Recorder(label, spec.size)
    uvloop.run(runner(spec, rec))
    return {"run": label, "topic": spec.topic, "rate_limit": spec.rate, **rec.summary()}


# ---------------------------------------------------------------- perf all


def _run_all(args: argparse.Namespace) -> int:
    spec = _spec(args, "", "")
    report: dict[str, Any] = {"machine": machine(), "settings": _settings(args, spec)}
    with _ceiling_server() as url:
        ceiling = _measure("ceiling", produce_raw, replace(spec, service_url=url, topic="c"))
    report["ceiling"] = ceiling
    rows = [{**ceiling, "durability": "none (no broker)"}]
    report["runs"] = {}
    for mode in ("page-cache", "fsync") if args.sync else ("page-cache",):
        with _broker(MODES[mode]) as url:
            runs = _broker_runs(replace(spec, service_url=url), args.latency_rate)
        report["runs"][mode] = runs
        rows += [{**r, "durability": mode} for r in runs.values()]
    report["machine"]["load_after"] = os.getloadavg()
    ceiling_rate = ceiling["msg_per_s"]
    for row in rows:
        row["pct_of_ceiling"] = round(100 * row["msg_per_s"] / ceiling_rate, 1)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(_table(rows))
    ok = all(r["messages"] and not r["errors"] for r in rows)
    return 0 if ok else 1


def _broker_runs(spec: LoadSpec, latency_rate: float) -> dict[str, dict[str, Any]]:
    """Produce (SDK, then raw); consume what the SDK produced (SDK, then raw, on a second
    subscription); then latency at a fixed rate."""
    sdk = _measure("produce", produce_sdk, replace(spec, topic="perf-sdk"))
    raw = _measure("produce raw", produce_raw, replace(spec, topic="perf-raw"))
    drain = replace(spec, topic="perf-sdk", messages=sdk["messages"], duration=0)
    consume = _measure("consume", consume_sdk, drain)
    drain_raw = replace(drain, subscription="perf-raw-sub")
    consume_raw_result = _measure("consume raw", consume_raw, drain_raw)
    paced = replace(spec, topic="perf-latency", rate=latency_rate)
    latency = _measure(f"latency@{latency_rate:,.0f}", produce_sdk, paced)
    return {
        "produce_sdk": sdk,
        "produce_raw": raw,
        "consume_sdk": consume,
        "consume_raw": consume_raw_result,
        "latency": latency,
    }


def _settings(args: argparse.Namespace, spec: LoadSpec) -> dict[str, Any]:
    keep = ("size", "batch", "messages", "duration", "producers", "max_pending", "batch_delay_ms")
    out = {k: getattr(spec, k) for k in keep}
    out.update(latency_rate=args.latency_rate, receiver_queue=spec.receiver_queue)
    return out


@contextmanager
def _child(cmd: list[str], ready: re.Pattern[str], what: str) -> Iterator[re.Match[str]]:
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
        yield match
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
def _broker(extra: tuple[str, ...]) -> Iterator[str]:
    """A standalone broker on free ports with a temporary data directory."""
    with tempfile.TemporaryDirectory(prefix="pulsar-grpc-perf-") as data:
        cmd = [
            sys.executable, "-m", "cli.main", "standalone", "--data", data,
            "--set", "grpcServicePort=0", "--set", "webServicePort=0",
            "--log-level", "WARNING", *extra,
        ]  # fmt: skip
        with _child(cmd, READY, "broker " + " ".join(extra)) as match:
            yield match.group(1)


@contextmanager
def _ceiling_server() -> Iterator[str]:
    """The bare-stream server in its own process, like the broker."""
    code = "from cli.perf.load import serve_ceiling; serve_ceiling()"
    with _child([sys.executable, "-c", code], CEILING, "ceiling server") as match:
        yield f"grpc://127.0.0.1:{match.group(1)}"


# ---------------------------------------------------------------- reporting


def machine() -> dict[str, Any]:
    """What the figures depend on, to print next to them."""
    import grpc
    import uvloop
    from google import protobuf

    cpu = mem = ""
    with open("/proc/cpuinfo") as f:
        cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    with open("/proc/meminfo") as f:
        mem = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("MemTotal")), "")
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory": mem,
        "python": platform.python_version(),
        "grpcio": grpc.__version__,
        "protobuf": protobuf.__version__,
        "uvloop": uvloop.__version__,
        "load_before": os.getloadavg(),
    }


def _table(rows: list[dict[str, Any]]) -> str:
    head = f"{'run':<18}{'durability':<18}{'messages':>10}{'msg/s':>11}{'MB/s':>7}{'%ceil':>7}"
    head += "".join(f"{k:>9}" for k in ("mean", "p50", "p95", "p99", "p99.9", "max"))
    lines = [head + "  (latency ms)"]
    for r in rows:
        pct = f"{r['pct_of_ceiling']:.1f}" if "pct_of_ceiling" in r else "-"
        line = f"{r['run']:<18}{r.get('durability', ''):<18}{r['messages']:>10,}"
        line += f"{r['msg_per_s']:>11,.0f}{r['mb_per_s']:>7.1f}{pct:>7}"
        lat = r["latency_ms"] or {}
        line += "".join(f"{v:>9.2f}" for v in lat.values())
        lines.append(line + (f"  errors {r['errors']}" if r["errors"] else ""))
    return "\n".join(lines)
