"""What the TLS front costs (broker/tls_front.py): ``pulsar-grpc perf produce`` over TLS with a
client certificate, against a broker whose TLS port is grpcio's own mutual TLS
(tlsRequireTrustedClientCertOnConnect=true: no front) and one whose port is served by the
front (the same setting false, with the TLS provider: Python's ssl on the front's thread,
piping to the gRPC server on loopback).

Each mode, in turn and ``--rounds`` times over, gets its own standalone broker (a child
process) and the same perf run; the certificates are made as tests/tls.py makes them. Prints
the perf summary line of each run and a Markdown table for docs/benchmarks.md.

Usage::

    PYTHONPATH=$PWD:$PWD/protos python -m bench.tls_front_cost --seconds 10
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.killsoak import Broker, free_port
from tests.tls import TlsFiles, make_tls_files

_AGGREGATED = re.compile(r"Aggregated throughput stats --- (\d+) records .*? --- ([\d.]+) msg/s")


def broker_flags(files: TlsFiles, tls_port: int, require_certificate: bool) -> list[str]:
    settings = {
        "grpcServicePortTls": str(tls_port),
        "tlsCertificateFilePath": str(files.server_cert),
        "tlsKeyFilePath": str(files.server_key),
        "tlsTrustCertsFilePath": str(files.ca),
        "tlsRequireTrustedClientCertOnConnect": str(require_certificate).lower(),
        "authenticationEnabled": "true",
        "authenticationProviders": "tls",
    }
    return [arg for name, value in settings.items() for arg in ("--set", f"{name}={value}")]


def perf_produce(files: TlsFiles, tls_port: int, seconds: int, size: int) -> tuple[int, float]:
    """Messages produced and the aggregated msg/s of one ``perf produce`` run."""
    command = [
        sys.executable, "-m", "pulsar_grpc.cli.main", "perf", "produce", "bench-tls-front",
        "-u", f"grpc+ssl://127.0.0.1:{tls_port}",
        "--tls-trust-cert-path", str(files.ca),
        "--auth-plugin", "tls",
        "--auth-params", f"tlsCertFile:{files.client_cert},tlsKeyFile:{files.client_key}",
        "-r", "0", "-s", str(size), "-time", str(seconds),
    ]  # fmt: skip
    out = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 120)
    match = _AGGREGATED.search(out.stdout + out.stderr)  # the summary lines go to stderr
    if out.returncode != 0 or match is None:
        raise RuntimeError(f"perf produce failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    print(match.group(0), flush=True)
    return int(match.group(1)), float(match.group(2))


def main(seconds: int, size: int, rounds: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-tls-front-"))
    files = make_tls_files(root / "tls")
    modes = [("grpcio mutual TLS (no front)", True), ("TLS front", False)]
    rows = []
    load_before = os.getloadavg()
    try:
        # Rounds alternate the modes, so that a machine getting busier favours neither.
        for round_no, (name, require) in enumerate(modes * rounds):
            data = root / f"broker-{round_no}"
            data.mkdir()
            tls_port = free_port()
            broker = Broker(data / "store", data, broker_flags(files, tls_port, require))
            broker.start()
            try:
                rows.append((name, *perf_produce(files, tls_port, seconds, size)))
            finally:
                broker.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    load_after = os.getloadavg()
    print(f"\nload average before {load_before[0]:.2f}, after {load_after[0]:.2f}")
    print(f"| TLS port served by | messages in {seconds} s | produce msg/s ({size} B) |")
    print("|---|---:|---:|")
    for name, count, rate in rows:
        print(f"| {name} | {count:,} | {rate:,.0f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    main(args.seconds, args.size, args.rounds)
