"""Tenants and permissions in Pulsar's admin API v2: the same paths, bodies and answers, so
``pulsar-admin`` and Pulsar's REST clients work against this broker.

- ``/admin/v2/tenants[/{tenant}]``: TenantInfo ``{"adminRoles": [...], "allowedClusters":
  [...]}``; listing, creating and updating tenants needs a super-user, reading one a tenant
  admin;
- ``/admin/v2/namespaces/{tenant}/{ns}/permissions[/{role}]``: the namespace's grants (a POST
  body is the JSON list of actions), ``.../permissions/subscription`` and
  ``.../permission/{subscription}[/{role}]`` the roles allowed on a subscription;
- ``/admin/v2/persistent/{tenant}/{ns}/{topic}/permissions[/{role}]``: a topic's grants.

Changing grants needs a super-user or an admin of the tenant. Writes go to the metadata store
from whichever broker receives them: every broker reads permissions from there.
"""

from __future__ import annotations

from typing import Any, Protocol

from aiohttp import web

from pulsar_grpc.broker import errors as e
from pulsar_grpc.broker.cluster.ownership import POLICIES_ROOT
from pulsar_grpc.broker.json_text import json_value
from pulsar_grpc.broker.naming import NamespaceName, TopicName, check_subscription_name
from pulsar_grpc.broker.security.permissions import (
    TenantInfo,
    check_role,
    parse_actions,
    parse_roles,
)
from pulsar_grpc.broker.service_parts import HasConfig, HasPermissions, HasStore
from pulsar_grpc.broker.web.access import AdminAccess

TENANT = "/admin/v2/tenants/{tenant}"
NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}"
TOPIC = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"


async def _json_body(request: web.Request, default: Any = None) -> Any:
    text = (await request.text()).strip()
    if not text:
        if default is None:
            raise e.InvalidArgumentError("a JSON body is required")
        return default
    try:
        return json_value(text)
    except ValueError:
        raise e.InvalidArgumentError(f"the body is not JSON: {text[:60]!r}") from None


class PermissionsPort(HasConfig, HasPermissions, HasStore, Protocol):
    """What the permissions routes use: the grants, the tenants in the store, the cluster."""


class PermissionsAdmin:
    """The routes; ``add_routes`` registers them on the web application."""

    def __init__(self, service: PermissionsPort, access: AdminAccess) -> None:
        self.service = service
        self.access = access

    def add_routes(self, app: web.Application) -> None:
        app.add_routes(
            [
                web.get("/admin/v2/tenants", self.list_tenants),
                web.get(TENANT, self.get_tenant),
                web.put(TENANT, self.create_tenant),
                web.post(TENANT, self.update_tenant),
                web.get(NAMESPACE + "/permissions", self.namespace_permissions),
                web.get(NAMESPACE + "/permissions/subscription", self.subscription_permissions),
                web.post(NAMESPACE + "/permissions/{role}", self.grant_namespace),
                web.delete(NAMESPACE + "/permissions/{role}", self.revoke_namespace),
                web.post(NAMESPACE + "/permission/{subscription}", self.grant_subscription),
                web.delete(
                    NAMESPACE + "/permission/{subscription}/{role}", self.revoke_subscription
                ),
                web.get(TOPIC + "/permissions", self.topic_permissions),
                web.post(TOPIC + "/permissions/{role}", self.grant_topic),
                web.delete(TOPIC + "/permissions/{role}", self.revoke_topic),
            ]
        )

    # ------------------------------------------------------------ tenants

    async def list_tenants(self, request: web.Request) -> web.Response:
        self.access.super_user(request, "listing tenants")
        return web.json_response(sorted(await self.service.store.get_children(POLICIES_ROOT)))

    async def get_tenant(self, request: web.Request) -> web.Response:
        tenant = request.match_info["tenant"]
        await self.access.tenant_admin(request, tenant)
        info = await self.service.permissions.tenant(tenant)
        if info is None:
            raise e.NotFoundError(f"Tenant {tenant} does not exist")
        return web.json_response(info.as_json())

    async def create_tenant(self, request: web.Request) -> web.Response:
        """PUT with a TenantInfo body; without one the tenant has no admins and may use this
        cluster."""
        self.access.super_user(request, "creating a tenant")
        default = {"allowedClusters": [self.service.config.clusterName]}
        info = self._tenant_info(await _json_body(request, default))
        await self.service.permissions.put_tenant(request.match_info["tenant"], info, create=True)
        return web.Response(status=204)

    async def update_tenant(self, request: web.Request) -> web.Response:
        self.access.super_user(request, "updating a tenant")
        info = self._tenant_info(await _json_body(request))
        await self.service.permissions.put_tenant(request.match_info["tenant"], info, create=False)
        return web.Response(status=204)

    def _tenant_info(self, body: Any) -> TenantInfo:
        info = TenantInfo.from_json(body)
        unknown = sorted(set(info.allowed_clusters) - {self.service.config.clusterName})
        if unknown:  # Pulsar's answer: 412 "Clusters do not exist"
            raise e.PreconditionFailedError(f"Clusters do not exist: {', '.join(unknown)}")
        return info

    # ------------------------------------------------------------ namespaces

    async def _namespace(self, request: web.Request) -> NamespaceName:
        ns = NamespaceName.get(f"{request.match_info['tenant']}/{request.match_info['namespace']}")
        await self.access.tenant_admin(request, ns.tenant)
        return ns

    async def namespace_permissions(self, request: web.Request) -> web.Response:
        ns = await self._namespace(request)
        return web.json_response(await self.service.permissions.namespace_permissions(ns))

    async def grant_namespace(self, request: web.Request) -> web.Response:
        ns = await self._namespace(request)
        role = check_role(request.match_info["role"])
        actions = parse_actions(await _json_body(request))
        await self.service.permissions.grant_namespace(ns, role, actions)
        return web.Response(status=204)

    async def revoke_namespace(self, request: web.Request) -> web.Response:
        ns = await self._namespace(request)
        await self.service.permissions.revoke_namespace(ns, check_role(request.match_info["role"]))
        return web.Response(status=204)

    async def subscription_permissions(self, request: web.Request) -> web.Response:
        ns = await self._namespace(request)
        return web.json_response(await self.service.permissions.subscription_permissions(ns))

    async def grant_subscription(self, request: web.Request) -> web.Response:
        ns = await self._namespace(request)
        subscription = request.match_info["subscription"]
        check_subscription_name(subscription)
        roles = parse_roles(await _json_body(request))
        await self.service.permissions.grant_subscription(ns, subscription, roles)
        return web.Response(status=204)

    async def revoke_subscription(self, request: web.Request) -> web.Response:
        ns = await self._namespace(request)
        role = check_role(request.match_info["role"])
        await self.service.permissions.revoke_subscription(
            ns, request.match_info["subscription"], role
        )
        return web.Response(status=204)

    # ------------------------------------------------------------ topics

    async def _topic(self, request: web.Request) -> TopicName:
        m = request.match_info
        topic = TopicName.get(f"persistent://{m['tenant']}/{m['namespace']}/{m['topic']}")
        await self.access.tenant_admin(request, topic.tenant)
        return topic

    async def topic_permissions(self, request: web.Request) -> web.Response:
        topic = await self._topic(request)
        return web.json_response(await self.service.permissions.topic_permissions(topic))

    async def grant_topic(self, request: web.Request) -> web.Response:
        topic = await self._topic(request)
        role = check_role(request.match_info["role"])
        actions = parse_actions(await _json_body(request))
        await self.service.permissions.grant_topic(topic, role, actions)
        return web.Response(status=204)

    async def revoke_topic(self, request: web.Request) -> web.Response:
        topic = await self._topic(request)
        await self.service.permissions.revoke_topic(topic, check_role(request.match_info["role"]))
        return web.Response(status=204)
