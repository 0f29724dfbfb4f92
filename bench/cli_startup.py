"""Wall time of `pulsar-grpc` commands from start to exit (issue 29, "CLI start-up").

Each command is run ``--runs`` times in a fresh interpreter (``python -m pulsar_grpc.cli.main``,
what the ``pulsar-grpc`` script runs) and the median is printed, so one slow start on a shared
machine does not decide the figure. The admin verbs and ``produce`` need a running broker:
``--admin-url`` and ``--service-url`` name it (a standalone broker's defaults otherwise).

Bytecode is cached (in a temporary ``PYTHONPYCACHEPREFIX``, after one untimed run), as for an
installed package, even where the environment sets ``PYTHONDONTWRITEBYTECODE``: compiling the
sources on every start would be most of what is measured.

    python bench/cli_startup.py --admin-url http://127.0.0.1:8080 --service-url grpc://...
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


def median_wall_s(argv: list[str], runs: int, env: dict[str, str]) -> float:
    """The median seconds one run of the command takes (after an untimed one that caches its
    bytecode); a failing command stops the script."""
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--admin-url", default="http://127.0.0.1:8080")
    parser.add_argument("--service-url", default="grpc://127.0.0.1:50051")
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    cli = [sys.executable, "-m", "pulsar_grpc.cli.main"]
    commands = {
        "--help": ["--help"],
        "admin tenants list": ["admin", "tenants", "list", "--admin-url", args.admin_url],
        "topics list public/default": [
            "topics", "list", "public/default", "--admin-url", args.admin_url,
        ],
        "produce (one message)": [
            "produce", "bench-cli-startup", "-m", "x", "--service-url", args.service_url,
        ],
    }  # fmt: skip
    with tempfile.TemporaryDirectory() as cache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = cache
        for name, verb in commands.items():
            wall_s = median_wall_s(cli + verb, args.runs, env)
            print(f"{name:30} {wall_s * 1000:7.0f} ms")


if __name__ == "__main__":
    main()
