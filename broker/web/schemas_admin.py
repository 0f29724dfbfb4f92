"""Schemas in Pulsar's admin API v2 (SchemasResource), same paths and JSON, so pulsar-admin and
Pulsar's REST clients work against this broker:

- ``/admin/v2/schemas/{tenant}/{ns}/{topic}/schema``: GET the latest (GetSchemaResponse
  ``{"version", "type", "timestamp", "data", "properties"}``), POST a PostSchemaPayload
  ``{"type", "schema", "properties"}`` (answers ``{"version": {"version": n}}``; 409 when
  incompatible, 400 when not a schema), DELETE (``{"version": n}``; ``?force=true`` forgets
  every version);
- ``.../schema/{version}``: GET one version; ``.../schemas``: every version since the last
  delete (``{"getSchemaResponses": [...]}``); ``.../compatibility``: POST a payload to test it
  (``{"compatibility": bool, "schemaCompatibilityStrategy": ...}``); ``.../version``: POST a
  payload to find its version (``{"version": n}``);
- ``/admin/v2/namespaces/{tenant}/{ns}/schemaCompatibilityStrategy`` (GET, PUT a JSON string),
  ``.../isAllowAutoUpdateSchema`` and ``.../schemaValidationEnforced`` (GET, POST a boolean).

Reading a schema needs permission to look the topic up; changing one, or a namespace's
policies, a tenant admin (or a super-user). The registry is in the metadata store, so any
broker answers: no redirect to the topic's owner.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from pulsar_grpc.broker import errors as e
from pulsar_grpc.broker.json_text import json_value
from pulsar_grpc.broker.naming import NamespaceName, TopicName
from pulsar_grpc.broker.schema import (
    CompatibilityStrategy,
    SchemaInfo,
    SchemaType,
    StoredSchema,
    TopicSchemas,
    new_schema,
    schema_id,
)
from pulsar_grpc.broker.schema.registry import live
from pulsar_grpc.broker.security.authorization import TopicOperation
from pulsar_grpc.broker.web.access import AdminAccess

TOPIC = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"
NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}"
# A payload carries at most a schema definition and its properties: larger is refused unread.
MAX_BODY_BYTES = 1024 * 1024


class SchemasAdmin:
    """The routes; ``add_routes`` registers them on the web application."""

    def __init__(self, schemas: TopicSchemas, access: AdminAccess) -> None:
        self.schemas = schemas
        self.access = access

    def add_routes(self, app: web.Application) -> None:
        app.add_routes(
            [
                web.get(TOPIC + "/schema", self.get_latest),
                web.get(TOPIC + "/schema/{version}", self.get_version),
                web.get(TOPIC + "/schemas", self.get_all),
                web.post(TOPIC + "/schema", self.upload),
                web.delete(TOPIC + "/schema", self.delete),
                web.post(TOPIC + "/compatibility", self.compatibility),
                web.post(TOPIC + "/version", self.find_version),
                web.get(NAMESPACE + "/schemaCompatibilityStrategy", self.get_strategy),
                web.put(NAMESPACE + "/schemaCompatibilityStrategy", self.set_strategy),
                web.get(NAMESPACE + "/isAllowAutoUpdateSchema", self.get_auto_update),
                web.post(NAMESPACE + "/isAllowAutoUpdateSchema", self.set_auto_update),
                web.get(NAMESPACE + "/schemaValidationEnforced", self.get_enforced),
                web.post(NAMESPACE + "/schemaValidationEnforced", self.set_enforced),
            ]
        )

    # ------------------------------------------------------------ topics' schemas

    async def _topic(self, request: web.Request, write: bool) -> TopicName:
        m = request.match_info
        topic = TopicName.get(f"persistent://{m['tenant']}/{m['namespace']}/{m['topic']}")
        if write:
            await self.access.tenant_admin(request, topic.tenant)
        else:
            await self.access.topic(request, topic, TopicOperation.LOOKUP)
        return topic

    async def get_latest(self, request: web.Request) -> web.Response:
        topic = await self._topic(request, write=False)
        stored = await self.schemas.registry.latest(schema_id(topic))
        if stored is None:
            raise e.NotFoundError(f"Schema not found: {topic} has no schema")
        return web.json_response(_schema_response(stored))

    async def get_version(self, request: web.Request) -> web.Response:
        topic = await self._topic(request, write=False)
        raw = request.match_info["version"]
        if not (raw.isascii() and raw.isdigit()) or len(raw) > 19:  # int("²") fails
            raise e.InvalidArgumentError(f"schema version {raw[:40]!r} is not a number")
        stored = await self.schemas.registry.get(schema_id(topic), int(raw))
        if stored is None:
            raise e.NotFoundError(f"Schema not found: {topic} has no version {raw}")
        if stored.deleted:
            raise e.NotFoundError(f"Schema is deleted: version {raw} of {topic}")
        return web.json_response(_schema_response(stored))

    async def get_all(self, request: web.Request) -> web.Response:
        topic = await self._topic(request, write=False)
        versions = live(await self.schemas.registry.versions(schema_id(topic)))
        if not versions:
            raise e.NotFoundError(f"Schema not found: {topic} has no schema")
        return web.json_response({"getSchemaResponses": [_schema_response(v) for v in versions]})

    async def upload(self, request: web.Request) -> web.Response:
        """As Pulsar's postSchema: registered under the namespace's strategy (auto-update does
        not apply: this is how an admin adds a schema when producers may not)."""
        topic = await self._topic(request, write=True)
        info = _payload(await _json_body(request))
        schemas = self.schemas
        strategy = await schemas.policies.strategy(topic.namespace)
        version = await schemas.registry.put_if_absent(schema_id(topic), info, strategy)
        return web.json_response({"version": {"version": version}}, status=202)

    async def delete(self, request: web.Request) -> web.Response:
        topic = await self._topic(request, write=True)
        registry = self.schemas.registry
        if request.query.get("force", "").lower() == "true":
            latest = await registry.versions(schema_id(topic))
            if not latest:
                raise e.NotFoundError(f"Schema not found: {topic} has no schema")
            await registry.delete_all(schema_id(topic))
            return web.json_response({"version": latest[-1].version})
        version = await registry.delete(schema_id(topic))
        if version is None:
            raise e.NotFoundError(f"Schema not found: {topic} has no schema")
        return web.json_response({"version": version})

    async def compatibility(self, request: web.Request) -> web.Response:
        topic = await self._topic(request, write=False)
        info = _payload(await _json_body(request))
        schemas = self.schemas
        strategy = await schemas.policies.strategy(topic.namespace)
        try:
            await schemas.registry.check(schema_id(topic), info, strategy)
            compatible, reason = True, None
        except e.IncompatibleSchemaError as exc:
            compatible, reason = False, exc.message
        answer: dict[str, Any] = {
            "compatibility": compatible,
            "schemaCompatibilityStrategy": strategy.value,
        }
        if reason is not None:  # not in Pulsar's answer: says which field broke which rule
            answer["reason"] = reason
        return web.json_response(answer)

    async def find_version(self, request: web.Request) -> web.Response:
        topic = await self._topic(request, write=False)
        info = _payload(await _json_body(request))
        version = await self.schemas.registry.find_version(schema_id(topic), info)
        if version is None:
            raise e.NotFoundError(f"Not found schema: {topic} does not hold this schema")
        return web.json_response({"version": version})

    # ------------------------------------------------------------ namespaces' policies

    async def _namespace(self, request: web.Request) -> NamespaceName:
        m = request.match_info
        ns = NamespaceName.get(f"{m['tenant']}/{m['namespace']}")
        await self.access.tenant_admin(request, ns.tenant)
        return ns

    async def get_strategy(self, request: web.Request) -> web.Response:
        ns = await self._namespace(request)
        strategy = await self.schemas.policies.namespace_strategy(ns)
        return web.json_response(strategy.value)

    async def set_strategy(self, request: web.Request) -> web.Response:
        ns = await self._namespace(request)
        raw = await request.text()
        try:
            value = json_value(raw)
        except ValueError:
            value = raw.strip()  # a bare word, as curl users write it
        names = ", ".join(s.value for s in CompatibilityStrategy)
        if not isinstance(value, str) or value.upper() not in CompatibilityStrategy.__members__:
            raise e.InvalidArgumentError(f"{str(value)[:40]!r} is not one of {names}")
        strategy = CompatibilityStrategy(value.upper())
        await self.schemas.policies.set_strategy(ns, strategy)
        return web.Response(status=204)

    async def get_auto_update(self, request: web.Request) -> web.Response:
        ns = await self._namespace(request)
        return web.json_response(await self.schemas.policies.allow_auto_update(ns))

    async def set_auto_update(self, request: web.Request) -> web.Response:
        ns = await self._namespace(request)
        allow = _boolean(await _json_body(request))
        await self.schemas.policies.set_allow_auto_update(ns, allow)
        return web.Response(status=204)

    async def get_enforced(self, request: web.Request) -> web.Response:
        ns = await self._namespace(request)
        policies = self.schemas.policies
        return web.json_response(await policies.namespace_validation_enforced(ns))

    async def set_enforced(self, request: web.Request) -> web.Response:
        ns = await self._namespace(request)
        enforced = _boolean(await _json_body(request))
        await self.schemas.policies.set_validation_enforced(ns, enforced)
        return web.Response(status=204)


def _schema_response(stored: StoredSchema) -> dict[str, Any]:
    """Pulsar's GetSchemaResponse; the data as text, as Pulsar's (a definition is JSON)."""
    return {
        "version": stored.version,
        "type": stored.info.type.name,
        "timestamp": stored.timestamp_ms,
        "data": stored.info.data.decode("utf-8", errors="replace"),
        "properties": dict(stored.info.properties),
    }


async def _json_body(request: web.Request) -> Any:
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise e.TooLargeError(f"body of {request.content_length} bytes exceeds {MAX_BODY_BYTES}")
    chunks, size = [], 0
    while chunk := await request.content.read(64 * 1024):  # a chunked body has no length
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise e.TooLargeError(f"body exceeds {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks)
    try:
        return json_value(raw)
    except ValueError:
        raise e.InvalidArgumentError(f"the body is not JSON: {raw[:60]!r}") from None


def _payload(body: Any) -> SchemaInfo:
    """Pulsar's PostSchemaPayload ``{"type", "schema", "properties"}``."""
    if not isinstance(body, dict) or not isinstance(body.get("type"), str):
        raise e.InvalidSchemaDataError(
            'the body must be a PostSchemaPayload: {"type": ..., "schema": ..., "properties": {}}'
        )
    definition = body.get("schema") or ""
    properties = body.get("properties") or {}
    if not isinstance(definition, str) or not isinstance(properties, dict):
        raise e.InvalidSchemaDataError("schema must be a string and properties an object")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in properties.items()):
        raise e.InvalidSchemaDataError("schema properties must map strings to strings")
    return new_schema(SchemaType.parse(body["type"]), definition.encode("utf-8"), properties)


def _boolean(body: Any) -> bool:
    if not isinstance(body, bool):
        raise e.InvalidArgumentError(f"the body must be true or false, got {str(body)[:40]!r}")
    return body
