"""Authorization on a real broker (authorizationEnabled, token roles): super-users may do
everything, other roles what the namespace's or the topic's grants allow (Pulsar's
auth_policies), a refused call ends PERMISSION_DENIED with Pulsar's AuthorizationError code and
leaves nothing behind (no topic, producer or subscription), a revoke applies to the next call
without a restart, and a proxy role may act for a client that is allowed itself (PIP-1)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from pulsar_grpc.broker.config import ConfigError
from pulsar_grpc.broker.security.tokens import create_secret_key, create_token
from pulsar_grpc.client import AuthenticationToken, AuthorizationError, Client
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.wire import batch as wire_batch
from tests.e2e.wire import error_code, stub
from tests.support import BrokerThread, broker_config
from tests.waiting import eventually
from tests.zookeeper import ZooKeeperServer, zk_chroot, zookeeper

__all__ = ["zk_chroot", "zookeeper"]  # fixtures, imported to be found

KEY = create_secret_key()
TIMEOUT_S = 15
SUPER, PROXY = "admin", "proxy"
NS = "public/default"


def token(role: str) -> str:
    return create_token(KEY, role, expires_at=int(time.time()) + 3600)


AUTHZ = {
    "authenticationEnabled": "true",
    "authenticationProviders": "token",
    "tokenSecretKey": "data:;base64," + base64.b64encode(KEY).decode(),
    "authorizationEnabled": "true",
    "superUserRoles": SUPER,
    "proxyRoles": PROXY,
}


@pytest.fixture(name="authz_broker")
def authz_broker_fixture(broker_factory: Callable[..., BrokerThread]) -> BrokerThread:
    return broker_factory(**AUTHZ)


def client(broker: BrokerThread, role: str) -> Client:
    return Client(
        broker.service_url,
        authentication=AuthenticationToken(token(role)),
        operation_timeout_ms=5000,
    )


def http(
    broker: BrokerThread, method: str, path: str, role: str | None, body: Any = None
) -> tuple[int, Any]:
    """An admin call as ``role``: its status and its JSON answer (None when empty)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{broker.http_url}{path}", data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if role is not None:
        request.add_header("Authorization", f"Bearer {token(role)}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            raw = response.read()
            return int(response.status), json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw else None


async def admin(broker: BrokerThread, method: str, path: str, body: Any = None) -> Any:
    status, answer = await asyncio.to_thread(http, broker, method, path, SUPER, body)
    assert status in (200, 204), (method, path, status, answer)
    return answer


async def grant(
    broker: BrokerThread, role: str, actions: list[str], topic: str | None = None
) -> None:
    where = f"/admin/v2/persistent/{NS}/{topic}" if topic else f"/admin/v2/namespaces/{NS}"
    await admin(broker, "POST", f"{where}/permissions/{role}", actions)


def topics_of(broker: BrokerThread) -> list[str]:
    assert broker.service is not None
    return broker.run(broker.service.list_topics(NS))


def subscriptions_of(broker: BrokerThread, topic: str) -> list[str]:
    assert broker.service is not None
    loaded = broker.run(broker.service.topics.get_topic(f"persistent://{NS}/{topic}", create=False))
    return sorted(loaded.stats()["subscriptions"])


async def raw_produce(
    broker: BrokerThread, role: str, topic: str, extra: list[tuple[str, str]] | None = None
) -> grpc.aio.AioRpcError | None:
    """Open a raw Produce call as ``role``: None when the producer became ready, else the
    error it ended with."""
    metadata = [("authorization", f"Bearer {token(role)}"), ("x-pulsar-topic", topic)]
    async with grpc.aio.insecure_channel(broker.grpc_address) as channel:
        call = stub(channel).Produce(metadata=[*metadata, *(extra or [])])
        try:
            response = await asyncio.wait_for(call.read(), TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            return exc
        assert response.HasField("ready")
        call.cancel()
        return None


def assert_denied(error: grpc.aio.AioRpcError | None, *words: str) -> None:
    assert error is not None, "the call was allowed"
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error
    assert error_code(error) == pb.AuthorizationError
    for word in words:
        assert word in (error.details() or ""), (word, error.details())


async def test_a_super_user_may_do_everything(authz_broker: BrokerThread) -> None:
    async with client(authz_broker, SUPER) as c:
        producer = await c.create_producer("super-t")
        consumer = await c.subscribe("super-t", "s", initial_position="earliest")
        await producer.send(b"hello")
        assert (await consumer.receive(timeout_ms=10_000)).data() == b"hello"


async def test_a_role_without_grants_is_refused_and_leaves_nothing_behind(
    authz_broker: BrokerThread,
) -> None:
    async with client(authz_broker, "mallory") as c:
        # The SDK's setup is refused at the topic's lookup; its error names what the
        # application asked for, not only the lookup.
        with pytest.raises(
            AuthorizationError,
            match=r"not authorized to produce on \S*nobody-t: the broker refused",
        ):
            await asyncio.wait_for(c.create_producer("nobody-t"), TIMEOUT_S)
        with pytest.raises(
            AuthorizationError,
            match=r"not authorized to consume on \S*nobody-t: the broker refused",
        ):
            await asyncio.wait_for(c.subscribe("nobody-t", "s"), TIMEOUT_S)
        with pytest.raises(
            AuthorizationError,
            match=r"not authorized to consume on \S*nobody-t: the broker refused",
        ):
            await asyncio.wait_for(c.create_reader("nobody-t", "earliest"), TIMEOUT_S)
    assert_denied(
        await raw_produce(authz_broker, "mallory", "nobody-t"),
        "mallory",
        "produce",
        "persistent://public/default/nobody-t",
    )
    assert topics_of(authz_broker) == []
    async with grpc.aio.insecure_channel(authz_broker.grpc_address) as channel:
        auth = [("authorization", f"Bearer {token('mallory')}")]
        calls = {
            "lookup": stub(channel).Lookup(pb.LookupRequest(topic="nobody-t"), metadata=auth),
            "partitions": stub(channel).GetPartitionedTopicMetadata(
                pb.PartitionedTopicMetadataRequest(topic="nobody-t"), metadata=auth
            ),
            "last id": stub(channel).GetLastMessageId(
                pb.GetLastMessageIdRequest(topic="nobody-t"), metadata=auth
            ),
            "topics": stub(channel).GetTopicsOfNamespace(
                pb.GetTopicsOfNamespaceRequest(namespace=NS), metadata=auth
            ),
        }
        for what, call in calls.items():
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await asyncio.wait_for(call, TIMEOUT_S)
            assert_denied(info.value, "mallory")
            assert what
    assert topics_of(authz_broker) == []


async def test_produce_only_and_consume_only_roles(authz_broker: BrokerThread) -> None:
    await grant(authz_broker, "writer", ["produce"])
    await grant(authz_broker, "reader", ["consume"])
    async with client(authz_broker, "writer") as w, client(authz_broker, "reader") as r:
        producer = await w.create_producer("split-t")
        await producer.send(b"one")
        with pytest.raises(AuthorizationError):
            await asyncio.wait_for(w.subscribe("split-t", "writer-sub"), TIMEOUT_S)
        consumer = await r.subscribe("split-t", "reader-sub", initial_position="earliest")
        assert (await consumer.receive(timeout_ms=10_000)).data() == b"one"
        with pytest.raises(AuthorizationError):
            await asyncio.wait_for(r.create_producer("split-t"), TIMEOUT_S)
        assert subscriptions_of(authz_broker, "split-t") == ["reader-sub"]
        stats = authz_broker.run(
            authz_broker.service.topics.get_topic(f"persistent://{NS}/split-t", create=False)  # type: ignore[union-attr]
        ).stats()
        assert len(stats["publishers"]) == 1  # the writer's; none for the refused reader


async def test_a_topic_grant_covers_that_topic_only(authz_broker: BrokerThread) -> None:
    await grant(authz_broker, "one-topic", ["produce", "consume"], topic="mine")
    async with client(authz_broker, "one-topic") as c:
        producer = await c.create_producer("mine")
        consumer = await c.subscribe("mine", "s", initial_position="earliest")
        await producer.send(b"x")
        assert (await consumer.receive(timeout_ms=10_000)).data() == b"x"
        with pytest.raises(AuthorizationError):
            await asyncio.wait_for(c.create_producer("not-mine"), TIMEOUT_S)
    assert topics_of(authz_broker) == ["persistent://public/default/mine"]


async def test_a_revoke_applies_to_new_calls_without_a_restart(authz_broker: BrokerThread) -> None:
    await grant(authz_broker, "temp", ["produce"])
    assert await raw_produce(authz_broker, "temp", "revoked-t") is None
    await admin(authz_broker, "DELETE", f"/admin/v2/namespaces/{NS}/permissions/temp")

    async def refused() -> grpc.aio.AioRpcError:
        error = await raw_produce(authz_broker, "temp", "revoked-t")
        assert error is not None, "still allowed"
        return error

    assert_denied(await eventually(refused, timeout=10), "temp")


async def test_subscription_roles_restrict_who_consumes_a_subscription(
    authz_broker: BrokerThread,
) -> None:
    await grant(authz_broker, "team-a", ["consume"])
    await grant(authz_broker, "team-b", ["consume"])
    await admin(authz_broker, "POST", f"/admin/v2/namespaces/{NS}/permission/billing", ["team-a"])
    async with client(authz_broker, "team-a") as a, client(authz_broker, "team-b") as b:
        await a.subscribe("sub-auth", "billing")
        with pytest.raises(AuthorizationError):
            await asyncio.wait_for(b.subscribe("sub-auth", "billing"), TIMEOUT_S)
        await b.subscribe("sub-auth", "other")  # not restricted
    assert subscriptions_of(authz_broker, "sub-auth") == ["billing", "other"]


async def test_proxy_roles_act_for_an_allowed_client_only(authz_broker: BrokerThread) -> None:
    await grant(authz_broker, PROXY, ["produce", "consume"])
    await grant(authz_broker, "app", ["produce"])
    as_app = [("x-pulsar-original-principal", "app")]
    assert await raw_produce(authz_broker, PROXY, "proxied", as_app) is None
    assert_denied(
        await raw_produce(authz_broker, PROXY, "proxied", [("x-pulsar-original-principal", "x")]),
        "role x",
        "produce",
    )
    assert_denied(await raw_produce(authz_broker, PROXY, "proxied"), "Invalid roles")
    as_proxy = [("x-pulsar-original-principal", PROXY)]
    assert_denied(await raw_produce(authz_broker, PROXY, "proxied", as_proxy), "Invalid roles")
    # Only a proxy role may name another: even a super-user may not pose as someone else.
    assert_denied(await raw_produce(authz_broker, SUPER, "proxied", as_app), "Invalid roles")
    huge = await raw_produce(
        authz_broker, PROXY, "proxied", [("x-pulsar-original-principal", "a" * 5000)]
    )
    assert huge is not None and huge.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_authorization_needs_authentication(tmp_path) -> None:
    with pytest.raises(ConfigError, match="authorizationEnabled: requires authenticationEnabled"):
        broker_config(tmp_path, authorizationEnabled="true")


async def test_a_change_made_on_one_broker_applies_on_the_others(
    broker_factory: Callable[..., BrokerThread], zookeeper: ZooKeeperServer, zk_chroot: str
) -> None:
    """Two brokers on one ZooKeeper: each caches the permissions it read, and the store's
    watch tells it when another broker changed them."""
    url = f"zk:{zookeeper.hosts}{zk_chroot}"
    first, second = (broker_factory(metadataStoreUrl=url, **AUTHZ) for _ in range(2))
    listing = f"/admin/v2/persistent/{NS}"

    async def second_answers(expected: int) -> None:
        status = (await asyncio.to_thread(http, second, "GET", listing, "app"))[0]
        assert status == expected

    await second_answers(403)  # read (and cached) on the second broker
    await grant(first, "app", ["consume"])
    await eventually(lambda: second_answers(200), timeout=10, what="the grant arrived")
    await admin(first, "DELETE", f"/admin/v2/namespaces/{NS}/permissions/app")
    await eventually(lambda: second_answers(403), timeout=10, what="the revoke arrived")


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ([("x-pulsar-original-principal", "a" * 5000)], grpc.StatusCode.INVALID_ARGUMENT),
        ([("x-pulsar-original-principal", "")], grpc.StatusCode.INVALID_ARGUMENT),
        (
            [("x-pulsar-original-principal", "app"), ("x-pulsar-original-principal", "app")],
            grpc.StatusCode.UNAUTHENTICATED,
        ),
    ],
    ids=["huge", "empty", "repeated"],
)
async def test_hostile_original_principals_are_refused(
    authz_broker: BrokerThread, headers: list[tuple[str, str]], status: grpc.StatusCode
) -> None:
    await grant(authz_broker, "app", ["produce"])
    error = await raw_produce(authz_broker, PROXY, "hostile", headers)
    assert error is not None and error.code() == status, error
    assert topics_of(authz_broker) == []


@pytest.mark.parametrize(
    ("path", "headers", "status"),
    [
        (f"/admin/v2/namespaces/{NS}/permissions/{'r' * 5000}", {}, 400),
        (f"/admin/v2/namespaces/{NS}/permissions", {"X-Original-Principal": "a" * 5000}, 400),
        (f"/admin/v2/namespaces/{NS}/permissions", {"X-Original-Principal": "app"}, 403),
    ],
    ids=["huge role", "huge original principal", "original principal from a non-proxy"],
)
def test_hostile_admin_requests_are_refused(
    authz_broker: BrokerThread, path: str, headers: dict[str, str], status: int
) -> None:
    method = "POST" if path.endswith("r" * 10) else "GET"
    request = urllib.request.Request(
        f"{authz_broker.http_url}{path}", data=b'["produce"]' if method == "POST" else None,
        method=method, headers={"Authorization": f"Bearer {token(SUPER)}", **headers},
    )  # fmt: skip
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=TIMEOUT_S)
    assert info.value.code == status
    assert json.loads(info.value.read())["reason"]


def test_a_proxy_acts_for_its_client_on_the_admin_api(authz_broker: BrokerThread) -> None:
    """Both the proxy's role and its client's must be allowed (here: be the tenant's admins)."""

    def status_for(original: str) -> int:
        request = urllib.request.Request(f"{authz_broker.http_url}/admin/v2/namespaces/public")
        request.add_header("Authorization", f"Bearer {token(PROXY)}")
        request.add_header("X-Original-Principal", original)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    assert status_for(SUPER) == 403  # the proxy itself administers nothing yet
    info = {"adminRoles": [PROXY, "ops"], "allowedClusters": ["standalone"]}
    assert http(authz_broker, "POST", "/admin/v2/tenants/public", SUPER, info)[0] == 204
    assert status_for(SUPER) == 200
    assert status_for("ops") == 200
    assert status_for("app") == 403


@pytest.mark.parametrize("wildcards", [True, False])
async def test_wildcard_grants_match_only_when_allowed(
    broker_factory: Callable[..., BrokerThread], wildcards: bool
) -> None:
    broker = broker_factory(**AUTHZ, authorizationAllowWildcardsMatching=str(wildcards).lower())
    await grant(broker, "app-*", ["produce"])
    await grant(broker, "*-reader", ["produce"])
    for role in ("app-1", "billing-reader"):
        error = await raw_produce(broker, role, "wild")
        if wildcards:
            assert error is None, (role, error)
        else:
            assert_denied(error, role)
    assert_denied(await raw_produce(broker, "other", "wild"), "other")


async def test_a_grant_on_a_partitioned_topic_covers_its_partitions(
    authz_broker: BrokerThread,
) -> None:
    await admin(authz_broker, "PUT", f"/admin/v2/persistent/{NS}/parts/partitions", 3)
    await grant(authz_broker, "parts-user", ["produce", "consume"], topic="parts")
    async with client(authz_broker, "parts-user") as c:
        consumer = await c.subscribe("parts", "s", initial_position="earliest")
        producer = await c.create_producer("parts")
        for i in range(6):
            await producer.send(f"m{i}".encode())
        received = {(await consumer.receive(timeout_ms=10_000)).data() for _ in range(6)}
        assert received == {f"m{i}".encode() for i in range(6)}
        with pytest.raises(AuthorizationError):
            await asyncio.wait_for(c.create_producer("parts-other"), TIMEOUT_S)


async def test_a_revoke_ends_the_streams_that_lost_the_right(authz_broker: BrokerThread) -> None:
    """As Pulsar re-checks its producers and consumers when a namespace's policies change."""
    await grant(authz_broker, "writer", ["produce"])
    await grant(authz_broker, "reader", ["consume"])
    await grant(authz_broker, "stays", ["produce"], topic="open-streams")
    async with grpc.aio.insecure_channel(authz_broker.grpc_address) as channel:

        def opened(role: str, method: str, *extra: tuple[str, str]) -> grpc.aio.StreamStreamCall:
            auth = ("authorization", f"Bearer {token(role)}")
            rpc = getattr(stub(channel), method)
            return rpc(metadata=[auth, ("x-pulsar-topic", "open-streams"), *extra])

        producer = opened("writer", "Produce")
        consumer = opened("reader", "Consume", ("x-pulsar-subscription", "s"))
        untouched = opened("stays", "Produce")
        for call in (producer, consumer, untouched):
            await asyncio.wait_for(call.read(), TIMEOUT_S)  # ready / subscribed
        await admin(authz_broker, "DELETE", f"/admin/v2/namespaces/{NS}/permissions/writer")
        await admin(authz_broker, "DELETE", f"/admin/v2/namespaces/{NS}/permissions/reader")
        for call in (producer, consumer):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                while True:  # a consumer may first be told it is the active one
                    await asyncio.wait_for(call.read(), TIMEOUT_S)
            assert_denied(info.value, "not authorized")
        await untouched.write(wire_batch(1, [b"still here"]))
        receipt = await asyncio.wait_for(untouched.read(), TIMEOUT_S)
        assert receipt.HasField("receipt")
        untouched.cancel()
