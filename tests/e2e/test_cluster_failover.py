"""Cluster-level failover (pulsar-client's AutoClusterFailover) between two real brokers, each
standing for a cluster: the application produces and consumes through one client while the
primary goes away and comes back, and never calls anything but send and receive."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pulsar_grpc.broker.security.tokens import create_secret_key, create_token
from pulsar_grpc.client import (
    AuthenticationToken,
    AutoClusterFailover,
    Client,
    Consumer,
    MessageId,
    ServiceInfo,
)
from tests.support import BrokerThread, broker_config
from tests.waiting import eventually

TOPIC = "persistent://public/default/failover"


class Brokers:
    """Brokers started and stopped off the test's loop (the client runs on it)."""

    def __init__(self) -> None:
        self.running: list[BrokerThread] = []

    async def start(self, data_dir: Path, **overrides: object) -> BrokerThread:
        broker = BrokerThread(broker_config(data_dir, **overrides))
        await asyncio.to_thread(broker.start)
        self.running.append(broker)
        return broker

    async def stop(self, broker: BrokerThread) -> None:
        self.running.remove(broker)
        await asyncio.to_thread(broker.stop)
        assert broker.errors.check() == []


@pytest.fixture
async def brokers() -> AsyncIterator[Brokers]:
    started = Brokers()
    yield started
    for broker in list(started.running):
        await started.stop(broker)


async def receive_until(consumer: Consumer, payload: bytes) -> list[bytes]:
    """Receive and ack until ``payload`` came; what came (a redelivery may come first)."""
    seen: list[bytes] = []
    while payload not in seen:
        msg = await consumer.receive(timeout_ms=30_000)
        seen.append(msg.data())
        await consumer.acknowledge(msg)
    return seen


async def stored(service_url: str, auth_token: str | None = None) -> list[bytes]:
    """What the cluster at ``service_url`` stores on the topic, read by a client of its own."""
    async with Client(service_url, auth_token=auth_token) as direct:
        reader = await direct.create_reader(TOPIC, MessageId.earliest)
        messages = []
        while await reader.has_message_available():
            messages.append((await reader.read_next(timeout_millis=10_000)).data())
        return messages


async def test_the_client_fails_over_to_the_secondary_and_back(
    brokers: Brokers, tmp_path: Path
) -> None:
    primary = await brokers.start(tmp_path / "primary")
    secondary = await brokers.start(tmp_path / "secondary")
    primary_port = primary.grpc_address.rsplit(":", 1)[1]
    failover = AutoClusterFailover(
        ServiceInfo(primary.service_url),
        [ServiceInfo(secondary.service_url)],
        check_interval_ms=100,
        failover_threshold=3,
        switch_back_threshold=3,
    )
    client = Client(failover, initial_backoff_interval_ms=50, max_backoff_interval_ms=500)
    try:
        producer = await client.create_producer(TOPIC)
        consumer = await client.subscribe(TOPIC, "sub", initial_position="earliest")
        await producer.send(b"on-primary")
        assert await receive_until(consumer, b"on-primary") == [b"on-primary"]

        await brokers.stop(primary)
        # Pending until the client moved to the secondary: then stored there and delivered.
        await producer.send(b"on-secondary")
        assert await receive_until(consumer, b"on-secondary") == [b"on-secondary"]
        assert client.get_service_info() is failover.secondary[0]
        assert await stored(secondary.service_url) == [b"on-secondary"]

        # The primary is reachable again (a broker on its address): the client goes back.
        primary = await brokers.start(tmp_path / "primary-again", grpcServicePort=primary_port)
        await eventually(lambda: client.get_service_info() is failover.primary, 30)
        await producer.send(b"back")
        assert (await receive_until(consumer, b"back"))[-1] == b"back"
        assert await stored(primary.service_url) == [b"back"]
        assert await stored(secondary.service_url) == [b"on-secondary"]
    finally:
        await client.close()


async def test_the_secondary_is_reached_with_its_own_credentials(
    brokers: Brokers, tmp_path: Path
) -> None:
    key = create_secret_key()
    primary = await brokers.start(tmp_path / "primary")
    secondary = await brokers.start(
        tmp_path / "secondary",
        authenticationEnabled="true",
        authenticationProviders="org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        tokenSecretKey="data:;base64," + base64.b64encode(key).decode(),
    )
    token = create_token(key, "failover-app")
    failover = AutoClusterFailover(
        ServiceInfo(primary.service_url),
        [ServiceInfo(secondary.service_url, authentication=AuthenticationToken(token))],
        check_interval_ms=100,
    )
    client = Client(failover, initial_backoff_interval_ms=50, max_backoff_interval_ms=500)
    try:
        producer = await client.create_producer(TOPIC)
        await producer.send(b"on-primary")
        await brokers.stop(primary)
        await producer.send(b"on-secondary")
        assert await stored(secondary.service_url, auth_token=token) == [b"on-secondary"]
    finally:
        await client.close()


async def test_a_secondary_named_by_its_web_service_url_takes_lookups_over_http(
    brokers: Brokers, tmp_path: Path
) -> None:
    """A cluster's ServiceInfo may be its http:// URL, as a plain service URL may: after the
    switch the client asks that cluster its lookups over HTTP, then produces over gRPC."""
    primary = await brokers.start(tmp_path / "primary")
    secondary = await brokers.start(tmp_path / "secondary")
    failover = AutoClusterFailover(
        ServiceInfo(primary.service_url), [ServiceInfo(secondary.http_url)], check_interval_ms=100
    )
    client = Client(failover, initial_backoff_interval_ms=50, max_backoff_interval_ms=500)
    try:
        producer = await client.create_producer(TOPIC)
        await producer.send(b"on-primary")
        await brokers.stop(primary)
        await producer.send(b"on-secondary")
        assert client.cluster.current is failover.secondary[0]
        assert await stored(secondary.service_url) == [b"on-secondary"]
        late = await client.create_producer(TOPIC + "-late")  # a lookup over HTTP
        await late.send(b"late")
    finally:
        await client.close()
