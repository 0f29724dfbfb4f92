"""What a perf run prints: the machine the figures depend on, the summary table, the plot."""

from __future__ import annotations

import os
import platform
from typing import Any

from pulsar_grpc.cli.perf.stats import Recorder


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


def table(rows: list[dict[str, Any]]) -> str:
    """One line per run: throughput, share of the ceiling when known, latency in ms."""
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


def plot(path: str, recorders: list[Recorder], title: str) -> None:
    """Throughput (top) and latency p50/p99/max (bottom, log scale) per stats interval.

    matplotlib is imported here, with the Agg backend, so the perf tool runs without it (and
    without a display) unless a plot is asked for.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (rate_ax, lat_ax) = plt.subplots(2, 1, sharex=True, figsize=(10, 7))
    for rec in recorders:
        points = rec.series
        t = [p["t"] for p in points]
        (line,) = rate_ax.plot(t, [p["msg_per_s"] for p in points], marker=".", label=rec.label)
        timed = [p for p in points if p["latency_ms"]]
        if not timed:
            continue
        tt = [p["t"] for p in timed]
        color = line.get_color()
        for key, style in (("p50", "-"), ("p99", "--"), ("max", ":")):
            values = [p["latency_ms"][key] for p in timed]
            lat_ax.plot(tt, values, style, color=color, label=f"{rec.label} {key}")
    rate_ax.set_ylabel("msg/s")
    rate_ax.set_ylim(bottom=0)
    rate_ax.grid(True, alpha=0.3)
    rate_ax.legend(loc="lower right")
    rate_ax.yaxis.set_major_formatter(matplotlib.ticker.StrMethodFormatter("{x:,.0f}"))
    lat_ax.set_ylabel("latency ms (per interval)")
    lat_ax.set_xlabel("seconds since start")
    lat_ax.grid(True, which="both", alpha=0.3)
    if lat_ax.lines:
        lat_ax.set_yscale("log")
        lat_ax.legend(loc="best", fontsize="small", ncol=2)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
