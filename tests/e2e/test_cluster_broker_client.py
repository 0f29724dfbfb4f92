"""Broker-to-broker credentials (Pulsar's brokerClientAuthenticationPlugin and
brokerClientAuthenticationParameters) on three broker PROCESSES (tests/cluster.py: real ZooKeeper
and PostgreSQL) with token authentication on: a broker's own calls to the others' admin API
carry its token, so that a partitioned topic's stats gathered from each partition's owner, a
namespace unload sent on to each bundle's owner, and the leader's split of a bundle on its owner
all work; without the properties, the others' 401 comes back in a clear 503, never a crash.
Over https (brokerClientTlsEnabled, one in-process broker) the broker client trusts its CA and
presents a tls plugin's certificate."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence

import aiohttp
import pytest

from pulsar_grpc.broker.config import load_config
from pulsar_grpc.broker.naming import NamespaceBundles, NamespaceName, TopicName
from pulsar_grpc.broker.security.tokens import create_secret_key, create_token
from pulsar_grpc.broker.web.broker_client import BrokerClient
from pulsar_grpc.client import AuthenticationToken, Client
from tests.cluster import Cluster, Member, cluster_factory, topic_over_every_bundle
from tests.e2e.test_cli import cli
from tests.postgres import postgres_server, postgres_url
from tests.support import BrokerThread
from tests.tls import TlsFiles, tls_files_fixture
from tests.waiting import eventually
from tests.zookeeper import zk_chroot, zookeeper

__all__ = [  # fixtures
    "cluster_factory",
    "postgres_server",
    "postgres_url",
    "tls_files_fixture",
    "zk_chroot",
    "zookeeper",
]

KEY = create_secret_key()
PARTITIONS = 4
PULSAR_TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
TOKEN_AUTH = {
    "authenticationEnabled": "true",
    "authenticationProviders": "token",
    "tokenSecretKey": "data:;base64," + base64.b64encode(KEY).decode(),
}


def token(role: str) -> str:
    return create_token(KEY, role, expires_at=int(time.time()) + 3600)


def with_broker_credentials() -> dict[str, str]:
    return {
        **TOKEN_AUTH,
        "brokerClientAuthenticationPlugin": PULSAR_TOKEN_PLUGIN,
        "brokerClientAuthenticationParameters": f"token:{token('broker-super')}",
    }


@pytest.fixture
async def admin() -> AsyncIterator[aiohttp.ClientSession]:
    """An operator's HTTP session, with a valid token."""
    headers = {"Authorization": f"Bearer {token('operator')}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        yield session


async def placed(members: Sequence[Member], topic: TopicName) -> Member:
    """The member owning ``topic`` once an authenticated lookup placed it."""
    url = members[0].service_url()
    async with Client(url, authentication=AuthenticationToken(token("app"))) as client:
        owner = (await client.lookup(topic.full_name)).grpc_url
    (member,) = [m for m in members if m.service_url() == owner]
    return member


async def partitioned_topic_over(
    members: Sequence[Member], http: aiohttp.ClientSession
) -> tuple[TopicName, list[Member]]:
    """A partitioned topic whose partitions are placed on at least two brokers; the owners."""
    topic = topic_over_every_bundle(f"bclient-{uuid.uuid4().hex[:6]}", PARTITIONS)
    url = f"{members[0].http_url()}/admin/v2/{topic.rest_path}/partitions"
    async with http.put(url, data=str(PARTITIONS)) as response:
        assert response.status == 204, await response.text()
    owners = [await placed(members, topic.get_partition(i)) for i in range(PARTITIONS)]
    assert len({o.name for o in owners}) >= 2, "placement put every partition on one broker"
    return topic, owners


async def answer(http: aiohttp.ClientSession, method: str, url: str) -> tuple[int, str]:
    async with http.request(method, url) as response:
        return response.status, await response.text()


async def owned_in(http: aiohttp.ClientSession, member: Member, ns: str) -> list[str]:
    """The bundles of ``ns`` ``member`` owns (Pulsar's ownedNamespaces)."""
    url = f"{member.http_url()}/admin/v2/brokers/standalone/{member.broker_id}/ownedNamespaces"
    status, body = await answer(http, "GET", url)
    assert status == 200, body
    return [b for b in json.loads(body) if b.startswith(ns + "/")]


async def test_with_broker_credentials_the_brokers_calls_to_each_other_work(
    cluster_factory: Callable[..., Cluster], admin: aiohttp.ClientSession
) -> None:
    cluster = cluster_factory(
        **with_broker_credentials(),
        # The leader checks every 1.2 s, from reports rewritten every 200 ms; a bundle with
        # more than 2 topics is split, once.
        loadBalancerSheddingIntervalMinutes="0.02",
        loadBalancerReportUpdateMinIntervalMillis="200",
        loadBalancerNamespaceBundleMaxTopics="2",
    )
    members = cluster.members
    topic, owners = await partitioned_topic_over(members, admin)

    # Partitioned stats, asked of every broker: the partitions it does not own come from
    # their owners, asked with its own token.
    for member in members:
        status, body = await answer(
            admin, "GET", f"{member.http_url()}/admin/v2/{topic.rest_path}/stats"
        )
        assert status == 200, f"{member.name}: {body}"
        assert set(json.loads(body)["partitions"]) == {
            str(topic.get_partition(i)) for i in range(PARTITIONS)
        }

    # The namespace unloaded through one broker (the CLI): each bundle on its owner.
    asked = next(m for m in members if owners.count(m) < PARTITIONS)
    ns = str(topic.namespace)
    assert any([await owned_in(admin, m, ns) for m in members])
    unload = await asyncio.to_thread(
        cli, "admin", "--admin-url", asked.http_url(), "--auth-plugin", "token",
        "--auth-params", f"token:{token('operator')}", "namespaces", "unload", ns,
    )  # fmt: skip
    assert unload.returncode == 0, unload.stderr
    assert [await owned_in(admin, m, ns) for m in members] == [[], [], []]

    # The leader splits a bundle with 3 topics on its owner, as the owner's admin API asks.
    split_ns = NamespaceName.get(f"public/split-{uuid.uuid4().hex[:6]}")
    status, body = await answer(
        admin, "PUT", f"{members[0].http_url()}/admin/v2/namespaces/{split_ns}"
    )
    assert status == 204, body
    first = NamespaceBundles.with_count(split_ns, 4).bundles[0]
    names = [f"persistent://{split_ns}/t-{i}" for i in range(200)]
    hot = [n for n in names if first.includes(TopicName.get(n))][:3]
    auth = AuthenticationToken(token("app"))
    async with Client(members[1].service_url(), authentication=auth) as client:
        producers = [await client.create_producer(n) for n in hot]

        async def split() -> int | bool:
            url = f"{members[2].http_url()}/admin/v2/namespaces/{split_ns}/bundles"
            status, body = await answer(admin, "GET", url)
            assert status == 200, body
            count = int(json.loads(body)["numBundles"])
            return count if count > 4 else False

        await eventually(split, timeout=90, what="the leader splits the bundle on its owner")
        for producer in producers:
            await producer.close()
    logs = "".join(m.process.log.read_text(errors="replace") for m in members)
    assert "could not split bundle" not in logs


async def test_without_broker_credentials_the_refusal_is_relayed_clearly(
    cluster_factory: Callable[..., Cluster], admin: aiohttp.ClientSession
) -> None:
    members = cluster_factory(**TOKEN_AUTH).members
    topic, owners = await partitioned_topic_over(members, admin)
    asked = next(m for m in members if owners.count(m) < PARTITIONS)
    status, body = await answer(
        admin, "GET", f"{asked.http_url()}/admin/v2/{topic.rest_path}/stats"
    )
    assert status == 503, body
    reason = json.loads(body)["reason"]
    assert "401" in reason and "brokerClientAuthenticationParameters" in reason, reason

    ns = topic.namespace
    status, body = await answer(admin, "PUT", f"{asked.http_url()}/admin/v2/namespaces/{ns}/unload")
    assert status == 503, body
    reason = json.loads(body)["reason"]
    assert "refused its unload: 401" in reason, reason
    assert all(m.process.running for m in members)  # refused, not crashed


async def test_over_https_the_broker_client_trusts_its_ca_and_presents_its_certificate(
    broker_factory: Callable[..., BrokerThread], tls_files: TlsFiles
) -> None:
    """brokerClientTlsEnabled: the https address is called, trusting
    brokerClientTrustCertsFilePath, with a tls plugin's certificate as the credentials (the
    broker's TLS provider takes its CN as the role)."""
    broker = broker_factory(
        webServicePortTls="0",
        tlsCertificateFilePath=str(tls_files.server_cert),
        tlsKeyFilePath=str(tls_files.server_key),
        tlsTrustCertsFilePath=str(tls_files.ca),
        tlsRequireTrustedClientCertOnConnect="true",
        authenticationEnabled="true",
        authenticationProviders="tls",
    )
    assert broker.service is not None
    urls = broker.service.namespaces.internal_urls()
    as_broker = {
        "brokerClientTlsEnabled": "true",
        "brokerClientAuthenticationPlugin": "tls",
        "brokerClientAuthenticationParameters": (
            f"tlsCertFile:{tls_files.client_cert},tlsKeyFile:{tls_files.client_key}"
        ),
    }
    timeout = aiohttp.ClientTimeout(total=10)

    async def topics_status(**properties: str) -> int:
        client = BrokerClient(load_config(None, {}, properties))
        base = client.web_url(urls.http_url, urls.http_url_tls)
        assert base == urls.http_url_tls and base is not None and base.startswith("https://")
        async with (
            client.session(timeout) as http,
            http.get(f"{base}/admin/v2/persistent/public/default") as response,
        ):
            return response.status

    assert await topics_status(**as_broker, brokerClientTrustCertsFilePath=str(tls_files.ca)) == 200
    # Without brokerClientTrustCertsFilePath, tlsTrustCertsFilePath is trusted, as in Pulsar.
    assert await topics_status(**as_broker, tlsTrustCertsFilePath=str(tls_files.ca)) == 200
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        await topics_status(**as_broker, brokerClientTrustCertsFilePath=str(tls_files.other_ca))
