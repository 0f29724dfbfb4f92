"""Cluster-level failover's configuration and decisions: pulsar-client's argument errors word
for word, AutoClusterFailover's thresholds (probes scripted here; tests/e2e/test_cluster_failover.py
runs it between real brokers), and an application's ServiceInfoProvider switching a client."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pulsar
import pytest

import pulsar_grpc.client as pulsar_grpc_client
from pulsar_grpc.client import (
    AuthenticationToken,
    AutoClusterFailover,
    Client,
    ServiceInfo,
    ServiceInfoProvider,
)
from pulsar_grpc.client._cluster_failover import AutoFailoverProvider, probe
from tests.faultproxy import free_port
from tests.waiting import eventually

PRIMARY = ServiceInfo("grpc://127.0.0.1:6650")
EAST = ServiceInfo("grpc://127.0.0.1:6651")
WEST = ServiceInfo("grpc://127.0.0.1:6652")


def error_of(make: Callable[[], object]) -> str:
    with pytest.raises(ValueError) as info:
        make()
    return str(info.value)


@pytest.mark.parametrize(
    "arguments",
    [
        {"secondary": []},
        {"secondary": ["not a ServiceInfo"]},
        {"check_interval_ms": 0},
        {"failover_threshold": -1},
        {"switch_back_threshold": 0},
        {"check_interval_ms": 1.5},
    ],
)
def test_bad_arguments_are_refused_as_pulsar_client_refuses_them(arguments: dict) -> None:
    def make(module: object, info: object) -> Callable[[], object]:
        args = {"primary": info, "secondary": [info], **arguments}
        return lambda: module.AutoClusterFailover(**args)  # type: ignore[attr-defined]

    theirs = error_of(make(pulsar, pulsar.ServiceInfo("pulsar://127.0.0.1:6650")))
    assert error_of(make(pulsar_grpc_client, PRIMARY)) == theirs


def test_a_client_of_several_clusters_refuses_its_own_credentials_as_pulsar_client() -> None:
    theirs = error_of(
        lambda: pulsar.Client(
            pulsar.AutoClusterFailover(
                pulsar.ServiceInfo("pulsar://a:6650"), [pulsar.ServiceInfo("pulsar://b:6650")]
            ),
            tls_trust_certs_file_path="ca.pem",
        )
    )
    ours = error_of(
        lambda: Client(AutoClusterFailover(PRIMARY, [EAST]), tls_trust_certs_file_path="ca.pem")
    )
    assert ours == theirs
    assert "set authentication on each ServiceInfo" in error_of(
        lambda: Client(
            AutoClusterFailover(PRIMARY, [EAST]), authentication=AuthenticationToken("t")
        )
    )


def test_a_service_info_with_a_bad_url_is_refused_at_once() -> None:
    assert "invalid service URL" in error_of(lambda: ServiceInfo("ftp://broker:8080"))
    assert "Pulsar's binary protocol" in error_of(lambda: ServiceInfo("pulsar://broker:6650"))
    assert "invalid service URL" in error_of(lambda: ServiceInfo("http://broker:8080/admin"))


def test_a_service_info_may_name_a_web_service() -> None:
    """As a plain http:// service URL: the cluster's lookups go over HTTP, and the failover
    probe connects to the web service's port (80 or 443 when the URL names none)."""
    web = ServiceInfo("https://broker")
    assert (web.web_service, web.target, web.use_tls) == (True, "broker:443", True)
    assert not ServiceInfo("grpc://broker:50051").web_service


def test_failover_needs_a_running_loop_to_probe_on() -> None:
    assert "running event loop" in error_of(lambda: Client(AutoClusterFailover(PRIMARY, [EAST])))


class Clusters:
    """Which clusters answer a probe, as the test says; the switches the provider made."""

    def __init__(self) -> None:
        self.up = {PRIMARY.service_url, EAST.service_url, WEST.service_url}
        self.switches: list[ServiceInfo] = []

    async def probe(self, service_info: ServiceInfo) -> bool:
        return service_info.service_url in self.up

    def provider(self, **thresholds: int) -> AutoFailoverProvider:
        config = AutoClusterFailover(PRIMARY, [EAST, WEST], **thresholds)
        provider = AutoFailoverProvider(config, self.probe)
        provider._update = self.switches.append  # what initialize() hands it, minus the task
        return provider


async def checks(provider: AutoFailoverProvider, n: int) -> None:
    for _ in range(n):
        await provider.check()


async def test_failover_after_the_threshold_to_the_first_secondary_that_answers() -> None:
    clusters = Clusters()
    provider = clusters.provider(failover_threshold=3)
    clusters.up -= {PRIMARY.service_url, EAST.service_url}
    await checks(provider, 2)
    assert clusters.switches == []  # two failed probes in a row: not yet
    await checks(provider, 1)
    assert clusters.switches == [WEST]


async def test_a_primary_answering_between_failures_restarts_the_count() -> None:
    clusters = Clusters()
    provider = clusters.provider(failover_threshold=2)
    clusters.up.remove(PRIMARY.service_url)
    await checks(provider, 1)
    clusters.up.add(PRIMARY.service_url)
    await checks(provider, 1)
    clusters.up.remove(PRIMARY.service_url)
    await checks(provider, 1)
    assert clusters.switches == []
    await checks(provider, 1)
    assert clusters.switches == [EAST]


async def test_no_secondary_answering_keeps_the_primary_and_tries_again() -> None:
    clusters = Clusters()
    provider = clusters.provider()
    clusters.up.clear()
    await checks(provider, 3)
    assert clusters.switches == []
    clusters.up.add(EAST.service_url)
    await checks(provider, 1)
    assert clusters.switches == [EAST]


async def test_switch_back_after_the_primary_answered_the_threshold_in_a_row() -> None:
    clusters = Clusters()
    provider = clusters.provider(switch_back_threshold=3)
    clusters.up.remove(PRIMARY.service_url)
    await checks(provider, 1)
    assert clusters.switches == [EAST]
    clusters.up.add(PRIMARY.service_url)
    await checks(provider, 2)
    clusters.up.remove(PRIMARY.service_url)  # flapping: the count starts over
    await checks(provider, 1)
    clusters.up.add(PRIMARY.service_url)
    await checks(provider, 2)
    assert clusters.switches == [EAST]
    await checks(provider, 1)
    assert clusters.switches == [EAST, PRIMARY]


async def test_a_failing_secondary_goes_back_to_an_answering_primary_at_once() -> None:
    clusters = Clusters()
    provider = clusters.provider(failover_threshold=2, switch_back_threshold=10)
    clusters.up.remove(PRIMARY.service_url)
    await checks(provider, 2)
    assert clusters.switches == [EAST]
    clusters.up = {PRIMARY.service_url}
    await checks(provider, 2)
    assert clusters.switches == [EAST, PRIMARY]


async def test_the_probe_is_a_tcp_connect() -> None:
    port = free_port()
    assert not await probe(ServiceInfo(f"grpc://127.0.0.1:{port}"))
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", port)
    async with server:
        assert await probe(ServiceInfo(f"grpc://127.0.0.1:{port}"))


class Discovery(ServiceInfoProvider):
    """An application's provider: it learns of a new cluster on a thread of its own."""

    def __init__(self) -> None:
        self.update: Callable[[ServiceInfo], None] | None = None
        self.closed = threading.Event()

    def initial_service_info(self) -> ServiceInfo:
        return PRIMARY

    def initialize(self, on_service_info_update: Callable[[ServiceInfo], None]) -> None:
        self.update = on_service_info_update

    def close(self) -> None:
        self.closed.set()


async def test_a_service_info_provider_switches_the_client_from_its_own_thread() -> None:
    discovery = Discovery()
    client = Client(discovery)
    assert client.cluster.current is PRIMARY and discovery.update is not None
    update = discovery.update
    thread = threading.Thread(target=update, args=(WEST,))
    thread.start()
    thread.join()
    await eventually(lambda: client.cluster.current is WEST, 5)
    not_a_service_info: Any = "grpc://127.0.0.1:6653"
    assert "Expected a pulsar_grpc.client.ServiceInfo" in error_of(
        lambda: update(not_a_service_info)
    )
    await client.close()
    assert discovery.closed.is_set()


def test_a_provider_whose_first_answer_is_no_service_info_is_refused() -> None:
    class Broken(Discovery):
        def initial_service_info(self) -> ServiceInfo:
            return "grpc://127.0.0.1:6650"  # type: ignore[return-value]

    assert "Expected a pulsar_grpc.client.ServiceInfo" in error_of(lambda: Client(Broken()))
