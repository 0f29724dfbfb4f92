"""The life of tenants and namespaces in Pulsar's admin API v2 (Tenants and Namespaces): the
namespace's Policies, creating one with its bundles, deleting namespaces and tenants.

- ``DELETE /admin/v2/tenants/{tenant}``: a super-user's; 409 "The tenant still has active
  namespaces"; ``force=true`` deletes its namespaces (forced) too, and is refused 405 unless
  forceDeleteTenantAllowed and forceDeleteNamespaceAllowed are true (both false by default,
  as in Pulsar);
- ``GET /admin/v2/namespaces/{t}/{ns}``: the namespace's Policies JSON (the fields Pulsar always
  writes, with what is stored: bundles, permissions, rate limits);
- ``PUT /admin/v2/namespaces/{t}/{ns}`` with an optional Policies body, of which ``bundles``
  (BundlesData: ``numBundles``, or ``boundaries``) and ``replication_clusters`` are used: 409
  when it exists, 404 when its tenant does not, 412 for bad bundles or an unknown cluster;
- ``DELETE /admin/v2/namespaces/{t}/{ns}[?force=true]``: 409 "Cannot delete non empty
  namespace" while it has topics, unless forced (its topics are deleted first, each where it
  is served; 405 unless forceDeleteNamespaceAllowed); its bundles are unloaded before its
  policies go;
- ``GET``/``POST /admin/v2/namespaces/{t}/{ns}/encryptionRequired`` (body ``true`` or ``false``):
  Pulsar's encryption_required policy; while set, producers' unencrypted batches are refused
  (broker/topics/encryption_policy.py), on every broker at once (the Policies node is watched).
- ``GET``/``POST``/``DELETE /admin/v2/namespaces/{t}/{ns}/deduplication``: Pulsar's
  deduplicationEnabled policy (POST ``true`` or ``false``, 204; DELETE removes it, 204; GET
  answers it, or 204 with no body while it is not set, as Pulsar's null). The effective value
  is the policy when set, else brokerDeduplicationEnabled; loaded topics follow a change live
  (PersistentTopic.set_deduplication).
"""

from __future__ import annotations

import copy
import json
from typing import Any, Protocol, TypeVar

from aiohttp import web

from pulsar_grpc.broker import errors as e
from pulsar_grpc.broker.cluster.ownership import POLICIES_ROOT
from pulsar_grpc.broker.config import ServiceConfiguration
from pulsar_grpc.broker.json_text import json_value
from pulsar_grpc.broker.naming import NamespaceBundles, NamespaceName, TopicName
from pulsar_grpc.broker.service_parts import HasConfig, HasPermissions, HasResources, HasStore
from pulsar_grpc.broker.topics.dedup import FIELD as DEDUPLICATION_ENABLED
from pulsar_grpc.broker.topics.encryption_policy import FIELD as ENCRYPTION_REQUIRED
from pulsar_grpc.broker.topics.encryption_policy import EncryptionPolicy
from pulsar_grpc.broker.web.access import AdminAccess
from pulsar_grpc.broker.web.bundles_admin import BundlesAdmin
from pulsar_grpc.broker.web.partition_fanout import Absent, FanoutPort, PartitionCall, on_each_topic
from pulsar_grpc.broker.web.topics_admin import TopicsAdmin, forced

__all__ = ["NamespacesAdmin"]

NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}"
_Body = TypeVar("_Body", dict[str, Any], bool)

# What Pulsar's Policies serializes whether set or not (its defaults), under the stored node.
_POLICIES_DEFAULTS: dict[str, Any] = {
    "auth_policies": {"namespace_auth": {}, "destination_auth": {}, "subscription_auth_roles": {}},
    "replication_clusters": [],
    "backlog_quota_map": {},
    "clusterDispatchRate": {},
    "topicDispatchRate": {},
    "subscriptionDispatchRate": {},
    "replicatorDispatchRate": {},
    "clusterSubscribeRate": {},
    "publishMaxMessageRate": {},
    "latency_stats_sample_rate": {},
    "deleted": False,
    "encryption_required": False,
    "subscription_auth_mode": "None",
    "schema_validation_enforced": False,
    "is_allow_auto_update_schema": True,
    "properties": {},
}


class NamespacesPort(FanoutPort, HasConfig, HasPermissions, HasResources, HasStore, Protocol):
    """What the namespaces routes use: the namespaces' resources, policies and grants, and the
    fan-out of a call to each topic's owner."""


class NamespacesAdmin:
    """The routes; ``add_routes`` registers them on the web application."""

    def __init__(
        self,
        service: NamespacesPort,
        access: AdminAccess,
        topics: TopicsAdmin,
        bundles: BundlesAdmin,
    ) -> None:
        self.service = service
        self.access = access
        self.topics = topics
        self.bundles = bundles

    def add_routes(self, app: web.Application) -> None:
        app.add_routes(
            [
                web.delete("/admin/v2/tenants/{tenant}", self.delete_tenant),
                web.get(NAMESPACE, self.policies),
                web.put(NAMESPACE, self.create),
                web.delete(NAMESPACE, self.delete),
                web.get(f"{NAMESPACE}/encryptionRequired", self.get_encryption_required),
                web.post(f"{NAMESPACE}/encryptionRequired", self.set_encryption_required),
                web.get(f"{NAMESPACE}/deduplication", self.get_deduplication),
                web.post(f"{NAMESPACE}/deduplication", self.set_deduplication),
                web.delete(f"{NAMESPACE}/deduplication", self.remove_deduplication),
            ]
        )

    # ------------------------------------------------------------ tenants

    async def delete_tenant(self, request: web.Request) -> web.Response:
        self.access.super_user(request, "deleting a tenant")
        tenant = request.match_info["tenant"]
        config = self.service.config
        force = forced(request)
        if force and not config.forceDeleteTenantAllowed:
            return _forced_refused("tenants")
        if force and not config.forceDeleteNamespaceAllowed:  # its namespaces are forced too
            return _forced_refused("namespaces")
        path = f"{POLICIES_ROOT}/{tenant}"
        if not await self.service.store.exists(path):
            raise e.NotFoundError(f"Tenant {tenant} does not exist")
        namespaces = await self.service.resources.list_namespaces(tenant)
        if namespaces and not force:
            raise e.NotAllowedError("The tenant still has active namespaces")
        for name in namespaces:
            await self._delete_namespace(NamespaceName.get(name), force=True)
        await self.service.store.delete(path)
        self.service.permissions.cache.invalidate(path)
        return web.Response(status=204)

    # ------------------------------------------------------------ namespaces

    async def _namespace(self, request: web.Request) -> NamespaceName:
        ns = NamespaceName.get(f"{request.match_info['tenant']}/{request.match_info['namespace']}")
        await self.access.tenant_admin(request, ns.tenant)
        return ns

    async def policies(self, request: web.Request) -> web.Response:
        ns = await self._namespace(request)
        found = await self.service.store.get(f"{POLICIES_ROOT}/{ns}")
        if found is None:
            raise e.NotFoundError(f"Namespace {ns} does not exist")
        policies = copy.deepcopy(_POLICIES_DEFAULTS)
        policies["replication_clusters"] = [self.service.config.clusterName]
        policies.update(json.loads(found.value or b"{}"))
        return web.json_response(policies)

    async def create(self, request: web.Request) -> web.Response:
        ns = await self._namespace(request)
        body: dict[str, Any] = await _policies_body(request, dict)
        clusters = body.get("replication_clusters") or []
        if not isinstance(clusters, list) or not all(isinstance(c, str) for c in clusters):
            raise e.InvalidArgumentError("replication_clusters must be a list of cluster names")
        unknown = sorted(set(clusters) - {self.service.config.clusterName})
        if unknown:
            raise e.PreconditionFailedError(f"Invalid cluster(s): {', '.join(map(str, unknown))}")
        bundles = _bundles(ns, body.get("bundles"), self.service.config)
        await self.service.resources.create_namespace(ns, bundles=bundles)
        return web.Response(status=204)

    async def delete(self, request: web.Request) -> web.Response:
        ns = await self._namespace(request)
        if forced(request) and not self.service.config.forceDeleteNamespaceAllowed:
            return _forced_refused("namespaces")
        await self._delete_namespace(ns, forced(request))
        return web.Response(status=204)

    async def get_encryption_required(self, request: web.Request) -> web.Response:
        ns = await self._namespace(request)
        policies = await self.service.permissions.cache.get(f"{POLICIES_ROOT}/{ns}")
        if policies is None:
            raise e.NotFoundError(f"Namespace {ns} does not exist")
        return web.json_response(EncryptionPolicy.of(policies) is EncryptionPolicy.REQUIRED)

    async def set_encryption_required(self, request: web.Request) -> web.Response:
        ns = await self._namespace(request)
        required = await _policies_body(request, bool)

        def change(node: dict[str, Any]) -> None:
            node[ENCRYPTION_REQUIRED] = required

        await self.service.permissions.update_namespace(ns, change)
        return web.Response(status=204)

    async def get_deduplication(self, request: web.Request) -> web.Response:
        ns = await self._namespace(request)
        policies = await self.service.permissions.cache.get(f"{POLICIES_ROOT}/{ns}")
        if policies is None:
            raise e.NotFoundError(f"Namespace {ns} does not exist")
        found = policies.get(DEDUPLICATION_ENABLED)
        if not isinstance(found, bool):
            return web.Response(status=204)  # Pulsar's null: not set
        return web.json_response(found)

    async def set_deduplication(self, request: web.Request) -> web.Response:
        ns = await self._namespace(request)
        enabled = await _policies_body(request, bool)

        def change(node: dict[str, Any]) -> None:
            node[DEDUPLICATION_ENABLED] = enabled

        await self.service.permissions.update_namespace(ns, change)
        return web.Response(status=204)

    async def remove_deduplication(self, request: web.Request) -> web.Response:
        ns = await self._namespace(request)

        def change(node: dict[str, Any]) -> None:
            node.pop(DEDUPLICATION_ENABLED, None)

        await self.service.permissions.update_namespace(ns, change)
        return web.Response(status=204)

    async def _delete_namespace(self, ns: NamespaceName, force: bool) -> None:
        """Refused (409) while it has topics unless forced: then each partitioned topic and
        each other topic is deleted where it is served; its bundles are unloaded (their
        ownership let go), then its policies removed."""
        resources = self.service.resources
        await resources.check_namespace(ns)
        partitioned = await resources.list_partitioned_topics(ns)
        plain = _outside(await resources.list_topics(str(ns)), set(partitioned))
        if partitioned or plain:
            if not force:
                raise e.NotAllowedError("Cannot delete non empty namespace")
            for name in partitioned:
                await self.topics.delete_partitioned(TopicName.get(name), force=True)

            async def delete(topic: TopicName) -> None:
                await self.topics.delete_plain(topic, force=True)

            call = PartitionCall("DELETE", "", {"force": "true"}, absent=Absent.IGNORED)
            await on_each_topic(self.service, self.topics.broker_client, plain, call, delete)
        await self.bundles.unload_all(ns)
        await resources.delete_namespace(ns)
        self.service.permissions.cache.invalidate(f"{POLICIES_ROOT}/{ns}")


def _forced_refused(what: str) -> web.Response:
    """Pulsar's 405 for a forced delete that broker.conf does not allow
    (forceDeleteTenantAllowed, forceDeleteNamespaceAllowed: both false by default)."""
    return web.json_response(
        {"reason": f"Broker doesn't allow forced deletion of {what}"}, status=405
    )


def _outside(names: list[str], partitioned: set[str]) -> list[TopicName]:
    """The topics of ``names`` that are neither one of the partitioned topics nor a partition
    of one (a non-partitioned topic may end in -partition-N too: its own ledger)."""
    topics = [TopicName.get(n) for n in names if n not in partitioned]
    return [t for t in topics if not (t.is_partitioned and t.partitioned_topic_name in partitioned)]


async def _policies_body(request: web.Request, kind: type[_Body]) -> _Body:
    """The JSON body, of ``kind``: a Policies object (empty when there is none) or a
    boolean policy's value."""
    text = (await request.text()).strip()
    if not text and kind is dict:
        return kind()
    try:
        body = json_value(text)
    except ValueError:
        raise e.InvalidArgumentError(f"the body is not JSON: {text[:60]!r}") from None
    if not isinstance(body, kind):
        what = "true or false" if kind is bool else "a JSON Policies object"
        raise e.InvalidArgumentError(f"the body must be {what}, got {text[:40]!r}")
    return body


def _bundles(ns: NamespaceName, data: Any, config: ServiceConfiguration) -> NamespaceBundles | None:
    """BundlesData: its ``boundaries`` when given, else ``numBundles`` even bundles (412 for
    either when invalid, as Pulsar's validateBundlesData)."""
    if data is None:
        return None
    if not isinstance(data, dict):
        raise e.PreconditionFailedError("bundles must be a BundlesData object")
    try:
        boundaries = data.get("boundaries")
        if boundaries:
            if not isinstance(boundaries, list) or not all(isinstance(b, str) for b in boundaries):
                raise e.InvalidArgumentError("boundaries must be a list of 0x%08x strings")
            _within_maximum(len(boundaries) - 1, "boundaries make", config)
            return NamespaceBundles.parse(ns, boundaries)
        count = data.get("numBundles")
        if count is None:
            return None
        if isinstance(count, bool) or not isinstance(count, int):
            raise e.InvalidArgumentError(f"numBundles must be a number, got {count!r}")
        _within_maximum(count, "numBundles asks for", config)
        return NamespaceBundles.with_count(ns, count)
    except e.InvalidArgumentError as exc:
        raise e.PreconditionFailedError(f"Invalid bundles: {exc.message}") from None
    except ValueError as exc:  # a boundary that is not a number
        raise e.PreconditionFailedError(f"Invalid bundles: {exc}") from None


def _within_maximum(count: int, what: str, config: ServiceConfiguration) -> None:
    """A namespace's bundles, however they are given, are checked against the most it may have
    before any is made: each is owned, reported on and looked up on its own (a 1 MiB body of
    boundaries would otherwise make some 80,000)."""
    if count > config.loadBalancerNamespaceMaximumBundles:
        raise e.InvalidArgumentError(
            f"{what} {count} bundles, over loadBalancerNamespaceMaximumBundles "
            f"{config.loadBalancerNamespaceMaximumBundles}"
        )
