"""`pulsar-grpc perf cluster`: how produce and consume throughput scale with broker processes,
and how long clients are blocked when a bundle is unloaded or its owner is killed.

Throughput: for each broker count N (``--brokers 1,2,4``) N `pulsar-grpc broker` processes on
ZooKeeper and PostgreSQL (started once for the run, cli.perf.servers), a topic of
``--partitions`` partitions placed by lookups, then ``--load-processes`` K producer processes
(`perf produce`, SDK batching as in `perf all`) and K consumer processes (`perf consume`, one
Shared subscription) at once, each on its own broker's address; the aggregate is the sum of the
processes' rates, and the ratio is to the first broker count. The baseline, in the same run, is
the standalone broker on its embedded store under the same load: the gap between it and one
cluster broker is what PostgreSQL and ZooKeeper cost. Blocked time: cli.perf.blocked.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from pulsar_grpc.cli.local_servers import ServerNotInstalledError
from pulsar_grpc.cli.perf.blocked import (
    DEFAULT_MAX_BACKOFF_MS,
    BlockedSpec,
    Disruption,
    blocked_runs,
)
from pulsar_grpc.cli.perf.flags import positive_ints
from pulsar_grpc.cli.perf.procs import standalone
from pulsar_grpc.cli.perf.report import machine
from pulsar_grpc.cli.perf.servers import DEFAULT_SESSION_MS, Servers, placed_topic, servers

TOPIC = "perf-cluster"
SUBSCRIPTION = "perf-cluster-sub"
# A load process that has not finished this long after its duration has hung.
LOAD_GRACE_S = 120
CONSUME_EXTRA_S = 3.0
LOAD_ATTEMPTS = 2
DISRUPTIONS = {
    "none": [],
    "unload": [Disruption.UNLOAD],
    "kill": [Disruption.KILL],
    "both": [Disruption.UNLOAD, Disruption.KILL],
}


def add_parser(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = verbs.add_parser(
        "cluster",
        help="start ZooKeeper, PostgreSQL and 1, 2, 4 brokers; throughput per broker count, "
        "and how long clients are blocked by an unload and a kill -9",
    )
    p.add_argument(
        "--brokers", type=positive_ints, default=[1, 2, 4],
        help="broker counts to measure (default 1,2,4)",
    )  # fmt: skip
    p.add_argument("--partitions", type=int, default=16, help="of the topic (default 16)")
    p.add_argument(
        "--load-processes", "-k", type=int, default=2,
        help="producer processes, and as many consumer processes (default 2)",
    )  # fmt: skip
    p.add_argument("--duration", "-d", type=float, default=10, help="seconds of load per step")
    p.add_argument("--size", type=int, default=100, help="payload bytes (default 100)")
    p.add_argument("--batch", type=int, default=100, help="messages per batch (default 100)")
    p.add_argument("--no-baseline", action="store_true", help="skip the standalone broker's run")
    p.add_argument(
        "--blocked", choices=("none", "unload", "kill", "both"), default="none",
        help="also measure how long producers are blocked by a bundle unload and/or a kill -9",
    )  # fmt: skip
    p.add_argument(
        "--session-timeouts", type=positive_ints, default=[DEFAULT_SESSION_MS, 5000],
        help="metadataStoreSessionTimeoutMillis values for the kill runs (default 30000,5000)",
    )  # fmt: skip
    p.add_argument("--repeat", type=int, default=3, help="repetitions of each disruption")
    p.add_argument(
        "--max-backoff-ms", type=int, default=DEFAULT_MAX_BACKOFF_MS,
        help="the disrupted clients' max_backoff_interval_ms (default the SDK's, 60000)",
    )  # fmt: skip
    p.add_argument(
        "--interval", type=float, default=0, help="seconds between the load processes' stats "
        "lines (default: one line at the end)",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    counts: list[int] = args.brokers
    if args.partitions < 1 or args.load_processes < 1:
        print("pulsar-grpc perf cluster: --partitions, -k must be >= 1", file=sys.stderr)
        return 2
    report: dict[str, Any] = {"machine": machine(), "settings": _settings(args)}
    try:
        with servers() as run_servers:
            report["throughput"] = _throughput(args, run_servers, counts)
            timeouts = tuple(args.session_timeouts)
            spec = BlockedSpec(args.partitions, args.repeat, timeouts, args.max_backoff_ms)
            report["blocked"] = blocked_runs(run_servers, DISRUPTIONS[args.blocked], spec)
    except ServerNotInstalledError as exc:
        print(f"pulsar-grpc perf cluster: {exc}", file=sys.stderr)
        return 1
    report["machine"]["load_after"] = os.getloadavg()
    print(json.dumps(report, indent=2) if args.json else _table(report))
    rows = report["throughput"]
    ok = all(r["produced"] and r["consumed"] and not r["errors"] for r in rows)
    return 0 if ok else 1


def _throughput(
    args: argparse.Namespace, run_servers: Servers, counts: list[int]
) -> list[dict[str, Any]]:
    """The baseline (unless --no-baseline), then each broker count; ratios to the first."""
    rows: list[dict[str, Any]] = []
    if not args.no_baseline:
        with standalone() as broker:
            step = _step(args, [broker.service_url], broker.http_url, [broker.pid])
            rows.append({"brokers": "standalone", **step})
    for n in counts:
        with run_servers.brokers(n) as brokers:
            _progress(f"{n} broker(s) up: {brokers.service_urls}")
            step = _step(args, brokers.service_urls, brokers.http_urls[0], brokers.pids)
        rows.append({"brokers": n, **step})
    first = next(r for r in rows if r["brokers"] != "standalone")
    for row in rows:
        row["produce_ratio"] = round(row["produce_msg_per_s"] / first["produce_msg_per_s"], 2)
        row["consume_ratio"] = round(row["consume_msg_per_s"] / first["consume_msg_per_s"], 2)
    return rows


class LoadFailedError(RuntimeError):
    """A load process printed no summary (on an overloaded machine, a first connection may
    time out)."""


def _step(
    args: argparse.Namespace, service_urls: list[str], admin_url: str, broker_pids: list[int]
) -> dict[str, Any]:
    """One broker count's measurement; once more on a fresh topic if a load process failed
    (the failed attempt's messages would otherwise count)."""
    for attempt in range(LOAD_ATTEMPTS):
        topic = f"{TOPIC}-{attempt}"
        try:
            return _load(args, service_urls, admin_url, broker_pids, topic)
        except LoadFailedError as exc:
            _progress(f"attempt {attempt + 1} failed: {exc}")
    raise LoadFailedError(f"{LOAD_ATTEMPTS} attempts failed")


def _load(
    args: argparse.Namespace,
    service_urls: list[str],
    admin_url: str,
    broker_pids: list[int],
    topic: str,
) -> dict[str, Any]:
    """Place the topic, run K producer and K consumer processes at once (process i on broker
    i mod N); their summed rates, and the CPU seconds the brokers and the load processes used
    meanwhile (what a 2-core machine runs out of)."""
    owners = placed_topic(service_urls[0], admin_url, topic, args.partitions)
    common = [
        topic, "-np", str(args.partitions), "--admin-url", admin_url, "--size", str(args.size),
        "--interval", str(args.interval or args.duration), "--json",
    ]  # fmt: skip
    # As fast as it goes (pulsar-perf's default is 100 msg/s).
    produce = ["-r", "0", "-bm", str(args.batch), "-time", str(args.duration)]
    # Consumers start first and may run a little longer: their clock stops at their last
    # message once the producers are done.
    consume = [
        "-s", SUBSCRIPTION, "-st", "Shared", "-sp", "Earliest", "--idle-timeout", "5",
        "-q", "10000", "-time", str(args.duration + CONSUME_EXTRA_S),
    ]  # fmt: skip
    commands = [
        [verb, "-u", service_urls[i % len(service_urls)], *common, *extra]
        for verb, extra in (("consume", consume), ("produce", produce))
        for i in range(args.load_processes)
    ]
    brokers_cpu = sum(_cpu_s(pid) for pid in broker_pids)
    load_cpu = _children_cpu_s()
    began = time.monotonic()
    results = _run_load(commands, args.duration)
    wall = time.monotonic() - began
    brokers_cpu = sum(_cpu_s(pid) for pid in broker_pids) - brokers_cpu
    load_cpu = _children_cpu_s() - load_cpu
    producers = [r for c, r in zip(commands, results, strict=True) if c[0] == "produce"]
    consumers = [r for c, r in zip(commands, results, strict=True) if c[0] == "consume"]
    step = {
        "partitions_per_broker": sorted(Counter(owners).values(), reverse=True),
        "produce_msg_per_s": round(sum(r["msg_per_s"] for r in producers)),
        "consume_msg_per_s": round(sum(r["msg_per_s"] for r in consumers)),
        "produced": sum(r["messages"] for r in producers),
        "consumed": sum(r["messages"] for r in consumers),
        "errors": sum(r["errors"] for r in producers),
        "produce_p50_ms": max(r["latency_ms"]["p50"] for r in producers if r["latency_ms"]),
        "produce_p99_ms": max(r["latency_ms"]["p99"] for r in producers if r["latency_ms"]),
        "wall_s": round(wall, 1),
        "brokers_cpu_s": round(brokers_cpu, 1),
        "load_cpu_s": round(load_cpu, 1),
    }
    _progress(f"step: {step}")
    return step


def _run_load(commands: list[list[str]], duration: float) -> list[dict[str, Any]]:
    """`pulsar-grpc perf <command>` processes, all at once, each waited for; their JSON
    summaries. Their stderr goes to files: a full pipe would stall a process mid-run."""
    base = [sys.executable, "-m", "pulsar_grpc.cli.main", "perf"]
    with contextlib.ExitStack() as stack:
        logs = [stack.enter_context(tempfile.TemporaryFile("w+")) for _ in commands]
        procs = [
            subprocess.Popen([*base, *cmd], stdout=subprocess.PIPE, stderr=log, text=True)
            for cmd, log in zip(commands, logs, strict=True)
        ]
        outs = [proc.communicate(timeout=duration + LOAD_GRACE_S)[0] for proc in procs]
        for cmd, proc, out, log in zip(commands, procs, outs, logs, strict=True):
            if not out.strip():
                log.seek(0)
                tail = log.read()[-1500:]
                raise LoadFailedError(f"perf {' '.join(cmd)} exited {proc.returncode}:\n{tail}")
    return [json.loads(out) for out in outs]


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a running process (/proc/<pid>/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children_cpu_s() -> float:
    """CPU seconds of this process's finished children (the load processes, once waited)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _progress(line: str) -> None:
    print(f"perf cluster: {line}", file=sys.stderr, flush=True)


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    keep = (
        "brokers", "partitions", "load_processes", "duration", "size", "batch", "repeat",
        "session_timeouts", "max_backoff_ms",
    )  # fmt: skip
    return {k: getattr(args, k) for k in keep}


def _loads(averages: tuple[float, float, float]) -> str:
    return " / ".join(f"{a:.2f}" for a in averages)


def _table(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        f"machine: {m['nproc']} x {m['cpu']}, load {_loads(m['load_before'])} before,"
        f" {_loads(m['load_after'])} after",
        f"{'brokers':<12}{'parts/broker':<16}{'produce msg/s':>14}{'ratio':>7}"
        f"{'consume msg/s':>15}{'ratio':>7}{'p50 ms':>8}{'p99 ms':>8}"
        f"{'CPU s brokers/load/wall':>25}",
    ]
    for r in report["throughput"]:
        lines.append(
            f"{r['brokers']!s:<12}{','.join(map(str, r['partitions_per_broker'])):<16}"
            f"{r['produce_msg_per_s']:>14,}{r['produce_ratio']:>7.2f}"
            f"{r['consume_msg_per_s']:>15,}{r['consume_ratio']:>7.2f}"
            f"{r['produce_p50_ms']:>8.1f}{r['produce_p99_ms']:>8.1f}"
            f"{r['brokers_cpu_s']:>11.1f} /{r['load_cpu_s']:>5.1f} /{r['wall_s']:>5.1f}"
        )
    for b in report["blocked"]:
        lines.append(
            f"{b['disruption']:<7} session {b['session_ms']:>5} ms, client max backoff"
            f" {b['client_max_backoff_ms']:>5} ms: longest gap between receipts"
            f" p50 {b['gap_s']['p50']:.3f} s max {b['gap_s']['max']:.3f} s; unblocked after"
            f" p50 {b['first_receipt_s']['p50']:.3f} s max {b['first_receipt_s']['max']:.3f} s"
            f" (x{len(b['runs'])})"
        )
    return "\n".join(lines)
