"""TLS with an optional client certificate (Pulsar's tlsRequireTrustedClientCertOnConnect=false
with the TLS provider): the listener asks for a certificate without requiring one, through the
TLS front (broker/tls_front.py). A trusted certificate authenticates as its CN; a client without
one gets through the handshake and may prove a role with a token, or is refused by
authentication; a certificate from another CA fails the handshake. With the setting on,
grpcio's own mutual TLS serves the port and there is no front."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from pulsar_grpc.broker.tls_front import LOOPBACK, TlsFront
from pulsar_grpc.client import (
    AuthenticationError,
    AuthenticationTLS,
    AuthenticationToken,
    AuthorizationError,
    Client,
    ConnectError,
)
from pulsar_grpc.handler.protocol import GrpcProtocolHandler
from tests.e2e.test_authentication import assert_unauthenticated
from tests.e2e.test_authorization import KEY, NS, SUPER, http, token
from tests.e2e.test_cli import cli
from tests.e2e.test_tls import OPERATION_TIMEOUT_MS, tls_config, tls_url
from tests.e2e.wire import stub
from tests.support import BrokerThread, StandaloneProcess
from tests.tls import TlsFiles, tls_files_fixture  # noqa: F401
from tests.waiting import eventually

TIMEOUT_S = 15
CERT_ROLE = "client"  # the CN of tests/tls.py's client certificate
TOKEN_ROLE = "token-app"

OPTIONAL_CERT = {
    "tlsRequireTrustedClientCertOnConnect": "false",
    "authenticationEnabled": "true",
    "authenticationProviders": "tls,token",
    "tokenSecretKey": "data:;base64," + base64.b64encode(KEY).decode(),
    "authorizationEnabled": "true",
    "superUserRoles": SUPER,
}


def fronts_of(broker: BrokerThread) -> list[TlsFront]:
    assert broker.service is not None
    (handler,) = broker.service.handlers
    assert isinstance(handler, GrpcProtocolHandler)
    return handler.fronts


def grant_produce(broker: BrokerThread) -> BrokerThread:
    """Authorization lets the certificate's role and the token's role produce, nobody else."""
    for role in (CERT_ROLE, TOKEN_ROLE):
        path = f"/admin/v2/namespaces/{NS}/permissions/{role}"
        assert http(broker, "POST", path, SUPER, ["produce"])[0] == 204
    return broker


@pytest.fixture
def optional_cert_broker(
    broker_factory: Callable[..., BrokerThread], tls_files: TlsFiles
) -> BrokerThread:
    return grant_produce(broker_factory(**tls_config(tls_files, **OPTIONAL_CERT)))


def tls_client(broker: BrokerThread, files: TlsFiles, **kwargs: object) -> Client:
    return Client(
        tls_url(broker),
        tls_trust_certs_file_path=str(files.ca),
        operation_timeout_ms=OPERATION_TIMEOUT_MS,
        **kwargs,  # type: ignore[arg-type]
    )


def trusted_client(broker: BrokerThread, files: TlsFiles) -> Client:
    """A client presenting the certificate of tests/tls.py's CA, CN ``client``."""
    auth = AuthenticationTLS(str(files.client_cert), str(files.client_key))
    return tls_client(broker, files, authentication=auth)


async def produce_one(client: Client, topic: str) -> None:
    producer = await asyncio.wait_for(client.create_producer(topic), TIMEOUT_S)
    await producer.send(b"m")
    await producer.close()


async def test_a_trusted_certificate_authenticates_as_its_common_name(
    optional_cert_broker: BrokerThread, tls_files: TlsFiles
) -> None:
    async with trusted_client(optional_cert_broker, tls_files) as c:
        await produce_one(c, "by-certificate")  # only the certificate's role may produce
        with pytest.raises(AuthorizationError):  # and it is that role: it may not consume
            await asyncio.wait_for(c.subscribe("by-certificate", "s"), TIMEOUT_S)


async def test_without_a_certificate_a_token_proves_the_role(
    optional_cert_broker: BrokerThread, tls_files: TlsFiles
) -> None:
    auth = AuthenticationToken(token(TOKEN_ROLE))
    async with tls_client(optional_cert_broker, tls_files, authentication=auth) as c:
        await produce_one(c, "by-token")


async def test_without_certificate_or_token_authentication_refuses_after_the_handshake(
    optional_cert_broker: BrokerThread, tls_files: TlsFiles
) -> None:
    async with tls_client(optional_cert_broker, tls_files) as c:
        with pytest.raises(AuthenticationError):
            await asyncio.wait_for(c.create_producer("nobody"), TIMEOUT_S)


async def test_a_certificate_from_another_ca_fails_the_handshake(
    optional_cert_broker: BrokerThread, tls_files: TlsFiles
) -> None:
    foreign = AuthenticationTLS(str(tls_files.other_client_cert), str(tls_files.other_client_key))
    async with tls_client(optional_cert_broker, tls_files, authentication=foreign) as c:
        with pytest.raises(ConnectError):
            await asyncio.wait_for(c.create_producer("stranger"), TIMEOUT_S)
    async with trusted_client(optional_cert_broker, tls_files) as c:
        await produce_one(c, "after-stranger")  # the front goes on serving


async def test_a_required_certificate_keeps_grpcs_own_tls(
    broker_factory: Callable[..., BrokerThread], tls_files: TlsFiles
) -> None:
    config = {**OPTIONAL_CERT, "tlsRequireTrustedClientCertOnConnect": "true"}
    broker = grant_produce(broker_factory(**tls_config(tls_files, **config)))
    assert fronts_of(broker) == []
    async with trusted_client(broker, tls_files) as c:
        await produce_one(c, "required-certificate")


async def test_a_connection_the_front_did_not_pipe_has_no_certificate(
    optional_cert_broker: BrokerThread, tls_files: TlsFiles
) -> None:
    """Another process on the machine dialling the internal port directly is nobody, even
    while a piped connection with a certificate is open."""
    (front,) = fronts_of(optional_cert_broker)
    async with trusted_client(optional_cert_broker, tls_files) as c:
        await produce_one(c, "piped")
        assert len(front.peers) >= 1
        internal = f"{LOOPBACK}:{front.upstream_port}"
        async with grpc.aio.insecure_channel(internal) as channel:
            call = stub(channel).Produce(metadata=[("x-pulsar-topic", "unpiped")])
            await assert_unauthenticated(call.read())


async def open_tls_stream(
    broker: BrokerThread, files: TlsFiles
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A raw TLS connection to the front with the trusted client certificate, handshake done."""
    host, port = tls_url(broker).removeprefix("grpc+ssl://").rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(files.ca))
    context.load_cert_chain(str(files.client_cert), str(files.client_key))
    context.set_alpn_protocols(["h2"])
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(host, int(port), ssl=context, server_hostname=host), TIMEOUT_S
    )
    assert writer.get_extra_info("ssl_object").selected_alpn_protocol() == "h2"
    return reader, writer


async def open_tls(broker: BrokerThread, files: TlsFiles) -> asyncio.StreamWriter:
    return (await open_tls_stream(broker, files))[1]


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    await writer.wait_closed()


async def test_the_front_holds_at_most_its_connections_and_forgets_closed_ones(
    broker_factory: Callable[..., BrokerThread], tls_files: TlsFiles
) -> None:
    config = {**OPTIONAL_CERT, "grpcTlsFrontMaxConnections": "1"}
    broker = broker_factory(**tls_config(tls_files, **config))
    (front,) = fronts_of(broker)
    first = await open_tls(broker, tls_files)
    await eventually(lambda: len(front.peers) == 1, timeout=TIMEOUT_S, what="first recorded")
    # One over the cap is closed by the front as soon as its handshake is done.
    reader, writer = await open_tls_stream(broker, tls_files)
    with contextlib.suppress(ssl.SSLError, ConnectionError):
        assert await asyncio.wait_for(reader.read(), TIMEOUT_S) == b""
    writer.close()
    assert len(front.peers) == 1  # never piped
    await close(first)
    await eventually(lambda: len(front.peers) == 0, timeout=TIMEOUT_S, what="first forgotten")
    await close(await open_tls(broker, tls_files))  # its slot is free again


def test_the_admin_api_over_https_asks_for_the_certificate_too(
    broker_factory: Callable[..., BrokerThread], tls_files: TlsFiles
) -> None:
    config = tls_config(tls_files, webServicePortTls="0", **OPTIONAL_CERT)
    broker = grant_produce(broker_factory(**config))
    assert broker.service is not None
    https_url = broker.service.namespaces.internal_urls().http_url_tls
    assert https_url is not None
    context = ssl.create_default_context(cafile=str(tls_files.ca))
    url = f"{https_url}/admin/v2/namespaces/{NS}/permissions"

    def status() -> int:
        try:
            with urllib.request.urlopen(url, timeout=TIMEOUT_S, context=context) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    assert status() == 401  # no certificate: the handshake passes, authentication refuses
    context.load_cert_chain(str(tls_files.client_cert), str(tls_files.client_key))
    assert status() == 403  # the certificate's role, who may produce but not administer


def standalone_args(files: TlsFiles, tls_port: int) -> list[str]:
    """The CLI's --set arguments of a front broker with the TLS provider alone."""
    settings = {
        **tls_config(files),
        "grpcServicePortTls": str(tls_port),
        "tlsRequireTrustedClientCertOnConnect": "false",
        "authenticationEnabled": "true",
        "authenticationProviders": "tls",
    }
    return [arg for name, value in settings.items() for arg in ("--set", f"{name}={value}")]


async def test_the_standalone_broker_serves_the_front_on_its_uvloop(
    standalone_factory: Callable[..., StandaloneProcess], tls_files: TlsFiles, tmp_path: Path
) -> None:
    """The CLI's broker runs on uvloop, and so does its front."""
    with socket.socket() as probe:  # a port free now, for the broker to bind
        probe.bind((LOOPBACK, 0))
        tls_port = probe.getsockname()[1]
    standalone_factory(tmp_path / "data", *standalone_args(tls_files, tls_port))
    auth = AuthenticationTLS(str(tls_files.client_cert), str(tls_files.client_key))
    async with Client(
        f"grpc+ssl://{LOOPBACK}:{tls_port}",
        tls_trust_certs_file_path=str(tls_files.ca),
        authentication=auth,
        operation_timeout_ms=OPERATION_TIMEOUT_MS,
    ) as c:
        await produce_one(c, "on-uvloop")


def test_a_taken_front_port_is_exit_1_without_a_traceback(
    tls_files: TlsFiles, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind((LOOPBACK, 0))
        taken.listen()
        port = taken.getsockname()[1]
        data = str(tmp_path / "d")
        ports = ["--set", "grpcServicePort=0", "--set", "webServicePort=0"]
        args = standalone_args(tls_files, port)
        result = cli("standalone", "--data", data, *ports, *args, timeout=30)
    assert result.returncode == 1, result.stderr
    assert "cannot start" in result.stderr and str(port) in result.stderr
    assert "Traceback" not in result.stderr
