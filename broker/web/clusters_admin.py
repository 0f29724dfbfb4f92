"""Pulsar's clusters admin API v2 (ClustersBase), as far as a test environment of Pulsar's
clients calls it (pulsar-client-python's CI runs ``PUT /admin/v2/clusters/standalone`` before
its tests).

- ``GET /admin/v2/clusters``: the names: this broker's ``clusterName`` and those created;
- ``GET /admin/v2/clusters/{cluster}``: its ClusterData (``serviceUrl``, ``serviceUrlTls``,
  ``brokerServiceUrl``, ``brokerServiceUrlTls``, ...): for this broker's own cluster, the
  broker's own advertised URLs (gRPC ones in the broker service fields) unless a stored
  ClusterData says otherwise; 404 "Cluster does not exist";
- ``PUT /admin/v2/clusters/{cluster}`` with a ClusterData body: a super-user's (as in Pulsar);
  204 once stored, 409 "Cluster already exists" as Pulsar answers for one that exists (this
  broker's own cluster exists from its start, as Pulsar standalone's does), 412 for a name
  Pulsar would refuse, 400 for a body that is not a JSON object. Another cluster is stored and
  listed; nothing replicates to it (there is no geo-replication here).
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol

from aiohttp import web

from pulsar_grpc.broker import errors as e
from pulsar_grpc.broker.json_text import json_value
from pulsar_grpc.broker.service_parts import HasConfig, HasNamespaces, HasStore
from pulsar_grpc.broker.web.access import AdminAccess

__all__ = ["ClustersAdmin"]

# Pulsar's metadata path of a cluster's ClusterData.
CLUSTERS_ROOT = "/admin/clusters"
# Pulsar's NamedEntity.checkName: letters, digits and - _ = : .
_CLUSTER_NAME = re.compile(r"[-=:.\w]+")
_URL_FIELDS = ("serviceUrl", "serviceUrlTls", "brokerServiceUrl", "brokerServiceUrlTls")


class ClustersPort(HasConfig, HasNamespaces, HasStore, Protocol):
    """What the clusters routes use: the cluster's name, its internal URLs and the store."""


class ClustersAdmin:
    def __init__(self, service: ClustersPort, access: AdminAccess) -> None:
        self.service = service
        self.access = access

    def add_routes(self, app: web.Application) -> None:
        app.add_routes(
            [
                web.get("/admin/v2/clusters", self.list_clusters),
                web.get("/admin/v2/clusters/{cluster}", self.get_cluster),
                web.put("/admin/v2/clusters/{cluster}", self.create_cluster),
            ]
        )

    async def _stored(self) -> list[str]:
        if not await self.service.store.exists(CLUSTERS_ROOT):
            return []
        return await self.service.store.get_children(CLUSTERS_ROOT)

    async def list_clusters(self, request: web.Request) -> web.Response:
        own = self.service.config.clusterName
        return web.json_response([own, *sorted(set(await self._stored()) - {own})])

    def _own_cluster_data(self) -> dict[str, Any]:
        """What this broker advertises on its internal listener, in ClusterData's fields."""
        urls = self.service.namespaces.internal_urls()
        found = {
            "serviceUrl": urls.http_url,
            "serviceUrlTls": urls.http_url_tls,
            "brokerServiceUrl": urls.grpc_url,
            "brokerServiceUrlTls": urls.grpc_url_tls,
        }
        return {name: value for name, value in found.items() if value}

    async def get_cluster(self, request: web.Request) -> web.Response:
        self.access.super_user(request, "getting a cluster's data")
        cluster = request.match_info["cluster"]
        stored = await self.service.store.get(f"{CLUSTERS_ROOT}/{cluster}")
        if cluster == self.service.config.clusterName:
            data = self._own_cluster_data()
        elif stored is None:
            raise e.NotFoundError("Cluster does not exist")
        else:
            data = {}
        if stored is not None:
            data.update(json.loads(stored.value or b"{}"))
        return web.json_response(data)

    async def create_cluster(self, request: web.Request) -> web.Response:
        self.access.super_user(request, "creating a cluster")
        cluster = request.match_info["cluster"]
        if not _CLUSTER_NAME.fullmatch(cluster):
            raise e.PreconditionFailedError("Cluster name is not valid")
        data = await _cluster_data(request)
        path = f"{CLUSTERS_ROOT}/{cluster}"
        if cluster == self.service.config.clusterName or await self.service.store.exists(path):
            raise e.NotAllowedError("Cluster already exists")
        await self.service.store.put(path, json.dumps(data).encode(), expected_version=-1)
        return web.Response(status=204)


async def _cluster_data(request: web.Request) -> dict[str, Any]:
    """The ClusterData body: a JSON object whose URL fields, when given, are strings."""
    text = (await request.text()).strip()
    try:
        body = json_value(text) if text else {}
    except ValueError:
        raise e.InvalidArgumentError(f"the body is not JSON: {text[:60]!r}") from None
    if not isinstance(body, dict):
        raise e.InvalidArgumentError("the body must be a JSON ClusterData object")
    for name in _URL_FIELDS:
        if name in body and body[name] is not None and not isinstance(body[name], str):
            raise e.InvalidArgumentError(f"{name} must be a URL string")
    return body
