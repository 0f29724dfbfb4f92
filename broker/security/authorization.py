"""What a role may do: Pulsar's AuthorizationService over its PulsarAuthorizationProvider.

Built from the configuration (authorizationEnabled, superUserRoles, proxyRoles,
authorizationAllowWildcardsMatching) and the permissions in the metadata store
(broker/security/permissions.py). The rules, as Pulsar's:

- a super-user may do everything; a tenant's admin (TenantInfo.adminRoles) may administer the
  tenant and produce to and consume from its topics;
- another role may produce or consume on a topic when the action is granted to it on the
  topic's namespace (namespace_auth) or on the topic (destination_auth; for a partition, on
  its partitioned topic too); a lookup is allowed to whoever may produce or consume;
- consuming from a subscription listed in subscription_auth_roles needs one of its roles too;
- a call from a proxy role (PIP-1) must name the client it acts for (its original principal,
  never itself a proxy role), and both must be allowed; a call from any other role that names
  an original principal is refused (Pulsar 3's "Invalid roles").

Every check raises :class:`AuthorizationError` naming the role, the action and the resource;
protocols map it to their own answer (gRPC PERMISSION_DENIED, HTTP 403).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass

from pulsar_grpc.broker.config import ServiceConfiguration
from pulsar_grpc.broker.errors import AuthorizationError, NotFoundError
from pulsar_grpc.broker.naming import NamespaceName, TopicName
from pulsar_grpc.broker.security.permissions import AuthAction, AuthPolicies, PermissionStore

log = logging.getLogger(__name__)


class TopicOperation(enum.Enum):
    """What a call does to a topic (Pulsar's TopicOperation, the ones this broker serves)."""

    LOOKUP = "lookup"  # where is it, how many partitions: allowed to producers and consumers
    PRODUCE = "produce"
    CONSUME = "consume"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who makes a call: the authenticated role and, from a proxy, the client it acts for."""

    role: str | None
    original_principal: str | None = None

    def __str__(self) -> str:
        if self.original_principal is None:
            return f"role {self.role}"
        return f"role {self.role} (for {self.original_principal})"


def _matches(granted: str, role: str, wildcards: bool) -> bool:
    """Pulsar's wildcard matching: a granted "prefix*" or "*suffix" covers matching roles."""
    if granted == role:
        return True
    if not wildcards or len(granted) < 2:
        return False
    if granted.endswith("*"):
        return role.startswith(granted[:-1])
    if granted.startswith("*"):
        return role.endswith(granted[1:])
    return False


class AuthorizationService:
    """Decisions only; the permissions themselves are :attr:`permissions`."""

    def __init__(self, config: ServiceConfiguration, permissions: PermissionStore) -> None:
        self._super_users = frozenset(config.superUserRoles)
        self._proxies = frozenset(config.proxyRoles)
        self._wildcards = config.authorizationAllowWildcardsMatching
        self.permissions = permissions

    @classmethod
    def from_config(
        cls, config: ServiceConfiguration, permissions: PermissionStore
    ) -> AuthorizationService | None:
        """None while authorizationEnabled is false: then every authenticated role may do
        everything, as in Pulsar (grants are still kept, for when it is turned on)."""
        if not config.authorizationEnabled:
            return None
        return cls(config, permissions)

    def watch(self, tenant: str, changed: Callable[[], None]) -> Callable[[], None]:
        """Call ``changed`` when permissions in ``tenant`` may have changed, so that an open
        producer or consumer is checked again (returns the function that stops watching)."""
        return self.permissions.cache.watch(tenant, changed)

    # ------------------------------------------------------------ roles

    def is_super_user(self, role: str | None) -> bool:
        return role is not None and role in self._super_users

    def is_proxy_role(self, role: str | None) -> bool:
        return role is not None and role in self._proxies

    def _roles_to_check(self, caller: Caller) -> list[str | None]:
        """The roles that must all be allowed (Pulsar's isValidOriginalPrincipal first)."""
        role, original = caller.role, caller.original_principal
        if self.is_proxy_role(role):
            if not original:
                problem = "a proxy role must name the client it acts for"
            elif self.is_proxy_role(original):
                problem = "the original principal cannot be a proxy role"
            else:
                return [role, original]
        elif original is not None:
            problem = "only a proxy role may name an original principal"
        else:
            return [role]
        log.info("refused %s: %s", caller, problem)
        raise AuthorizationError(f"Invalid roles: {problem} ({caller})")

    async def _is_tenant_admin(self, tenant: str, role: str | None) -> bool:
        if role is None:
            return False
        info = await self.permissions.tenant(tenant)
        return info is not None and role in info.admin_roles

    # ------------------------------------------------------------ checks

    async def check_topic(
        self,
        caller: Caller,
        topic: TopicName,
        operation: TopicOperation,
        subscription: str | None = None,
    ) -> None:
        """Raise AuthorizationError unless every role of ``caller`` may do ``operation`` on
        ``topic`` (``subscription``: the one a consumer names)."""
        for role in self._roles_to_check(caller):
            if not await self._allows_topic(role, topic, operation, subscription):
                what = operation.value
                if subscription and operation is TopicOperation.CONSUME:
                    what += f" (subscription {subscription})"
                raise AuthorizationError(f"role {role} is not authorized to {what} on {topic}")

    async def _allows_topic(
        self, role: str | None, topic: TopicName, op: TopicOperation, subscription: str | None
    ) -> bool:
        if role is None:
            return False
        if self.is_super_user(role) or await self._is_tenant_admin(topic.tenant, role):
            return True
        policies = await self.permissions.auth_policies(topic.namespace)
        if policies is None:
            return False
        if op is TopicOperation.PRODUCE:
            return self._granted(policies, topic, role, AuthAction.PRODUCE)
        if op is TopicOperation.CONSUME:
            return self._may_consume(policies, topic, role, subscription)
        return self._granted(policies, topic, role, AuthAction.PRODUCE) or self._may_consume(
            policies, topic, role, None
        )

    def _may_consume(
        self, policies: AuthPolicies, topic: TopicName, role: str, subscription: str | None
    ) -> bool:
        if subscription:
            roles = policies.subscription_auth_roles.get(subscription)
            if roles and role not in roles:  # an empty list restricts nobody, as in Pulsar
                return False
        return self._granted(policies, topic, role, AuthAction.CONSUME)

    def _granted(
        self, policies: AuthPolicies, topic: TopicName, role: str, action: AuthAction
    ) -> bool:
        grants: list[dict[str, list[str]]] = [policies.namespace_auth]
        # A partition follows its partitioned topic's grants too.
        names = {str(topic), topic.partitioned_topic_name}
        grants += [policies.destination_auth.get(name, {}) for name in names]
        return any(self._grants(grant, role, action) for grant in grants)

    def _grants(self, grant: dict[str, list[str]], role: str, action: AuthAction) -> bool:
        return any(
            action.value in actions and _matches(granted, role, self._wildcards)
            for granted, actions in grant.items()
        )

    async def check_namespace_topics(self, caller: Caller, ns: NamespaceName) -> None:
        """Listing a namespace's topics (Pulsar's GET_TOPICS): produce or consume granted on
        the namespace, or a tenant admin."""
        for role in self._roles_to_check(caller):
            if role is not None and (
                self.is_super_user(role) or await self._is_tenant_admin(ns.tenant, role)
            ):
                continue
            policies = await self.permissions.auth_policies(ns)
            grant = policies.namespace_auth if policies else {}
            if role is None or not any(
                self._grants(grant, role, action)
                for action in (AuthAction.PRODUCE, AuthAction.CONSUME)
            ):
                raise AuthorizationError(
                    f"role {role} is not authorized to list the topics of {ns}"
                )

    async def check_tenant_admin(self, caller: Caller, tenant: str) -> None:
        """A super-user or an admin of ``tenant`` (NotFoundError when it does not exist)."""
        roles = self._roles_to_check(caller)
        if all(self.is_super_user(role) for role in roles):
            return
        if await self.permissions.tenant(tenant) is None:
            raise NotFoundError(f"Tenant {tenant} does not exist")
        for role in roles:
            if not (self.is_super_user(role) or await self._is_tenant_admin(tenant, role)):
                raise AuthorizationError(
                    f"role {role} is not authorized to administer tenant {tenant}"
                )

    def check_super_user(self, caller: Caller, what: str = "this operation") -> None:
        for role in self._roles_to_check(caller):
            if not self.is_super_user(role):
                raise AuthorizationError(
                    f"role {role} is not authorized: {what} needs a super-user"
                )
