"""CPU seconds per message of the load process: the bare stream, the SDK producer, the
hand-built producer (``perf all``'s produce rows, by a measure that a shared machine disturbs
less than msg/s).

On a busy machine the msg/s of a run swing with the neighbours; the CPU time the load process
spends per message does much less. The SDK producer is bound by its process's core, so
``ceiling CPU / SDK CPU`` is the share of the bare stream it would reach with a core to itself
(while the broker keeps up: its CPU per message is printed too).

    PYTHONPATH=$PWD:$PWD/protos .venv/bin/python bench/produce_cpu.py --messages 1000000
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import uvloop

from bench.broker_memory import cpu_s
from pulsar_grpc.cli.perf.load import produce_sdk
from pulsar_grpc.cli.perf.procs import ceiling_server, standalone
from pulsar_grpc.cli.perf.raw import produce_raw
from pulsar_grpc.cli.perf.spec import LoadSpec
from pulsar_grpc.cli.perf.stats import Recorder


def _run(label: str, runner: object, spec: LoadSpec, server_pid: int) -> float:
    """One run; prints msg/s and µs of CPU per message (load process, server); returns the
    load process's."""
    rec = Recorder(label, spec.size)
    cpu, server, wall = time.process_time(), cpu_s(server_pid), time.perf_counter()
    uvloop.run(runner(spec, rec))  # type: ignore[operator]
    cpu, server = time.process_time() - cpu, cpu_s(server_pid) - server
    wall = time.perf_counter() - wall
    n = rec.count
    print(
        f"{label:12s} {n:>10,} msgs {n / wall:>10,.0f} msg/s   CPU per message: load "
        f"{cpu / n * 1e6:5.2f} µs, server {server / n * 1e6:5.2f} µs",
        flush=True,
    )
    return cpu / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    args = parser.parse_args()
    spec = LoadSpec(service_url="", topics=("c",), messages=args.messages, interval=3600)
    with ceiling_server() as (url, pid):
        ceiling = _run("ceiling", produce_raw, replace(spec, service_url=url), pid)
    with standalone() as broker:
        on_broker = replace(spec, service_url=broker.service_url)
        sdk = _run("produce", produce_sdk, replace(on_broker, topics=("sdk",)), broker.pid)
        raw = _run("produce raw", produce_raw, replace(on_broker, topics=("raw",)), broker.pid)
    print(f"ceiling's load CPU / SDK's: {ceiling / sdk:.1%}; / hand-built's: {ceiling / raw:.1%}")


if __name__ == "__main__":
    main()
