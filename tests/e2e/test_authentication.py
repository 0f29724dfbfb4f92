"""Authentication on a real broker (authenticationEnabled): the basic provider with an htpasswd
file of bcrypt hashes, the TLS provider with real client certificates under mutual TLS,
anonymousUserRole, the admin API's 401, hostile Authorization headers and a client certificate
from another CA, over gRPC and HTTP.
A refused call ends UNAUTHENTICATED with Pulsar's AuthenticationError code before the broker
does anything for it (no topic is created)."""

from __future__ import annotations

import asyncio
import base64
import http.client
import logging
import ssl
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path

import bcrypt
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pulsar_grpc.client import (
    Authentication,
    AuthenticationBasic,
    AuthenticationError,
    AuthenticationTLS,
    AuthenticationToken,
    Client,
)
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.test_cli import cli
from tests.e2e.test_tls import produce_and_consume, tls_config, tls_url
from tests.e2e.wire import error_code, stub
from tests.support import BrokerThread
from tests.tls import TlsFiles, tls_files_fixture  # noqa: F401

USERS = {"alice": "wonderland", "bob": "builder"}
TIMEOUT_S = 15


def htpasswd(directory: Path) -> Path:
    """An htpasswd file as `htpasswd -B` writes it ($2y$ hashes; cost 4 keeps tests fast)."""
    lines = []
    for user, password in USERS.items():
        hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
        lines.append(f"{user}:$2y${hashed[4:]}")
    path = directory / "htpasswd"
    path.write_text("\n".join(lines) + "\n")
    return path


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture
def basic_broker(broker_factory: Callable[..., BrokerThread], tmp_path: Path) -> BrokerThread:
    return broker_factory(
        authenticationEnabled="true",
        authenticationProviders="org.apache.pulsar.broker.authentication.AuthenticationProviderBasic",
        basicAuthConf=str(htpasswd(tmp_path)),
    )


def topics_of(broker: BrokerThread) -> list[str]:
    assert broker.service is not None
    return broker.run(broker.service.list_topics("public/default"))


async def produce_refusal(
    broker: BrokerThread, topic: str, metadata: list[tuple[str, str]]
) -> tuple[grpc.StatusCode, int | None]:
    """A raw Produce call's final status and Pulsar error code (None: no code trailer)."""
    async with grpc.aio.insecure_channel(broker.grpc_address) as channel:
        call = stub(channel).Produce(metadata=[("x-pulsar-topic", topic), *metadata])
        # Nothing is written: a refused call ends before its first request is read (a write
        # would race the refusal and fail on the client's side), an accepted one waits.
        try:
            await asyncio.wait_for(call.read(), TIMEOUT_S)
        except TimeoutError:
            call.cancel()
            return grpc.StatusCode.OK, None  # not refused
        except grpc.aio.AioRpcError:
            pass
        code = await asyncio.wait_for(call.code(), TIMEOUT_S)
        trailers = dict(await call.trailing_metadata() or ())
        raw = trailers.get("pulsar-error-code")
        return code, int(raw) if raw is not None else None


async def assert_produce_unauthenticated(
    broker: BrokerThread, topic: str, metadata: list[tuple[str, str]]
) -> None:
    refusal = await produce_refusal(broker, topic, metadata)
    assert refusal == (grpc.StatusCode.UNAUTHENTICATED, pb.AuthenticationError), metadata


async def assert_unauthenticated(call: Awaitable[object]) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await asyncio.wait_for(call, TIMEOUT_S)
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED, info.value
    assert error_code(info.value) == pb.AuthenticationError


# ------------------------------------------------------------------ gRPC


async def test_a_call_without_credentials_is_refused_before_any_broker_work(basic_broker):
    await assert_produce_unauthenticated(basic_broker, "never-created", [])
    async with grpc.aio.insecure_channel(basic_broker.grpc_address) as channel:
        request = pb.LookupRequest(topic="persistent://public/default/never-created")
        await assert_unauthenticated(stub(channel).Lookup(request))
        metadata = pb.PartitionedTopicMetadataRequest(topic="never-created-either")
        await assert_unauthenticated(stub(channel).GetPartitionedTopicMetadata(metadata))
    assert topics_of(basic_broker) == []  # nothing was auto-created


async def test_health_checks_need_no_credentials(basic_broker):
    async with grpc.aio.insecure_channel(basic_broker.grpc_address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        answer = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=TIMEOUT_S)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING


async def test_basic_credentials_right_wrong_and_unknown(basic_broker):
    url = basic_broker.service_url
    async with Client(url, authentication=AuthenticationBasic("alice", "wonderland")) as c:
        assert await produce_and_consume(c, "basic-ok", b"hi") == b"hi"
    for user, password in [("alice", "wrong"), ("mallory", "wonderland"), ("bob", "wonderland")]:
        auth = AuthenticationBasic(user, password)
        async with Client(url, authentication=auth, operation_timeout_ms=5000) as c:
            with pytest.raises(AuthenticationError):
                await asyncio.wait_for(c.create_producer(f"refused-{user}"), TIMEOUT_S)
    assert topics_of(basic_broker) == ["persistent://public/default/basic-ok"]


async def test_the_sync_client_sends_the_same_credentials(basic_broker):
    from pulsar_grpc.client import SyncClient

    def run() -> bytes:
        auth = AuthenticationBasic("bob", "builder")
        with SyncClient(basic_broker.service_url, authentication=auth) as client:
            producer = client.create_producer("sync-basic")
            producer.send(b"sync")
            consumer = client.subscribe("sync-basic", "s", initial_position="earliest")
            return consumer.receive(timeout_ms=10_000).data()

    assert await asyncio.to_thread(run) == b"sync"


async def test_pulsar_client_forms_of_basic_credentials(basic_broker):
    """AuthenticationBasic(auth_params_string=) and Authentication(plugin, params), as
    pulsar-client takes them (issue 26)."""
    forms = [
        AuthenticationBasic("alice", "wonderland", method="basic"),
        AuthenticationBasic(auth_params_string='{"username": "alice", "password": "wonderland"}'),
        Authentication("basic", '{"userId": "alice", "password": "wonderland"}'),
        Authentication(
            "org.apache.pulsar.client.impl.auth.AuthenticationBasic",
            "userId:alice,password:wonderland",
        ),
    ]
    for i, auth in enumerate(forms):
        async with Client(basic_broker.service_url, authentication=auth) as c:
            assert await produce_and_consume(c, f"forms-{i}", b"x") == b"x"
    wrong = Authentication("basic", '{"userId": "alice", "password": "nope"}')
    async with Client(basic_broker.service_url, authentication=wrong) as c:
        with pytest.raises(AuthenticationError):
            await c.lookup("t")


def test_credentials_refuse_arguments_as_pulsar_client_does():
    with pytest.raises(ValueError):
        AuthenticationToken(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        AuthenticationBasic("alice", None)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        AuthenticationBasic(auth_params_string="{}")
    with pytest.raises(ValueError):
        AuthenticationTLS(b"/cert.pem", "/key.pem")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Authentication("nosuchplugin", "")


async def test_a_token_supplier_that_raises_is_an_authentication_error(broker_factory, tmp_path):
    """The supplier's exception is chained to an AuthenticationError, which the application
    gets from the call (not a retry loop, not the bare exception)."""
    broker = broker_factory(
        authenticationEnabled="true",
        authenticationProviders="basic",
        basicAuthConf=str(htpasswd(tmp_path)),
    )

    def supplier() -> str:
        raise RuntimeError("vault unreachable")

    auth = AuthenticationToken(supplier)
    async with Client(broker.service_url, authentication=auth, operation_timeout_ms=5000) as c:
        with pytest.raises(AuthenticationError, match="vault unreachable") as caught:
            await c.lookup("t")
        assert isinstance(caught.value.__cause__, RuntimeError)
        with pytest.raises(AuthenticationError, match="vault unreachable"):
            await c.create_producer("t")


async def test_a_token_supplier_is_asked_on_every_call(broker_factory, tmp_path):
    # No token provider on this broker: a Bearer header is refused, and the supplier was asked.
    broker = broker_factory(
        authenticationEnabled="true",
        authenticationProviders="basic",
        basicAuthConf=str(htpasswd(tmp_path)),
    )
    asked: list[int] = []

    def supplier() -> str:
        asked.append(1)
        return "some.jwt.token"

    auth = AuthenticationToken(supplier)
    async with Client(broker.service_url, authentication=auth, operation_timeout_ms=5000) as c:
        with pytest.raises(AuthenticationError, match="token is not enabled"):
            await c.lookup("t")
        with pytest.raises(AuthenticationError):
            await c.lookup("t")
    assert len(asked) >= 2


async def test_anonymous_user_role_lets_calls_without_credentials_in(broker_factory, tmp_path):
    broker = broker_factory(
        authenticationEnabled="true",
        authenticationProviders="basic",
        basicAuthConf=str(htpasswd(tmp_path)),
        anonymousUserRole="guest",
    )
    async with Client(broker.service_url) as c:
        assert await produce_and_consume(c, "anon", b"a") == b"a"
    # Credentials that are sent are still checked.
    auth = AuthenticationBasic("alice", "nope")
    async with Client(broker.service_url, authentication=auth, operation_timeout_ms=5000) as c:
        with pytest.raises(AuthenticationError):
            await c.create_producer("anon")


async def test_tls_provider_takes_the_client_certificate_cn_as_role(
    broker_factory, tls_files: TlsFiles, caplog
):
    broker = broker_factory(
        **tls_config(
            tls_files,
            tlsRequireTrustedClientCertOnConnect="true",
            authenticationEnabled="true",
            authenticationProviders="tls",
        )
    )
    caplog.set_level(logging.DEBUG, logger="pulsar_grpc.interceptors.auth")
    auth = AuthenticationTLS(str(tls_files.client_cert), str(tls_files.client_key))
    url = tls_url(broker)
    async with Client(url, tls_trust_certs_file_path=str(tls_files.ca), authentication=auth) as c:
        assert await produce_and_consume(c, "tls-role", b"t") == b"t"
    assert "authenticated as client (tls)" in caplog.text  # the CN of tests/tls.py's client
    # The plaintext port of the same broker has no certificate to go by.
    await assert_produce_unauthenticated(broker, "no-cert", [])


def test_admin_api_over_https_takes_the_client_certificate(broker_factory, tls_files: TlsFiles):
    broker = broker_factory(
        **tls_config(
            tls_files,
            webServicePortTls="0",
            tlsRequireTrustedClientCertOnConnect="true",
            authenticationEnabled="true",
            authenticationProviders="tls",
        )
    )
    assert broker.service is not None
    https_url = broker.service.namespaces.internal_urls().http_url_tls
    assert https_url is not None
    context = ssl.create_default_context(cafile=str(tls_files.ca))
    context.load_cert_chain(str(tls_files.client_cert), str(tls_files.client_key))
    url = "/admin/v2/persistent/public/default"
    request = urllib.request.Request(https_url + url)
    with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context) as resp:
        assert resp.status == 200
    # The plaintext port has no certificate to go by.
    assert http_get(broker.http_url + url)[0] == 401


# ------------------------------------------------------------------ hostile input

HOSTILE = [
    "Basic",
    "Basic ",
    "Basic !!!not-base64!!!",
    "Basic " + base64.b64encode(b"no-colon").decode(),
    "Basic " + base64.b64encode(b":password-without-user").decode(),
    "Basic " + base64.b64encode(b"\xff\xfe:wonderland").decode(),  # user not UTF-8
    "Basic " + base64.b64encode(b"alice:" + b"w" * 100).decode(),  # past bcrypt's 72 bytes
    "Basic " + "A" * 6000,  # long, under gRPC's metadata limit
    "Bearer",
    "Bearer x.y.z",  # no token provider here
    "Digest username=alice",
    "wonderland",
]


@pytest.mark.parametrize("authorization", HOSTILE)
async def test_hostile_authorization_headers_are_unauthenticated(basic_broker, authorization):
    metadata = [("authorization", authorization)]
    await assert_produce_unauthenticated(basic_broker, "hostile", metadata)


async def test_repeated_authorization_headers_are_refused(basic_broker):
    good = basic("alice", "wonderland")
    for pair in ([good, "Basic x"], ["Basic x", good], [good, good]):
        metadata = [("authorization", value) for value in pair]
        await assert_produce_unauthenticated(basic_broker, "repeated", metadata)
    assert topics_of(basic_broker) == []


async def test_a_client_certificate_from_another_ca_is_refused_without_harm(
    broker_factory, tls_files: TlsFiles
):
    """Mutual TLS with the TLS provider: a certificate signed by a CA the broker does not
    trust fails the handshake (UNAVAILABLE) or the call (UNAUTHENTICATED) promptly, every
    time, and the broker goes on serving a client with a trusted certificate."""
    broker = broker_factory(
        **tls_config(
            tls_files,
            tlsRequireTrustedClientCertOnConnect="true",
            authenticationEnabled="true",
            authenticationProviders="tls",
        )
    )
    target = tls_url(broker).removeprefix("grpc+ssl://")
    foreign = grpc.ssl_channel_credentials(
        root_certificates=tls_files.ca.read_bytes(),
        private_key=tls_files.other_client_key.read_bytes(),
        certificate_chain=tls_files.other_client_cert.read_bytes(),
    )
    for _ in range(5):
        async with grpc.aio.secure_channel(target, foreign) as channel:
            call = stub(channel).Produce(metadata=[("x-pulsar-topic", "foreign-ca")])
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await asyncio.wait_for(call.read(), TIMEOUT_S)
            assert refused.value.code() in (
                grpc.StatusCode.UNAVAILABLE,
                grpc.StatusCode.UNAUTHENTICATED,
            ), refused.value
    assert topics_of(broker) == []
    trusted = AuthenticationTLS(str(tls_files.client_cert), str(tls_files.client_key))
    url = tls_url(broker)
    async with Client(
        url, tls_trust_certs_file_path=str(tls_files.ca), authentication=trusted
    ) as c:
        assert await produce_and_consume(c, "after-foreign-ca", b"ok") == b"ok"


# ------------------------------------------------------------------ admin API


def http_get(url: str, authorization: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if authorization is not None:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_admin_api_answers_401_without_credentials_and_200_with(basic_broker):
    url = f"{basic_broker.http_url}/admin/v2/persistent/public/default"
    status, body = http_get(url)
    assert (status, '"reason"' in body) == (401, True), body
    assert http_get(url, basic("alice", "wonderland")) == (200, "[]")
    for authorization in [basic("alice", "wrong"), *HOSTILE]:
        assert http_get(url, authorization)[0] == 401, authorization
    assert http_get(f"{basic_broker.http_url}/metrics")[0] == 200  # open, as in Pulsar
    # Two Authorization headers, each valid alone: neither counts.
    both = [basic("alice", "wonderland").encode(), basic("bob", "builder").encode()]
    assert raw_http_status(basic_broker, both) == 401
    # Bytes that are not ASCII (nor UTF-8), as the header or inside the base64.
    assert raw_http_status(basic_broker, [b"Basic \xff\xfe\x80"]) == 401
    assert raw_http_status(basic_broker, [b"\xc3\xa9"]) == 401


def raw_http_status(broker: BrokerThread, authorization: list[bytes]) -> int:
    """The status of a GET sent with these Authorization header values, bytes as they are."""
    connection = http.client.HTTPConnection(broker.http_url.removeprefix("http://"), timeout=15)
    try:
        connection.putrequest("GET", "/admin/v2/persistent/public/default")
        for value in authorization:
            connection.putheader("Authorization", value)
        connection.endheaders()
        return connection.getresponse().status
    finally:
        connection.close()


def test_metrics_ask_for_credentials_when_configured(broker_factory, tmp_path):
    broker = broker_factory(
        authenticationEnabled="true",
        authenticationProviders="basic",
        basicAuthConf=str(htpasswd(tmp_path)),
        authenticateMetricsEndpoint="true",
    )
    assert http_get(f"{broker.http_url}/metrics")[0] == 401
    assert http_get(f"{broker.http_url}/metrics", basic("bob", "builder"))[0] == 200


# ------------------------------------------------------------------ configuration


def test_unknown_provider_refuses_to_start(broker_factory):
    from pulsar_grpc.broker.config import ConfigError

    with pytest.raises(ConfigError, match=r"unknown provider com\.example\.Nope"):
        broker_factory(authenticationEnabled="true", authenticationProviders="com.example.Nope")


def test_basic_auth_conf_as_a_data_url(broker_factory, tmp_path):
    content = base64.b64encode(htpasswd(tmp_path).read_bytes()).decode()
    broker = broker_factory(
        authenticationEnabled="true",
        authenticationProviders="basic",
        basicAuthConf=f"data:;base64,{content}",
    )
    url = f"{broker.http_url}/admin/v2/persistent/public/default"
    assert http_get(url, basic("alice", "wonderland"))[0] == 200


def test_pulsar_client_pythons_apr1_htpasswd_file(broker_factory, tmp_path):
    """The .htpasswd of pulsar-client-python's CI (admin / 123456, an $apr1$ hash) as Pulsar
    reads it: the user it names gets in over real HTTP, a wrong password does not."""
    path = tmp_path / ".htpasswd"
    path.write_text("admin:$apr1$FG4AO6aX$KGYPuMoLUou3i6vUkPUUf.\n")
    broker = broker_factory(
        authenticationEnabled="true",
        authenticationProviders="org.apache.pulsar.broker.authentication.AuthenticationProviderBasic",
        basicAuthConf=str(path),
    )
    url = f"{broker.http_url}/admin/v2/persistent/public/default"
    assert http_get(url, basic("admin", "123456"))[0] == 200
    assert http_get(url, basic("admin", "1234567"))[0] == 401


# ------------------------------------------------------------------ CLI


def test_cli_with_basic_credentials(basic_broker):
    creds = [
        "--auth-plugin",
        "basic",
        "--auth-params",
        '{"userId":"alice","password":"wonderland"}',
    ]
    url = ["--service-url", basic_broker.service_url]
    produced = cli("produce", "cli-basic", "-m", "hello", *url, *creds)
    assert produced.returncode == 0, produced.stderr
    refused = cli("produce", "cli-basic", "-m", "x", *url, "--operation-timeout-ms", "3000")
    assert refused.returncode == 1 and "AuthenticationError" in refused.stderr, refused.stderr
    admin = ["--admin-url", basic_broker.http_url]
    listed = cli("topics", *admin, "--auth-plugin", "basic", "--auth-params",
                 "userId:alice,password:wonderland", "list")  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert "persistent://public/default/cli-basic" in listed.stdout
    denied = cli("topics", *admin, "list")
    assert denied.returncode == 1 and "401" in denied.stderr, denied.stderr
