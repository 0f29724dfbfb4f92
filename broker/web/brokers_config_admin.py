"""Dynamic broker configuration in Pulsar's admin API v2 (BrokersBase), for super-users:

- ``GET /admin/v2/brokers/configuration``: the names of the dynamic properties;
- ``GET /admin/v2/brokers/configuration/values``: the overrides stored for the cluster;
- ``GET /admin/v2/brokers/configuration/runtime``: every property's value in effect on this
  broker (credentials masked);
- ``POST /admin/v2/brokers/configuration/{configName}/{configValue}``: store an override
  (412 "Can't update non-dynamic configuration" for a name that is not dynamic, 412
  "Invalid dynamic-config value" for a value that does not parse or is under the minimum);
- ``DELETE /admin/v2/brokers/configuration/{configName}``: remove it.

Every broker of the cluster applies a change (broker/dynamic_config.py); the broker that took
it has applied it when it answers.
"""

from __future__ import annotations

from aiohttp import web

from pulsar_grpc.broker.dynamic_config import DYNAMIC_PROPERTIES, DynamicConfig
from pulsar_grpc.broker.service_parts import HasDynamicConfig
from pulsar_grpc.broker.web.access import AdminAccess

BASE = "/admin/v2/brokers/configuration"


class BrokersConfigAdmin:
    """The routes. Registered before ``/admin/v2/brokers/{cluster}``, which would otherwise
    take ``configuration`` for a cluster name."""

    def __init__(self, service: HasDynamicConfig, access: AdminAccess) -> None:
        self.service = service
        self.access = access

    def add_routes(self, app: web.Application) -> None:
        app.add_routes(
            [
                web.get(BASE, self.names),
                web.get(f"{BASE}/values", self.values),
                web.get(f"{BASE}/runtime", self.runtime),
                web.post(BASE + "/{name}/{value}", self.update),
                web.delete(BASE + "/{name}", self.delete),
            ]
        )

    def _dynamic(self, request: web.Request, what: str) -> DynamicConfig:
        self.access.super_user(request, what)
        dynamic = self.service.dynamic_config
        assert dynamic is not None, "the web service starts after the dynamic configuration"
        return dynamic

    async def names(self, request: web.Request) -> web.Response:
        self._dynamic(request, "list the dynamic configuration")
        return web.json_response(sorted(DYNAMIC_PROPERTIES))

    async def values(self, request: web.Request) -> web.Response:
        stored = await self._dynamic(request, "read the dynamic configuration").stored()
        return web.json_response(stored)

    async def runtime(self, request: web.Request) -> web.Response:
        dynamic = self._dynamic(request, "read the runtime configuration")
        return web.json_response(dynamic.runtime())

    async def update(self, request: web.Request) -> web.Response:
        dynamic = self._dynamic(request, "update the dynamic configuration")
        await dynamic.update(request.match_info["name"], request.match_info["value"])
        return web.Response(status=204)

    async def delete(self, request: web.Request) -> web.Response:
        dynamic = self._dynamic(request, "delete the dynamic configuration")
        await dynamic.delete(request.match_info["name"])
        return web.Response(status=204)
