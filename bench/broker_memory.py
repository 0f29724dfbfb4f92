"""What the broker's memory and time cost per topic and per idle consumer, and how fast it loads
many topics, fresh and after a restart, measured on a standalone broker child process.

One run, on one fresh data directory (a temporary one):

1. **warm-up**: ``--warmup`` topics are loaded and dropped from the figures (the first loads
   import modules and fill caches that do not grow with the number of topics);
2. **topics**: ``--topics`` topics are loaded the way a producing client loads one: a Produce
   call opens (the broker loads the topic, creating it, and answers ``ready``), then the client
   half-closes it; ``--concurrency`` calls are in flight at once. Per loaded topic: the
   broker's RSS after, minus before, over the number of topics; topics/s over the wall time of
   the whole load; the broker's CPU seconds per 1,000 topics (the client shares the machine:
   this says whether the broker or the client bounded the rate);
3. **consumers**: ``--consumers`` Consume calls on the first topics (loaded already, so their
   own cost is not counted), each its own subscription, left idle once ``subscribed``: RSS
   after minus before over the number of streams, the subscription and its cursor included,
   as an idle application has them;
4. **floor** (measured last, once the broker has stopped): as many idle bidi streams on a
   bare grpc.aio server (a child process on uvloop, one method that reads until the end):
   what gRPC itself keeps per stream, under any consumer's figure;
5. **restart** twice, graceful (SIGTERM) and ``kill -9``: the broker starts again on the same
   data directory. *Serving* is the time from the new process's start to its ready line (it
   answers calls); *all topics ready* is the time from the same start until every one of the
   topics has been loaded again by clients coming back, which open their Produce calls (as in
   2) as soon as the broker serves, all at once up to ``--concurrency``.

The broker's RSS is read with psutil (``memory_info().rss``) after a garbage collection has
had its chance (a short settle). RSS figures move little between runs; rates do, with the
machine's other work: note ``uptime``.

``--tracemalloc`` runs the same load on a broker inside this process instead (no restart
step) and prints the top allocation sites, by size, of the topic load and of the consumers:
what to look at when a figure is too high.

Usage::

    PYTHONPATH=$PWD:$PWD/protos python -m bench.broker_memory               # the table (~2 min)
    PYTHONPATH=$PWD:$PWD/protos python -m bench.broker_memory --json
    PYTHONPATH=$PWD:$PWD/protos python -m bench.broker_memory --tracemalloc --topics 1000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import grpc
import psutil

from bench.killsoak import Broker
from pulsargrpc.v1 import pulsar_pb2_grpc as pbg

KB = 1024
SETTLE_S = 1.5  # after a step: the broker's loop runs its follow-up work, gc runs


def topic_names(prefix: str, count: int) -> list[str]:
    return [f"persistent://public/default/{prefix}-{i}" for i in range(count)]


async def bounded(concurrency: int, jobs: list[Callable[[], Awaitable[None]]]) -> None:
    """Run ``jobs`` with at most ``concurrency`` in flight; the first failure is raised."""
    queue = list(reversed(jobs))

    async def worker() -> None:
        while queue:
            await queue.pop()()

    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(jobs)))))


async def load_topics(address: str, topics: list[str], concurrency: int) -> None:
    """Load each topic the way a producer does: open a Produce call, await ``ready``, close."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pbg.PulsarServiceStub(channel)

        def opener(topic: str) -> Callable[[], Awaitable[None]]:
            async def open_and_close() -> None:
                call = stub.Produce(metadata=(("x-pulsar-topic", topic),))
                response = await call.read()
                if not response.HasField("ready"):
                    raise RuntimeError(f"{topic}: {response}")
                await call.done_writing()
                await call.read()  # the end of the call

            return open_and_close

        await bounded(concurrency, [opener(t) for t in topics])


class IdleConsumers:
    """Consume calls left open and idle (no permits), each on its own subscription."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._exit = AsyncExitStack()
        self._calls: list[Any] = []

    async def open(self, topics: list[str], concurrency: int) -> None:
        channel = await self._exit.enter_async_context(grpc.aio.insecure_channel(self.address))
        stub = pbg.PulsarServiceStub(channel)

        def opener(i: int, topic: str) -> Callable[[], Awaitable[None]]:
            async def subscribe() -> None:
                call = stub.Consume(
                    metadata=(("x-pulsar-topic", topic), ("x-pulsar-subscription", f"idle-{i}"))
                )
                self._calls.append(call)
                response = await call.read()
                if not response.HasField("subscribed"):
                    raise RuntimeError(f"{topic}: {response}")

            return subscribe

        await bounded(concurrency, [opener(i, t) for i, t in enumerate(topics)])

    async def close(self) -> None:
        for call in self._calls:
            call.cancel()
        await self._exit.aclose()


def rss(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


def cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


async def settle() -> None:
    await asyncio.sleep(SETTLE_S)


async def measure(args: argparse.Namespace, data_dir: Path, log_dir: Path) -> dict[str, Any]:
    extra = [arg for kv in args.set for arg in ("--set", kv)]
    broker = Broker(data_dir, log_dir, extra)
    result: dict[str, Any] = {
        "topics": args.topics,
        "consumers": args.consumers,
        "concurrency": args.concurrency,
        "load_before": os.getloadavg()[0],
    }
    try:
        result["first_start_s"] = broker.start()
        address = f"127.0.0.1:{broker.port}"
        pid = broker.pid
        await load_topics(address, topic_names("warm", args.warmup), args.concurrency)
        await settle()
        result["rss_start_mb"] = rss(pid) / KB / KB

        topics = topic_names("many", args.topics)
        before, cpu_before = rss(pid), cpu_s(pid)
        began = time.monotonic()
        await load_topics(address, topics, args.concurrency)
        elapsed = time.monotonic() - began
        cpu = cpu_s(pid) - cpu_before
        await settle()
        after = rss(pid)
        result["topic_kb"] = (after - before) / args.topics / KB
        result["topics_per_s"] = args.topics / elapsed
        result["topic_cpu_ms"] = cpu / args.topics * 1000

        consumers = IdleConsumers(address)
        before = rss(pid)
        began = time.monotonic()
        await consumers.open(topics[: args.consumers], args.concurrency)
        result["consumers_per_s"] = args.consumers / (time.monotonic() - began)
        await settle()
        result["consumer_kb"] = (rss(pid) - before) / args.consumers / KB
        result["rss_loaded_mb"] = rss(pid) / KB / KB
        await consumers.close()
        await settle()  # the stop below finds the topics idle, not the streams still ending

        for how in ("graceful", "kill9"):
            began = time.monotonic()
            if how == "graceful":
                broker.stop()
            else:
                broker.kill9()
            result[f"{how}_stop_s"] = time.monotonic() - began
            result[f"{how}_serving_s"] = broker.start()
            began_reload = time.monotonic()
            await load_topics(address_of(broker), topics, args.concurrency)
            reload_s = time.monotonic() - began_reload
            result[f"{how}_all_ready_s"] = result[f"{how}_serving_s"] + reload_s
            result[f"{how}_reload_per_s"] = args.topics / reload_s
        problems = broker.log_problems()
        if problems:
            result["log_problems"] = problems[:20]
    finally:
        broker.stop()
    result["bare_stream_kb"] = await bare_stream_floor(args.consumers)
    result["load_after"] = os.getloadavg()[0]
    return result


async def bare_stream_floor(count: int) -> float:
    """RSS per idle bidi stream of a bare grpc.aio server (on uvloop, as the broker runs):
    the floor under a consumer stream, whatever the broker keeps for it."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.broker_memory", "--bare-server",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert child.stdout is not None
    try:
        port = int(await child.stdout.readline())
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            method = channel.stream_stream("/bench.Bare/Idle")
            warm = [method() for _ in range(200)]
            for call in warm:
                await call.write(b"x")
            await settle()
            before = rss(child.pid)
            calls = [method() for _ in range(count)]
            for call in calls:
                await call.write(b"x")
            await settle()
            after = rss(child.pid)
            for call in warm + calls:
                call.cancel()
    finally:
        child.kill()
        await child.wait()
    return (after - before) / count / KB


def run_bare_server() -> None:
    """The child of :func:`bare_stream_floor`: one bidi method that reads until the end."""
    import uvloop

    async def serve() -> None:
        async def idle(requests: Any, context: grpc.aio.ServicerContext) -> None:
            async for _ in requests:
                pass

        server = grpc.aio.server()
        handler = grpc.stream_stream_rpc_method_handler(idle)
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("bench.Bare", {"Idle": handler}),)
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print(port, flush=True)
        await server.wait_for_termination()

    uvloop.run(serve())


def address_of(broker: Broker) -> str:
    return f"127.0.0.1:{broker.port}"


ROWS = [
    ("memory per loaded topic", "topic_kb", "{:.2f} KB"),
    ("memory per idle consumer stream", "consumer_kb", "{:.2f} KB"),
    ("topics loaded per second (fresh)", "topics_per_s", "{:,.0f}"),
    ("broker CPU per 1,000 topic loads", "topic_cpu_ms", "{:.2f} s"),
    ("consumers subscribed per second", "consumers_per_s", "{:,.0f}"),
    ("floor: an idle stream of a bare grpc.aio server", "bare_stream_kb", "{:.2f} KB"),
    ("broker RSS after warm-up", "rss_start_mb", "{:.1f} MB"),
    ("broker RSS, topics + consumers", "rss_loaded_mb", "{:.1f} MB"),
    ("graceful stop", "graceful_stop_s", "{:.2f} s"),
    ("restart after graceful stop: serving", "graceful_serving_s", "{:.2f} s"),
    ("restart after graceful stop: all topics ready", "graceful_all_ready_s", "{:.2f} s"),
    ("reload rate after graceful stop", "graceful_reload_per_s", "{:,.0f} topics/s"),
    ("restart after kill -9: serving", "kill9_serving_s", "{:.2f} s"),
    ("restart after kill -9: all topics ready", "kill9_all_ready_s", "{:.2f} s"),
    ("reload rate after kill -9", "kill9_reload_per_s", "{:,.0f} topics/s"),
]


def table(result: dict[str, Any]) -> str:
    lines = [
        f"{result['topics']:,} topics, {result['consumers']:,} idle consumers, "
        f"{result['concurrency']} calls in flight; load {result['load_before']:.2f} before, "
        f"{result['load_after']:.2f} after",
        "",
        "| measure | value |",
        "|---|---:|",
    ]
    for label, key, fmt in ROWS:
        if key in result:
            value = result[key]
            lines.append(f"| {label} | {fmt.format(value)} |")
    for problem in result.get("log_problems", []):
        lines.append(f"broker log: {problem}")
    return "\n".join(lines)


# ------------------------------------------------------------ --tracemalloc


async def profile(args: argparse.Namespace, data_dir: Path) -> None:
    """The same topic and consumer load against a broker in this process, with the top
    allocation sites of each step. The clients run in a child process (``--client``), so
    that what they allocate is not counted."""
    from pulsar_grpc.broker.config import load_config
    from pulsar_grpc.broker.service import BrokerService

    values = {"dataDirectory": str(data_dir), "grpcServicePort": "0", "webServicePort": "0"}
    values.update(kv.split("=", 1) for kv in args.set)
    async with BrokerService(load_config(None, {}, values)) as service:
        url = service.namespaces.internal_urls().grpc_url
        assert url is not None
        address = url.removeprefix("grpc://")
        await client_child(address, "topics", "warm", args.warmup, args.concurrency)
        tracemalloc.start(args.frames)
        for step, count in (("topics", args.topics), ("consumers", args.consumers)):
            gc.collect()
            before = tracemalloc.take_snapshot()
            child = await client_child(address, step, "many", count, args.concurrency)
            await asyncio.sleep(SETTLE_S)
            gc.collect()
            after = tracemalloc.take_snapshot()
            if child.stdin is not None:  # the consumers' child holds them until this closes
                child.stdin.close()
                await child.wait()
            stats = after.compare_to(before, "traceback" if args.frames > 1 else "lineno")
            total = sum(s.size_diff for s in stats)
            print(f"\n== {step}: {total / count:,.0f} bytes each (Python heap, all sites)")
            for stat in stats[: args.top]:
                sites = "  <  ".join(
                    f"{Path(frame.filename).name}:{frame.lineno}" for frame in stat.traceback
                )
                each, blocks = stat.size_diff / count, stat.count_diff / count
                print(f"{each:7.0f} B {blocks:5.2f} blocks  {sites}")
        tracemalloc.stop()


async def client_child(
    address: str, step: str, prefix: str, count: int, concurrency: int
) -> asyncio.subprocess.Process:
    """Run one step's clients in a child process; returns once the step is done (for
    ``consumers``: once all are subscribed; they stay open until the child's stdin closes)."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.broker_memory", "--client", address, "--step", step,
        "--prefix", prefix, "--count", str(count), "--concurrency", str(concurrency),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert child.stdout is not None
    line = await child.stdout.readline()
    if line.strip() != b"done":
        raise RuntimeError(f"client step {step} failed (exit {await child.wait()})")
    return child


async def run_client(args: argparse.Namespace) -> None:
    """The child's side of :func:`client_child`."""
    topics = topic_names(args.prefix, args.count)
    if args.step == "topics":
        await load_topics(args.client, topics, args.concurrency)
        print("done", flush=True)
        return
    consumers = IdleConsumers(args.client)
    await consumers.open(topics, args.concurrency)
    print("done", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await consumers.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--consumers", type=int, default=2_000)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--set", action="append", default=[], help="broker property k=v")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--tracemalloc", action="store_true", help="top allocation sites")
    parser.add_argument("--frames", type=int, default=1, help="traceback depth (tracemalloc)")
    parser.add_argument("--top", type=int, default=25, help="sites shown (tracemalloc)")
    parser.add_argument("--bare-server", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client", help=argparse.SUPPRESS)  # a --tracemalloc run's child
    parser.add_argument("--step", choices=["topics", "consumers"], help=argparse.SUPPRESS)
    parser.add_argument("--prefix", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        asyncio.run(run_client(args))
        return
    if args.bare_server:
        run_bare_server()
        return
    work = Path(tempfile.mkdtemp(prefix="broker-memory-"))
    try:
        if args.tracemalloc:
            asyncio.run(profile(args, work / "data"))
            return
        (work / "logs").mkdir()
        result = asyncio.run(measure(args, work / "data", work / "logs"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=2) if args.json else table(result))
    if "log_problems" in result:
        sys.exit(1)


if __name__ == "__main__":
    main()
