"""`pulsar-grpc perf` against real servers: the summaries must add up (no timing assertions)."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pulsar_grpc.broker.security.tokens import create_secret_key, create_token
from pulsar_grpc.cli.main import main
from tests.e2e.test_cli_perf import logged_count
from tests.support import BrokerThread

LATENCY_KEYS = ["mean", "p50", "p95", "p99", "p99.9", "max"]


def perf(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    """Run `pulsar-grpc perf ... --json` in this process and parse its summary."""
    capsys.readouterr()
    assert main(["perf", *argv, "--json", "--interval", "0.5"]) == 0
    return json.loads(capsys.readouterr().out)


def assert_consistent(run: dict[str, Any], messages: int, latency: bool = True) -> None:
    assert run["messages"] == messages
    assert run["errors"] == 0
    assert run["seconds"] > 0 and run["msg_per_s"] > 0 and run["mb_per_s"] > 0
    if not latency:
        assert run["latency_ms"] is None
        return
    lat = run["latency_ms"]
    assert list(lat) == LATENCY_KEYS
    ordered = [lat[k] for k in LATENCY_KEYS[1:]]
    assert ordered == sorted(ordered), lat
    assert 0 < lat["mean"] <= lat["max"]


def test_produce_then_consume_everything(
    broker: BrokerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    url = broker.service_url
    sdk = perf(capsys, "produce", "e2e", "-u", url, "-r", "0", "-m", "3000")
    assert_consistent(sdk, 3000)
    raw = perf(capsys, "produce", "e2e", "-u", url, "-r", "0", "-m", "2000", "--raw")
    assert_consistent(raw, 2000)
    for flags in ([], ["--raw"]):
        sub = f"sub{len(flags)}"
        consumed = perf(
            capsys, "consume", "e2e", "-u", url, "-s", sub, "-sp", "Earliest", "-m", "5000", *flags
        )
        # The SDK consumer measures publish -> receive, as pulsar-perf consume; raw: counts.
        assert_consistent(consumed, 5000, latency=not flags)


def test_produce_at_a_fixed_rate_with_several_producers(
    broker: BrokerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    run = perf(
        capsys, "produce", "paced", "-u", broker.service_url,
        "-m", "2000", "-r", "4000", "-n", "2",
    )  # fmt: skip
    assert_consistent(run, 2000)


def test_e2e_receives_everything_it_sent_and_plots_it(
    broker: BrokerThread, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    png = tmp_path / "e2e.png"
    report = perf(
        capsys, "e2e", "e2e", "-u", broker.service_url, "-time", "1.5",
        "-r", "5000", "--plot", str(png),
    )  # fmt: skip
    assert report["sent"] == report["received"] > 0
    assert report["stale"] == 0
    assert_consistent(report["publish"], report["sent"])
    assert_consistent(report["end_to_end"], report["received"])
    assert report["end_to_end"]["series"], "one point per stats interval, for the plot"
    assert png.read_bytes().startswith(b"\x89PNG")


def test_e2e_with_the_consumer_in_another_process(
    broker: BrokerThread, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The consumer process measures send -> receive from the payload stamps and reports back
    every message the producer stored; its histogram log counts each one."""
    log = tmp_path / "e2e.hgrm"
    report = perf(
        capsys, "e2e", "e2e-apart", "-u", broker.service_url, "-m", "3000", "-r", "5000",
        "--separate-processes", "--histogram-file", str(log),
    )  # fmt: skip
    assert report["separate_processes"] is True
    assert report["sent"] == report["received"] == 3000
    assert report["stale"] == 0
    assert_consistent(report["publish"], 3000)
    assert_consistent(report["end_to_end"], 3000)
    assert logged_count(log) == 3000
    # A second run on the same subscription finds the first one's messages acked: none stale.
    again = perf(
        capsys, "e2e", "e2e-apart", "-u", broker.service_url, "-m", "500", "-r", "5000",
        "--separate-processes",
    )  # fmt: skip
    assert again["sent"] == again["received"] == 500


def test_e2e_on_partitioned_topics_with_shared_consumers(
    broker: BrokerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    report = perf(
        capsys, "e2e", "parts", "-u", broker.service_url, "--admin-url", broker.http_url,
        "-t", "2", "-np", "3", "-nc", "2", "-n", "2", "-m", "6000", "-r", "0",
    )  # fmt: skip
    assert report["topic"] == "parts-0,parts-1"
    assert report["sent"] == report["received"] == 6000
    assert_consistent(report["publish"], 6000)
    assert_consistent(report["end_to_end"], 6000)


def test_all_starts_its_own_broker_and_ceiling(capsys: pytest.CaptureFixture[str]) -> None:
    report = perf(capsys, "all", "--messages", "2000", "--latency-rate", "4000")
    assert report["machine"]["nproc"] >= 1
    assert_consistent(report["ceiling"], 2000)
    runs = report["runs"]["page-cache"]
    for name in ("produce_sdk", "produce_raw", "latency"):
        assert_consistent(runs[name], 2000)
    # End-to-end at the latency rate, the consumer in its own process: its figures, all of it.
    apart = runs["e2e_separate"]
    assert apart["sent"] == apart["received"] == 2000
    assert_consistent(apart, 2000)
    assert list(apart["publish_latency_ms"]) == LATENCY_KEYS
    for name in ("consume_sdk", "consume_raw"):
        assert_consistent(runs[name], 2000, latency=False)


def test_perf_against_a_broker_with_token_authentication(
    broker_factory: Callable[..., BrokerThread],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    key = create_secret_key()
    broker = broker_factory(
        authenticationEnabled="true",
        authenticationProviders="token",
        tokenSecretKey="data:;base64," + base64.b64encode(key).decode(),
    )
    token = create_token(key, "perf", expires_at=int(time.time()) + 3600)
    conf = tmp_path / "client.conf"
    conf.write_text(
        f"webServiceUrl={broker.http_url}\nbrokerServiceUrl={broker.service_url}\n"
        f"authPlugin=token\nauthParams=token:{token}\n"
    )
    # The client.conf: the partitioned topic is created over admin HTTP, then produced to.
    sdk = perf(capsys, "produce", "authd", "--conf", str(conf), "-np", "2",
               "-m", "1000", "-r", "0")  # fmt: skip
    assert_consistent(sdk, 1000)
    # The flags, on hand-driven streams.
    flags = ["-u", broker.service_url, "--auth-plugin", "token", "--auth-params", f"token:{token}"]
    raw = perf(capsys, "produce", "authd-raw", *flags, "-m", "500", "-r", "0", "--raw")
    assert_consistent(raw, 500)
    consumed = perf(capsys, "consume", "authd-raw", *flags, "-m", "500", "-sp", "Earliest",
                    "--raw")  # fmt: skip
    assert_consistent(consumed, 500, latency=False)
    # Without credentials the broker refuses the run: one line and exit code 1, SDK or raw.
    for raw_flag in ([], ["--raw"]):
        assert main(["perf", "produce", "authd", "-u", broker.service_url,
                     "-m", "10", *raw_flag]) == 1  # fmt: skip
        err = capsys.readouterr().err
        assert "UNAUTHENTICATED" in err or "AuthenticationError" in err, err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    # Credentials that do not parse: a usage error before any run.
    assert main(["perf", "produce", "t", "--conf", str(conf), "--auth-plugin", "kerberos"]) == 2
    assert "unknown plugin 'kerberos'" in capsys.readouterr().err
