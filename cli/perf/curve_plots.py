"""The PNGs of `perf curves`: one figure per curve, drawn from the data its JSON carries.

matplotlib is imported here, with the Agg backend, as for ``--plot``: only when asked for.
Rates and sizes that span decades are on log axes, latencies always.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

_LATENCY_STYLES = (("p50", "-"), ("p99", "--"), ("max", ":"))


def draw(curves: dict[str, Any], directory: str) -> list[str]:
    """Each measured curve to ``directory/curve-<name>.png``; the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    drawers: dict[str, Callable[[Any], Any]] = {
        "latency": _latency,
        "topics": _topics,
        "size": _size,
        "backlog": _backlog,
    }
    paths = []
    for name, data in curves.items():
        path = str(Path(directory) / f"curve-{name}.png")
        fig = drawers[name](data)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        import matplotlib.pyplot as plt

        plt.close(fig)
        paths.append(path)
    return paths


def _figure(rows: int = 1) -> Any:
    import matplotlib.pyplot as plt

    return plt.subplots(rows, 1, figsize=(9, 3.6 * rows + 0.6), squeeze=False)


def _thousands() -> Any:
    import matplotlib.ticker

    return matplotlib.ticker.StrMethodFormatter("{x:,.0f}")


def _latency(modes: dict[str, list[dict[str, Any]]]) -> Any:
    """Publish latency against the achieved rate, per mode; the unpaced step marked."""
    fig, axes = _figure()
    ax = axes[0][0]
    for mode, steps in modes.items():
        rates = [s["msg_per_s"] for s in steps]
        color = None
        for key, style in _LATENCY_STYLES:
            values = [s["latency_ms"][key] for s in steps]
            (line,) = ax.plot(rates, values, style, marker="o", color=color, label=f"{mode} {key}")
            color = line.get_color()
        top = steps[-1]
        ax.annotate("max", (top["msg_per_s"], top["latency_ms"]["p99"]), fontsize="small")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("achieved msg/s (SDK producer, 100 B, batches of 100; last point unpaced)")
    ax.set_ylabel("publish latency ms")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", ncol=2)
    fig.suptitle("perf curves: publish latency against offered rate")
    return fig


def _topics(steps: list[dict[str, Any]]) -> Any:
    """Achieved rate (top) and publish latency (bottom) against the number of topics."""
    fig, axes = _figure(2)
    rate_ax, lat_ax = axes[0][0], axes[1][0]
    counts = [s["topics"] for s in steps]
    rate_ax.plot(counts, [s["msg_per_s"] for s in steps], marker="o", label="achieved")
    rate_ax.plot(counts, [s["offered"] for s in steps], "--", color="grey", label="offered")
    rate_ax.set_ylabel("msg/s (all topics)")
    rate_ax.yaxis.set_major_formatter(_thousands())
    rate_ax.set_ylim(bottom=0)
    rate_ax.legend(fontsize="small")
    for key, style in _LATENCY_STYLES:
        lat_ax.plot(counts, [s["latency_ms"][key] for s in steps], style, marker="o", label=key)
    lat_ax.set_yscale("log")
    lat_ax.set_ylabel("publish latency ms")
    lat_ax.set_xlabel("topics (one SDK producer each, one client)")
    lat_ax.legend(fontsize="small")
    for ax in (rate_ax, lat_ax):
        ax.set_xscale("log")
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle("perf curves: a fixed total rate over more topics")
    return fig


def _size(steps: list[dict[str, Any]]) -> Any:
    """msg/s (top) and MB/s (bottom) against the message size; sizes sent alone marked."""
    fig, axes = _figure(2)
    msg_ax, mb_ax = axes[0][0], axes[1][0]
    sizes = [s["size"] for s in steps]
    msg_ax.plot(sizes, [s["msg_per_s"] for s in steps], marker="o")
    mb_ax.plot(sizes, [s["mb_per_s"] for s in steps], marker="o")
    for s in steps:
        msg_ax.annotate(f"batch {s['batch']}", (s["size"], s["msg_per_s"]), fontsize="small")
    msg_ax.set_ylabel("msg/s")
    mb_ax.set_ylabel("MB/s")
    mb_ax.set_xlabel("message bytes (batches of up to 100 messages and 128 KiB)")
    for ax in (msg_ax, mb_ax):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle("perf curves: produce throughput against message size")
    return fig


def _backlog(data: dict[str, Any]) -> Any:
    """Read rates side by side: live tail, backlog from the entry cache, backlog from the store."""
    fig, axes = _figure()
    ax = axes[0][0]
    bars = [
        ("live tail\n(SDK, own process)", data["live_tail"]["end_to_end"]["msg_per_s"]),
        ("cached backlog\nSDK", data["cached"]["sdk"]["msg_per_s"]),
        ("cached backlog\nhand-driven", data["cached"]["raw"]["msg_per_s"]),
        ("cold backlog\nSDK", data["cold"]["sdk"]["msg_per_s"]),
        ("cold backlog\nhand-driven", data["cold"]["raw"]["msg_per_s"]),
    ]
    positions = range(len(bars))
    ax.bar(positions, [v for _, v in bars], color=["C2", "C0", "C0", "C1", "C1"])
    ax.set_xticks(list(positions), [name for name, _ in bars], fontsize="small")
    for x, (_, value) in zip(positions, bars, strict=True):
        ax.annotate(f"{value:,.0f}", (x, value), ha="center", va="bottom", fontsize="small")
    ax.set_ylabel("msg/s read")
    ax.yaxis.set_major_formatter(_thousands())
    ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(
        f"perf curves: reading a backlog of {data['messages']:,} messages against a live tail"
    )
    return fig
