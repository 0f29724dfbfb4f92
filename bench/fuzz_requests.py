"""The request fuzzer of tests/e2e/test_fuzz_requests.py, run long: many random programs of
produce, flow, ack, nack, seek, redeliver and reconnect requests against a fresh standalone
broker, then kill -9 and a restart; prints how many ran, the longest the broker's probe waited,
the broker's RSS at the end, and every invariant violated (the first failing program is
printed as hypothesis's falsifying example; the broker is shared by every program, so it is not
shrunk).

    PYTHONPATH=$PWD:$PWD/protos .venv/bin/python -m bench.fuzz_requests --examples 2000
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time

import psutil

from pulsar_grpc.cli.perf.procs import standalone
from tests.e2e.fuzzing import Prober, Run
from tests.e2e.test_fuzz_requests import RETAIN_ALL, ClientLoop, fuzz, stored_entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=2000)
    args = parser.parse_args()
    run = Run()
    started = time.monotonic()
    failure: BaseException | None = None
    with tempfile.TemporaryDirectory(prefix="pulsar-grpc-fuzz-") as data:
        with standalone(*RETAIN_ALL, data=data) as broker:
            address = broker.service_url.removeprefix("grpc://")
            process = psutil.Process(broker.pid)
            with Prober(address) as prober:
                try:
                    fuzz(address, run, args.examples)
                except Exception as e:  # a violation, or the run itself could not go on
                    failure = e
            rss_mb = process.memory_info().rss / 2**20
            os.kill(broker.pid, signal.SIGKILL)
        lost = 0
        with standalone(*RETAIN_ALL, data=data) as broker, ClientLoop() as client:
            address = broker.service_url.removeprefix("grpc://")
            for topic, receipted in run.receipted.items():
                if receipted:
                    lost += len(receipted - client.run(stored_entries(address, topic)))
    print(
        f"{run.programs} programs, {run.requests} requests in {time.monotonic() - started:.0f} s;"
        f" probe: worst wait {prober.worst_s * 1000:.0f} ms, {len(prober.failures)} failed;"
        f" broker RSS at the end {rss_mb:.0f} MB;"
        f" receipted entries lost across the restart: {lost}"
    )
    for violation in run.violations[:20]:
        print("VIOLATION", violation)
    if failure is not None or run.violations or lost or prober.failures:
        print(failure or "", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
