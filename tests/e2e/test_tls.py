"""TLS on a real broker, with a CA and certificates made by the test (tests/tls.py): the
client verifies the server; a client trusting another CA and a plaintext client are refused
promptly; with tlsRequireTrustedClientCertOnConnect only clients with a certificate signed by
the trusted CA get through; the https web port serves /metrics; a grpc+ssl bind address
serves its listener over TLS, also to a client whose service URL is plaintext.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import grpc
import pytest

from pulsar_grpc.client import Client, ConnectError, PulsarError
from pulsargrpc.v1 import pulsar_pb2 as pb
from pulsargrpc.v1 import pulsar_pb2_grpc as pbg
from tests.support import BrokerThread
from tests.tls import TlsFiles, tls_files_fixture  # noqa: F401

# Failing calls must end well before this: a refused handshake is not a timeout.
OPERATION_TIMEOUT_MS = 10_000


def tls_config(files: TlsFiles, **extra: str) -> dict[str, str]:
    return {
        "grpcServicePortTls": "0",
        "tlsCertificateFilePath": str(files.server_cert),
        "tlsKeyFilePath": str(files.server_key),
        "tlsTrustCertsFilePath": str(files.ca),
        **extra,
    }


def tls_url(broker: BrokerThread) -> str:
    assert broker.service is not None
    url = broker.service.namespaces.internal_urls().grpc_url_tls
    assert url is not None and url.startswith("grpc+ssl://127.0.0.1:")
    return url


async def produce_and_consume(c: Client, topic: str, payload: bytes) -> bytes:
    producer = await c.create_producer(topic, batching_max_messages=1)
    await producer.send(payload)
    consumer = await c.subscribe(topic, "sub", initial_position="earliest")
    msg = await consumer.receive(timeout_ms=10_000)
    await consumer.acknowledge(msg)
    return msg.data()


async def refused(c: Client, error: type[PulsarError] = ConnectError) -> PulsarError:
    """The error creating a producer ends with, promptly (no wait for the deadline)."""
    started = time.monotonic()
    with pytest.raises(error) as info:
        await asyncio.wait_for(c.create_producer("t"), OPERATION_TIMEOUT_MS / 1000 + 5)
    assert time.monotonic() - started < OPERATION_TIMEOUT_MS / 1000 / 2, "refused too slowly"
    return info.value


@pytest.fixture
def tls_broker(broker_factory: Callable[..., BrokerThread], tls_files: TlsFiles) -> BrokerThread:
    return broker_factory(**tls_config(tls_files, webServicePortTls="0"))


async def test_client_verifying_the_server_produces_and_consumes_over_tls(tls_broker, tls_files):
    url = tls_url(tls_broker)
    async with Client(url, tls_trust_certs_file_path=str(tls_files.ca)) as c:
        result = await c.lookup("t")
        assert result.grpc_url_tls == url
        assert result.grpc_url.startswith("grpc://127.0.0.1:")  # both are answered
        assert await produce_and_consume(c, "t", b"secret") == b"secret"
        # Lookup and streams went over the TLS address only: the TLS URL was chosen by scheme.
        assert c._calls.pool.addresses == [(url.removeprefix("grpc+ssl://"), True)]


async def test_client_trusting_another_ca_is_refused_with_a_clear_error(tls_broker, tls_files):
    async with Client(
        tls_url(tls_broker),
        tls_trust_certs_file_path=str(tls_files.other_ca),
        operation_timeout_ms=OPERATION_TIMEOUT_MS,
    ) as c:
        error = await refused(c)
    assert error.status == grpc.StatusCode.UNAVAILABLE
    assert "CERTIFICATE_VERIFY_FAILED" in error.message


async def test_plaintext_to_the_tls_port_fails_without_hanging(tls_broker):
    address = tls_url(tls_broker).removeprefix("grpc+ssl://")
    async with Client(f"grpc://{address}", operation_timeout_ms=OPERATION_TIMEOUT_MS) as c:
        error = await refused(c)
    assert error.status == grpc.StatusCode.UNAVAILABLE


async def test_tls_client_to_the_plaintext_port_fails_without_hanging(tls_broker, tls_files):
    async with Client(
        tls_broker.service_url.replace("grpc://", "grpc+ssl://"),
        tls_trust_certs_file_path=str(tls_files.ca),
        operation_timeout_ms=OPERATION_TIMEOUT_MS,
    ) as c:
        await refused(c)


async def test_tls_port_speaks_tls_with_the_configured_certificate(tls_broker, tls_files):
    """Below the client: the handshake itself, verified against the test CA by Python's ssl."""
    host, port = tls_url(tls_broker).removeprefix("grpc+ssl://").rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(tls_files.ca))
    context.set_alpn_protocols(["h2"])

    def handshake() -> dict[str, Any]:
        with (
            socket.create_connection((host, int(port)), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname=host) as tls,
        ):
            assert tls.selected_alpn_protocol() == "h2"
            cert = tls.getpeercert()
            assert cert is not None
            return dict(cert)

    cert = await asyncio.to_thread(handshake)
    assert ("IP Address", "127.0.0.1") in cert["subjectAltName"]


@pytest.fixture
def mtls_broker(broker_factory: Callable[..., BrokerThread], tls_files: TlsFiles) -> BrokerThread:
    return broker_factory(**tls_config(tls_files, tlsRequireTrustedClientCertOnConnect="true"))


async def test_mutual_tls_refuses_a_client_without_certificate(mtls_broker, tls_files):
    async with Client(
        tls_url(mtls_broker),
        tls_trust_certs_file_path=str(tls_files.ca),
        operation_timeout_ms=OPERATION_TIMEOUT_MS,
    ) as c:
        await refused(c)


def test_the_cli_says_a_mutual_tls_broker_wants_a_client_certificate(mtls_broker, tls_files):
    """gRPC reports only "Socket closed" when the broker ends the handshake for want of a
    client certificate: the CLI names the likely cause and the flags that fix it."""
    url = tls_url(mtls_broker)
    trust = ("--url", url, "--tls-trust-cert-path", str(tls_files.ca))
    base = [sys.executable, "-m", "pulsar_grpc.cli.main", "produce", "t", "-m", "x", *trust]
    done = subprocess.run(base, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "closed the connection during the TLS handshake" in done.stderr, done.stderr
    assert "--auth-plugin tls --auth-params tlsCertFile:" in done.stderr, done.stderr
    other = f"tlsCertFile:{tls_files.other_client_cert},tlsKeyFile:{tls_files.other_client_key}"
    done = subprocess.run(
        [*base, "--auth-plugin", "tls", "--auth-params", other],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "may not trust the client certificate given" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


async def test_mutual_tls_refuses_a_certificate_from_another_ca(mtls_broker, tls_files):
    async with Client(
        tls_url(mtls_broker),
        tls_trust_certs_file_path=str(tls_files.ca),
        tls_cert_file_path=str(tls_files.other_client_cert),
        tls_key_file_path=str(tls_files.other_client_key),
        operation_timeout_ms=OPERATION_TIMEOUT_MS,
    ) as c:
        await refused(c)


async def test_mutual_tls_admits_a_certificate_signed_by_the_ca(mtls_broker, tls_files):
    async with Client(
        tls_url(mtls_broker),
        tls_trust_certs_file_path=str(tls_files.ca),
        tls_cert_file_path=str(tls_files.client_cert),
        tls_key_file_path=str(tls_files.client_key),
    ) as c:
        assert await produce_and_consume(c, "t", b"mutual") == b"mutual"


async def test_https_web_port_serves_metrics_to_a_client_trusting_the_ca(tls_broker, tls_files):
    assert tls_broker.service is not None
    https_url = tls_broker.service.namespaces.internal_urls().http_url_tls
    assert https_url is not None and https_url.startswith("https://127.0.0.1:")
    timeout = aiohttp.ClientTimeout(total=10)
    trusting = ssl.create_default_context(cafile=str(tls_files.ca))
    async with aiohttp.ClientSession(timeout=timeout) as http:
        async with http.get(f"{https_url}/metrics", ssl=trusting) as response:
            assert response.status == 200
            assert "# TYPE" in await response.text()
        other = ssl.create_default_context(cafile=str(tls_files.other_ca))
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            async with http.get(f"{https_url}/metrics", ssl=other):
                pass
        plain = https_url.replace("https://", "http://")
        with pytest.raises(aiohttp.ClientError):
            async with http.get(f"{plain}/metrics"):
                pass


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


async def test_tls_bind_addresses_serve_their_listener_to_a_plaintext_service_url(
    broker_factory, tls_files
):
    """The external listener has only TLS addresses (grpc+ssl and https bind addresses): a
    client given the internal (plaintext) address and listener "external" is answered the
    grpc+ssl address and uses TLS; the https address answers lookups for its listener."""
    internal, external, https = (
        free_port("127.0.0.1"),
        free_port("127.0.0.2"),
        free_port("127.0.0.2"),
    )
    listeners = (
        f"internal:grpc://127.0.0.1:{internal},"
        f"external:grpc+ssl://127.0.0.2:{external},external:https://127.0.0.2:{https}"
    )
    broker = broker_factory(
        advertisedListeners=listeners,
        bindAddresses=listeners,
        grpcServicePort="",
        webServicePort="",
        tlsCertificateFilePath=str(tls_files.server_cert),
        tlsKeyFilePath=str(tls_files.server_key),
    )
    service_url = f"grpc://127.0.0.1:{internal}"
    assert broker.service_url == service_url
    async with Client(
        service_url, listener_name="external", tls_trust_certs_file_path=str(tls_files.ca)
    ) as c:
        result = await c.lookup("t")
        assert (result.grpc_url, result.grpc_url_tls) == ("", f"grpc+ssl://127.0.0.2:{external}")
        assert result.http_url_tls == f"https://127.0.0.2:{https}"
        assert await produce_and_consume(c, "t", b"external") == b"external"
        assert c._calls.pool.addresses == [
            (f"127.0.0.1:{internal}", False),
            (f"127.0.0.2:{external}", True),
        ]
    # The TLS bind address speaks only TLS.
    async with grpc.aio.insecure_channel(f"127.0.0.2:{external}") as channel:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await pbg.PulsarServiceStub(channel).Lookup(pb.LookupRequest(topic="t"), timeout=10)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    # Lookups through the https bind address answer its listener.
    trusting = ssl.create_default_context(cafile=str(tls_files.ca))
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
        http.get(
            f"https://127.0.0.2:{https}/lookup/v2/topic/persistent/public/default/t", ssl=trusting
        ) as response,
    ):
        assert response.status == 200
        body = await response.json()
    assert body["brokerUrlTls"] == f"grpc+ssl://127.0.0.2:{external}"
    assert body["brokerUrl"] is None
