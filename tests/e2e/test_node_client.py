"""A Node.js client drives the broker with @grpc/grpc-js straight from the .proto files.

tests/node/produce_consume.js produces 1000 messages in batches of 100, consumes them on a
Shared subscription, acks them (the last ack waits for its AckReceipt), then subscribes again
and checks that nothing comes back. It prints one JSON summary line and exits 0 on success.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = ROOT / "tests" / "node"
SCRIPT = NODE_DIR / "produce_consume.js"
TIMEOUT_S = 90  # the script gives up by itself after 60 s


def test_node_client_produces_consumes_and_acks(broker: Any) -> None:
    node = shutil.which("node")
    assert node is not None, "node (Node.js 20) is not on PATH"
    assert (NODE_DIR / "node_modules" / "@grpc" / "grpc-js").is_dir(), (
        "tests/node/node_modules is missing: run `make node-deps`"
    )
    assert (NODE_DIR / "node_modules" / "@grpc" / "proto-loader").is_dir(), (
        "tests/node/node_modules is incomplete: run `make node-deps`"
    )

    topic = f"persistent://public/default/node-{uuid.uuid4().hex}"
    try:
        proc = subprocess.run(
            [node, str(SCRIPT), broker.grpc_address, topic],
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"produce_consume.js did not finish within {TIMEOUT_S} s\n"
            f"stdout:\n{exc.stdout!r}\nstderr:\n{exc.stderr!r}"
        ) from exc

    output = f"exit code {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.returncode == 0, output
    lines = proc.stdout.strip().splitlines()
    assert lines, output
    summary = json.loads(lines[-1])
    assert summary == {"produced": 1000, "consumed": 1000, "redelivered": 0}, output
