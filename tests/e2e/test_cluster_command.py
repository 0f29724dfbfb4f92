"""`pulsar-grpc cluster` (what `make cluster` runs), on ports moved off its defaults: it starts
ZooKeeper, PostgreSQL and three brokers, what one broker is given another serves, and SIGINT
(Ctrl-C) stops every process it started; it refuses to empty a directory it did not make."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

from pulsar_grpc.cli.cluster import BROKERS, EXTERNAL_HOST, INTERNAL_HOST
from tests.faultproxy import free_port

READY = "pulsar-grpc cluster ready:"
START_TIMEOUT_S = 120


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "pulsar_grpc.cli.main", *args]


def listening(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, port)) == 0


def free_block(taken: set[int]) -> int:
    """A first port such that it and the next BROKERS - 1 are free on both hosts."""
    while True:
        first = free_port()
        block = set(range(first, first + BROKERS))
        if block & taken or first + BROKERS > 65535:
            continue
        if not any(listening(h, p) for h in (INTERNAL_HOST, EXTERNAL_HOST) for p in block):
            taken |= block
            return first


def run_cli(*args: str) -> str:
    done = subprocess.run(command(*args), capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done
    return done.stdout


def test_cluster_serves_until_sigint_then_stops_everything(tmp_path: Path) -> None:
    taken: set[int] = set()
    zookeeper, postgres = free_port(), free_port()
    taken |= {zookeeper, postgres}
    grpc, http = free_block(taken), free_block(taken)
    process = subprocess.Popen(
        command(
            "cluster", "--dir", str(tmp_path / "cluster"),
            "--zookeeper-port", str(zookeeper), "--postgres-port", str(postgres),
            "--grpc-port", str(grpc), "--http-port", str(http),
        ),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ.copy(),
    )  # fmt: skip
    assert process.stdout is not None
    lines: list[str] = []
    # SIGINT, not SIGKILL: the command stops what it started (its children run in sessions
    # of their own and would outlive it).
    timer = threading.Timer(START_TIMEOUT_S, process.send_signal, (signal.SIGINT,))
    timer.start()
    try:
        for line in process.stdout:
            lines.append(line)
            if READY in line:
                break
        assert READY in "".join(lines), "".join(lines)
        drain = threading.Thread(target=lambda: lines.extend(process.stdout or ()), daemon=True)
        drain.start()
        ports = [(INTERNAL_HOST, zookeeper), (INTERNAL_HOST, postgres)] + [
            (host, first + i)
            for host in (INTERNAL_HOST, EXTERNAL_HOST)
            for first in (grpc, http)
            for i in range(BROKERS)
        ]
        assert all(listening(host, port) for host, port in ports)

        # Given to broker 1, served from broker 2's external address (or wherever it is owned).
        run_cli("produce", "t", "-m", "hello", "-n", "3",
                "--service-url", f"grpc://{INTERNAL_HOST}:{grpc + 1}")  # fmt: skip
        consumed = run_cli("consume", "t", "-s", "s", "-p", "earliest", "-n", "3",
                           "--service-url", f"grpc://{EXTERNAL_HOST}:{grpc + 2}")  # fmt: skip
        assert consumed.count("content:hello") == 3, consumed

        process.send_signal(signal.SIGINT)
        assert process.wait(START_TIMEOUT_S) == 0, "".join(lines)
    finally:
        timer.cancel()
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(START_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    drain.join(10)
    process.stdout.close()
    assert lines[-1].strip() == "stopped", "".join(lines)
    still = [(host, port) for host, port in ports if listening(host, port)]
    assert not still, f"still listening after the stop: {still}"


def test_cluster_refuses_to_empty_a_directory_it_did_not_make(tmp_path: Path) -> None:
    keep = tmp_path / "keep.txt"
    keep.write_text("mine")
    done = subprocess.run(
        command("cluster", "--dir", str(tmp_path)),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done
    assert "not made by pulsar-grpc cluster" in done.stderr
    assert keep.read_text() == "mine"
