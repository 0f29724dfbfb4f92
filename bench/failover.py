"""Failover: how long a producer and a consumer are blocked when their topic's owner goes away,
with the SDK's default reconnect settings (backoff 100 ms doubling to 60 s), before and after
the ownership watch (issue 24), from one run each.

Why: after a kill -9 a topic can move only once ZooKeeper expires the dead owner's session
(metadataStoreSessionTimeoutMillis, Pulsar's default 30 s); a client reconnecting on its timer
alone comes back at the first attempt after that, and the timer has doubled past it by then.

Each scenario starts a fresh three-broker cluster (broker processes, as `make cluster` runs
them, each with its own ZooKeeper and PostgreSQL fault proxies) on one ZooKeeper and one
PostgreSQL. One topic is placed; a client through a broker that is NOT the owner sends one
message at a time (each awaited to its receipt, no send timeout) and receives and acks with an
Exclusive consumer. Then the owner is hit:

- ``unload``: its bundle is unloaded (admin API);
- ``kill9-30s`` / ``kill9-5s``: kill -9, with a 30 s (Pulsar's default) / 5 s session timeout;
- ``zk-partition``: its ZooKeeper link goes silent (blackhole) for 20 s, past its 5 s session,
  then is mended;
- ``pg-cut``: its PostgreSQL connections are reset and new ones refused for 15 s, then allowed
  again (5 s session).

Blocked time: the longest wait for a receipt (producer) and between two deliveries (consumer),
from the last before the fault until both have had 20 more after the fault ended (150 s at
most: "> 150" when they did not).

Usage (from a checkout whose .venv has the dev extras; ZooKeeper and PostgreSQL installed, as
`make cluster-deps` does)::

    PYTHONPATH=$PWD:$PWD/protos .venv/bin/python -m bench.failover [--before /path/to/old/tree]

``--before`` runs the same scenarios with another checkout's code (its own .venv, SDK and
brokers) first, and prints both columns; each column is one run of each scenario.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

SCENARIOS = {  # name -> (ZooKeeper session timeout ms, how long the fault is held, s)
    "unload": (30_000, 0.0),
    "kill9-30s": (30_000, 0.0),
    "kill9-5s": (5_000, 0.0),
    "zk-partition": (5_000, 20.0),
    "pg-cut": (5_000, 15.0),
}
AFTER_FAULT = 20  # receipts and deliveries after the fault that end a scenario
DEADLINE_S = 150.0
SEND_PAUSE_S = 0.02  # about 50 messages a second: light on a shared machine


async def run_scenario(name: str, workdir: Path) -> dict[str, float | None]:
    """One scenario on this checkout's code: the blocked times, seconds (None: not back)."""
    from pulsar_grpc.broker.naming import TopicName
    from pulsar_grpc.cli.local_servers import PostgresServer
    from pulsar_grpc.client import Client
    from pulsar_grpc.client.exceptions import Timeout
    from tests.cluster import place, start_cluster
    from tests.waiting import eventually
    from tests.zookeeper import ZooKeeperServer

    zookeeper = ZooKeeperServer(workdir / "zk").start()
    postgres = PostgresServer().start()
    session_ms, hold_s = SCENARIOS[name]
    properties = {"metadataStoreSessionTimeoutMillis": str(session_ms)}
    cluster = start_cluster(
        zookeeper,
        "/failover",
        postgres.create_database("failover"),
        workdir,
        properties,
        proxied=True,
    )
    try:
        members = cluster.members
        topic_name = "persistent://public/default/failover"
        topic = TopicName.get(topic_name)
        owner = await place(members, members[0].service_url(), topic)
        via = next(m for m in members if m is not owner)
        receipts: list[float] = []
        deliveries: list[float] = []
        stop = asyncio.Event()
        async with Client(via.service_url()) as client:
            consumer = await client.subscribe(topic_name, "bench", initial_position="earliest")
            producer = await client.create_producer(
                topic_name, batching_enabled=False, send_timeout_millis=0
            )

            async def produce() -> None:
                i = 0
                while not stop.is_set():
                    await producer.send(f"m{i}".encode())
                    receipts.append(time.monotonic())
                    i += 1
                    await asyncio.sleep(SEND_PAUSE_S)

            async def consume() -> None:
                while not stop.is_set():
                    try:
                        message = await consumer.receive(timeout_millis=500)
                    except Timeout:
                        continue
                    deliveries.append(time.monotonic())
                    await consumer.acknowledge(message)

            tasks = [asyncio.create_task(produce()), asyncio.create_task(consume())]
            await eventually(lambda: len(receipts) >= 50 and len(deliveries) >= 50, timeout=60)
            fault_at = time.monotonic()
            await fault(name, owner, topic)
            if hold_s:  # the owner's link stays broken this long, then is mended
                await asyncio.sleep(hold_s)
                assert owner.links is not None
                owner.links.zookeeper.heal()
                owner.links.postgres.heal()
            ended = time.monotonic()
            deadline = fault_at + DEADLINE_S
            while time.monotonic() < deadline:
                back = [sum(1 for t in ts if t > ended) for ts in (receipts, deliveries)]
                if min(back) >= AFTER_FAULT:
                    break
                await asyncio.sleep(0.1)
            stop.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return {
            "producer_s": blocked(receipts, fault_at, ended),
            "consumer_s": blocked(deliveries, fault_at, ended),
        }
    finally:
        cluster.stop()
        postgres.stop()
        zookeeper.stop()


async def fault(name: str, owner: object, topic: object) -> None:
    """Hit the owner."""
    from pulsar_grpc.broker.naming import DEFAULT_NAMESPACE, NamespaceBundles, TopicName
    from tests.cluster import Member

    assert isinstance(owner, Member) and isinstance(topic, TopicName)
    if name == "unload":
        bundle = NamespaceBundles.with_count(DEFAULT_NAMESPACE, 4).bundle_for(topic)
        request = urllib.request.Request(
            f"{owner.http_url()}/admin/v2/namespaces/public/default/{bundle.range_str}/unload",
            method="PUT",
        )
        await asyncio.to_thread(urllib.request.urlopen, request, timeout=60)
    elif name.startswith("kill9"):
        owner.process.kill9()
    elif name == "zk-partition":
        assert owner.links is not None
        owner.links.zookeeper.blackhole()
    else:
        assert owner.links is not None
        owner.links.postgres.refuse()


def blocked(times: list[float], fault_at: float, ended: float) -> float | None:
    """The longest gap between two events (receipts or deliveries) from the last before the
    fault through the AFTER_FAULT-th after the fault ended (None: they never came)."""
    before = [t for t in times if t <= fault_at]
    during = [t for t in times if fault_at < t <= ended]
    after = [t for t in times if t > ended]
    if len(after) < AFTER_FAULT:
        return None
    points = [before[-1] if before else fault_at, *during, *after[:AFTER_FAULT]]
    return max(b - a for a, b in itertools.pairwise(points))


def run_tree(tree: Path) -> dict[str, dict[str, float | None]]:
    """Every scenario, each in a child process on ``tree``'s code and venv."""
    results = {}
    for name in SCENARIOS:
        with tempfile.TemporaryDirectory(prefix=f"failover-{name}-") as workdir:
            env = {**os.environ, "PYTHONPATH": f"{tree}:{tree}/protos"}
            out = subprocess.run(
                [str(tree / ".venv/bin/python"), __file__, "--scenario", name, "--work", workdir],
                cwd=tree,
                env=env,
                capture_output=True,
                text=True,
                timeout=DEADLINE_S + 300,
            )
            if out.returncode != 0:
                print(out.stderr[-3000:], file=sys.stderr)
                results[name] = {"producer_s": None, "consumer_s": None}
                continue
            results[name] = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"  {tree.name} {name}: {results[name]}", file=sys.stderr, flush=True)
    return results


def cell(value: float | None) -> str:
    return f"> {DEADLINE_S:g}" if value is None else f"{value:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="another checkout to compare with")
    parser.add_argument("--scenario", choices=SCENARIOS, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.scenario:  # the child: one scenario on this interpreter's code
        print(json.dumps(asyncio.run(run_scenario(args.scenario, args.work))))
        return
    here = Path(__file__).resolve().parent.parent
    columns = {}
    if args.before:
        columns["before"] = run_tree(args.before.resolve())
    columns["after"] = run_tree(here)
    header = "| scenario | session | " + " | ".join(
        f"{c} producer s | {c} consumer s" for c in columns
    )
    print(header + " |")
    print("|" + "---|" * (2 + 2 * len(columns)))
    for name, (session_ms, _) in SCENARIOS.items():
        cells = [
            f"{cell(r[name]['producer_s'])} | {cell(r[name]['consumer_s'])}"
            for r in columns.values()
        ]
        print(f"| {name} | {session_ms / 1000:g} s | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
