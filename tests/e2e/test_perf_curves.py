"""`pulsar-grpc perf curves --quick`: every curve's steps are there and add up, and each is
drawn (structure and sanity only: benchmarks are never timed assertions)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pulsar_grpc.cli.main import main

LATENCY_KEYS = ["mean", "p50", "p95", "p99", "p99.9", "max"]


def assert_measured(step: dict[str, Any], latency: bool = True) -> None:
    """A step that moved messages, lost none, and (for a producer) timed them."""
    assert step["messages"] > 0 and step["errors"] == 0, step
    assert step["seconds"] > 0 and step["msg_per_s"] > 0, step
    if latency:
        lat = step["latency_ms"]
        assert list(lat) == LATENCY_KEYS, lat
        assert lat["p50"] <= lat["p99"] <= lat["max"], lat


def test_quick_curves_measure_and_draw_every_curve(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    capsys.readouterr()
    assert main(["perf", "curves", "--quick", "--json", "--plot-dir", str(tmp_path)]) == 0
    report = json.loads(capsys.readouterr().out)
    curves = report["curves"]
    assert report["machine"]["nproc"] >= 1 and len(report["machine"]["load_after"]) == 3

    # Latency against rate: offered rates rise; every step before the last paced one held
    # (the sweep stops at the first that does not); then one unpaced step.
    steps = curves["latency"]["page-cache"]
    paced, unpaced = steps[:-1], steps[-1]
    offered = [s["offered"] for s in paced]
    assert offered == sorted(set(offered)) and offered[0] == report["plan"]["rates"][0]
    assert all(s["held"] for s in paced[:-1])
    assert unpaced["offered"] is None and unpaced["rate_limit"] == 0
    for step in steps:
        assert_measured(step)

    # Topics: the plan's counts, each at the same offered total, producers created and warmed.
    topics = curves["topics"]
    assert [s["topics"] for s in topics] == report["plan"]["topic_counts"]
    for step in topics:
        assert_measured(step)
        assert step["offered"] == report["plan"]["topics_rate"]
        assert step["create_s"] >= 0 and step["warm_s"] >= 0

    # Size: 10 B to 1 MB; batches shrink to fit 128 KiB, and only 1 MB is over that limit.
    sizes = curves["size"]
    assert [s["size"] for s in sizes] == [10, 100, 1_000, 10_000, 100_000, 1_000_000]
    batches = [s["batch"] for s in sizes]
    assert batches == sorted(batches, reverse=True) and batches[0] == 100 and batches[-1] == 1
    assert [s["over_batch_limit"] for s in sizes] == [False] * 5 + [True]
    for step in sizes:
        assert_measured(step)
        assert step["mb_per_s"] == pytest.approx(step["msg_per_s"] * step["size"] / 1e6, rel=0.01)

    # Backlog: every written message read back from the cache and, after a restart, the store;
    # the live tail's consumer (its own process) got everything its producer stored.
    backlog = curves["backlog"]
    written = backlog["write"]["messages"]
    assert written == report["plan"]["backlog"]
    for how in ("cached", "cold"):
        assert_measured(backlog[how]["sdk"], latency=False)
        assert backlog[how]["sdk"]["messages"] == written
        assert backlog[how]["raw"]["messages"] == written
    assert "root" in backlog["os_page_cache"]
    tail = backlog["live_tail"]
    assert tail["sent"] == tail["received"] > 0 and tail["stale"] == 0
    assert_measured(tail["end_to_end"])

    # One PNG per curve.
    assert sorted(Path(p).name for p in report["plots"]) == [
        "curve-backlog.png", "curve-latency.png", "curve-size.png", "curve-topics.png",
    ]  # fmt: skip
    for path in report["plots"]:
        assert Path(path).read_bytes().startswith(b"\x89PNG")


def test_curves_refuses_an_unknown_curve(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["perf", "curves", "--which", "latency,colour"])
    assert exit_.value.code == 2
    assert "latency, topics, size, backlog" in capsys.readouterr().err
