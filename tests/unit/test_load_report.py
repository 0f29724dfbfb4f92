"""The load report's update rule (Pulsar's ModularLoadManagerImpl.needBrokerDataUpdate), alone
and in a broker on an in-memory store: a report is rewritten only when its load moved by more
than loadBalancerReportUpdateThresholdPercentage, or when the maximum interval has passed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pulsar_grpc.broker.cluster.load_report import LoadSample, needs_update, percent_change
from pulsar_grpc.broker.config import ConfigError, ServiceConfiguration, load_config
from pulsar_grpc.broker.metadata import MemoryMetadataStore, Notification, NotificationType
from pulsar_grpc.client import Client
from tests.support import BrokerThread
from tests.waiting import eventually

IDLE = LoadSample(max_resource_usage=0.5, msg_rate=100, msg_throughput=1000, num_bundles=4)


def config(threshold: int = 5) -> ServiceConfiguration:
    return ServiceConfiguration(loadBalancerReportUpdateThresholdPercentage=threshold)


def test_percent_change_from_zero_is_infinite_unless_still_zero() -> None:
    assert percent_change(0, 0) == 0
    assert percent_change(0, 1) == float("inf")
    assert percent_change(100, 90) == 10


def test_a_change_within_the_threshold_is_not_written() -> None:
    moved = LoadSample(0.52, 104, 1040, 4)  # every value moved by 4%
    assert not needs_update(IDLE, moved, 1, config(5))


def test_each_kind_of_load_past_the_threshold_is_written() -> None:
    for moved in (
        LoadSample(0.53, 100, 1000, 4),  # resource usage +6%
        LoadSample(0.5, 106, 1000, 4),  # message rate
        LoadSample(0.5, 100, 940, 4),  # throughput, downwards too
        LoadSample(0.5, 100, 1000, 5),  # bundles
    ):
        assert needs_update(IDLE, moved, 1, config(5)), moved


def test_the_maximum_interval_forces_a_write() -> None:
    cfg = ServiceConfiguration(loadBalancerReportUpdateMaxIntervalMinutes=15)
    assert not needs_update(IDLE, IDLE, 15 * 60 - 1, cfg)
    assert needs_update(IDLE, IDLE, 15 * 60 + 1, cfg)


async def test_a_broker_rewrites_its_report_when_traffic_starts_not_before(
    broker_factory: Callable[..., BrokerThread], tmp_path: Path
) -> None:
    # A threshold so high that only a move from nothing to something (infinite) passes it, and
    # no timer: the test drives the checks.
    broker = broker_factory(
        metadataStoreUrl=f"memory:{tmp_path.name}",
        loadBalancerReportUpdateThresholdPercentage=1_000_000,
        loadBalancerReportUpdateMinIntervalMillis=3_600_000,
    )
    service = broker.service
    assert service is not None and service.load_reporter is not None
    reporter = service.load_reporter
    first = await broker.call(service.store.get(reporter.path))
    assert first is not None and json.loads(first.value)["msgRateIn"] == 0

    assert not await broker.call(reporter.update())
    unchanged = await broker.call(service.store.get(reporter.path))
    assert unchanged is not None and unchanged.version == first.version

    async with Client(broker.service_url) as client:
        producer = await client.create_producer("threshold")
        for i in range(10):
            await producer.send(f"m{i}".encode())

        # Rates are measured over at least a second: poll until a check writes them. (Taking
        # the topic's bundle is a move from nothing too: it may be written first.)
        async def rate_written() -> dict[str, Any]:
            await broker.call(reporter.update())
            got = await broker.call(service.store.get(reporter.path))
            assert got is not None
            report = json.loads(got.value)
            assert report["msgRateIn"] > 0
            return report

        report = await eventually(rate_written, timeout=20, interval=0.2)
    written = await broker.call(service.store.get(reporter.path))
    assert written is not None and written.version > first.version
    assert report["numProducers"] == 1 and report["numBundles"] == 1


async def test_a_lost_session_takes_the_report_away_and_the_new_session_writes_it_again(
    broker_factory: Callable[..., BrokerThread], tmp_path: Path
) -> None:
    # No timer: only the new session can bring the report back.
    broker = broker_factory(
        metadataStoreUrl=f"memory:{tmp_path.name}",
        loadBalancerReportUpdateMinIntervalMillis=3_600_000,
    )
    service = broker.service
    assert service is not None and service.load_reporter is not None
    path = service.load_reporter.path
    watcher = MemoryMetadataStore(tmp_path.name)  # another broker's view of the cluster
    try:
        before = await watcher.get(path)
        assert before is not None
        deleted = asyncio.Event()

        def on_change(change: Notification) -> None:
            if (change.type, change.path) == (NotificationType.DELETED, path):
                deleted.set()

        watcher.register_listener(on_change)
        assert isinstance(service.store, MemoryMetadataStore)
        service.store.expire_session()
        await asyncio.wait_for(deleted.wait(), 10)  # the ephemeral node went with the session

        async def written_again() -> bool:
            found = await watcher.get(path)
            return (
                found is not None
                and json.loads(found.value)["lastUpdate"] >= json.loads(before.value)["lastUpdate"]
            )

        await eventually(written_again, timeout=10)
    finally:
        await watcher.close()


def test_a_cluster_member_needs_a_web_port_to_be_named_by() -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(None, {}, {"metadataStoreUrl": "memory:x", "webServicePort": ""})
    (problem,) = refused.value.errors
    assert problem.startswith("--set webServicePort: webServicePort: a cluster member")
    # Standalone on its embedded store has no such need.
    assert load_config(None, {}, {"webServicePort": ""}).webServicePort is None


def test_the_report_properties_are_pulsars_with_their_defaults() -> None:
    config = load_config(None, {}, {})
    assert config.loadBalancerReportUpdateThresholdPercentage == 10
    assert config.loadBalancerReportUpdateMinIntervalMillis == 5000
    assert config.loadBalancerReportUpdateMaxIntervalMinutes == 15
    with pytest.raises(ConfigError, match="loadBalancerReportUpdateMinIntervalMillis: 0 is less"):
        load_config(None, {"PULSAR_PREFIX_loadBalancerReportUpdateMinIntervalMillis": "0"}, {})
