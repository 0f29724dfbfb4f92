"""Permissions and tenants as Pulsar keeps them in the metadata store, read through a cache
that the store's notifications keep fresh.

Layout (Pulsar's, so its tools read ours):

- ``/admin/policies/<tenant>``: the tenant's TenantInfo ``{"adminRoles": [...],
  "allowedClusters": [...]}``;
- ``/admin/policies/<tenant>/<ns>``: the namespace's Policies, whose ``auth_policies`` are
  ``{"namespace_auth": {role: [actions]}, "destination_auth": {topic: {role: [actions]}},
  "subscription_auth_roles": {subscription: [roles]}}``.

Why a watched cache and not a timed one: every authorized call reads these nodes, so they are
cached, and a permission change must reach every broker of a cluster within seconds. The
metadata store notifies about a node once it has been read (a ZooKeeper watch, re-armed by the
next read), so an entry lives until its node changes: a revoke takes effect on the next call
after the notification, with no polling and no stale window beyond the notification's own
delay. A lost session loses its watches, so a session event empties the whole cache.
"""

from __future__ import annotations

import asyncio
import enum
import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from pulsar_grpc.broker.cluster.ownership import POLICIES_ROOT
from pulsar_grpc.broker.errors import (
    InvalidArgumentError,
    MetadataError,
    NotAllowedError,
    NotFoundError,
    PreconditionFailedError,
)
from pulsar_grpc.broker.metadata import MetadataStore
from pulsar_grpc.broker.metadata.store import (
    BadVersionError,
    Notification,
    NotificationType,
    SessionEvent,
)
from pulsar_grpc.broker.naming import NamespaceName, TopicName

# Nodes kept at once: one per tenant and namespace that calls name. Misses are not cached, so
# names a client makes up cost a read each but no memory.
MAX_CACHED_NODES = 10_000
# A role is a token's subject, a certificate's CN or a user name: far shorter than this.
MAX_ROLE_CHARS = 1024
_POLICIES_PREFIX = POLICIES_ROOT + "/"
# Compare-and-set rounds before a permission write gives up (another writer kept winning).
_WRITE_ATTEMPTS = 20


class AuthAction(enum.Enum):
    """Pulsar's AuthAction names. Only produce and consume are enforced here; the others are
    accepted in grants so that Pulsar's policies and commands carry over unchanged."""

    PRODUCE = "produce"
    CONSUME = "consume"
    FUNCTIONS = "functions"
    SOURCES = "sources"
    SINKS = "sinks"
    PACKAGES = "packages"


def parse_actions(raw: Any) -> list[str]:
    """A JSON list of AuthAction names (the body of a grant), sorted and without repeats."""
    names = {a.value for a in AuthAction}
    if not isinstance(raw, list) or not all(isinstance(a, str) for a in raw):
        raise InvalidArgumentError('actions must be a JSON list of names, e.g. ["produce"]')
    unknown = sorted({a for a in raw if a not in names})
    if unknown:
        raise InvalidArgumentError(
            f"unknown action {', '.join(u[:40] for u in unknown[:5])} "
            f"(known: {', '.join(sorted(names))})"
        )
    return sorted(set(raw))


def check_role(role: str) -> str:
    if not role or len(role) > MAX_ROLE_CHARS or not role.isprintable():
        raise InvalidArgumentError(
            f"a role must be 1 to {MAX_ROLE_CHARS} printable characters, got {role[:40]!r}"
        )
    return role


def parse_roles(raw: Any) -> list[str]:
    if not isinstance(raw, list) or not all(isinstance(r, str) for r in raw):
        raise InvalidArgumentError('roles must be a JSON list of names, e.g. ["app"]')
    return sorted({check_role(r) for r in raw})


@dataclass(frozen=True, slots=True)
class TenantInfo:
    """Pulsar's TenantInfo: who administers the tenant, which clusters it may use."""

    admin_roles: tuple[str, ...] = ()
    allowed_clusters: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, value: Any) -> TenantInfo:
        """From the stored node or a request body; an older node may hold ``{}``."""
        if not isinstance(value, dict):
            raise InvalidArgumentError("TenantInfo must be a JSON object")
        roles, clusters = value.get("adminRoles") or [], value.get("allowedClusters") or []
        for name, items in (("adminRoles", roles), ("allowedClusters", clusters)):
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise InvalidArgumentError(f"TenantInfo.{name} must be a list of names")
        return cls(tuple(check_role(r) for r in roles), tuple(clusters))

    def as_json(self) -> dict[str, list[str]]:
        return {
            "adminRoles": list(self.admin_roles),
            "allowedClusters": list(self.allowed_clusters),
        }


@dataclass(frozen=True, slots=True)
class AuthPolicies:
    """A namespace's ``auth_policies``, read-only."""

    namespace_auth: dict[str, list[str]] = field(default_factory=dict)
    destination_auth: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    subscription_auth_roles: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, policies: dict[str, Any]) -> AuthPolicies:
        auth = policies.get("auth_policies") or {}
        return cls(
            dict(auth.get("namespace_auth") or {}),
            dict(auth.get("destination_auth") or {}),
            dict(auth.get("subscription_auth_roles") or {}),
        )


def _auth_section(policies: dict[str, Any]) -> dict[str, Any]:
    """The ``auth_policies`` of ``policies``, created in Pulsar's shape when missing."""
    auth = policies.setdefault("auth_policies", {})
    for key in ("namespace_auth", "destination_auth", "subscription_auth_roles"):
        auth.setdefault(key, {})
    return auth


@dataclass(frozen=True)
class _Read:
    """A metadata read in flight, and the cache epoch it started in (a read that overlapped
    an invalidation may hold the old value, so a later caller starts a fresh one)."""

    epoch: int
    task: asyncio.Future[dict[str, Any] | None]


class PolicyCache:
    """The tenant and namespace nodes under /admin/policies, as parsed JSON, each kept until
    the store says it changed (see the module docstring)."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._nodes: OrderedDict[str, dict[str, Any]] = OrderedDict()
        # Bumped by every invalidation: a read that overlapped one may hold the old value and
        # is not cached.
        self._epoch = 0
        # Called when a tenant's node or one of its namespaces' changes, by tenant.
        self._watchers: dict[str, set[Callable[[], None]]] = {}
        # The read in flight per node, shared by every caller that missed the cache.
        self._reading: dict[str, _Read] = {}
        store.register_listener(self._on_notification)
        store.register_session_listener(self._on_session_event)

    async def get(self, path: str) -> dict[str, Any] | None:
        """The node's parsed JSON (None when it does not exist). Callers that miss the cache
        together share one read: a change notifies every open stream at once, and each of
        them checking its right again must not become one metadata read per stream."""
        cached = self._nodes.get(path)
        if cached is not None:
            self._nodes.move_to_end(path)
            return cached
        reading = self._reading.get(path)
        if reading is None or reading.epoch != self._epoch:
            reading = _Read(self._epoch, asyncio.ensure_future(self._read(path, self._epoch)))
            self._reading[path] = reading
            reading.task.add_done_callback(partial(self._read_done, path, reading))
        # Shielded: a caller that gives up must not cancel the read the others wait for.
        return await asyncio.shield(reading.task)

    async def _read(self, path: str, epoch: int) -> dict[str, Any] | None:
        found = await self._store.get(path)
        if found is None:
            return None
        value: dict[str, Any] = json.loads(found.value or b"{}")
        if epoch == self._epoch:
            self._nodes[path] = value
            if len(self._nodes) > MAX_CACHED_NODES:
                self._nodes.popitem(last=False)
        return value

    def _read_done(self, path: str, reading: _Read, task: asyncio.Future[Any]) -> None:
        if self._reading.get(path) is reading:
            del self._reading[path]
        if not task.cancelled():
            task.exception()  # retrieved here too: every waiter may have given up

    def invalidate(self, path: str) -> None:
        self._epoch += 1
        self._nodes.pop(path, None)
        tenant = path[len(_POLICIES_PREFIX) :].partition("/")[0]
        for watcher in list(self._watchers.get(tenant, ())):
            watcher()

    def watch(self, tenant: str, changed: Callable[[], None]) -> Callable[[], None]:
        """Call ``changed`` whenever ``tenant``'s or one of its namespaces' permissions may
        have changed (a ZooKeeper watch fires once: ``changed`` should read them again, which
        re-arms it). Returns the function that stops watching."""
        watchers = self._watchers.setdefault(tenant, set())
        watchers.add(changed)

        def stop() -> None:
            watchers.discard(changed)
            if not watchers and self._watchers.get(tenant) is watchers:
                del self._watchers[tenant]

        return stop

    def _on_notification(self, notification: Notification) -> None:
        # Only policy nodes: a store without watches reports every change (cursors move on
        # every ack), and those must not keep reads in flight from being cached.
        path = notification.path
        if notification.type is not NotificationType.CHILDREN_CHANGED and path.startswith(
            _POLICIES_PREFIX
        ):
            self.invalidate(path)

    def _on_session_event(self, event: SessionEvent) -> None:
        self._epoch += 1
        self._nodes.clear()
        for watchers in list(self._watchers.values()):
            for watcher in list(watchers):
                watcher()


class PermissionStore:
    """Reads (cached) and writes (compare-and-set, from any broker) of tenants' TenantInfo and
    namespaces' auth_policies."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self.cache = PolicyCache(store)

    # ------------------------------------------------------------ reads

    async def tenant(self, tenant: str) -> TenantInfo | None:
        found = await self.cache.get(f"{POLICIES_ROOT}/{tenant}")
        return None if found is None else TenantInfo.from_json(found)

    async def auth_policies(self, ns: NamespaceName) -> AuthPolicies | None:
        found = await self.cache.get(f"{POLICIES_ROOT}/{ns}")
        return None if found is None else AuthPolicies.of(found)

    async def namespace_permissions(self, ns: NamespaceName) -> dict[str, list[str]]:
        return (await self._existing(ns)).namespace_auth

    async def topic_permissions(self, topic: TopicName) -> dict[str, list[str]]:
        """Pulsar's GET .../permissions of a topic: the namespace's grants and the topic's
        (the topic's win for a role granted both)."""
        policies = await self._existing(topic.namespace)
        return {**policies.namespace_auth, **policies.destination_auth.get(str(topic), {})}

    async def subscription_permissions(self, ns: NamespaceName) -> dict[str, list[str]]:
        return (await self._existing(ns)).subscription_auth_roles

    async def _existing(self, ns: NamespaceName) -> AuthPolicies:
        policies = await self.auth_policies(ns)
        if policies is None:
            raise NotFoundError(f"Namespace {ns} does not exist")
        return policies

    # ------------------------------------------------------------ writes

    async def put_tenant(self, tenant: str, info: TenantInfo, create: bool) -> None:
        """Create (``create``: refused when it exists) or update a tenant's TenantInfo,
        keeping whatever else an older version stored in the node."""
        NamespaceName.get(f"{tenant}/x")  # validates the tenant part
        path = f"{POLICIES_ROOT}/{tenant}"
        found = await self._store.get(path)
        if create and found is not None:
            raise NotAllowedError(f"Tenant {tenant} already exists")
        if not create and found is None:
            raise NotFoundError(f"Tenant {tenant} does not exist")
        if found is None:
            try:
                await self._store.put(path, json.dumps(info.as_json()).encode(), -1)
            except BadVersionError:
                raise NotAllowedError(f"Tenant {tenant} already exists") from None
        else:
            await self._update(path, lambda node: node.update(info.as_json()), f"Tenant {tenant}")

    async def grant_namespace(self, ns: NamespaceName, role: str, actions: list[str]) -> None:
        """Pulsar's grant: the role's actions on the namespace become ``actions``."""
        await self._update_auth(ns, lambda auth: auth["namespace_auth"].__setitem__(role, actions))

    async def revoke_namespace(self, ns: NamespaceName, role: str) -> None:
        await self._update_auth(ns, lambda auth: auth["namespace_auth"].pop(role, None))

    async def grant_topic(self, topic: TopicName, role: str, actions: list[str]) -> None:
        def grant(auth: dict[str, Any]) -> None:
            auth["destination_auth"].setdefault(str(topic), {})[role] = actions

        await self._update_auth(topic.namespace, grant)

    async def revoke_topic(self, topic: TopicName, role: str) -> None:
        """As Pulsar: revoking what was granted on the namespace, not the topic, is refused."""

        def revoke(auth: dict[str, Any]) -> None:
            roles = auth["destination_auth"].get(str(topic), {})
            if role not in roles:
                raise PreconditionFailedError(
                    f"Permissions are not set at the topic level for role {role} on {topic}"
                )
            del roles[role]
            if not roles:
                del auth["destination_auth"][str(topic)]

        await self._update_auth(topic.namespace, revoke)

    async def grant_subscription(self, ns: NamespaceName, sub: str, roles: list[str]) -> None:
        """Only ``roles`` may consume from subscription ``sub`` of the namespace's topics."""
        await self._update_auth(
            ns, lambda auth: auth["subscription_auth_roles"].__setitem__(sub, roles)
        )

    async def revoke_subscription(self, ns: NamespaceName, sub: str, role: str) -> None:
        def revoke(auth: dict[str, Any]) -> None:
            roles = auth["subscription_auth_roles"].get(sub)
            if not roles or role not in roles:
                raise PreconditionFailedError(
                    f"role {role} has no permission on subscription {sub}"
                )
            roles.remove(role)
            if not roles:
                del auth["subscription_auth_roles"][sub]

        await self._update_auth(ns, revoke)

    async def _update_auth(
        self, ns: NamespaceName, change: Callable[[dict[str, Any]], Any]
    ) -> None:
        await self.update_namespace(ns, lambda node: change(_auth_section(node)))

    async def update_namespace(
        self, ns: NamespaceName, change: Callable[[dict[str, Any]], Any]
    ) -> None:
        """Change the namespace's Policies node in place (compare-and-set, from any broker;
        every broker's cache hears of it): other policies than permissions (rate limits)
        write through here too."""
        await self._update(f"{POLICIES_ROOT}/{ns}", change, f"Namespace {ns}")

    async def _update(self, path: str, change: Callable[[dict[str, Any]], Any], what: str) -> None:
        """Read, change, write back if nobody wrote meanwhile; else again."""
        for _ in range(_WRITE_ATTEMPTS):
            found = await self._store.get(path)
            if found is None:
                raise NotFoundError(f"{what} does not exist")
            node = json.loads(found.value or b"{}")
            change(node)
            try:
                await self._store.put(path, json.dumps(node).encode(), found.version)
            except BadVersionError:
                continue
            self.cache.invalidate(path)  # this broker sees its own write at once
            return
        raise MetadataError(f"{what}: too many concurrent changes, try again")
