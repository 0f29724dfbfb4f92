"""Pulsar's clusters admin paths on a real broker over HTTP: what pulsar-client-python's CI
does before its tests (PUT /admin/v2/clusters/standalone with a ClusterData body), and what GET
answers after."""

from __future__ import annotations

import asyncio

from tests.e2e.admin_support import call, shared_broker, unique
from tests.e2e.test_authorization import SUPER, authz_broker_fixture, http
from tests.support import BrokerThread

__all__ = ["authz_broker_fixture", "shared_broker"]  # fixtures

# pulsar-client-python's build-support/start-test-service-inside-container.sh sends this.
CLIENT_CI_CLUSTER_DATA = {
    "serviceUrl": "http://localhost:8080/",
    "serviceUrlTls": "https://localhost:8443/",
    "brokerServiceUrl": "pulsar://localhost:6650/",
    "brokerServiceUrlTls": "pulsar+ssl://localhost:6651/",
}


async def test_the_own_cluster_exists_from_the_start(shared_broker: BrokerThread) -> None:
    status, answer = await call(shared_broker, "PUT", "/admin/v2/clusters/standalone",
                                CLIENT_CI_CLUSTER_DATA)  # fmt: skip
    # As Pulsar standalone answers: it exists (the CI's curl goes on either way).
    assert (status, answer) == (409, {"reason": "Cluster already exists"})
    status, data = await call(shared_broker, "GET", "/admin/v2/clusters/standalone")
    assert status == 200
    assert data["serviceUrl"] == shared_broker.http_url
    assert data["brokerServiceUrl"].startswith("grpc://")


async def test_another_cluster_is_created_once_and_listed(shared_broker: BrokerThread) -> None:
    name = unique("east")
    path = f"/admin/v2/clusters/{name}"
    assert (await call(shared_broker, "GET", path))[0] == 404
    assert await call(shared_broker, "PUT", path, CLIENT_CI_CLUSTER_DATA) == (204, None)
    assert await call(shared_broker, "GET", path) == (200, CLIENT_CI_CLUSTER_DATA)
    status, names = await call(shared_broker, "GET", "/admin/v2/clusters")
    assert status == 200 and names[0] == "standalone" and name in names
    assert (await call(shared_broker, "PUT", path, {}))[0] == 409
    assert await call(shared_broker, "GET", path) == (200, CLIENT_CI_CLUSTER_DATA)  # unchanged


async def test_bad_cluster_names_and_bodies(shared_broker: BrokerThread) -> None:
    status, answer = await call(shared_broker, "PUT", "/admin/v2/clusters/a%20b", {})
    assert (status, answer) == (412, {"reason": "Cluster name is not valid"})
    status, answer = await call(shared_broker, "PUT", f"/admin/v2/clusters/{unique('c')}",
                                raw="[1]")  # fmt: skip
    assert status == 400 and "ClusterData" in answer["reason"]
    status, answer = await call(shared_broker, "PUT", f"/admin/v2/clusters/{unique('c')}",
                                {"serviceUrl": 8080})  # fmt: skip
    assert status == 400 and "serviceUrl" in answer["reason"]


async def test_creating_a_cluster_is_a_super_users(authz_broker: BrokerThread) -> None:
    path = f"/admin/v2/clusters/{unique('west')}"
    status, _ = await asyncio.to_thread(http, authz_broker, "PUT", path, "someone", {})
    assert status == 403
    status, _ = await asyncio.to_thread(http, authz_broker, "PUT", path, SUPER, {})
    assert status == 204
