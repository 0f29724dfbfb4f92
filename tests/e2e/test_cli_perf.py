"""`pulsar-grpc perf` speaks pulsar-perf: positional topics, its flag names and defaults, its
throughput line, consumer latency from publish time, and --histogram-file in HdrHistogram's
log format."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

from pulsar_grpc.cli.main import build_parser, main
from tests.support import BrokerThread

NUMBER = r"[\d,]+(?:\.\d+)?"
PRODUCED_LINE = re.compile(
    rf"Throughput produced: (?P<total>{NUMBER}) msg --- {NUMBER} msg/s --- {NUMBER} Mbit/s "
    rf"--- failure {NUMBER} msg/s --- Latency: mean: {NUMBER} ms - med: {NUMBER} - "
    rf"95pct: {NUMBER} - 99pct: {NUMBER} - 99.9pct: {NUMBER} - 99.99pct: {NUMBER} - Max: {NUMBER}"
)
RECEIVED_LINE = re.compile(
    rf"Throughput received: (?P<total>{NUMBER}) msg --- {NUMBER} msg/s --- {NUMBER} Mbit/s "
    rf"--- Latency: mean: (?P<mean>{NUMBER}) ms - med: {NUMBER} - 95pct: {NUMBER} - "
    rf"99pct: {NUMBER} - 99.9pct: {NUMBER} - 99.99pct: {NUMBER} - Max: {NUMBER}"
)


def run_perf(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[dict, str]:  # type: ignore[type-arg]
    """`perf ARGV --json` in this process: its summary and its stderr (the interval lines)."""
    capsys.readouterr()
    assert main(["perf", *argv, "--json"]) == 0
    out, err = capsys.readouterr()
    return json.loads(out), err


def logged_count(log: Path) -> int:
    """How many latencies an HdrHistogram log (pulsar-perf's --histogram-file) holds."""
    reader = HistogramLogReader(str(log), HdrHistogram(1, 600_000_000, 3))
    counted = 0
    try:
        while (interval := reader.get_next_interval_histogram()) is not None:
            counted += interval.get_total_count()
    finally:
        reader.close()
    return counted


def test_pulsar_perfs_defaults_and_flag_names() -> None:
    parser = build_parser()
    produce = parser.parse_args(["perf", "produce", "my-topic"])
    assert (produce.topic_names, produce.rate, produce.size, produce.batch) == (
        ["my-topic"], 100, 1024, 1000,
    )  # fmt: skip
    assert (produce.producers, produce.batch_delay_ms, produce.num_topics) == (1, 1.0, 1)
    argv = ["perf", "produce", "t", "-r", "50", "-s", "64", "-n", "3", "-time", "5", "-b", "2",
            "-bm", "10", "-o", "100", "-t", "4", "-np", "2", "-m", "7"]  # fmt: skip
    named = parser.parse_args(argv)
    assert (named.rate, named.size, named.producers, named.duration, named.batch_delay_ms) == (
        50, 64, 3, 5, 2,
    )  # fmt: skip
    assert (named.batch, named.max_pending, named.num_topics, named.partitions) == (10, 100, 4, 2)
    assert named.messages == 7
    consume = parser.parse_args(["perf", "consume", "t", "-n", "2", "-st", "shared"])
    assert (consume.consumers, consume.subscription_type, consume.subscription) == (
        2, "Shared", "sub",
    )  # fmt: skip
    assert (consume.initial_position, consume.receiver_queue) == ("Latest", 1000)


def test_the_topic_is_positional_and_old_flags_fail_clearly(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["perf", "produce", "-t", "my-topic"])  # -t is pulsar-perf's --num-topic now
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "-t/--num-topic" in err, err
    assert main(["perf", "produce", "a", "b", "-t", "3"]) == 2
    assert "2 topics given but -t/--num-topic says 3" in capsys.readouterr().err


def test_produce_prints_pulsar_perfs_line_and_logs_hdr_histograms(
    broker: BrokerThread, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log = tmp_path / "produce.hgrm"
    summary, err = run_perf(
        capsys, "produce", "perf-lines", "-u", broker.service_url, "-r", "3000", "-m", "3000",
        "-t", "2", "--interval", "0.3", "--histogram-file", str(log),
    )  # fmt: skip
    assert summary["messages"] == 3000 and summary["topic"] == "perf-lines-0,perf-lines-1"
    interval_lines = [line for line in err.splitlines() if line.startswith("Throughput")]
    matches = [PRODUCED_LINE.fullmatch(line) for line in interval_lines]
    assert matches and all(matches), err
    totals = [int(m["total"].replace(",", "")) for m in matches if m]
    assert totals == sorted(totals) and totals[-1] <= 3000, totals  # a running total
    assert "Aggregated throughput stats --- 3000 records sent --- " in err, err
    assert "Aggregated latency stats --- Latency: mean: " in err, err
    # The histogram log: pulsar-perf's header, and every measured send in its intervals.
    text = log.read_text()
    assert text.startswith("#[Histogram log format version 1.2]\n"), text[:200]
    assert logged_count(log) == 3000


def test_consume_measures_latency_from_publish_time(
    broker: BrokerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    run_perf(capsys, "produce", "aged", "-u", broker.service_url, "-r", "0", "-m", "500")
    produced_at = time.monotonic()
    time.sleep(1.0)  # the age the consumer must see: what is measured, not a wait for a state
    summary, err = run_perf(
        capsys, "consume", "aged", "-u", broker.service_url, "-sp", "Earliest", "-m", "500",
        "--interval", "0.3",
    )  # fmt: skip
    waited_ms = (time.monotonic() - produced_at) * 1000
    assert summary["messages"] == 500
    latency = summary["latency_ms"]
    # Every message had waited at least the second before the consumer started.
    assert 1000 <= latency["p50"] <= waited_ms + 1000, latency
    assert "Aggregated throughput stats --- 500 records received --- " in err, err


def test_e2e_prints_both_of_pulsar_perfs_lines(
    broker: BrokerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    report, err = run_perf(
        capsys, "e2e", "both-lines", "-u", broker.service_url, "-r", "2000", "-time", "1",
        "--interval", "0.3",
    )  # fmt: skip
    assert report["sent"] == report["received"] > 0
    lines = err.splitlines()
    assert any(PRODUCED_LINE.fullmatch(line) for line in lines), err
    assert any(RECEIVED_LINE.fullmatch(line) for line in lines), err


def test_without_a_budget_it_runs_until_ctrl_c_then_reports(broker: BrokerThread) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "pulsar_grpc.cli.main", "perf", "produce", "until-ctrl-c",
         "-u", broker.service_url, "-r", "500", "--interval", "0.3", "--json"],
        env=os.environ.copy(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # running: its first throughput line
            if PRODUCED_LINE.fullmatch(line.strip()):
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert re.search(r"Aggregated throughput stats --- \d+ records sent", err), err
    assert json.loads(out)["messages"] > 0
