"""The schema registry on the metadata store, as two brokers of a cluster share it, and the
compatibility rules of the types the wire tests do not reach (key/value, native Protobuf, the
primitives, JSON)."""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import uuid

import pytest
from google.protobuf import descriptor_pb2

from pulsar_grpc.broker.errors import (
    IncompatibleSchemaError,
    InvalidSchemaDataError,
    NotAllowedError,
)
from pulsar_grpc.broker.metadata import MemoryMetadataStore, ZooKeeperMetadataStore
from pulsar_grpc.broker.schema import (
    CompatibilityStrategy,
    SchemaRegistry,
    SchemaStorage,
    SchemaType,
    new_schema,
)
from pulsar_grpc.broker.schema import registry as registry_module
from pulsar_grpc.broker.schema.compatibility import check
from pulsar_grpc.broker.schema.data import StoredSchema
from tests.waiting import eventually
from tests.zookeeper import ZooKeeperServer, zk_chroot, zookeeper

__all__ = ["zk_chroot", "zookeeper"]  # fixtures, imported to be found

FULL = CompatibilityStrategy.FULL
ID = "public/default/t"


def avro(*fields: tuple[str, str], **defaults: object) -> bytes:
    declared = [
        {"name": n, "type": t, **({"default": defaults[n]} if n in defaults else {})}
        for n, t in fields
    ]
    return json.dumps({"type": "record", "name": "R", "fields": declared}).encode()


def stored(version: int, type_: SchemaType, data: bytes, **properties: str) -> StoredSchema:
    return StoredSchema(version, new_schema(type_, data, properties), False, 0)


def registry(tree: str) -> SchemaRegistry:
    return SchemaRegistry(SchemaStorage(MemoryMetadataStore(tree)))


async def test_two_brokers_never_give_one_version_to_two_schemas() -> None:
    """Both read [v0] and both find their schema compatible with it; only one may take
    version 1, and the other is checked again against it (and refused: FULL)."""
    tree = uuid.uuid4().hex
    a, b = registry(tree), registry(tree)
    assert await a.put_if_absent(ID, new_schema(SchemaType.AVRO, avro(("x", "int"))), FULL) == 0
    with_y = new_schema(SchemaType.AVRO, avro(("x", "int"), ("y", "int"), y=0))
    with_y_string = new_schema(SchemaType.AVRO, avro(("x", "int"), ("y", "string"), y=""))
    results = await asyncio.gather(
        a.put_if_absent(ID, with_y, FULL),
        b.put_if_absent(ID, with_y_string, FULL),
        return_exceptions=True,
    )
    assert sorted(map(type, results), key=str) == sorted([int, IncompatibleSchemaError], key=str)
    assert 1 in results
    for reader in (a, b):
        versions = await reader.versions(ID)
        assert [v.version for v in versions] == [0, 1]


async def test_a_version_is_taken_once() -> None:
    """The storage's guarantee the registry relies on: a version already written by another
    broker is not overwritten, whatever the writer's cache says."""
    tree = uuid.uuid4().hex
    a, b = SchemaStorage(MemoryMetadataStore(tree)), SchemaStorage(MemoryMetadataStore(tree))
    first = stored(0, SchemaType.STRING, b"")
    second = stored(0, SchemaType.INT32, b"")
    assert await a.append(ID, 0, first)
    assert not await b.append(ID, 0, second)
    assert [v.info.type for v in await b.versions(ID)] == [SchemaType.STRING]


async def test_a_broker_sees_another_brokers_new_version() -> None:
    tree = uuid.uuid4().hex
    a, b = registry(tree), registry(tree)
    first = new_schema(SchemaType.AVRO, avro(("x", "int")))
    await a.put_if_absent(ID, first, FULL)
    assert (await b.latest(ID)) is not None  # cached by b now
    second = new_schema(SchemaType.AVRO, avro(("x", "int"), ("y", "int"), y=1))
    await a.put_if_absent(ID, second, FULL)

    async def b_sees_it() -> None:
        latest = await b.latest(ID)
        assert latest is not None and latest.version == 1

    await eventually(b_sees_it)


async def test_brokers_on_zookeeper_see_each_others_versions(
    zookeeper: ZooKeeperServer, zk_chroot: str
) -> None:
    """ZooKeeper's watches are one-shot: b must see a's second version after having cached
    the first, and a's delete after that."""
    stores = [await ZooKeeperMetadataStore.connect(zookeeper.hosts, zk_chroot) for _ in "ab"]
    try:
        a, b = (SchemaRegistry(SchemaStorage(store)) for store in stores)
        await a.put_if_absent(ID, new_schema(SchemaType.AVRO, avro(("x", "int"))), FULL)
        assert (await b.latest(ID)) is not None
        second = new_schema(SchemaType.AVRO, avro(("x", "int"), ("y", "int"), y=1))
        await a.put_if_absent(ID, second, FULL)

        async def b_sees(version: int) -> None:
            assert [v.version for v in await b.versions(ID)][-1] == version

        await eventually(lambda: b_sees(1))
        assert await b.put_if_absent(ID, second, FULL) == 1  # found, not registered again
        await a.delete(ID)
        await eventually(lambda: b_sees(2))
        assert await b.latest(ID) is None
    finally:
        for store in stores:
            await store.close()


async def test_delete_starts_over_and_a_forced_delete_forgets_everything() -> None:
    reg = registry(uuid.uuid4().hex)
    await reg.put_if_absent(ID, new_schema(SchemaType.AVRO, avro(("x", "int"))), FULL)
    assert await reg.delete(ID) == 1
    assert await reg.delete(ID) is None  # nothing left to delete
    assert await reg.latest(ID) is None
    unrelated = new_schema(SchemaType.STRING, b"")
    assert await reg.put_if_absent(ID, unrelated, FULL) == 2
    await reg.delete_all(ID)
    assert await reg.versions(ID) == ()
    assert await reg.put_if_absent(ID, unrelated, FULL) == 0


def test_primitives_are_compatible_with_their_own_type_only() -> None:
    existing = [stored(0, SchemaType.STRING, b"")]
    for strategy in CompatibilityStrategy:
        if strategy is not CompatibilityStrategy.UNDEFINED:
            check(existing, new_schema(SchemaType.STRING, b""), strategy)
    with pytest.raises(IncompatibleSchemaError, match="STRING, the new one INT64"):
        check(existing, new_schema(SchemaType.INT64, b""), CompatibilityStrategy.ALWAYS_COMPATIBLE)


def test_json_definitions_are_checked_as_avro() -> None:
    existing = [stored(0, SchemaType.JSON, avro(("a", "int")))]
    with pytest.raises(IncompatibleSchemaError, match="field 'b'"):
        check(existing, new_schema(SchemaType.JSON, avro(("a", "int"), ("b", "int"))), FULL)
    check(existing, new_schema(SchemaType.JSON, avro(("a", "int"), ("b", "int"), b=0)), FULL)


def key_value(key: bytes, value: bytes) -> bytes:
    return struct.pack(">i", len(key)) + key + struct.pack(">i", len(value)) + value


def test_key_value_checks_the_key_and_the_value_by_their_types() -> None:
    kinds = {"key.schema.type": "STRING", "value.schema.type": "AVRO"}
    existing = [stored(0, SchemaType.KEY_VALUE, key_value(b"", avro(("a", "int"))), **kinds)]
    added = new_schema(
        SchemaType.KEY_VALUE, key_value(b"", avro(("a", "int"), ("b", "int"))), kinds
    )
    with pytest.raises(IncompatibleSchemaError, match=r"the value schema: .*field 'b'"):
        check(existing, added, FULL)
    other_key = {**kinds, "key.schema.type": "INT32"}
    keyed = new_schema(SchemaType.KEY_VALUE, key_value(b"", avro(("a", "int"))), other_key)
    with pytest.raises(IncompatibleSchemaError, match="the key schema"):
        check(existing, keyed, FULL)
    with pytest.raises(InvalidSchemaDataError, match="ends inside"):
        new_schema(SchemaType.KEY_VALUE, struct.pack(">i", 50) + b"short", kinds)


def native(message: str, package: str = "app") -> bytes:
    files = descriptor_pb2.FileDescriptorSet()
    proto = files.file.add(name="app.proto", package=package)
    proto.message_type.add(name=message)
    return json.dumps(
        {
            "fileDescriptorSet": base64.b64encode(files.SerializeToString()).decode(),
            "rootMessageTypeName": f"{package}.{message}",
            "rootFileDescriptorName": "app.proto",
        }
    ).encode()


def test_protobuf_native_keeps_its_root_message() -> None:
    existing = [stored(0, SchemaType.PROTOBUF_NATIVE, native("User"))]
    check(existing, new_schema(SchemaType.PROTOBUF_NATIVE, native("User")), FULL)
    with pytest.raises(IncompatibleSchemaError, match="root message may not change"):
        check(existing, new_schema(SchemaType.PROTOBUF_NATIVE, native("Order")), FULL)
    with pytest.raises(InvalidSchemaDataError, match="ProtobufNativeSchemaData"):
        new_schema(SchemaType.PROTOBUF_NATIVE, b'{"fileDescriptorSet": "!!"}')


def test_always_compatible_accepts_another_struct_type() -> None:
    existing = [stored(0, SchemaType.AVRO, avro(("a", "int")))]
    check(
        existing,
        new_schema(SchemaType.JSON, avro(("b", "string"))),
        CompatibilityStrategy.ALWAYS_COMPATIBLE,
    )
    with pytest.raises(IncompatibleSchemaError, match="AVRO, the new one JSON"):
        check(existing, new_schema(SchemaType.JSON, avro(("a", "int"))), FULL)


# v0 -> v1 -> new, where new is compatible with v1 in the given directions and with v0 in
# none (its field a changed type): the _TRANSITIVE forms refuse what the plain ones accept.
V0 = avro(("id", "int"), ("a", "int"))
V1 = avro(("id", "int"), ("a", "string"), a="")  # itself accepted only under ALWAYS_COMPATIBLE


@pytest.mark.parametrize(
    ("strategy", "new", "accepted"),
    [
        # the new schema reads v1's data, not v0's (a was an int there)
        (CompatibilityStrategy.BACKWARD, avro(("id", "int"), ("a", "string")), True),
        (CompatibilityStrategy.BACKWARD_TRANSITIVE, avro(("id", "int"), ("a", "string")), False),
        # v1 reads the new data (c ignored), v0 does not (a is a string now)
        (CompatibilityStrategy.FORWARD, avro(("id", "int"), ("a", "string"), ("c", "int")), True),
        (
            CompatibilityStrategy.FORWARD_TRANSITIVE,
            avro(("id", "int"), ("a", "string"), ("c", "int")),
            False,
        ),
        # both ways with v1 (c has a default), neither with v0
        (CompatibilityStrategy.FULL, avro(("id", "int"), ("a", "string"), ("c", "int"), c=0), True),
        (
            CompatibilityStrategy.FULL_TRANSITIVE,
            avro(("id", "int"), ("a", "string"), ("c", "int"), c=0),
            False,
        ),
        (CompatibilityStrategy.ALWAYS_COMPATIBLE, avro(("z", "bytes")), True),
        (CompatibilityStrategy.ALWAYS_INCOMPATIBLE, avro(("id", "int"), ("a", "string")), False),
    ],
)
def test_each_strategy_against_two_versions(
    strategy: CompatibilityStrategy, new: bytes, accepted: bool
) -> None:
    existing = [stored(0, SchemaType.AVRO, V0), stored(1, SchemaType.AVRO, V1)]
    candidate = new_schema(SchemaType.AVRO, new)
    if accepted:
        check(existing, candidate, strategy)
    else:
        with pytest.raises(IncompatibleSchemaError, match=strategy.value):
            check(existing, candidate, strategy)


async def test_the_same_definition_laid_out_differently_is_the_same_version() -> None:
    """Spacing and key order do not make a new version: a producer cannot grow the registry
    by sending one definition with ever more spaces."""
    reg = registry(uuid.uuid4().hex)
    compact = avro(("x", "int"))
    spaced = json.dumps(json.loads(compact), indent=4, sort_keys=True).encode() + b"   "
    assert spaced != compact
    assert await reg.put_if_absent(ID, new_schema(SchemaType.AVRO, compact), FULL) == 0
    for _ in range(3):
        assert await reg.put_if_absent(ID, new_schema(SchemaType.AVRO, spaced), FULL) == 0
    assert len(await reg.versions(ID)) == 1


async def test_a_topic_keeps_a_bounded_number_of_versions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(registry_module, "MAX_VERSIONS", 3)
    reg = registry(uuid.uuid4().hex)
    anything = CompatibilityStrategy.ALWAYS_COMPATIBLE
    for i in range(3):
        info = new_schema(SchemaType.AVRO, avro((f"f{i}", "int")))
        assert await reg.put_if_absent(ID, info, anything) == i
    with pytest.raises(NotAllowedError, match="3 versions, the most a topic keeps"):
        await reg.put_if_absent(ID, new_schema(SchemaType.AVRO, avro(("g", "int"))), anything)
    # A schema it holds already is still answered.
    assert (
        await reg.put_if_absent(ID, new_schema(SchemaType.AVRO, avro(("f1", "int"))), anything) == 1
    )
