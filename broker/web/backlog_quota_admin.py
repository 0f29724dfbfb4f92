"""Backlog quotas in Pulsar's admin API v2: the same paths, query parameter and JSON, so
``pulsar-admin`` and Pulsar's REST clients set them on this broker.

- ``/admin/v2/namespaces/{tenant}/{ns}/backlogQuotaMap`` GET: the namespace's quotas by type
  (its Policies ``backlog_quota_map``);
- ``/admin/v2/namespaces/{tenant}/{ns}/backlogQuota?backlogQuotaType=...`` POST (a BacklogQuota
  JSON body) and DELETE; the type defaults to ``destination_storage``, as in Pulsar;
- ``/admin/v2/persistent/{tenant}/{ns}/{topic}/backlogQuotaMap`` GET (``?applied=true``: the
  quotas in effect, from whichever level) and ``/backlogQuota`` POST, DELETE: the topic's own
  (its TopicPolicies ``backLogQuotaMap``).

A quota at or above the retention that covers it is refused with 412 and Pulsar's message
(broker/topics/backlog_quota.py's check_fits_retention; the retention side of the same rule
refuses a retention under a quota). Reading and changing them needs a tenant admin or a
super-user. Every broker watches the Policies node, so a change reaches loaded topics at once.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from pulsar_grpc.broker.topics.backlog_quota import (
    NAMESPACE_FIELD,
    TOPIC_FIELD,
    TOPIC_POLICIES,
    BacklogQuota,
    QuotaLevel,
    QuotaType,
    check_fits_retention,
    policy_topic_key,
    resolve_quotas,
    retention_of,
    topic_entry,
)
from pulsar_grpc.broker.topics.settings import BacklogQuotaSettings
from pulsar_grpc.broker.web.rate_admin import NAMESPACE, TOPIC, PolicyRoutes, json_body

QUOTA_TYPE_PARAM = "backlogQuotaType"


class BacklogQuotaAdmin(PolicyRoutes):
    """The routes; ``add_routes`` registers them on the web application."""

    def add_routes(self, app: web.Application) -> None:
        app.add_routes(
            [
                web.get(f"{NAMESPACE}/backlogQuotaMap", self._namespace_map),
                web.post(f"{NAMESPACE}/backlogQuota", self._namespace_set),
                web.delete(f"{NAMESPACE}/backlogQuota", self._namespace_remove),
                web.get(f"{TOPIC}/backlogQuotaMap", self._topic_map),
                web.post(f"{TOPIC}/backlogQuota", self._topic_set),
                web.delete(f"{TOPIC}/backlogQuota", self._topic_remove),
            ]
        )

    async def _namespace_map(self, request: web.Request) -> web.Response:
        policies = await self._policies(await self._namespace(request))
        return web.json_response(policies.get(NAMESPACE_FIELD) or {})

    async def _namespace_set(self, request: web.Request) -> web.Response:
        ns = await self._namespace(request)
        kind = QuotaType.parse(request.query.get(QUOTA_TYPE_PARAM))
        quota = BacklogQuota.parse(await json_body(request))

        def change(node: dict[str, Any]) -> None:
            check_fits_retention(quota, retention_of(node, None), QuotaLevel.NAMESPACE)
            node.setdefault(NAMESPACE_FIELD, {})[kind.value] = quota.as_json()

        await self.service.permissions.update_namespace(ns, change)
        return web.Response(status=204)

    async def _namespace_remove(self, request: web.Request) -> web.Response:
        ns = await self._namespace(request)
        kind = QuotaType.parse(request.query.get(QUOTA_TYPE_PARAM))

        def change(node: dict[str, Any]) -> None:
            (node.get(NAMESPACE_FIELD) or {}).pop(kind.value, None)

        await self.service.permissions.update_namespace(ns, change)
        return web.Response(status=204)

    async def _topic_map(self, request: web.Request) -> web.Response:
        topic = await self._topic(request)
        policies = await self._policies(topic.namespace)
        if request.query.get("applied", "").lower() != "true":
            return web.json_response(topic_entry(policies, topic).get(TOPIC_FIELD) or {})
        default = BacklogQuotaSettings.from_config(self.service.config).default
        quotas = resolve_quotas(default, policies, topic)
        return web.json_response({kind.value: quotas.of(kind).as_json() for kind in QuotaType})

    async def _topic_set(self, request: web.Request) -> web.Response:
        topic = await self._topic(request)
        kind = QuotaType.parse(request.query.get(QUOTA_TYPE_PARAM))
        quota = BacklogQuota.parse(await json_body(request))

        def change(node: dict[str, Any]) -> None:
            check_fits_retention(quota, retention_of(node, topic), QuotaLevel.TOPIC)
            entry = node.setdefault(TOPIC_POLICIES, {}).setdefault(policy_topic_key(topic), {})
            entry.setdefault(TOPIC_FIELD, {})[kind.value] = quota.as_json()

        await self.service.permissions.update_namespace(topic.namespace, change)
        return web.Response(status=204)

    async def _topic_remove(self, request: web.Request) -> web.Response:
        topic = await self._topic(request)
        kind = QuotaType.parse(request.query.get(QUOTA_TYPE_PARAM))

        def change(node: dict[str, Any]) -> None:
            topics = node.get(TOPIC_POLICIES) or {}
            entry = topics.get(policy_topic_key(topic)) or {}
            quotas = entry.get(TOPIC_FIELD) or {}
            quotas.pop(kind.value, None)
            if not quotas:
                entry.pop(TOPIC_FIELD, None)
            if not entry:
                topics.pop(policy_topic_key(topic), None)

        await self.service.permissions.update_namespace(topic.namespace, change)
        return web.Response(status=204)
