"""Schemas through the admin API at Pulsar's paths and JSON (SchemasResource), the namespace
schema policies, `pulsar-grpc admin schemas` and its namespace verbs, hostile admin bodies,
and who may read and register schemas under authorization."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import grpc
import pytest

from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.schemas import (
    USER_V1,
    USER_V2,
    consume,
    field,
    open_producer,
    record,
    refusal,
    schema_bin,
    send,
    version,
)
from tests.e2e.test_authorization import (  # noqa: F401 - a fixture
    SUPER,
    authz_broker_fixture,
    grant,
    http,
    token,
)
from tests.e2e.test_cli import assert_one_line_error, cli
from tests.e2e.wire import error_code, stub
from tests.support import BrokerThread

SCHEMA = "/admin/v2/schemas/public/default/{}/schema"
NS = "/admin/v2/namespaces/public/default"


async def call(
    broker: BrokerThread, method: str, path: str, body: Any = None, role: str | None = None
) -> tuple[int, Any]:
    return await asyncio.to_thread(http, broker, method, path, role, body)


def payload(definition: bytes, type_: str = "AVRO") -> dict[str, Any]:
    return {"type": type_, "schema": definition.decode(), "properties": {"owner": "ops"}}


async def test_upload_get_evolve_test_and_delete_at_pulsars_paths(
    broker: BrokerThread, channel: grpc.aio.Channel
) -> None:
    path = SCHEMA.format("rest")
    assert await call(broker, "GET", path) == (
        404,
        {"reason": "Schema not found: persistent://public/default/rest has no schema"},
    )
    assert await call(broker, "POST", path, payload(USER_V1)) == (202, {"version": {"version": 0}})
    status, latest = await call(broker, "GET", path)
    assert status == 200
    assert latest["version"] == 0 and latest["type"] == "AVRO"
    assert json.loads(latest["data"]) == json.loads(USER_V1)
    assert latest["properties"] == {"owner": "ops"} and latest["timestamp"] > 0

    # a producer declaring the uploaded schema gets its version
    producer, ready = await open_producer(channel, "rest", schema_bin(USER_V1))
    assert ready.schema_version == version(0)
    producer.cancel()

    assert await call(broker, "POST", path, payload(USER_V2)) == (202, {"version": {"version": 1}})
    assert (await call(broker, "GET", f"{path}/0"))[1]["data"] == USER_V1.decode()
    status, every = await call(broker, "GET", "/admin/v2/schemas/public/default/rest/schemas")
    assert [s["version"] for s in every["getSchemaResponses"]] == [0, 1]

    dropped = record(field("name", "string"))  # age removed without a default: not FULL
    compat = "/admin/v2/schemas/public/default/rest/compatibility"
    status, answer = await call(broker, "POST", compat, payload(dropped))
    assert status == 200 and answer["compatibility"] is False
    assert answer["schemaCompatibilityStrategy"] == "FULL" and "field 'age'" in answer["reason"]
    assert (await call(broker, "POST", compat, payload(USER_V2)))[1]["compatibility"] is True
    status, refused = await call(broker, "POST", path, payload(dropped))
    assert status == 409 and "field 'age'" in refused["reason"]
    found = "/admin/v2/schemas/public/default/rest/version"
    assert await call(broker, "POST", found, payload(USER_V2)) == (200, {"version": 1})

    assert await call(broker, "DELETE", path) == (200, {"version": 2})
    assert (await call(broker, "GET", path))[0] == 404
    assert (await call(broker, "GET", f"{path}/2"))[0] == 404
    # after a delete, an unrelated schema starts over (checked against nothing)
    assert await call(broker, "POST", path, payload(dropped)) == (202, {"version": {"version": 3}})
    assert await call(broker, "DELETE", f"{path}?force=true") == (200, {"version": 3})
    assert await call(broker, "POST", path, payload(USER_V1)) == (202, {"version": {"version": 0}})


async def test_namespace_schema_policies_apply_to_producers(
    broker: BrokerThread, channel: grpc.aio.Channel
) -> None:
    assert await call(broker, "GET", f"{NS}/schemaCompatibilityStrategy") == (200, "UNDEFINED")
    assert await call(broker, "PUT", f"{NS}/schemaCompatibilityStrategy", "FORWARD") == (204, None)
    assert await call(broker, "GET", f"{NS}/schemaCompatibilityStrategy") == (200, "FORWARD")
    status, answer = await call(broker, "PUT", f"{NS}/schemaCompatibilityStrategy", "SOMETIMES")
    assert status == 400 and "FULL_TRANSITIVE" in answer["reason"]
    first, _ = await open_producer(channel, "policy", schema_bin(USER_V1))
    added = record(field("name", "string"), field("age", "int"), field("city", "string"))
    second, ready = await open_producer(channel, "policy", schema_bin(added))  # FORWARD: fine
    assert ready.schema_version == version(1)

    assert await call(broker, "GET", f"{NS}/isAllowAutoUpdateSchema") == (200, True)
    assert await call(broker, "POST", f"{NS}/isAllowAutoUpdateSchema", False) == (204, None)
    assert await call(broker, "GET", f"{NS}/isAllowAutoUpdateSchema") == (200, False)
    error = await refusal(channel, "policy", schema_bin(USER_V2))
    assert "auto updating is disabled" in (error.details() or "")

    assert await call(broker, "GET", f"{NS}/schemaValidationEnforced") == (200, False)
    assert await call(broker, "POST", f"{NS}/schemaValidationEnforced", True) == (204, None)
    assert await call(broker, "GET", f"{NS}/schemaValidationEnforced") == (200, True)
    assert error_code(await refusal(channel, "policy")) == pb.IncompatibleSchema
    status, answer = await call(broker, "POST", f"{NS}/schemaValidationEnforced", "yes")
    assert status == 400
    for call_ in (first, second):
        call_.cancel()


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        ({"type": "AVRO", "schema": "{not json"}, 400, "not a valid Avro schema"),
        ({"type": "AVRO", "schema": '{"type": "record"}'}, 400, "not a valid Avro schema"),
        ({"type": "MAGIC", "schema": "{}"}, 400, "unknown schema type 'MAGIC'"),
        ({"schema": "{}"}, 400, "PostSchemaPayload"),
        ({"type": "AVRO", "schema": "x" * 300_000}, 400, "exceeds 262144"),
        ({"type": "AVRO", "schema": "x" * 1_100_000}, 413, "exceeds 1048576"),
        ({"type": "AVRO", "schema": "{}", "properties": {"a": 1}}, 400, "strings to strings"),
    ],
)
async def test_hostile_admin_bodies_are_refused(
    broker: BrokerThread, body: dict[str, Any], status: int, reason: str
) -> None:
    got, answer = await call(broker, "POST", SCHEMA.format("hostile"), body)
    assert got == status and reason in answer["reason"]
    assert (await call(broker, "GET", SCHEMA.format("hostile")))[0] == 404


def test_cli_schemas_and_namespace_policies_round_trip(
    broker: BrokerThread, tmp_path: Path
) -> None:
    url = ("--admin-url", broker.http_url)
    v1, v2 = tmp_path / "v1.json", tmp_path / "v2.json"
    v1.write_text(json.dumps(payload(USER_V1)))
    v2.write_text(json.dumps(payload(record(field("name", "string")))))
    uploaded = cli("admin", *url, "schemas", "upload", "typed", "--filename", str(v1))
    assert uploaded.returncode == 0, uploaded.stderr
    full = "persistent://public/default/typed"
    assert uploaded.stdout == f"uploaded the schema of {full}: version 0\n"
    got = cli("admin", *url, "schemas", "get", "typed")
    assert got.returncode == 0 and json.loads(got.stdout)["version"] == 0
    old = cli("admin", *url, "schemas", "get", "typed", "--version", "0")
    assert json.loads(json.loads(old.stdout)["data"]) == json.loads(USER_V1)
    compat = cli("admin", *url, "schemas", "compatibility", "typed", "-f", str(v2))
    assert json.loads(compat.stdout)["compatibility"] is False
    refused = cli("admin", *url, "schemas", "upload", "typed", "-f", str(v2))
    assert refused.returncode == 1 and "field 'age'" in assert_one_line_error(refused)
    deleted = cli("admin", *url, "schemas", "delete", "typed")
    assert deleted.stdout == f"deleted the schema of {full}\n", deleted.stderr
    missing = cli("admin", *url, "schemas", "get", "typed")
    assert missing.returncode == 1 and "404" in assert_one_line_error(missing)

    ns = ("namespaces",)
    set_strategy = ("set-schema-compatibility-strategy", "public/default", "-c", "BACKWARD")
    done = cli("admin", *url, *ns, *set_strategy)
    assert done.stdout == (
        "set the schema-compatibility-strategy of public/default to BACKWARD\n"
    ), done.stderr
    shown = cli("admin", *url, *ns, "get-schema-compatibility-strategy", "public/default")
    assert shown.stdout.strip() == '"BACKWARD"'
    disable = ("set-is-allow-auto-update-schema", "public/default", "--disable")
    done = cli("admin", *url, *ns, *disable)
    assert done.stdout == "disabled is-allow-auto-update-schema on public/default\n"
    shown = cli("admin", *url, *ns, "get-is-allow-auto-update-schema", "public/default")
    assert shown.stdout.strip() == "false"
    enforce = ("set-schema-validation-enforce", "public/default", "-e")
    assert cli("admin", *url, *ns, *enforce).returncode == 0
    shown = cli("admin", *url, *ns, "get-schema-validation-enforce", "public/default")
    assert shown.stdout.strip() == "true"
    not_json = tmp_path / "bad.json"
    not_json.write_text("{")
    bad = cli("admin", *url, "schemas", "upload", "typed", "-f", str(not_json))
    assert bad.returncode == 1 and "not JSON" in assert_one_line_error(bad)


async def test_reading_needs_lookup_registering_needs_produce(authz_broker: BrokerThread) -> None:
    b = authz_broker
    await grant(b, "reader", ["consume"])
    await grant(b, "writer", ["produce"])
    schema = pb.Schema(name="s", schema_data=USER_V1, type=pb.SCHEMA_TYPE_AVRO)
    request = pb.GetOrCreateSchemaRequest(topic="guarded", schema=schema)

    def auth(role: str) -> tuple[tuple[str, str]]:
        return (("authorization", f"Bearer {token(role)}"),)

    async with grpc.aio.insecure_channel(b.grpc_address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub(channel).GetOrCreateSchema(request, metadata=auth("reader"))
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        made = await stub(channel).GetOrCreateSchema(request, metadata=auth("writer"))
        assert made.schema_version == version(0)
        got = await stub(channel).GetSchema(
            pb.GetSchemaRequest(topic="guarded"), metadata=auth("reader")
        )
        assert got.schema.schema_data == USER_V1
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub(channel).GetSchema(
                pb.GetSchemaRequest(topic="guarded"), metadata=auth("stranger")
            )
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    path = SCHEMA.format("guarded")
    assert (await call(b, "GET", path, role="reader"))[0] == 200
    assert (await call(b, "POST", path, payload(USER_V2), role="writer"))[0] == 403
    assert (await call(b, "POST", path, payload(USER_V2), role=SUPER))[0] == 202


async def test_a_producer_after_an_admin_upload_writes_its_version(
    broker: BrokerThread, channel: grpc.aio.Channel
) -> None:
    """The admin registers v0 and v1; producers of either write entries with their own."""
    path = SCHEMA.format("uploaded")
    await call(broker, "POST", path, payload(USER_V1))
    await call(broker, "POST", path, payload(USER_V2))
    await call(broker, "POST", f"{NS}/isAllowAutoUpdateSchema", False)
    old, _ = await open_producer(channel, "uploaded", schema_bin(USER_V1))
    await send(old, 0, b"a")
    new, _ = await open_producer(channel, "uploaded", schema_bin(USER_V2))
    await send(new, 0, b"b")
    old.cancel()
    new.cancel()
    entries = await consume(channel, "uploaded", 2)
    assert [e.schema_version for e in entries] == [version(0), version(1)]


async def test_deleting_a_topic_deletes_its_schema(
    broker: BrokerThread, channel: grpc.aio.Channel
) -> None:
    producer, _ = await open_producer(channel, "doomed", schema_bin(USER_V1))
    producer.cancel()
    assert (await call(broker, "GET", SCHEMA.format("doomed")))[0] == 200
    topic = "/admin/v2/persistent/public/default/doomed"
    assert await call(broker, "DELETE", topic) == (204, None)
    assert (await call(broker, "GET", SCHEMA.format("doomed")))[0] == 404
    unrelated = record(field("other", "string"))
    again, ready = await open_producer(channel, "doomed", schema_bin(unrelated))
    assert ready.schema_version == version(0)
    again.cancel()
