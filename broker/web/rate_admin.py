"""Rate limits in Pulsar's admin API v2: the same paths and bodies, so ``pulsar-admin`` and
Pulsar's REST clients set them on this broker.

- ``/admin/v2/namespaces/{tenant}/{ns}/publishRate`` (PublishRate JSON), ``/dispatchRate`` and
  ``/subscriptionDispatchRate`` (DispatchRate JSON): GET, POST (set), DELETE (remove); kept in
  the namespace's Policies for this broker's cluster, as Pulsar does;
- ``/admin/v2/persistent/{tenant}/{ns}/{topic}/publishRate``, ``/dispatchRate``,
  ``/subscriptionDispatchRate``: the topic's own (GET ``?applied=true`` answers the limit in
  effect, whichever level it comes from).

A GET of what is not set answers 204 with no body (Pulsar's null). Reading and changing them
needs a tenant admin or a super-user. Every broker of the cluster watches the Policies node,
so a change reaches open producers and consumers everywhere (broker/topics/rate_policies.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import web

from pulsar_grpc.broker import errors as e
from pulsar_grpc.broker.cluster.ownership import POLICIES_ROOT
from pulsar_grpc.broker.json_text import json_value
from pulsar_grpc.broker.naming import NamespaceName, TopicName
from pulsar_grpc.broker.service_parts import HasConfig, HasPermissions
from pulsar_grpc.broker.topics.rate_policies import TOPIC_POLICIES, RateKind, resolve
from pulsar_grpc.broker.web.access import AdminAccess

NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}"
TOPIC = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
PATHS = {
    RateKind.PUBLISH: "publishRate",
    RateKind.DISPATCH: "dispatchRate",
    RateKind.SUBSCRIPTION_DISPATCH: "subscriptionDispatchRate",
}
MAX_BODY_CHARS = 4096  # a rate is a few fields

Route = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def json_body(request: web.Request) -> Any:
    text = (await request.text()).strip()
    if len(text) > MAX_BODY_CHARS:
        raise e.InvalidArgumentError(f"the body is longer than {MAX_BODY_CHARS} characters")
    if not text:
        raise e.InvalidArgumentError("a JSON body is required")
    try:
        return json_value(text)
    except ValueError:
        raise e.InvalidArgumentError(f"the body is not JSON: {text[:60]!r}") from None


class RatePort(HasConfig, HasPermissions, Protocol):
    """What the rate-limit routes use: the namespaces' policies and the broker defaults."""


def json_or_no_content(value: Any) -> web.Response:
    return web.Response(status=204) if value is None else web.json_response(value)


class PolicyRoutes:
    """What every group of namespace- and topic-policy routes does first: the namespace or
    topic a request names (a tenant admin's), and the namespace's Policies node."""

    def __init__(self, service: RatePort, access: AdminAccess) -> None:
        self.service = service
        self.access = access

    async def _namespace(self, request: web.Request) -> NamespaceName:
        m = request.match_info
        ns = NamespaceName.get(f"{m['tenant']}/{m['namespace']}")
        await self.access.tenant_admin(request, ns.tenant)
        return ns

    async def _topic(self, request: web.Request) -> TopicName:
        m = request.match_info
        topic = TopicName.get(f"persistent://{m['tenant']}/{m['namespace']}/{m['topic']}")
        await self.access.tenant_admin(request, topic.tenant)
        if topic.is_partitioned:
            raise e.InvalidArgumentError(
                f"{topic} is a partition: set the policy on {topic.partitioned_topic_name}"
            )
        return topic

    async def _policies(self, ns: NamespaceName) -> dict[str, Any]:
        found = await self.service.permissions.cache.get(f"{POLICIES_ROOT}/{ns}")
        if found is None:
            raise e.NotFoundError(f"Namespace {ns} does not exist")
        return found


class RateAdmin(PolicyRoutes):
    """The routes; ``add_routes`` registers them on the web application."""

    @property
    def _cluster(self) -> str:
        return self.service.config.clusterName

    def add_routes(self, app: web.Application) -> None:
        for kind, path in PATHS.items():
            app.add_routes(
                [
                    web.get(f"{NAMESPACE}/{path}", self._namespace_get(kind)),
                    web.post(f"{NAMESPACE}/{path}", self._namespace_set(kind)),
                    web.delete(f"{NAMESPACE}/{path}", self._namespace_remove(kind)),
                    web.get(f"{TOPIC}/{path}", self._topic_get(kind)),
                    web.post(f"{TOPIC}/{path}", self._topic_set(kind)),
                    web.delete(f"{TOPIC}/{path}", self._topic_remove(kind)),
                ]
            )

    # ------------------------------------------------------------ namespace level

    def _namespace_get(self, kind: RateKind) -> Route:
        async def get(request: web.Request) -> web.Response:
            policies = await self._policies(await self._namespace(request))
            return json_or_no_content((policies.get(kind.namespace_field) or {}).get(self._cluster))

        return get

    def _namespace_set(self, kind: RateKind) -> Route:
        async def set_rate(request: web.Request) -> web.Response:
            ns = await self._namespace(request)
            rate = kind.normalize(await json_body(request))

            def change(node: dict[str, Any]) -> None:
                node.setdefault(kind.namespace_field, {})[self._cluster] = rate

            await self.service.permissions.update_namespace(ns, change)
            return web.Response(status=204)

        return set_rate

    def _namespace_remove(self, kind: RateKind) -> Route:
        async def remove(request: web.Request) -> web.Response:
            ns = await self._namespace(request)

            def change(node: dict[str, Any]) -> None:
                (node.get(kind.namespace_field) or {}).pop(self._cluster, None)

            await self.service.permissions.update_namespace(ns, change)
            return web.Response(status=204)

        return remove

    # ------------------------------------------------------------ topic level

    def _topic_get(self, kind: RateKind) -> Route:
        async def get(request: web.Request) -> web.Response:
            topic = await self._topic(request)
            policies = await self._policies(topic.namespace)
            if request.query.get("applied", "").lower() == "true":
                limits = resolve(self.service.config, policies, topic)
                limit = {
                    RateKind.PUBLISH: limits.publish,
                    RateKind.DISPATCH: limits.dispatch,
                    RateKind.SUBSCRIPTION_DISPATCH: limits.subscription_dispatch,
                }[kind]
                return web.json_response(kind.as_json(limit))
            entry = (policies.get(TOPIC_POLICIES) or {}).get(topic.full_name) or {}
            return json_or_no_content(entry.get(kind.topic_field))

        return get

    def _topic_set(self, kind: RateKind) -> Route:
        async def set_rate(request: web.Request) -> web.Response:
            topic = await self._topic(request)
            rate = kind.normalize(await json_body(request))

            def change(node: dict[str, Any]) -> None:
                topics = node.setdefault(TOPIC_POLICIES, {})
                topics.setdefault(topic.full_name, {})[kind.topic_field] = rate

            await self.service.permissions.update_namespace(topic.namespace, change)
            return web.Response(status=204)

        return set_rate

    def _topic_remove(self, kind: RateKind) -> Route:
        async def remove(request: web.Request) -> web.Response:
            topic = await self._topic(request)

            def change(node: dict[str, Any]) -> None:
                topics = node.get(TOPIC_POLICIES) or {}
                entry = topics.get(topic.full_name) or {}
                entry.pop(kind.topic_field, None)
                if not entry:
                    topics.pop(topic.full_name, None)

            await self.service.permissions.update_namespace(topic.namespace, change)
            return web.Response(status=204)

        return remove
