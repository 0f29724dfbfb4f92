"""The admin API and `pulsar-grpc admin` under authorization: tenants with adminRoles (Pulsar's
TenantInfo), who may create and administer what (super-users everything, a tenant's admins
their tenant, anyone else 403 {"reason"}), grants and revokes at Pulsar's paths and in
pulsar-admin's verbs, and bad grant bodies answered 400."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from pulsar_grpc.client import AuthorizationError
from tests.e2e.test_authorization import (  # noqa: F401 - a fixture
    SUPER,
    TIMEOUT_S,
    authz_broker_fixture,
    client,
    http,
    token,
)
from tests.e2e.test_cli import cli
from tests.support import BrokerThread

ACME = "/admin/v2/tenants/acme"


async def call(
    broker: BrokerThread, role: str | None, method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    return await asyncio.to_thread(http, broker, method, path, role, body)


async def test_tenant_admins_administer_their_tenant_only(authz_broker: BrokerThread) -> None:
    b = authz_broker
    info = {"adminRoles": ["acme-admin"], "allowedClusters": ["standalone"]}
    assert await call(b, "acme-admin", "PUT", ACME, info) == (
        403,
        {"reason": "role acme-admin is not authorized: creating a tenant needs a super-user"},
    )
    assert (await call(b, SUPER, "PUT", ACME, {"allowedClusters": ["elsewhere"]}))[0] == 412
    assert await call(b, SUPER, "PUT", ACME, info) == (204, None)
    assert (await call(b, SUPER, "PUT", ACME, info))[0] == 409
    assert await call(b, "acme-admin", "GET", ACME) == (200, info)
    assert (await call(b, None, "GET", ACME))[0] == 401

    ns = "/admin/v2/namespaces/acme/ns"
    status, answer = await call(b, "stranger", "PUT", ns)
    assert status == 403 and "stranger" in answer["reason"] and "acme" in answer["reason"]
    assert await call(b, "acme-admin", "PUT", ns) == (204, None)
    assert await call(b, "acme-admin", "POST", f"{ns}/permissions/app", ["produce"]) == (204, None)
    assert (await call(b, "stranger", "POST", f"{ns}/permissions/app", ["consume"]))[0] == 403
    assert (await call(b, "stranger", "GET", f"{ns}/permissions"))[0] == 403
    assert await call(b, "acme-admin", "GET", f"{ns}/permissions") == (200, {"app": ["produce"]})
    # Another tenant's namespaces are not acme-admin's to change.
    denied = "/admin/v2/namespaces/public/default/permissions/app"
    assert (await call(b, "acme-admin", "POST", denied, ["produce"]))[0] == 403

    topic = "/admin/v2/persistent/acme/ns/t/permissions"
    assert await call(b, "acme-admin", "POST", f"{topic}/reader", ["consume"]) == (204, None)
    assert await call(b, "acme-admin", "GET", topic) == (
        200,
        {"app": ["produce"], "reader": ["consume"]},
    )
    assert (await call(b, "acme-admin", "DELETE", f"{topic}/app"))[0] == 412  # namespace-level
    assert await call(b, "acme-admin", "DELETE", f"{topic}/reader") == (204, None)
    assert await call(b, "acme-admin", "GET", topic) == (200, {"app": ["produce"]})

    # As in Pulsar, a tenant's admins may produce and consume on its topics.
    async with client(b, "acme-admin") as c:
        producer = await c.create_producer("persistent://acme/ns/t")
        await producer.send(b"from the admin")
    async with client(b, "stranger") as c:
        with pytest.raises(AuthorizationError):
            await asyncio.wait_for(c.create_producer("persistent://acme/ns/t"), TIMEOUT_S)

    # An update replaces the admins: the stranger becomes one, acme-admin no longer is.
    update = {"adminRoles": ["stranger"], "allowedClusters": ["standalone"]}
    assert (await call(b, "stranger", "POST", ACME, update))[0] == 403
    assert await call(b, SUPER, "POST", ACME, update) == (204, None)
    assert (await call(b, "stranger", "GET", f"{ns}/permissions"))[0] == 200
    assert (await call(b, "acme-admin", "GET", f"{ns}/permissions"))[0] == 403
    assert await call(b, SUPER, "GET", "/admin/v2/tenants") == (200, ["acme", "public"])
    assert (await call(b, "stranger", "GET", "/admin/v2/tenants"))[0] == 403


@pytest.mark.parametrize(
    "body",
    [["fly"], "produce", {"produce": True}, [1], "not json"],
    ids=["unknown action", "not a list", "an object", "a number", "not JSON"],
)
async def test_a_bad_grant_is_refused_with_400(authz_broker: BrokerThread, body: object) -> None:
    path = "/admin/v2/namespaces/public/default/permissions/app"
    raw = body if body == "not json" else json.dumps(body)
    status, answer = await asyncio.to_thread(_post_raw, authz_broker, path, str(raw))
    assert status == 400 and answer["reason"], (status, answer)
    assert await call(authz_broker, SUPER, "GET", path.rsplit("/", 1)[0]) == (200, {})


def _post_raw(broker: BrokerThread, path: str, raw: str) -> tuple[int, Any]:
    request = urllib.request.Request(f"{broker.http_url}{path}", data=raw.encode(), method="POST")
    request.add_header("Authorization", f"Bearer {token(SUPER)}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return int(response.status), None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_admin_command_grants_and_revokes(authz_broker: BrokerThread) -> None:
    admin = (
        "admin",
        "--admin-url",
        authz_broker.http_url,
        "--auth-plugin",
        "token",
        "--auth-params",
        f"token:{token(SUPER)}",
    )

    def run(*args: str) -> str:
        done = cli(*admin, *args)
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout

    run("tenants", "create", "acme", "--admin-roles", "ops,dev", "--allowed-clusters", "standalone")
    assert json.loads(run("tenants", "get", "acme")) == {
        "adminRoles": ["ops", "dev"],
        "allowedClusters": ["standalone"],
    }
    run("tenants", "update", "acme", "--admin-roles", "ops")
    assert json.loads(run("tenants", "get", "acme"))["adminRoles"] == ["ops"]
    assert run("tenants", "list").split() == ["acme", "public"]

    ns = "public/default"
    granted = run(
        "namespaces", "grant-permission", ns, "--role", "app", "--actions", "produce,consume"
    )
    assert granted == f"granted produce, consume on {ns} to app\n"
    assert json.loads(run("namespaces", "permissions", ns)) == {"app": ["consume", "produce"]}
    run("topics", "grant-permission", "t1", "--role", "bot", "--actions", "produce")
    assert json.loads(run("topics", "permissions", "t1")) == {
        "app": ["consume", "produce"],
        "bot": ["produce"],
    }
    revoked = run("topics", "revoke-permission", "t1", "--role", "bot")
    assert revoked == "revoked the permissions of bot on persistent://public/default/t1\n"
    run("namespaces", "revoke-permission", ns, "--role", "app")
    assert json.loads(run("namespaces", "permissions", ns)) == {}

    denied = cli(
        "admin", "--admin-url", authz_broker.http_url, "--auth-plugin", "token",
        "--auth-params", f"token:{token('app')}",
        "namespaces", "grant-permission", ns, "--role", "app", "--actions", "produce",
    )  # fmt: skip
    assert denied.returncode == 1 and "403" in denied.stderr, denied.stderr
    bad = cli(*admin, "namespaces", "grant-permission", ns, "--role", "x", "--actions", "fly")
    assert bad.returncode == 1 and "400" in bad.stderr and "fly" in bad.stderr, bad.stderr
