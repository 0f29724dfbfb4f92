"""Where schemas are kept: the metadata store, at Pulsar's path ``/schemas/<tenant>/<ns>/<topic>``
(the schema id), so every broker of a cluster sees the same registry.

Pulsar keeps a locator at that path and each version's data in a BookKeeper ledger; here the
locator (``{"latest": n}``) is there and each version's data is its child node
``/schemas/<tenant>/<ns>/<topic>/<version>``, as JSON (type name, base64 data, properties,
deleted, timestamp). A version node is created only if absent: two brokers registering at once
cannot both take version n; the loser reads again and retries. The locator is updated after
and only ever grows; a reader also looks past it, so a writer stopped between the two writes
leaves a registry that reads the same.

The versions read are cached per schema id (bounded by :data:`MAX_CACHED_BYTES` of data),
until the store reports a change under ``/schemas`` or a session event.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections import OrderedDict
from typing import Any

from pulsar_grpc.broker.errors import MetadataError
from pulsar_grpc.broker.metadata import MetadataStore
from pulsar_grpc.broker.metadata.store import (
    BadVersionError,
    Notification,
    NotificationType,
    SessionEvent,
)
from pulsar_grpc.broker.schema.data import SchemaInfo, SchemaType, StoredSchema

SCHEMAS_ROOT = "/schemas"
MAX_CACHED_BYTES = 64 * 1024 * 1024
_LOCATOR_WRITE_ATTEMPTS = 10


class SchemaStorage:
    """Every version of a schema id, read (cached) and appended."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._cache: OrderedDict[str, tuple[StoredSchema, ...]] = OrderedDict()
        self._cached_bytes = 0
        # Bumped by every invalidation: a read that overlapped one is not cached.
        self._epoch = 0
        store.register_listener(self._on_notification)
        store.register_session_listener(self._on_session_event)

    @staticmethod
    def path(schema_id: str) -> str:
        return f"{SCHEMAS_ROOT}/{schema_id}"

    async def versions(self, schema_id: str) -> tuple[StoredSchema, ...]:
        """Every version, oldest first (deletes included)."""
        cached = self._cache.get(schema_id)
        if cached is not None:
            self._cache.move_to_end(schema_id)
            return cached
        epoch = self._epoch
        versions = await self._read(schema_id)
        if epoch == self._epoch:
            self._remember(schema_id, versions)
        return versions

    async def _read(self, schema_id: str) -> tuple[StoredSchema, ...]:
        base = self.path(schema_id)
        locator = await self._store.get(base)
        latest = json.loads(locator.value)["latest"] if locator and locator.value else -1
        # Up to the locator's latest at once; then one by one past it (a writer stopped
        # between the version and the locator writes leaves versions past it).
        known = await asyncio.gather(*(self._store.get(f"{base}/{v}") for v in range(latest + 1)))
        versions: list[StoredSchema] = []
        for version, found in enumerate(known):
            if found is None:
                raise MetadataError(f"schema {schema_id}: version {version} is missing")
            versions.append(_decode(version, found.value))
        while (found := await self._store.get(f"{base}/{len(versions)}")) is not None:
            versions.append(_decode(len(versions), found.value))
        return tuple(versions)

    async def append(self, schema_id: str, version: int, record: StoredSchema) -> bool:
        """Store ``record`` as ``version`` (the next one); False when another writer took that
        version first (read the versions again and decide again)."""
        base = self.path(schema_id)
        self.invalidate(schema_id)
        try:
            await self._store.put(f"{base}/{version}", _encode(record), -1)
        except BadVersionError:
            return False
        await self._advance_locator(base, version)
        self.invalidate(schema_id)
        return True

    async def _advance_locator(self, base: str, version: int) -> None:
        for _ in range(_LOCATOR_WRITE_ATTEMPTS):
            found = await self._store.get(base)
            latest = json.loads(found.value)["latest"] if found and found.value else -1
            if latest >= version:
                return
            try:
                await self._store.put(
                    base,
                    json.dumps({"latest": version}).encode(),
                    found.version if found else -1,
                )
                return
            except BadVersionError:
                continue
        raise MetadataError(f"{base}: too many concurrent changes, try again")

    async def delete_all(self, schema_id: str) -> None:
        """Forget every version (Pulsar's forced delete: a new schema starts at version 0)."""
        await self._store.delete_recursive(self.path(schema_id))
        self.invalidate(schema_id)

    # ------------------------------------------------------------ cache

    def _remember(self, schema_id: str, versions: tuple[StoredSchema, ...]) -> None:
        self._forget(schema_id)
        self._cache[schema_id] = versions
        self._cached_bytes += _size(versions)
        while self._cached_bytes > MAX_CACHED_BYTES and len(self._cache) > 1:
            oldest = next(iter(self._cache))
            self._forget(oldest)

    def _forget(self, schema_id: str) -> None:
        dropped = self._cache.pop(schema_id, None)
        if dropped is not None:
            self._cached_bytes -= _size(dropped)

    def invalidate(self, schema_id: str) -> None:
        self._epoch += 1
        self._forget(schema_id)

    def _on_notification(self, notification: Notification) -> None:
        path = notification.path
        if notification.type is NotificationType.CHILDREN_CHANGED or not path.startswith(
            SCHEMAS_ROOT + "/"
        ):
            return
        parts = path[len(SCHEMAS_ROOT) + 1 :].split("/")
        if len(parts) >= 3:
            self.invalidate("/".join(parts[:3]))

    def _on_session_event(self, event: SessionEvent) -> None:
        self._epoch += 1
        self._cache.clear()
        self._cached_bytes = 0


def _size(versions: tuple[StoredSchema, ...]) -> int:
    return sum(len(v.info.data) + 256 for v in versions)


def _encode(record: StoredSchema) -> bytes:
    return json.dumps(
        {
            "type": record.info.type.name,
            "data": base64.b64encode(record.info.data).decode(),
            "properties": dict(record.info.properties),
            "deleted": record.deleted,
            "timestamp": record.timestamp_ms,
        }
    ).encode()


def _decode(version: int, raw: bytes) -> StoredSchema:
    value: dict[str, Any] = json.loads(raw)
    info = SchemaInfo(
        SchemaType[value["type"]], base64.b64decode(value["data"]), dict(value["properties"])
    )
    return StoredSchema(version, info, bool(value["deleted"]), int(value["timestamp"]))
