"""Three `pulsar-grpc broker` PROCESSES on the run's ZooKeeper and a fresh PostgreSQL database:
what `make cluster` runs (pulsar_grpc.cli.cluster's broker.conf, two listeners each:
``internal`` on 127.0.0.1, ``external`` on 127.0.0.2), on free ports, under a chroot of the
test's own, with a short ZooKeeper session timeout so that a killed broker's bundles move
within seconds.

``cluster_factory(**properties)`` starts one (extra broker.conf properties for every member;
``proxied=True`` puts each member's ZooKeeper and PostgreSQL links behind fault proxies;
``start_cluster`` for a module's own, of any size);
each member can be killed (kill -9), stopped and started again on its ports. Every process is
stopped at teardown; each broker's output goes to its log file (nothing to drain), and a failed
test shows the logs' tails. A test module imports ``cluster_factory`` with the fixtures it
needs: ``postgres_server``, ``postgres_url``, ``zk_chroot``, ``zookeeper``.

Also what tests of lookups across IN-PROCESS brokers share: ``BrokerMember`` (one
BrokerThread with an ``internal`` and an ``external`` listener) and ``start_brokers``; and the
helpers every cluster test shares: a topic in each bundle, a raw gRPC lookup, the HTTP lookup
path.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import grpc
import pytest

from pulsar_grpc.broker.cluster.leader import LeaderState
from pulsar_grpc.broker.naming import DEFAULT_NAMESPACE, NamespaceBundles, TopicName
from pulsar_grpc.broker.service import BrokerService
from pulsar_grpc.cli.cluster import MemberPorts, broker_properties, write_broker
from pulsar_grpc.cli.local_servers import BrokerProcess
from pulsar_grpc.client import Client
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.test_listeners import EXTERNAL_HOST, INTERNAL_HOST, Ports, two_listener_config
from tests.e2e.wire import stub
from tests.faultproxy import ProxyThread
from tests.support import BrokerThread
from tests.zookeeper import ZooKeeperServer

__all__ = [
    "BROKERS",
    "EXTERNAL_GRPC_TLS",
    "LISTENERS",
    "SESSION_TIMEOUT_MS",
    "BrokerMember",
    "Cluster",
    "Member",
    "StoreLinks",
    "addresses",
    "cluster_factory",
    "grpc_lookup",
    "lookup_path",
    "one_topic_per_bundle",
    "owner_url",
    "place",
    "print_logs",
    "start_brokers",
    "start_cluster",
    "topic_over_every_bundle",
]

BROKERS = 3
LISTENERS = ("internal", "external")
# The members' ZooKeeper session: a killed broker's bundles are free again this long after
# its last heartbeat. Short, but long enough for a live broker on a busy machine to keep its
# session (kazoo pings every third of it).
SESSION_TIMEOUT_MS = 3000
LOG_TAIL_CHARS = 3000
# What two_listener_config advertises for the external listener's TLS gRPC endpoint.
EXTERNAL_GRPC_TLS = "grpc+ssl://broker.example.com:6651"


@dataclass
class StoreLinks:
    """A member's own connections to ZooKeeper and PostgreSQL, each through a proxy that can
    cut, blackhole or refuse them (that broker's network to its stores failing, no other's)."""

    zookeeper: ProxyThread
    postgres: ProxyThread

    def close(self) -> None:
        self.zookeeper.close()
        self.postgres.close()


@dataclass
class Member:
    name: str
    ports: MemberPorts
    process: BrokerProcess
    links: StoreLinks | None = None  # with start_cluster(..., proxied=True)

    def address(self, listener: str = "internal") -> str:
        """Where this broker serves gRPC for ``listener`` (host:port)."""
        return self.service_url(listener).removeprefix("grpc://")

    def service_url(self, listener: str = "internal") -> str:
        return self.ports.url("grpc", listener)

    def http_url(self, listener: str = "internal") -> str:
        return self.ports.url("http", listener)

    def answer(self, listener: str) -> dict[str, str]:
        """What a lookup for ``listener`` answers when this broker owns the topic."""
        return {
            "grpc_url": self.service_url(listener),
            "grpc_url_tls": "",
            "http_url": self.http_url(listener),
        }

    @property
    def broker_id(self) -> str:
        """Its name in the cluster (/loadbalance/brokers/<advertisedAddress>:<webServicePort>)."""
        return f"127.0.0.1:{self.ports.http}"


@dataclass
class Cluster:
    members: list[Member]
    zookeeper: ZooKeeperServer
    chroot: str

    def stop(self) -> None:
        for member in self.members:
            member.process.stop()
        for member in self.members:
            if member.links is not None:
                member.links.close()


def start_cluster(
    zookeeper: ZooKeeperServer,
    chroot: str,
    postgres_url: str,
    workdir: Path,
    properties: Mapping[str, str],
    *,
    brokers: int = BROKERS,
    prefix: str = "broker",
    proxied: bool = False,
) -> Cluster:
    """``brokers`` broker processes under ``chroot``, their data under ``workdir``, all
    started and serving (``properties``: more broker.conf for every one). With ``proxied``,
    each reaches ZooKeeper and PostgreSQL through proxies of its own (``Member.links``). The
    caller stops them (:meth:`Cluster.stop`, then :func:`print_logs`)."""
    members = []
    zk_port = int(zookeeper.hosts.rsplit(":", 1)[1])
    pg = urllib.parse.urlsplit(postgres_url)
    for i in range(brokers):
        name = f"{prefix}-{i}"
        ports = MemberPorts.free()
        links = None
        metadata, ledgers = f"zk:{zookeeper.hosts}{chroot}", postgres_url
        if proxied:
            assert pg.port is not None
            links = StoreLinks(ProxyThread(zk_port), ProxyThread(pg.port))
            metadata = f"zk:{links.zookeeper.address}{chroot}"
            ledgers = pg._replace(netloc=f"postgres@{links.postgres.address}").geturl()
        config = {
            **broker_properties(ports, workdir / name / "data", metadata, ledgers),
            "metadataStoreSessionTimeoutMillis": str(SESSION_TIMEOUT_MS),
            # The members share one machine's CPU: a report written at a busier moment
            # must not make the leader's placement pass a broker over as overloaded.
            "loadBalancerBrokerOverloadedThresholdPercentage": "100",
            **properties,
        }
        members.append(Member(name, ports, write_broker(workdir, name, config), links))
    cluster = Cluster(members, zookeeper, chroot)
    try:
        for member in members:
            member.process.launch()
        for member in members:
            member.process.wait_ready()
    except BaseException:
        cluster.stop()
        raise
    return cluster


def print_logs(cluster: Cluster) -> None:
    """Each member's log tail (pytest shows it when the test failed)."""
    for member in cluster.members:
        log = member.process.log.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        print(f"--- {member.name} ({member.process.log}), last lines:\n{log}")


@pytest.fixture
def cluster_factory(
    zookeeper: ZooKeeperServer,
    zk_chroot: str,
    postgres_url: str,
    tmp_path: Path,
) -> Iterator[Callable[..., Cluster]]:
    clusters: list[Cluster] = []

    def make(proxied: bool = False, **properties: str) -> Cluster:
        prefix = f"c{len(clusters)}-broker"
        cluster = start_cluster(
            zookeeper, zk_chroot, postgres_url, tmp_path, properties, prefix=prefix, proxied=proxied
        )
        clusters.append(cluster)
        return cluster

    yield make
    for cluster in clusters:
        cluster.stop()
        print_logs(cluster)


@dataclass
class BrokerMember:
    """One in-process broker of a test's cluster, with two_listener_config's listeners:
    ``internal`` bound and advertised on INTERNAL_HOST, ``external`` bound on EXTERNAL_HOST and
    advertised as broker.example.com (a name only its gateway resolves)."""

    broker: BrokerThread
    ports: Ports

    @property
    def service(self) -> BrokerService:
        assert self.broker.service is not None
        return self.broker.service

    @property
    def leads(self) -> bool:
        election = self.service.election
        return election is not None and election.state is LeaderState.LEADER

    def grpc(self, listener: str) -> str:
        """The address this broker's ``listener`` is bound on (host:port)."""
        if listener == "internal":
            return f"{INTERNAL_HOST}:{self.ports.grpc_internal}"
        return f"{EXTERNAL_HOST}:{self.ports.grpc_external}"

    def http(self, listener: str) -> str:
        """Where this broker's ``listener`` web socket is bound."""
        if listener == "internal":
            return f"http://{INTERNAL_HOST}:{self.ports.http_internal}"
        return f"http://{EXTERNAL_HOST}:{self.ports.http_external}"

    def advertised_http(self, listener: str) -> str:
        """The web address this broker advertises for ``listener``."""
        if listener == "internal":
            return self.http(listener)
        return f"http://broker.example.com:{self.ports.http_external}"

    def answer(self, listener: str) -> dict[str, str]:
        """What a lookup for ``listener`` answers when this broker owns the topic."""
        return {
            "grpc_url": f"grpc://{self.grpc(listener)}",
            "grpc_url_tls": "" if listener == "internal" else EXTERNAL_GRPC_TLS,
            "http_url": self.advertised_http(listener),
        }

    @property
    def service_url(self) -> str:
        return f"grpc://{self.grpc('internal')}"


def start_brokers(
    factory: Callable[..., BrokerThread], store_url: str, **properties: object
) -> list[BrokerMember]:
    """BROKERS in-process brokers on the metadata store ``store_url``, each with two listeners
    on free ports (``properties``: more broker configuration for every one)."""
    members = []
    for _ in range(BROKERS):
        ports = Ports.pick()
        config = two_listener_config(ports, INTERNAL_HOST, f"{EXTERNAL_HOST}:{ports.grpc_external}")
        broker = factory(
            metadataStoreUrl=store_url,
            # The brokers share this machine's CPU: never count one as overloaded.
            loadBalancerBrokerOverloadedThresholdPercentage=100,
            **config,
            **properties,
        )
        members.append(BrokerMember(broker, ports))
    return members


@pytest.fixture
def zk_postgres_cluster(
    broker_factory: Callable[..., BrokerThread],
    zookeeper: ZooKeeperServer,
    zk_chroot: str,
    postgres_url: str,
) -> list[BrokerMember]:
    """:func:`start_brokers` on the test's ZooKeeper chroot, sharing one PostgreSQL ledger
    store (the module using it imports the zookeeper and postgres fixtures)."""
    return start_brokers(
        broker_factory, f"zk:{zookeeper.hosts}{zk_chroot}", ledgerStorageUrl=postgres_url
    )


def one_topic_per_bundle(prefix: str = "spread", count: int = 4) -> list[TopicName]:
    """Topics of public/default, one in each of its ``count`` bundles (4 by default), in
    bundle order."""
    bundles = NamespaceBundles.with_count(DEFAULT_NAMESPACE, count)
    found: dict[int, TopicName] = {}
    i = 0
    while len(found) < len(bundles):
        topic = TopicName.get(f"{prefix}-{i}")
        found.setdefault(bundles.bundles.index(bundles.bundle_for(topic)), topic)
        i += 1
    return [found[k] for k in sorted(found)]


def topic_over_every_bundle(prefix: str, partitions: int) -> TopicName:
    """A partitioned topic of public/default whose ``partitions`` partitions fall in each of
    its 4 default bundles, so that placement gives them to several brokers."""
    bundles = NamespaceBundles.with_count(DEFAULT_NAMESPACE, 4)
    for i in range(1000):
        topic = TopicName.get(f"{prefix}-{i}")
        hit = {bundles.bundle_for(topic.get_partition(p)) for p in range(partitions)}
        if len(hit) == len(bundles.bundles):
            return topic
    raise AssertionError(f"no {prefix}-N with {partitions} partitions spans every bundle")


async def grpc_lookup(
    address: str, topic: TopicName, listener: str | None = None
) -> dict[str, str]:
    """The raw Lookup RPC through ``address`` (naming ``listener`` in the call metadata if
    given): the answered addresses; it must be a connect, authoritative."""
    metadata = (("x-pulsar-listenername", listener),) if listener else None
    async with grpc.aio.insecure_channel(address) as channel:
        r = await stub(channel).Lookup(
            pb.LookupRequest(topic=topic.full_name), metadata=metadata, timeout=30
        )
    assert r.response == pb.LookupResponse.Connect and r.authoritative
    return addresses(r)


def addresses(response: pb.LookupResponse) -> dict[str, str]:
    """A lookup answer's addresses, keyed as a member's ``answer`` keys them."""
    return {
        "grpc_url": response.grpc_url,
        "grpc_url_tls": response.grpc_url_tls,
        "http_url": response.http_url,
    }


class Answering(Protocol):
    def answer(self, listener: str) -> dict[str, str]: ...


A = TypeVar("A", bound=Answering)


async def owner_url(service_url: str, topic: TopicName) -> str:
    """Look ``topic`` up through ``service_url`` as the SDK does, following redirects (the
    leader places an unowned bundle): the owner's gRPC URL."""
    async with Client(service_url) as client:
        return (await client.lookup(topic.full_name)).grpc_url


async def place(members: Sequence[A], service_url: str, topic: TopicName) -> A:
    """The member that owns ``topic`` once a lookup through ``service_url`` placed it."""
    url = await owner_url(service_url, topic)
    (owner,) = [m for m in members if m.answer("internal")["grpc_url"] == url]
    return owner


def lookup_path(topic: TopicName) -> str:
    """Pulsar's HTTP lookup path for a persistent topic."""
    return f"/lookup/v2/topic/persistent/{topic.namespace}/{topic.local_name}"
