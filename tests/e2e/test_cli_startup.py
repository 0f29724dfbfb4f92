"""`pulsar-grpc --help` and the admin verbs start without grpc, protobuf, the SDK or the
broker: main() imports a command's module only when it runs (issue 29; the timings are in
docs/benchmarks.md, "CLI start-up"). What is imported is checked, not how long it takes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.e2e.test_cli import ROOT
from tests.support import BrokerThread

# What costs a second to import, and what an admin verb (an HTTP request) does not use.
HEAVY = ("grpc", "google.protobuf", "aiohttp", "pulsar_grpc.client", "pulsar_grpc.broker.service")

# Runs main() on argv, then prints which of HEAVY were imported (after its own output).
_PROBE = """
import json, sys
from pulsar_grpc.cli.main import main
try:
    code = main(sys.argv[2:])
except SystemExit as exc:
    code = exc.code
print(json.dumps([name for name in json.loads(sys.argv[1]) if name in sys.modules]))
sys.exit(code)
"""


def imported(*argv: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """The command's outcome and which of HEAVY it imported."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(HEAVY), *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done, json.loads(done.stdout.splitlines()[-1])


def test_help_imports_no_command() -> None:
    done, heavy = imported("--help")
    assert done.returncode == 0 and "admin" in done.stdout, done.stderr
    assert heavy == []


@pytest.mark.parametrize(
    "argv",
    [
        ("admin", "tenants", "list"),
        ("topics", "list", "public/default"),
        ("admin", "namespaces", "policies", "public/default"),
        ("admin", "--help"),
    ],
)
def test_admin_verbs_import_no_grpc_sdk_or_broker(
    broker: BrokerThread, argv: tuple[str, ...]
) -> None:
    done, heavy = imported(*argv, "--admin-url", broker.http_url)
    assert done.returncode == 0, done.stderr
    assert heavy == []


def test_produce_still_imports_what_it_uses(broker: BrokerThread) -> None:
    done, heavy = imported("produce", "startup", "-m", "x", "--url", broker.service_url)
    assert done.returncode == 0, done.stderr
    assert {"grpc", "pulsar_grpc.client"} <= set(heavy)
