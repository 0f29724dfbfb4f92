"""A namespace's schema policies, in Pulsar's Policies fields on the namespace's node:

- ``schema_compatibility_strategy``: UNDEFINED (the default) applies the broker's
  schemaCompatibilityStrategy (FULL unless configured);
- ``is_allow_auto_update_schema``: absent applies the broker's isAllowAutoUpdateSchemaEnabled;
  false: a producer may only use a schema the topic already has (an admin uploads new ones);
- ``schema_validation_enforced``: a producer without a schema is refused on a topic with one
  (also when the broker's isSchemaValidationEnforced is set).

Reads go through the broker's policy cache (watched); writes compare-and-set the node from any
broker, as every other policy write does.
"""

from __future__ import annotations

from typing import Any

from pulsar_grpc.broker.cluster.ownership import POLICIES_ROOT
from pulsar_grpc.broker.config import ServiceConfiguration
from pulsar_grpc.broker.errors import NotFoundError
from pulsar_grpc.broker.naming import NamespaceName
from pulsar_grpc.broker.schema.data import CompatibilityStrategy
from pulsar_grpc.broker.security.permissions import PermissionStore

STRATEGY = "schema_compatibility_strategy"
AUTO_UPDATE = "is_allow_auto_update_schema"
VALIDATION_ENFORCED = "schema_validation_enforced"


class SchemaPolicies:
    """The schema fields of namespaces' policies, resolved against the broker's defaults."""

    def __init__(self, config: ServiceConfiguration, policies: PermissionStore) -> None:
        self._config = config
        self._policies_store = policies  # the one reader and writer of Policies nodes

    async def _policies(self, ns: NamespaceName) -> dict[str, Any]:
        found = await self._policies_store.cache.get(f"{POLICIES_ROOT}/{ns}")
        if found is None:
            raise NotFoundError(f"Namespace {ns} does not exist")
        return found

    # ------------------------------------------------------------ reads

    async def namespace_strategy(self, ns: NamespaceName) -> CompatibilityStrategy:
        """The namespace's own setting (UNDEFINED when it has none), as Pulsar's GET shows."""
        raw = (await self._policies(ns)).get(STRATEGY) or "UNDEFINED"
        return CompatibilityStrategy(raw)

    async def strategy(self, ns: NamespaceName) -> CompatibilityStrategy:
        """The strategy that applies to the namespace's topics."""
        strategy = await self.namespace_strategy(ns)
        if strategy is CompatibilityStrategy.UNDEFINED:
            return CompatibilityStrategy(self._config.schemaCompatibilityStrategy)
        return strategy

    async def allow_auto_update(self, ns: NamespaceName) -> bool:
        value = (await self._policies(ns)).get(AUTO_UPDATE)
        return self._config.isAllowAutoUpdateSchemaEnabled if value is None else bool(value)

    async def namespace_validation_enforced(self, ns: NamespaceName) -> bool:
        return bool((await self._policies(ns)).get(VALIDATION_ENFORCED, False))

    async def validation_enforced(self, ns: NamespaceName) -> bool:
        return self._config.isSchemaValidationEnforced or await self.namespace_validation_enforced(
            ns
        )

    # ------------------------------------------------------------ writes

    async def set_strategy(self, ns: NamespaceName, strategy: CompatibilityStrategy) -> None:
        await self._set(ns, STRATEGY, strategy.value)

    async def set_allow_auto_update(self, ns: NamespaceName, allow: bool) -> None:
        await self._set(ns, AUTO_UPDATE, allow)

    async def set_validation_enforced(self, ns: NamespaceName, enforced: bool) -> None:
        await self._set(ns, VALIDATION_ENFORCED, enforced)

    async def _set(self, ns: NamespaceName, field: str, value: object) -> None:
        await self._policies_store.update_namespace(ns, lambda node: node.__setitem__(field, value))
