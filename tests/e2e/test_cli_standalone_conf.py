"""`pulsar-grpc standalone` with Apache Pulsar's own conf/standalone.conf (tests/data, vendored
from apache/pulsar at 0058e734a959d09d03408923370b02424627b9ac, Apache-2.0) and --wipe-data."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.e2e.test_cli import cli, start_standalone

PULSAR_STANDALONE_CONF = Path(__file__).resolve().parents[1] / "data" / "pulsar-standalone.conf"
# Loopback and free ports instead of Pulsar's 0.0.0.0:8080; the rest is Pulsar's file as it is.
LOCAL = [
    "--set",
    "bindAddress=127.0.0.1",
    "--set",
    "grpcServicePort=0",
    "--set",
    "webServicePort=0",
]


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PULSAR_PREFIX_")}


@contextmanager
def standalone(*args: str) -> Iterator[tuple[str, str, list[str]]]:
    """A running `standalone ARGS`: (gRPC URL, HTTP URL, the lines it printed until ready)."""
    proc, match, lines = start_standalone([*args, "--log-level", "WARNING"], env())
    try:
        yield f"grpc://{match.group(1)}", match.group(2), lines
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert proc.stdout is not None
    proc.stdout.close()


def test_pulsars_standalone_conf_starts_with_one_warning_naming_what_it_ignores(
    tmp_path: Path,
) -> None:
    data = str(tmp_path / "data")
    with standalone("--config", str(PULSAR_STANDALONE_CONF), "--data", data, *LOCAL) as (
        grpc_url, http_url, lines,
    ):  # fmt: skip
        warnings = [line for line in lines if "warning" in line.lower()]
        assert len(warnings) == 1, lines
        warning = warnings[0]
        # BookKeeper, transactions, WebSocket: Pulsar features this broker does not have.
        for name in ("bookkeeperClientTimeoutInSeconds", "transactionCoordinatorEnabled",
                     "webSocketServiceEnabled", "brokerServicePort"):  # fmt: skip
            assert name in warning, warning
        # Properties it has are used, not named; empty ones (unset, as in Pulsar) neither.
        assert "clusterName" not in warning and "metadataStoreConfigPath" not in warning
        assert "Traceback" not in "".join(lines)
        produced = cli("produce", "t", "-m", "a,b", "--url", grpc_url)
        assert produced.returncode == 0, produced.stderr
        read = cli("read", "t", "-m", "earliest", "-n", "2", "--timeout", "20", "--url", grpc_url)
        assert read.returncode == 0 and read.stdout.count("got message") == 2, read
        listed = cli("topics", "list", "--admin-url", http_url)
        assert "persistent://public/default/t" in listed.stdout.split(), listed


def test_misspelt_properties_still_fail_with_a_did_you_mean(tmp_path: Path) -> None:
    conf = tmp_path / "standalone.conf"
    text = PULSAR_STANDALONE_CONF.read_text()
    # A property this broker uses, misspelt; and a misspelt one of those it ignores.
    conf.write_text(text + "\nallowAutoTopicCreaton=false\nbookkeeperClientTimeoutInSecond=5\n")
    result = cli("standalone", "--config", str(conf), "--data", str(tmp_path / "d"), *LOCAL)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert (
        "unknown property 'allowAutoTopicCreaton' (did you mean allowAutoTopicCreation?)" in output
    )
    assert (
        "unknown property 'bookkeeperClientTimeoutInSecond' (did you mean "
        "bookkeeperClientTimeoutInSeconds, which is ignored?)"
    ) in output
    assert "Traceback" not in output and "ready" not in output
    assert not (tmp_path / "d").exists()


def test_wipe_data_starts_from_an_empty_data_directory(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with standalone("--data", str(data), *LOCAL) as (grpc_url, http_url, _):
        assert cli("produce", "kept", "-m", "x", "--url", grpc_url).returncode == 0
    with standalone("--data", str(data), *LOCAL) as (grpc_url, http_url, _):
        listed = cli("topics", "list", "--admin-url", http_url)
        assert "persistent://public/default/kept" in listed.stdout.split(), listed
        # A broker runs on it: --wipe-data refuses, and deletes nothing.
        refused = cli("standalone", "--data", str(data), "--wipe-data", *LOCAL)
        assert refused.returncode == 3, refused
        assert "in use by another broker" in refused.stderr
    with standalone("--data", str(data), "--wipe-data", *LOCAL) as (grpc_url, http_url, lines):
        assert any(f"wiped data directory {data}" in line for line in lines), lines
        listed = cli("topics", "list", "--admin-url", http_url)
        assert listed.returncode == 0 and listed.stdout.split() == [], listed
        read = cli("read", "kept", "-m", "earliest", "-n", "0", "--timeout", "1", "--url", grpc_url)
        assert "got message" not in read.stdout, read


def test_wipe_data_refuses_external_stores(tmp_path: Path) -> None:
    result = cli("standalone", "--data", str(tmp_path / "d"), "--wipe-data", *LOCAL,
                 "--set", "metadataStoreUrl=zk:127.0.0.1:1")  # fmt: skip
    assert result.returncode == 2, result
    assert "--wipe-data: metadataStoreUrl name stores outside the data directory" in result.stderr
