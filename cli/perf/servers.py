"""The servers of `perf cluster`: ZooKeeper and PostgreSQL once per run, brokers per step.

Each step (a broker count, a repetition of a kill) gets brokers of its own on a fresh ZooKeeper
chroot and a fresh PostgreSQL database, so no step sees another's topics or bundles, while the
slow starts (a JVM, initdb) happen once. The brokers are `pulsar-grpc broker` processes on the
configuration `pulsar-grpc cluster` writes (cli.cluster), started by cli.local_servers.
"""

from __future__ import annotations

import asyncio
import itertools
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pulsar_grpc.cli.cluster import MemberPorts, broker_properties, write_broker
from pulsar_grpc.cli.local_servers import BrokerProcess, PostgresServer, ZooKeeperServer
from pulsar_grpc.cli.perf import create_partitioned_topic
from pulsar_grpc.client import Client

# Pulsar's default ZooKeeper session (metadataStoreSessionTimeoutMillis).
DEFAULT_SESSION_MS = 30_000


@dataclass
class Brokers:
    """The running brokers of one step."""

    processes: list[BrokerProcess]

    @property
    def service_urls(self) -> list[str]:
        return [b.grpc_url for b in self.processes]

    @property
    def http_urls(self) -> list[str]:
        return [b.http_url for b in self.processes]

    @property
    def pids(self) -> list[int]:
        return [b.pid for b in self.processes if b.pid is not None]


class Servers:
    """ZooKeeper and PostgreSQL for a whole `perf cluster` run, under a temporary directory."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.zookeeper = ZooKeeperServer(workdir / "zookeeper")
        self.postgres = PostgresServer()
        self._steps = itertools.count()

    @contextmanager
    def brokers(self, count: int, session_ms: int = DEFAULT_SESSION_MS) -> Iterator[Brokers]:
        """``count`` brokers on a fresh chroot and database; stopped (SIGTERM) on exit.

        The overload threshold is 100%: the brokers share the machine's cores with the load,
        and a busy moment must not make the leader pass a broker over when it places bundles.
        """
        step = next(self._steps)
        database = self.postgres.create_database(f"perf_{step}")
        metadata = f"zk:{self.zookeeper.hosts}/perf-{step}"
        processes = []
        for i in range(count):
            name = f"step-{step}-broker-{i}"
            properties = {
                **broker_properties(
                    MemberPorts.free(), self.workdir / name / "data", metadata, database
                ),
                "metadataStoreSessionTimeoutMillis": str(session_ms),
                "loadBalancerBrokerOverloadedThresholdPercentage": "100",
            }
            processes.append(write_broker(self.workdir, name, properties))
        try:
            for process in processes:
                process.launch()
            for process in processes:
                process.wait_ready()
            yield Brokers(processes)
        finally:
            for process in processes:
                process.stop()


@contextmanager
def servers() -> Iterator[Servers]:
    """ZooKeeper and PostgreSQL started, stopped on exit (logs in a temporary directory)."""
    with tempfile.TemporaryDirectory(prefix="pulsar-grpc-perf-cluster-") as tmp:
        run = Servers(Path(tmp))
        run.zookeeper.start()
        try:
            run.postgres.start()
            try:
                yield run
            finally:
                run.postgres.stop()
        finally:
            run.zookeeper.stop()


def placed_topic(service_url: str, admin_url: str, topic: str, partitions: int) -> list[str]:
    """Create ``topic`` with ``partitions`` partitions and look each partition up, as a
    client would before it produces (only a lookup makes the leader place a bundle): each
    partition's owner (its gRPC URL), in partition order."""
    create_partitioned_topic(admin_url, topic, partitions)

    async def lookups() -> list[str]:
        async with Client(service_url) as client:
            return [
                (await client.lookup(f"{topic}-partition-{p}")).grpc_url for p in range(partitions)
            ]

    return asyncio.run(lookups())
