"""A broker's web service URL (``http://``) as the client's service URL, as pulsar-client takes
it: lookups and partition counts go over Pulsar's REST API, whose lookup answer names the
broker's gRPC address (``grpcUrl``), and the messages over gRPC there. Pulsar's binary-protocol
URLs (``pulsar://``, ``pulsar+ssl://``) are refused at once, naming the URL to use instead."""

from __future__ import annotations

import asyncio
import base64
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
from aiohttp import web

from pulsar_grpc.broker.security.tokens import create_secret_key, create_token
from pulsar_grpc.client import (
    AuthenticationError,
    AuthenticationToken,
    Client,
    ConnectError,
    LookupFailed,
    SyncClient,
    TopicNotFound,
)
from tests.e2e.test_partitioned_and_dedup import create_partitioned
from tests.e2e.test_tls import produce_and_consume, tls_config
from tests.support import BrokerThread
from tests.tls import TlsFiles, tls_files_fixture  # noqa: F401

TIMEOUT_S = 30
KEY = create_secret_key()


@pytest.fixture
def token_broker(broker_factory: Callable[..., BrokerThread]) -> BrokerThread:
    return broker_factory(
        authenticationEnabled="true",
        authenticationProviders="token",
        tokenSecretKey="data:;base64," + base64.b64encode(KEY).decode(),
    )


async def test_an_http_service_url_produces_and_consumes_over_grpc(broker: BrokerThread) -> None:
    await create_partitioned(broker.http_url, "http-partitioned", 3)
    async with Client(broker.http_url) as client:
        assert await produce_and_consume(client, "http-plain", b"plain") == b"plain"
        assert (await client.lookup("http-plain")).grpc_url == f"grpc://{broker.grpc_address}"
        partitions = await client.get_partitions_for_topic("http-partitioned")
        assert len(partitions) == 3
        producer = await client.create_producer("http-partitioned", batching_enabled=False)
        consumer = await client.subscribe("http-partitioned", "sub", initial_position="earliest")
        sent = {f"key-{i}".encode() for i in range(12)}
        for payload in sorted(sent):
            await producer.send(payload, partition_key=payload.decode())
        received = set()
        for _ in sent:
            message = await consumer.receive(timeout_ms=10_000)
            received.add(message.data())
            await consumer.acknowledge(message)
        assert received == sent
        used = {m.partition() for m in [await producer.send(b"x", partition_key=k)
                                        for k in ("a", "b", "c", "d", "e", "f")]}  # fmt: skip
        assert len(used) > 1  # the partitions' streams, each looked up over HTTP
        assert "persistent://public/default/http-plain" in (
            await client.get_topics_of_namespace("public/default")
        )


async def test_a_pattern_subscription_lists_the_namespace_over_http(broker: BrokerThread) -> None:
    async with Client(broker.http_url) as client:
        await (await client.create_producer("http-re-one")).send(b"one")
        await (await client.create_producer("other-http-re")).send(b"no match")
        consumer = await client.subscribe(
            re.compile("persistent://public/default/http-re-.*"),
            "sub",
            initial_position="earliest",
        )
        message = await consumer.receive(timeout_ms=10_000)
        assert (message.data(), message.topic_name()) == (
            b"one",
            "persistent://public/default/http-re-one",
        )


def test_the_blocking_client_takes_an_http_service_url(broker: BrokerThread) -> None:
    client = SyncClient(broker.http_url)
    try:
        client.create_producer("http-sync").send(b"sync")
        consumer = client.subscribe("http-sync", "s", initial_position="earliest")
        assert consumer.receive(timeout_millis=10_000).data() == b"sync"
    finally:
        client.close()


@pytest.mark.parametrize(
    "url, instead", [("pulsar://localhost:6650", "grpc://localhost:<port>"),
                     ("pulsar+ssl://broker:6651/", "grpc+ssl://broker:<port>")],
)  # fmt: skip
def test_pulsar_binary_protocol_urls_are_refused_at_once(url: str, instead: str) -> None:
    with pytest.raises(ValueError) as info:
        Client(url)
    message = str(info.value)
    assert url in message and f"use {instead} on the broker's gRPC port" in message
    assert "http://" in message  # the web service URL is the other way


@pytest.mark.parametrize("url", ["http://", "http://host:8080/admin", "https://h:1/?x=1"])
def test_a_web_service_url_with_no_host_or_a_path_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="expected http://host:port"):
        Client(url)


async def test_lookups_over_http_carry_the_credentials(token_broker: BrokerThread) -> None:
    broker = token_broker
    good = AuthenticationToken(create_token(KEY, "app", expires_at=int(time.time()) + 3600))
    async with Client(broker.http_url, authentication=good) as client:
        assert await produce_and_consume(client, "http-auth", b"auth") == b"auth"
    async with Client(broker.http_url, operation_timeout_ms=5000) as anonymous:
        with pytest.raises(AuthenticationError, match="answered HTTP 401"):
            await asyncio.wait_for(anonymous.create_producer("http-auth"), TIMEOUT_S)


async def test_a_broker_error_over_http_keeps_its_meaning(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    broker = broker_factory(allowAutoTopicCreation="false")
    async with Client(broker.http_url, operation_timeout_ms=5000) as client:
        with pytest.raises(TopicNotFound):
            await asyncio.wait_for(client.create_producer("absent"), TIMEOUT_S)


async def test_an_https_service_url_trusts_the_clients_ca_and_connects_over_tls(
    broker_factory: Callable[..., BrokerThread], tls_files: TlsFiles
) -> None:
    broker = broker_factory(**tls_config(tls_files, webServicePortTls="0"))
    assert broker.service is not None
    https_url = broker.service.namespaces.internal_urls().http_url_tls
    assert https_url is not None and https_url.startswith("https://")
    trusted = Client(https_url, tls_trust_certs_file_path=str(tls_files.ca))
    async with trusted:
        assert await produce_and_consume(trusted, "https", b"tls") == b"tls"
    untrusted = Client(https_url, tls_trust_certs_file_path=str(tls_files.other_ca),
                       operation_timeout_ms=5000)  # fmt: skip
    async with untrusted:
        with pytest.raises(ConnectError, match="certificate verify failed"):
            await asyncio.wait_for(untrusted.create_producer("https"), TIMEOUT_S)


@asynccontextmanager
async def redirector(to: Callable[[str], str]) -> AsyncIterator[str]:
    """A web server on a free port answering every GET with 307 to ``to(its own URL)`` plus
    the request's path and query (as a broker that does not own a topic answers)."""
    own: list[str] = []

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect(to(own[0]) + str(request.rel_url))

    app = web.Application()
    app.router.add_get("/{tail:.*}", redirect)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        own.append(f"http://127.0.0.1:{runner.addresses[0][1]}")
        yield own[0]
    finally:
        await runner.cleanup()


async def test_redirects_are_followed_with_the_credentials_a_few_times_only(
    token_broker: BrokerThread,
) -> None:
    broker = token_broker
    auth = AuthenticationToken(create_token(KEY, "app", expires_at=int(time.time()) + 3600))
    async with redirector(lambda _: broker.http_url) as url, Client(url, authentication=auth) as c:
        assert await produce_and_consume(c, "redirected", b"there") == b"there"
    async with redirector(lambda own: own) as url, Client(url, max_lookup_redirects=2) as c:
        with pytest.raises(LookupFailed, match="more than 2 redirects"):
            await asyncio.wait_for(c.create_producer("loop"), TIMEOUT_S)
