"""What the PIP-1 proxy costs: SDK produce and consume throughput and publish latency at fixed
rates, direct to a broker and through a proxy in front of it, in one run.

One standalone broker and one `pulsar-grpc proxy` (on brokerServiceURL), each a child process
as a deployment runs them; the load runs in this process (`pulsar-grpc perf`'s generators:
one SDK producer, batching on, 100-byte messages; one SDK consumer). For each target in turn,
``--rounds`` times over so that a machine getting busier or quieter favours neither:

- produce as fast as the producer goes for ``--duration`` s, then consume that backlog;
- publish latency (send to receipt) at each of ``--rates`` msg/s for ``--duration`` s.

Issue 10's targets: through the proxy, at least 70% of direct throughput, and no more than
1 ms added to the median publish latency at 50,000 msg/s. A rate "holds" when the producer
actually sent at least 95% of it; a latency read at a rate that did not hold is a queue's, not
the path's. Prints the machine, `uptime`'s load before and after, and a Markdown table.

Usage::

    PYTHONPATH=$PWD:$PWD/protos .venv/bin/python -m bench.proxy --duration 10 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil

from pulsar_grpc.cli.perf.load import consume_sdk, produce_sdk
from pulsar_grpc.cli.perf.measure import Runner, measure
from pulsar_grpc.cli.perf.procs import child, standalone
from pulsar_grpc.cli.perf.report import machine
from pulsar_grpc.cli.perf.spec import LoadSpec

PROXY_READY = re.compile(r"pulsar-grpc proxy ready grpc=(\S+) http=(\S*)")
HOLDS = 0.95  # of the asked rate, sent: the rate held
TARGETS = ("direct", "proxy")


@contextmanager
def proxy_in_front_of(broker_url: str) -> Iterator[tuple[str, int]]:
    """`pulsar-grpc proxy` on free ports, forwarding to ``broker_url``; yields its URL and
    pid."""
    with tempfile.TemporaryDirectory(prefix="bench-proxy-") as home:
        conf = Path(home) / "proxy.conf"
        conf.write_text(
            f"brokerServiceURL={broker_url}\nbindAddress=127.0.0.1\n"
            "grpcServicePort=0\nwebServicePort=0\n"
        )
        cmd = [
            sys.executable, "-m", "pulsar_grpc.cli.main", "proxy",
            "--config", str(conf), "--log-level", "WARNING",
        ]  # fmt: skip
        with child(cmd, PROXY_READY, "proxy") as (match, pid):
            yield match.group(1), pid


class CpuShare:
    """How busy each server process was during a measurement (CPU seconds per second)."""

    def __init__(self, pids: dict[str, int]) -> None:
        self._processes = {name: psutil.Process(pid) for name, pid in pids.items()}

    def measure(self, label: str, runner: Runner, spec: LoadSpec) -> dict[str, Any]:
        """perf's ``_measure``, with ``cpu``: each server's share of one core meanwhile."""
        before = {n: sum(p.cpu_times()[:2]) for n, p in self._processes.items()}
        started = time.perf_counter()
        result, _ = measure(label, runner, spec)
        wall = time.perf_counter() - started
        result["cpu"] = {
            n: (sum(p.cpu_times()[:2]) - before[n]) / wall for n, p in self._processes.items()
        }
        return result


def one_round(
    urls: dict[str, str], cpu: CpuShare, spec: LoadSpec, rates: list[float], round_no: int
) -> dict[str, dict[str, Any]]:
    """Every measurement of one round, per target: produce, consume, latency@rate."""
    out: dict[str, dict[str, Any]] = defaultdict(dict)
    for target in TARGETS:
        run = replace(spec, service_url=urls[target])
        topic = f"bench-proxy-{target}-{round_no}"
        produced = cpu.measure(f"{target} produce", produce_sdk, replace(run, topics=(topic,)))
        out[target]["produce"] = produced
        drain = replace(run, topics=(topic,), messages=produced["messages"], duration=0)
        out[target]["consume"] = cpu.measure(f"{target} consume", consume_sdk, drain)
        for rate in rates:
            paced = replace(run, topics=(f"{topic}-at-{rate:.0f}",), rate=rate)
            out[target][f"latency@{rate:.0f}"] = cpu.measure(
                f"{target} latency@{rate:,.0f}", produce_sdk, paced
            )
    return out


def cpu_note(result: dict[str, Any]) -> str:
    """The servers' CPU during a measurement, e.g. "broker 0.61, proxy 0.36 cores"."""
    return ", ".join(f"{n} {share:.2f}" for n, share in result["cpu"].items()) + " cores"


def report(rounds: list[dict[str, dict[str, Any]]], rates: list[float]) -> str:
    """The Markdown table: each figure per round, direct and proxy side by side."""
    lines = [
        "| measurement | direct | proxy | proxy / direct | CPU direct | CPU through the proxy |",
        "|---|---:|---:|---:|---|---|",
    ]
    for kind in ("produce", "consume"):
        direct = [r["direct"][kind]["msg_per_s"] for r in rounds]
        proxied = [r["proxy"][kind]["msg_per_s"] for r in rounds]
        for i, (d, p) in enumerate(zip(direct, proxied, strict=True)):
            cpus = " | ".join(cpu_note(rounds[i][t][kind]) for t in TARGETS)
            lines.append(
                f"| {kind} msg/s, round {i + 1} | {d:,.0f} | {p:,.0f} | {p / d:.0%} | {cpus} |"
            )
        d, p = statistics.median(direct), statistics.median(proxied)
        lines.append(f"| {kind} msg/s, median | {d:,.0f} | {p:,.0f} | {p / d:.0%} | | |")
    for rate in rates:
        key = f"latency@{rate:.0f}"
        for i, r in enumerate(rounds):
            cells = []
            for target in TARGETS:
                result = r[target][key]
                lat = result["latency_ms"] or {}
                sent = result["msg_per_s"]
                held = "" if sent >= HOLDS * rate else f", held only {sent:,.0f}/s"
                cells.append(f"{lat.get('p50', 0):.2f} / {lat.get('p99', 0):.2f}{held}")
            added = (r["proxy"][key]["latency_ms"] or {}).get("p50", 0) - (
                r["direct"][key]["latency_ms"] or {}
            ).get("p50", 0)
            cpus = " | ".join(cpu_note(r[t][key]) for t in TARGETS)
            lines.append(
                f"| latency p50 / p99 ms at {rate:,.0f} msg/s, round {i + 1} | {cells[0]} | "
                f"{cells[1]} | {added:+.2f} ms median | {cpus} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10, help="seconds per measurement")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--rates", default="50000,20000", help="fixed publish rates for latency, msg/s"
    )
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    spec = LoadSpec(service_url="", topics=(), size=100, batch=100, duration=args.duration)
    facts = machine()
    print(f"uptime load before: {os.getloadavg()}", file=sys.stderr, flush=True)
    rounds = []
    with standalone() as broker, proxy_in_front_of(broker.service_url) as (proxy_url, pid):
        urls = {"direct": broker.service_url, "proxy": proxy_url}
        cpu = CpuShare({"broker": broker.pid, "proxy": pid})
        for round_no in range(args.rounds):
            rounds.append(one_round(urls, cpu, spec, rates, round_no))
    after = os.getloadavg()
    print(
        f"\nmachine: {facts['nproc']} cores, {facts['cpu']}, {facts['memory']}; Python "
        f"{facts['python']}, grpcio {facts['grpcio']}\n"
        f"uptime load before {facts['load_before']}, after {after}\n"
        f"{args.duration:g} s per measurement, {args.rounds} rounds, 100-byte messages, "
        "batches of up to 100\n"
    )
    print(report(rounds, rates))


if __name__ == "__main__":
    main()
