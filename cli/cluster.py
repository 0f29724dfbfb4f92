"""`pulsar-grpc cluster` (`make cluster`): a three-broker cluster on this machine, to try out.

It starts ZooKeeper (the metadata) and PostgreSQL (the entries) as child processes, then three
`pulsar-grpc broker` processes on them, prints every address and waits; SIGINT (Ctrl-C) or
SIGTERM stops the brokers (each leaves the cluster cleanly), then PostgreSQL, then ZooKeeper.
Every start is a fresh cluster: the work directory (default `.cluster/`) is emptied first and
keeps the configurations and logs after the stop for reading.

Each broker has two listeners, so that lookups show listener selection: ``internal`` on
127.0.0.1 (also the broker's primary address) and ``external`` on 127.0.0.2 (another loopback
address, standing for a second network). The ports have fixed defaults, clear of `make run`'s
standalone (50051, 8080): broker i serves gRPC on 6650+i, HTTP on 8180+i, on both hosts;
options move them (and ZooKeeper's and PostgreSQL's) where those are taken.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from pulsar_grpc.cli.local_servers import (
    BrokerProcess,
    PostgresServer,
    ServerNotInstalledError,
    ZooKeeperServer,
    free_port,
)

INTERNAL_HOST = "127.0.0.1"
EXTERNAL_HOST = "127.0.0.2"
BROKERS = 3
FIRST_GRPC_PORT = 6650
FIRST_HTTP_PORT = 8180
ZOOKEEPER_PORT = 2181
POSTGRES_PORT = 5433  # not 5432, where a system PostgreSQL may already listen
# The metadata under one chroot: the cluster's nodes stay apart from anything else in the
# ZooKeeper a reader may point it at.
CHROOT = "/pulsar-grpc"
# Marks a work directory as this command's, so that the next run may empty it.
WORKDIR_MARKER = ".pulsar-grpc-cluster"
# MemberPorts.free's tries: a port free on one host is almost always free on the other.
FREE_PORT_ATTEMPTS = 100


@dataclass(frozen=True)
class MemberPorts:
    """One broker's ports: the same gRPC and HTTP ports on the internal and external hosts."""

    grpc: int
    http: int

    @classmethod
    def free(cls) -> MemberPorts:
        """Ports free on both hosts now (for tests, which run beside other clusters); an
        OSError when none are found, as where 127.0.0.2 is no local address (macOS)."""
        for _ in range(FREE_PORT_ATTEMPTS):
            grpc, http = free_port(INTERNAL_HOST), free_port(INTERNAL_HOST)
            if grpc != http and _free_on(EXTERNAL_HOST, grpc) and _free_on(EXTERNAL_HOST, http):
                return cls(grpc, http)
        raise OSError(f"no two ports free on both {INTERNAL_HOST} and {EXTERNAL_HOST}")

    def url(self, scheme: str, listener: str) -> str:
        host = INTERNAL_HOST if listener == "internal" else EXTERNAL_HOST
        return f"{scheme}://{host}:{self.grpc if scheme == 'grpc' else self.http}"


def _free_on(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


# metadataStoreSessionTimeoutMillis of `make cluster`'s brokers (see broker_properties).
DEMO_SESSION_TIMEOUT_MS = 5000


def broker_properties(
    ports: MemberPorts, data_dir: Path, metadata_store_url: str, ledger_storage_url: str
) -> dict[str, str]:
    """A cluster member's broker.conf: listener ``internal`` on the primary addresses
    (127.0.0.1), ``external`` bound on 127.0.0.2; a lookup answers the addresses of the
    listener it came through (or the one it names)."""
    advertised = [
        f"{listener}:{ports.url(scheme, listener)}"
        for listener in ("internal", "external")
        for scheme in ("grpc", "http")
    ]
    return {
        "metadataStoreUrl": metadata_store_url,
        "ledgerStorageUrl": ledger_storage_url,
        "dataDirectory": str(data_dir),
        "bindAddress": INTERNAL_HOST,
        "grpcServicePort": str(ports.grpc),
        "webServicePort": str(ports.http),
        "advertisedListeners": ",".join(advertised),
        "internalListenerName": "internal",
        "bindAddresses": ",".join(advertised[2:]),
        # A killed broker's bundles move once ZooKeeper expires its session: with Pulsar's
        # default (30 s) a demo's clients wait half a minute after a kill -9, with this about
        # 5 s. ZooKeeper's tick here (2 s) allows 4 s at least; a broker pinging every third of
        # it keeps its session on a busy laptop. Production keeps 30 s (fewer false expiries).
        "metadataStoreSessionTimeoutMillis": str(DEMO_SESSION_TIMEOUT_MS),
    }


def write_broker(workdir: Path, name: str, properties: dict[str, str]) -> BrokerProcess:
    """Write `<workdir>/<name>/broker.conf`; the (not yet started) broker on it."""
    home = workdir / name
    home.mkdir(parents=True, exist_ok=True)
    conf = home / "broker.conf"
    conf.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))
    return BrokerProcess(conf, home / "broker.log")


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "cluster",
        description="A fresh three-broker cluster on this machine (ZooKeeper and PostgreSQL "
        "from their Debian packages, see `make cluster-deps`), for trying it out.",
    )
    p.add_argument(
        "--dir",
        type=Path,
        default=Path(".cluster"),
        help="work directory, emptied first: configurations, data, logs (default .cluster)",
    )
    ports = (
        ("--zookeeper-port", ZOOKEEPER_PORT, "ZooKeeper's port"),
        ("--postgres-port", POSTGRES_PORT, "PostgreSQL's port"),
        ("--grpc-port", FIRST_GRPC_PORT, "broker 0's gRPC port; broker i's is this + i"),
        ("--http-port", FIRST_HTTP_PORT, "broker 0's HTTP port; broker i's is this + i"),
    )
    for flag, default, what in ports:
        p.add_argument(flag, type=int, default=default, help=f"{what} (default {default})")
    p.set_defaults(run=run)


class _Stop:
    """Set by SIGINT or SIGTERM; the main thread waits on it."""

    def __init__(self) -> None:
        self.event = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: self.event.set())


def _fresh_workdir(workdir: Path) -> None:
    """Empty `workdir` for a new cluster; refuse a non-empty directory an earlier run did not
    make (a mistyped --dir must not delete someone's files)."""
    if workdir.exists() and any(workdir.iterdir()):
        if not (workdir / WORKDIR_MARKER).exists():
            raise ValueError(f"--dir {workdir}: not empty and not made by pulsar-grpc cluster")
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / WORKDIR_MARKER).touch()


def run(args: argparse.Namespace) -> int:
    workdir: Path = args.dir.resolve()
    try:
        _fresh_workdir(workdir)
    except ValueError as exc:
        print(f"pulsar-grpc cluster: {exc}", file=sys.stderr)
        return 2
    stop = _Stop()
    zookeeper: ZooKeeperServer | None = None
    postgres: PostgresServer | None = None
    brokers: list[BrokerProcess] = []
    try:
        members = [MemberPorts(args.grpc_port + i, args.http_port + i) for i in range(BROKERS)]
        zookeeper = ZooKeeperServer(workdir / "zookeeper", port=args.zookeeper_port)
        print(f"starting ZooKeeper on {zookeeper.hosts} ...", flush=True)
        zookeeper.start()
        postgres = PostgresServer(port=args.postgres_port)
        print(f"starting PostgreSQL on 127.0.0.1:{args.postgres_port} ...", flush=True)
        postgres.start()
        metadata = f"zk:{zookeeper.hosts}{CHROOT}"
        for i, ports in enumerate(members):
            properties = broker_properties(
                ports, workdir / f"broker-{i}" / "data", metadata, postgres.url()
            )
            brokers.append(write_broker(workdir, f"broker-{i}", properties))
        print(f"starting {BROKERS} brokers ...", flush=True)
        for broker in brokers:
            broker.launch()
        for broker in brokers:
            broker.wait_ready()
        print(_summary(workdir, metadata, postgres.url(), members), flush=True)
        # A broker that exits (kill -9 it to see its bundles move) is reported; the others
        # carry on.
        exited: set[int] = set()
        while not stop.event.wait(1):
            for i, broker in enumerate(brokers):
                if i not in exited and not broker.running:
                    exited.add(i)
                    print(f"broker-{i} exited; see {broker.log}", file=sys.stderr, flush=True)
    except (ServerNotInstalledError, RuntimeError, OSError, subprocess.SubprocessError) as exc:
        # SubprocessError: PostgreSQL's tools hung (TimeoutExpired) or useradd failed.
        print(f"pulsar-grpc cluster: cannot start: {exc}", file=sys.stderr)
        return 1
    finally:
        print("stopping the brokers, then PostgreSQL and ZooKeeper ...", flush=True)
        for broker in brokers:
            broker.stop()
        if postgres is not None:
            postgres.stop()
        if zookeeper is not None:
            zookeeper.stop()
        print("stopped", flush=True)
    return 0


def _summary(workdir: Path, metadata: str, ledgers: str, members: list[MemberPorts]) -> str:
    lines = [
        "",
        "pulsar-grpc cluster ready:",
        f"  metadataStoreUrl={metadata}",
        f"  ledgerStorageUrl={ledgers}",
    ]
    for i, ports in enumerate(members):
        lines.append(f"  broker-{i}")
        for listener in ("internal", "external"):
            lines.append(
                f"    {listener:<8} {ports.url('grpc', listener):<24} {ports.url('http', listener)}"
            )
    lines += [
        f"  configurations and logs: {workdir}/broker-<i>/",
        "Ctrl-C stops everything.",
    ]
    return "\n".join(lines)
