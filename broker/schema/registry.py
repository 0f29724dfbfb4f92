"""The schema registry (Pulsar's SchemaRegistryServiceImpl): a topic's schema versions, found,
added under a compatibility strategy, and deleted.

A delete adds a version marked deleted: the versions before it no longer count (Pulsar's
trimDeletedSchemaAndGetList), so the next schema is checked against nothing and a topic can
start over with an unrelated one, at the next version number.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from pulsar_grpc.broker.errors import IncompatibleSchemaError, MetadataError, NotAllowedError
from pulsar_grpc.broker.schema import compatibility
from pulsar_grpc.broker.schema.data import (
    CompatibilityStrategy,
    SchemaInfo,
    SchemaType,
    StoredSchema,
)
from pulsar_grpc.broker.schema.storage import SchemaStorage

_APPEND_ATTEMPTS = 10
# Versions a topic may have (deletes included). Pulsar sets no bound, but every version costs
# a metadata node and a read whenever the registry is loaded, and any producer can add them.
MAX_VERSIONS = 1000
# The strategies under which a consumer's schema is checked against the latest version with
# BACKWARD's rule (the consumer reads what was written), as Pulsar's checkConsumerCompatibility.
_CONSUMER_CHECKS_LATEST = frozenset(
    {
        CompatibilityStrategy.BACKWARD,
        CompatibilityStrategy.FORWARD,
        CompatibilityStrategy.FORWARD_TRANSITIVE,
        CompatibilityStrategy.FULL,
    }
)


def live(versions: Sequence[StoredSchema]) -> list[StoredSchema]:
    """The versions after the last delete (none when the latest is a delete)."""
    for index in range(len(versions) - 1, -1, -1):
        if versions[index].deleted:
            return list(versions[index + 1 :])
    return list(versions)


class SchemaRegistry:
    """Versions by schema id (``tenant/ns/topic``, a partitioned topic's own name)."""

    def __init__(self, storage: SchemaStorage) -> None:
        self.storage = storage

    async def versions(self, schema_id: str) -> tuple[StoredSchema, ...]:
        """Every version, deletes included, oldest first."""
        return await self.storage.versions(schema_id)

    async def latest(self, schema_id: str) -> StoredSchema | None:
        """The latest version, None when there is none or it is a delete."""
        versions = await self.storage.versions(schema_id)
        return versions[-1] if versions and not versions[-1].deleted else None

    async def get(self, schema_id: str, version: int) -> StoredSchema | None:
        versions = await self.storage.versions(schema_id)
        return versions[version] if 0 <= version < len(versions) else None

    async def find_version(self, schema_id: str, info: SchemaInfo) -> int | None:
        """The version holding ``info`` since the last delete (Pulsar's findSchemaVersion)."""
        return _find(live(await self.storage.versions(schema_id)), info)

    async def put_if_absent(
        self, schema_id: str, info: SchemaInfo, strategy: CompatibilityStrategy
    ) -> int:
        """The version of ``info``: the one it has already, or a new one if it is compatible
        with the versions since the last delete (IncompatibleSchemaError otherwise)."""
        for _ in range(_APPEND_ATTEMPTS):
            versions = await self.storage.versions(schema_id)
            current = live(versions)
            found = _find(current, info)
            if found is not None:
                return found
            compatibility.check(current, info, strategy)
            version = len(versions)
            if version >= MAX_VERSIONS:
                raise NotAllowedError(
                    f"schema {schema_id} has {version} versions, the most a topic keeps: "
                    "delete it (force) to start again"
                )
            record = StoredSchema(version, info, False, _now_ms())
            if await self.storage.append(schema_id, version, record):
                return version
        raise MetadataError(f"schema {schema_id}: too many concurrent changes, try again")

    async def check(
        self, schema_id: str, info: SchemaInfo, strategy: CompatibilityStrategy
    ) -> None:
        """Raise IncompatibleSchemaError unless ``info`` could be added (admin's compatibility
        test); a schema the topic has already is compatible."""
        current = live(await self.storage.versions(schema_id))
        if _find(current, info) is None:
            compatibility.check(current, info, strategy)

    async def check_consumer(
        self, schema_id: str, info: SchemaInfo, strategy: CompatibilityStrategy
    ) -> None:
        """A consumer's schema on a topic in use (Pulsar's checkConsumerCompatibility): it
        must read what the topic holds."""
        current = live(await self.storage.versions(schema_id))
        if not current:
            raise IncompatibleSchemaError(
                "Trying to subscribe with a schema to a topic in use that has none"
            )
        if _find(current, info) is not None:
            return
        if strategy in _CONSUMER_CHECKS_LATEST:
            compatibility.check(current, info, CompatibilityStrategy.BACKWARD)
        else:
            compatibility.check(current, info, strategy)

    async def delete(self, schema_id: str) -> int | None:
        """Mark the schema deleted (a new version); None when there is none to delete."""
        for _ in range(_APPEND_ATTEMPTS):
            versions = await self.storage.versions(schema_id)
            if not versions or versions[-1].deleted:
                return None
            version = len(versions)
            marker = StoredSchema(version, SchemaInfo(SchemaType.NONE, b""), True, _now_ms())
            if await self.storage.append(schema_id, version, marker):
                return version
        raise MetadataError(f"schema {schema_id}: too many concurrent changes, try again")

    async def delete_all(self, schema_id: str) -> None:
        """Forget every version (Pulsar's forced delete)."""
        await self.storage.delete_all(schema_id)


def _find(current: Sequence[StoredSchema], info: SchemaInfo) -> int | None:
    fingerprint = info.fingerprint
    for stored in current:
        if stored.info.fingerprint == fingerprint:
            return stored.version
    return None


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
