"""The proxy's security (PIP-1): clients authenticate at the proxy with the brokers' providers
(token here), the proxy calls the brokers as its own role (a proxy role, and a super-user) and
names the client's role, which the brokers authorize: a client not granted the topic is refused
by the broker, with its AuthorizationError, though the proxy may do everything. TLS toward
clients is the proxy's own: it terminates there (plain to the brokers) or is re-encrypted
(tlsEnabledWithBroker, trusting brokerClientTrustCertsFilePath)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from pulsar_grpc.broker.security.tokens import create_token
from pulsar_grpc.client import (
    AuthenticationError,
    AuthenticationSCRAM,
    AuthenticationTLS,
    AuthenticationToken,
    AuthorizationError,
    Client,
    PulsarError,
)
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.cluster import one_topic_per_bundle
from tests.e2e.messaging import receive_n
from tests.e2e.test_authorization import AUTHZ, KEY, PROXY, SUPER, grant, token
from tests.e2e.test_scram import credentials_file
from tests.e2e.test_tls import tls_config
from tests.e2e.wire import error_code, stub
from tests.proxy_support import ProxyThread, proxy_config
from tests.support import BrokerThread, broker_config
from tests.tls import TlsFiles, make_tls_files
from tests.waiting import eventually
from tests.zookeeper import ZooKeeperServer, zookeeper

__all__ = ["zookeeper"]  # fixtures, imported to be found

TIMEOUT_MS = 30_000
# The clients' side of the proxies: token authentication with the brokers' key.
CLIENT_AUTH = {
    "authenticationEnabled": "true",
    "authenticationProviders": "token",
    "tokenSecretKey": AUTHZ["tokenSecretKey"],
    "brokerClientAuthenticationPlugin": "token",
    "authenticationRefreshCheckSeconds": "1",
}


@dataclass
class SecureCluster:
    brokers: list[BrokerThread]
    terminating: ProxyThread  # TLS from clients ends here; plain to the brokers
    reencrypting: ProxyThread  # TLS from clients, TLS again to the brokers
    mutual: ProxyThread  # clients authenticate with their TLS certificate (provider tls)
    tls: TlsFiles
    store_url: str  # the brokers' metadata store, for proxies a test starts itself


@pytest.fixture(scope="module")
def secure(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SecureCluster]:
    """Two brokers with token authentication, authorization and a TLS port (the proxy role
    "proxy" in proxyRoles and superUserRoles), and two proxies in front of them."""
    tls = make_tls_files(tmp_path_factory.mktemp("proxy-tls"))
    store_url = f"zk:{zookeeper.hosts}/proxy-security-{id(tls)}"
    started: list[Any] = []
    try:
        brokers = []
        for i in range(2):
            data = tmp_path_factory.mktemp(f"secure-broker-{i}")
            config = broker_config(
                data,
                metadataStoreUrl=store_url,
                loadBalancerBrokerOverloadedThresholdPercentage=100,
                **{**AUTHZ, "superUserRoles": f"{SUPER},{PROXY}"},
                **tls_config(tls),
            )
            brokers.append(BrokerThread(config).start())
            started.append(brokers[-1])
        proxy_tls = {
            "grpcServicePortTls": "0",
            "tlsCertificateFilePath": str(tls.server_cert),
            "tlsKeyFilePath": str(tls.server_key),
        }
        as_proxy = f"token:{token(PROXY)}"
        credentials = {**CLIENT_AUTH, "brokerClientAuthenticationParameters": as_proxy}
        terminating = ProxyThread(
            proxy_config(metadataStoreUrl=store_url, **credentials, **proxy_tls)
        ).start()
        started.append(terminating)
        reencrypting = ProxyThread(
            proxy_config(
                metadataStoreUrl=store_url,
                tlsEnabledWithBroker="true",
                brokerClientTrustCertsFilePath=str(tls.ca),
                **credentials,
                **proxy_tls,
            )
        ).start()
        started.append(reencrypting)
        mutual = ProxyThread(
            proxy_config(
                metadataStoreUrl=store_url,
                **{**credentials, "authenticationProviders": "tls"},
                **proxy_tls,
                grpcServicePort="",
                tlsTrustCertsFilePath=str(tls.ca),
                tlsRequireTrustedClientCertOnConnect="true",
            )
        ).start()
        started.append(mutual)
        yield SecureCluster(brokers, terminating, reencrypting, mutual, tls, store_url)
    finally:
        for server in reversed(started):
            server.stop()


def tls_client(proxy: ProxyThread, tls: TlsFiles, role: str | None) -> Client:
    return Client(
        f"grpc+ssl://{proxy.tls_address}",
        tls_trust_certs_file_path=str(tls.ca),
        authentication=AuthenticationToken(token(role)) if role else None,
        operation_timeout_ms=TIMEOUT_MS,
    )


async def produce_consume(client: Client, topic: str) -> None:
    consumer = await client.subscribe(topic, "s", initial_position="earliest")
    producer = await client.create_producer(topic)
    sent = [b"%d" % i for i in range(10)]
    await asyncio.gather(*(producer.send(p) for p in sent))
    assert [m.data() for m in await receive_n(consumer, len(sent))] == sent


@pytest.mark.parametrize("which", ["terminating", "reencrypting"])
async def test_an_allowed_client_produces_and_consumes_over_tls_through_the_proxy(
    secure: SecureCluster, which: str
) -> None:
    proxy: ProxyThread = getattr(secure, which)
    await grant(secure.brokers[0], "app", ["produce", "consume"])
    async with tls_client(proxy, secure.tls, "app") as client:
        for topic in one_topic_per_bundle(f"proxy-{which}"):
            await produce_consume(client, topic.full_name)
            answer = await client.lookup(topic.full_name)
            assert answer.proxy_through_service_url
            assert answer.grpc_url_tls == f"grpc+ssl://{proxy.tls_address}"
            scheme = "grpc+ssl://" if which == "reencrypting" else "grpc://"
            assert answer.proxy_to_broker_url.startswith(scheme)


async def test_a_client_not_granted_the_topic_is_refused_by_the_broker(
    secure: SecureCluster,
) -> None:
    """The proxy's role may do everything; the client's may not, and the broker says so."""
    async with tls_client(secure.terminating, secure.tls, "stranger") as client:
        with pytest.raises(AuthorizationError) as refused:
            await client.create_producer("proxy-not-granted")
        assert "role stranger is not authorized" in str(refused.value)
    # A client naming someone else as its original principal is not believed: the proxy
    # sends the role the client proved.
    channel = grpc.aio.secure_channel(
        secure.terminating.tls_address,
        grpc.ssl_channel_credentials(root_certificates=secure.tls.ca.read_bytes()),
    )
    async with channel:
        metadata = (
            ("authorization", f"Bearer {token('stranger')}"),
            ("x-pulsar-original-principal", SUPER),
            ("x-pulsar-topic", "proxy-not-granted"),
        )
        call = stub(channel).Produce(metadata=metadata)
        with pytest.raises(grpc.aio.AioRpcError) as denied:
            await asyncio.wait_for(call.read(), TIMEOUT_MS / 1000)
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert error_code(denied.value) == pb.AuthorizationError
        assert "role stranger" in (denied.value.details() or "")


async def test_a_scram_client_authenticates_at_the_proxy(
    secure: SecureCluster, tmp_path: Path
) -> None:
    """SCRAM at the proxy, as at a broker: the exchange runs with the proxy, whose role token
    (signed with the cluster's keys from the metadata store) then opens the streams; the
    brokers authorize the user the exchange proved, not the proxy."""
    config = proxy_config(
        metadataStoreUrl=secure.store_url,
        **{
            **CLIENT_AUTH,
            "authenticationProviders": "scram",
            "scramAuthConf": str(credentials_file(tmp_path)),
            "brokerClientAuthenticationParameters": f"token:{token(PROXY)}",
        },
    )
    # Started and stopped off this test's loop: the proxy runs a loop of its own.
    proxy = await asyncio.to_thread(ProxyThread(config).start)
    try:
        await grant(secure.brokers[0], "alice", ["produce", "consume"])
        alice = AuthenticationSCRAM("alice", "wonderland")
        async with Client(proxy.service_url, authentication=alice) as client:
            await produce_consume(client, "proxy-scram")
        header = alice.authorization()
        assert header is not None and header.startswith("RoleToken ")
        bob = AuthenticationSCRAM("bob", "builder")  # a user the brokers granted nothing
        async with Client(proxy.service_url, authentication=bob) as client:
            with pytest.raises(AuthorizationError, match="role bob is not authorized"):
                await client.create_producer("proxy-scram")
        wrong = AuthenticationSCRAM("alice", "not-the-password")
        async with Client(proxy.service_url, authentication=wrong) as client:
            with pytest.raises(AuthenticationError):
                await client.create_producer("proxy-scram")
    finally:
        await asyncio.to_thread(proxy.stop)


@pytest.mark.parametrize("credentials", ["none", "invalid"])
async def test_a_client_without_valid_credentials_is_refused_at_the_proxy(
    secure: SecureCluster, credentials: str
) -> None:
    """Refused before the proxy does anything for the call (nothing asked of a broker)."""
    stats = secure.terminating.proxy.stats
    asked = stats.lookups.total() + stats.unary_calls.total()
    client = tls_client(secure.terminating, secure.tls, None)
    if credentials == "invalid":
        client = Client(
            f"grpc+ssl://{secure.terminating.tls_address}",
            tls_trust_certs_file_path=str(secure.tls.ca),
            auth_token="not-a-token",
            operation_timeout_ms=TIMEOUT_MS,
        )
    async with client:
        with pytest.raises(AuthenticationError):
            await client.create_producer("proxy-unauthenticated")
    assert stats.lookups.total() + stats.unary_calls.total() == asked


async def test_plaintext_clients_reach_the_proxy_too(secure: SecureCluster) -> None:
    await grant(secure.brokers[0], "app", ["produce", "consume"])
    async with Client(
        secure.terminating.service_url,
        auth_token=token("app"),
        operation_timeout_ms=TIMEOUT_MS,
    ) as client:
        await produce_consume(client, "proxy-plaintext")
        assert (await client.lookup("proxy-plaintext")).grpc_url == (secure.terminating.service_url)


async def test_a_stream_ends_when_the_clients_token_expires(secure: SecureCluster) -> None:
    """The brokers see the proxy's credentials, which do not expire with the client's: the
    proxy ends the client's stream itself, UNAUTHENTICATED, and the broker's stream with it."""
    await grant(secure.brokers[0], "app", ["produce"])
    short = create_token(KEY, "app", expires_at=int(time.time()) + 3)
    async with grpc.aio.insecure_channel(secure.terminating.grpc_address) as channel:
        metadata = (("authorization", f"Bearer {short}"), ("x-pulsar-topic", "proxy-expiring"))
        call = stub(channel).Produce(metadata=metadata)
        assert (await asyncio.wait_for(call.read(), TIMEOUT_MS / 1000)).HasField("ready")
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            await asyncio.wait_for(call.read(), 15)
        assert ended.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "expired" in (ended.value.details() or "")
    stats = secure.terminating.proxy.stats
    await eventually(lambda: stats.active_streams["Produce"] == 0, timeout=10)


async def test_a_client_certificate_is_the_role_at_a_mutual_tls_proxy(
    secure: SecureCluster,
) -> None:
    """tls authentication at the proxy: the certificate's common name ("client") is the role
    the brokers authorize; a certificate from another CA does not get through the handshake."""
    await grant(secure.brokers[0], "client", ["produce", "consume"])
    files = secure.tls
    async with Client(
        f"grpc+ssl://{secure.mutual.tls_address}",
        tls_trust_certs_file_path=str(files.ca),
        authentication=AuthenticationTLS(str(files.client_cert), str(files.client_key)),
        operation_timeout_ms=TIMEOUT_MS,
    ) as client:
        await produce_consume(client, "proxy-mutual")
    async with Client(
        f"grpc+ssl://{secure.mutual.tls_address}",
        tls_trust_certs_file_path=str(files.ca),
        authentication=AuthenticationTLS(str(files.other_client_cert), str(files.other_client_key)),
        operation_timeout_ms=5000,
    ) as stranger:
        with pytest.raises(PulsarError):
            await stranger.create_producer("proxy-mutual")
