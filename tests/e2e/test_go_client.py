"""A Go client drives the broker with grpc-go and code generated from the .proto files.

tests/go/produce_consume/main.go (built by ``make go-client``, i.e. tests/go/build.sh)
produces 100 messages in batches of 10, consumes them on a Shared subscription, acks them and
waits for the AckReceipt, closes by half-closing, subscribes again and checks that nothing
comes back before a fresh message; then it reads a TopicNotFound's google.rpc.ErrorInfo from
the status details and checks that a misspelt parameter is refused. It prints one JSON
summary line and exits 0 on success.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

from tests.support import BrokerThread

ROOT = Path(__file__).resolve().parents[2]
BINARY = ROOT / "tests" / "go" / "build" / "produce_consume"
TIMEOUT_S = 90  # every call of the program has a 45 s deadline


def test_go_client_produces_consumes_acks_and_reads_error_info(broker: BrokerThread) -> None:
    assert BINARY.is_file(), f"{BINARY} is missing: run `make go-client`"
    assert BINARY.stat().st_mtime >= max(
        (ROOT / p).stat().st_mtime
        for p in ("tests/go/produce_consume/main.go", "protos/pulsargrpc/v1/pulsar.proto")
    ), f"{BINARY} is older than its sources: run `make go-client`"
    topic = f"persistent://public/default/go-{uuid.uuid4().hex}"
    try:
        proc = subprocess.run(
            [str(BINARY), broker.grpc_address, topic],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"produce_consume did not finish within {TIMEOUT_S} s\n"
            f"stdout:\n{exc.stdout!r}\nstderr:\n{exc.stderr!r}"
        ) from exc
    output = f"exit code {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.returncode == 0, output
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary == {
        "produced": 100,
        "receipts": 10,
        "consumed": 100,
        "redelivered": 0,
        "error_reason": "TopicNotFound",
        "error_domain": "pulsar.apache.org",
        "error_metadata": {"topic": "persistent://public/default/go-never-produced"},
        "typo_refusal": "InvalidArgument",
    }, output
