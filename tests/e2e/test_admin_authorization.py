"""The admin calls on namespaces, topics and subscriptions under authorization: changes need a
super-user or an admin of the tenant (deleting a tenant a super-user), reading a topic's state
a role that may look it up, peeking at its messages one that may consume; anyone else 403."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.test_authorization import AUTHZ, SUPER, TIMEOUT_S, http, token
from tests.support import BrokerThread

NS = "/admin/v2/namespaces/acme/ns"
TOPIC = "/admin/v2/persistent/acme/ns/t"
SUB = f"{TOPIC}/subscription/s"


@pytest.fixture(name="authz_broker")
def authz_broker_fixture(broker_factory: Callable[..., BrokerThread]) -> BrokerThread:
    """Authorization on; a tenant admin may force a namespace's delete."""
    return broker_factory(**AUTHZ, forceDeleteNamespaceAllowed=True)


async def call(
    broker: BrokerThread, role: str | None, method: str, path: str, body: Any = None
) -> int:
    return (await asyncio.to_thread(http, broker, method, path, role, body))[0]


def health(broker: BrokerThread, role: str) -> bytes:
    request = urllib.request.Request(f"{broker.http_url}/admin/v2/brokers/health")
    request.add_header("Authorization", f"Bearer {token(role)}")
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
        return bytes(response.read())


async def test_changes_need_a_tenant_admin_and_reads_a_right(authz_broker: BrokerThread) -> None:
    b = authz_broker
    info = {"adminRoles": ["acme-admin"], "allowedClusters": ["standalone"]}
    assert await call(b, SUPER, "PUT", "/admin/v2/tenants/acme", info) == 204
    assert await call(b, "acme-admin", "PUT", NS, {"bundles": {"numBundles": 2}}) == 204
    assert await call(b, "acme-admin", "POST", f"{NS}/permissions/reader", ["consume"]) == 204
    assert await call(b, "acme-admin", "PUT", TOPIC) == 204
    assert await call(b, "acme-admin", "PUT", f"{TOPIC}-p/partitions", 1) == 204

    changes = [
        ("PUT", SUB, None),
        ("POST", f"{SUB}/skip_all", None),
        ("POST", f"{SUB}/skip/1", None),
        ("POST", f"{SUB}/resetcursor/0", None),
        ("DELETE", SUB, None),
        ("PUT", f"{TOPIC}/unload", None),
        ("POST", f"{TOPIC}-p/partitions", 2),
        ("DELETE", f"{TOPIC}-p/partitions", None),
        ("DELETE", TOPIC, None),
        ("DELETE", NS, None),
    ]
    for method, path, body in changes:
        for role in ("stranger", "reader"):
            assert await call(b, role, method, path, body) == 403, (role, method, path)
    reads = [f"{TOPIC}/internalStats", f"{TOPIC}/lastMessageId", f"{TOPIC}/subscriptions"]
    for path in reads:
        assert await call(b, "stranger", "GET", path) == 403, path
        assert await call(b, "reader", "GET", path) == 200, path
    assert await call(b, "stranger", "GET", "/admin/v2/brokers/health") == 403
    assert await asyncio.to_thread(health, b, SUPER) == b"ok"

    for method, path, body in changes:
        if path == SUB and method == "PUT":
            assert await call(b, "acme-admin", method, path, {"ledgerId": -1, "entryId": -1}) == 204
            assert await call(b, "reader", "GET", f"{SUB}/position/1") == 404  # allowed: empty
            assert await call(b, "stranger", "GET", f"{SUB}/position/1") == 403
        elif method == "DELETE" and path == NS:
            assert await call(b, "acme-admin", "DELETE", f"{NS}?force=true") == 204
        else:
            assert await call(b, "acme-admin", method, path, body) == 204, (method, path)
    assert await call(b, "acme-admin", "DELETE", "/admin/v2/tenants/acme") == 403
    assert await call(b, SUPER, "DELETE", "/admin/v2/tenants/acme") == 204


async def test_a_stranger_learns_nothing_of_a_topics_shape(authz_broker: BrokerThread) -> None:
    """Authorization comes first on every subscription route: a stranger gets 403, not the
    405 a partitioned topic answers nor the 400 of a bad body or number."""
    b = authz_broker
    info = {"adminRoles": ["acme-admin"], "allowedClusters": ["standalone"]}
    assert await call(b, SUPER, "PUT", "/admin/v2/tenants/acme", info) == 204
    assert await call(b, "acme-admin", "PUT", NS) == 204
    parted = f"{TOPIC}-p"
    assert await call(b, "acme-admin", "PUT", f"{parted}/partitions", 2) == 204
    sub = f"{parted}/subscription/s"
    refused = [
        ("GET", f"{sub}/position/1", None),  # 405 to its admin: partitioned
        ("POST", f"{sub}/skip/1", None),  # 405
        ("GET", f"{parted}/examinemessage", None),  # 405
        ("POST", f"{sub}/resetcursor", {"ledgerId": 1, "entryId": 0}),  # 405
        ("GET", f"{sub}/position/x", None),  # 400
        ("POST", f"{sub}/skip/x", None),  # 400
        ("PUT", sub, [1]),  # 400: not a MessageId
        ("POST", f"{sub}/resetcursor", [1]),  # 400
        ("POST", f"{sub}/resetcursor/x", None),  # 400
    ]
    for method, path, body in refused:
        assert await call(b, "stranger", method, path, body) == 403, (method, path)
    assert await call(b, "acme-admin", "GET", f"{sub}/position/1") == 405
    assert await call(b, "acme-admin", "PUT", sub, [1]) == 400
