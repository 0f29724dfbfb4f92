"""A Node.js client drives the broker with @grpc/grpc-js straight from the .proto files.

tests/node/produce_consume.js produces 1000 messages in batches of 100, consumes them on a
Shared subscription, acks them (the last ack waits for its AckReceipt), then subscribes again
and checks that nothing comes back. It prints one JSON summary line and exits 0 on success.
Against a broker with token authentication it sends the token of $PULSAR_GRPC_AUTH_TOKEN as
``authorization: Bearer``; without it, it is refused UNAUTHENTICATED. With --json-schema its
producer declares a JSON schema in x-pulsar-schema-bin, which the broker registers, and every
entry it consumes carries that schema's version.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from pulsar_grpc.broker.security.tokens import create_secret_key, create_token
from pulsargrpc.v1 import pulsar_pb2 as pb
from pulsargrpc.v1 import pulsar_pb2_grpc as pbg
from tests.support import BrokerThread

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = ROOT / "tests" / "node"
SCRIPT = NODE_DIR / "produce_consume.js"
TIMEOUT_S = 90  # the script gives up by itself after 60 s


def run_node(
    grpc_address: str, env: dict[str, str] | None = None, *args: str, topic: str | None = None
) -> tuple[int, str, str]:
    """Run the script against ``grpc_address``: its exit code, the whole output (for
    messages), and its last stdout line."""
    node = shutil.which("node")
    assert node is not None, "node (Node.js 20) is not on PATH"
    assert (NODE_DIR / "node_modules" / "@grpc" / "grpc-js").is_dir(), (
        "tests/node/node_modules is missing: run `make node-deps`"
    )
    assert (NODE_DIR / "node_modules" / "@grpc" / "proto-loader").is_dir(), (
        "tests/node/node_modules is incomplete: run `make node-deps`"
    )

    topic = topic or f"persistent://public/default/node-{uuid.uuid4().hex}"
    try:
        proc = subprocess.run(
            [node, str(SCRIPT), grpc_address, topic, *args],
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
            env={**os.environ, **(env or {})},
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"produce_consume.js did not finish within {TIMEOUT_S} s\n"
            f"stdout:\n{exc.stdout!r}\nstderr:\n{exc.stderr!r}"
        ) from exc

    output = f"exit code {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    lines = proc.stdout.strip().splitlines()
    assert lines, output
    return proc.returncode, output, lines[-1]


def test_node_client_produces_consumes_and_acks(broker: Any) -> None:
    code, output, last = run_node(broker.grpc_address)
    assert code == 0, output
    assert json.loads(last) == {"produced": 1000, "consumed": 1000, "redelivered": 0}, output


def test_node_client_with_a_token(broker_factory: Callable[..., BrokerThread]) -> None:
    key = create_secret_key()
    broker = broker_factory(
        authenticationEnabled="true",
        authenticationProviders="token",
        tokenSecretKey="data:;base64," + base64.b64encode(key).decode(),
    )
    token = create_token(key, "node-app", expires_at=int(time.time()) + 3600)
    code, output, last = run_node(broker.grpc_address, {"PULSAR_GRPC_AUTH_TOKEN": token})
    assert code == 0, output
    assert json.loads(last) == {"produced": 1000, "consumed": 1000, "redelivered": 0}, output

    code, output, last = run_node(broker.grpc_address, {"PULSAR_GRPC_AUTH_TOKEN": ""})
    assert code == 1, output
    assert "UNAUTHENTICATED" in json.loads(last)["error"], output


def test_node_client_declares_a_json_schema_the_broker_registers(broker: BrokerThread) -> None:
    topic = f"persistent://public/default/node-json-{uuid.uuid4().hex}"
    code, output, last = run_node(broker.grpc_address, None, "--json-schema", topic=topic)
    assert code == 0, output
    assert json.loads(last) == {
        "produced": 1000,
        "consumed": 1000,
        "redelivered": 0,
        "schema_version": "0000000000000000",
    }, output
    with grpc.insecure_channel(broker.grpc_address) as channel:
        got = pbg.PulsarServiceStub(channel).GetSchema(pb.GetSchemaRequest(topic=topic))
    assert got.schema_version == bytes(8)
    assert got.schema.type == pb.SCHEMA_TYPE_JSON
    assert dict(got.schema.properties) == {"from": "produce_consume.js"}
    definition = json.loads(got.schema.schema_data)
    assert definition["name"] == "Greeting"
    assert [f["name"] for f in definition["fields"]] == ["seq", "text"]
