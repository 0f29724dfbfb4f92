"""The SDK's schemas (pulsar_grpc.schema): the definitions pulsar-client derives from the same
Record classes, Pulsar's encodings, round trips, and refusals of values of the wrong type."""

from __future__ import annotations

import base64
import enum
import json
import struct

import pytest
from google.protobuf import descriptor_pb2

from pulsar_grpc.schema import (
    Array,
    AutoConsumeSchema,
    AvroSchema,
    Boolean,
    BooleanSchema,
    Bytes,
    ByteSchema,
    BytesSchema,
    Double,
    DoubleSchema,
    Float,
    FloatSchema,
    Integer,
    IntSchema,
    JsonSchema,
    KeyValueSchema,
    Long,
    LongSchema,
    Map,
    ProtobufNativeSchema,
    Record,
    SchemaSerializationError,
    SchemaType,
    ShortSchema,
    String,
    StringSchema,
)
from pulsargrpc.v1 import pulsar_pb2 as pb


class Color(enum.Enum):
    red = 1
    green = 2


class Address(Record):
    street = String()
    number = Integer(required=True)


class Person(Record):
    name = String(required=True)
    age = Integer()
    height = Double(default=1.5, required_default=True)
    active = Boolean()
    visits = Long()
    ratio = Float()
    avatar = Bytes()
    color = Color
    tags = Array(String())
    scores = Map(Integer())
    home = Address
    work = Address()
    friends = Array(Address())


# What pulsar-client's Record.schema() gives for Person, written out from its source
# (pulsar/schema/definition.py): a field that is not required is a union with "null"; a
# "default" only with required_default (Boolean's implicit default is False); a nested
# record is defined where it first appears and named afterwards; an Enum class attribute is
# an Avro enum of the member names.
PERSON_SCHEMA = {
    "type": "record",
    "name": "Person",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "age", "type": ["null", "int"]},
        {"name": "height", "default": 1.5, "type": ["null", "double"]},
        {"name": "active", "type": ["null", "boolean"]},
        {"name": "visits", "type": ["null", "long"]},
        {"name": "ratio", "type": ["null", "float"]},
        {"name": "avatar", "type": ["null", "bytes"]},
        {
            "name": "color",
            "type": ["null", {"type": "enum", "name": "Color", "symbols": ["red", "green"]}],
        },
        {"name": "tags", "type": ["null", {"type": "array", "items": "string"}]},
        {"name": "scores", "type": ["null", {"type": "map", "values": "int"}]},
        {
            "name": "home",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Address",
                    "fields": [
                        {"name": "street", "type": ["null", "string"]},
                        {"name": "number", "type": "int"},
                    ],
                },
            ],
        },
        {"name": "work", "type": ["null", "Address"]},
        {"name": "friends", "type": ["null", {"type": "array", "items": "Address"}]},
    ],
}


def a_person() -> Person:
    return Person(
        name="ada",
        age=36,
        active=True,
        visits=2**40,
        ratio=0.5,
        avatar=b"\x00\x01",
        color=Color.green,
        tags=["x", "y"],
        scores={"math": 10},
        home=Address(street="Main", number=1),
        friends=[Address(number=2)],
    )


def test_record_schema_is_pulsar_clients() -> None:
    assert Person.schema() == PERSON_SCHEMA
    # The definition text is pulsar-client's json.dumps(..., indent=True), byte for byte.
    info = AvroSchema(Person).schema_info()
    assert info.schema == json.dumps(PERSON_SCHEMA, indent=True).encode()
    assert (info.type, info.name) == (SchemaType.AVRO, "AVRO")
    json_info = JsonSchema(Person).schema_info()
    assert (json_info.type, json_info.schema) == (SchemaType.JSON, info.schema)


def test_namespace_and_sorted_fields() -> None:
    class Sorted(Record):
        _avro_namespace = "com.example"
        _sorted_fields = True
        b = Integer(required=True)
        a = String(default="z", required_default=True, required=True)

    assert Sorted.schema() == {
        "type": "record",
        "name": "Sorted",
        "namespace": "com.example",
        "fields": [
            {"name": "a", "default": "z", "type": "string"},
            {"name": "b", "type": "int"},
        ],
    }


def test_record_defaults_and_type_checks() -> None:
    person = Person(name="ada")
    assert (person.age, person.height, person.active, person.color) == (None, 1.5, False, None)
    with pytest.raises(TypeError, match="age"):
        Person(name="ada", age="old")
    with pytest.raises(TypeError, match="age"):
        Person(name="ada", age=True)  # a bool is not an int field's value
    with pytest.raises(TypeError, match="color"):
        Person(name="ada", color="blue")
    with pytest.raises(AttributeError, match="undeclared"):
        person.nickname = "a"
    assert Person(name="ada", color="red").color is Color.red
    assert Person(name="ada", home={"number": 3}).home == Address(number=3)


@pytest.mark.parametrize("schema_class", [AvroSchema, JsonSchema])
def test_record_round_trip(schema_class: type) -> None:
    schema = schema_class(Person)
    person = a_person()
    decoded = schema.decode(schema.encode(person))
    assert isinstance(decoded, Person) and decoded == person
    assert decoded.friends[0] == Address(number=2)


@pytest.mark.parametrize("schema_class", [AvroSchema, JsonSchema])
def test_a_value_of_the_wrong_type_is_refused(schema_class: type) -> None:
    with pytest.raises(TypeError, match=r"expected type is .*Person"):
        schema_class(Person).encode(Address(number=1))
    with pytest.raises(TypeError):
        schema_class(Person).encode({"name": "ada"})


def test_avro_bytes_are_avro_binary() -> None:
    class Small(Record):
        n = Integer(required=True)
        s = String()

    # zig-zag varint 3 -> 0x06; union branch 1 -> 0x02; string length 2 -> 0x04
    assert AvroSchema(Small).encode(Small(n=3, s="hi")) == b"\x06\x02\x04hi"


def test_avro_with_a_definition_takes_dicts() -> None:
    definition = {"type": "record", "name": "P", "fields": [{"name": "x", "type": "long"}]}
    schema = AvroSchema(None, schema_definition=definition)
    assert schema.decode(schema.encode({"x": 5})) == {"x": 5}


def test_avro_resolves_an_older_writer_version() -> None:
    class UserV1(Record):
        name = String(required=True)

    class UserV2(Record):
        name = String(required=True)
        age = Integer(required_default=True)

    v1, v2 = AvroSchema(UserV1), AvroSchema(UserV2)
    v1_info = v1.schema_info()
    # Both definitions name the record differently here; give v1 v2's name as the topic's
    # real versions would.
    writer = json.loads(v1_info.schema)
    writer["name"] = "UserV2"
    v1_same_name = AvroSchema(None, schema_definition=writer)
    data = v1_same_name.encode({"name": "ada"})
    decode = v2.decoder_for(v1_same_name.schema_info())
    assert decode(data) == UserV2(name="ada", age=None)
    assert v2.decoder_for(v2.schema_info()) == v2.decode  # its own version: no resolution
    assert v2.decoder_for(None) == v2.decode


def test_string_and_bytes() -> None:
    assert StringSchema().encode("héllo") == "héllo".encode()
    assert StringSchema().decode(b"abc") == "abc"
    assert BytesSchema().encode(b"\x00") == b"\x00"
    with pytest.raises(TypeError):
        StringSchema().encode(b"bytes")
    with pytest.raises(TypeError):
        BytesSchema().encode("text")
    assert StringSchema().schema_info().type is SchemaType.STRING


@pytest.mark.parametrize(
    ("schema", "value", "wire"),
    [
        (BooleanSchema(), True, b"\x01"),
        (ByteSchema(), -2, b"\xfe"),
        (ShortSchema(), 258, b"\x01\x02"),
        (IntSchema(), 1, b"\x00\x00\x00\x01"),
        (LongSchema(), -1, b"\xff" * 8),
        (FloatSchema(), 1.5, struct.pack(">f", 1.5)),
        (DoubleSchema(), 1.5, struct.pack(">d", 1.5)),
    ],
)
def test_primitives_use_pulsars_big_endian_encodings(schema, value, wire) -> None:
    assert schema.encode(value) == wire
    assert schema.decode(wire) == value
    assert schema.schema_info().schema == b""


def test_primitive_refusals() -> None:
    with pytest.raises(TypeError):
        IntSchema().encode("1")
    with pytest.raises(TypeError):
        IntSchema().encode(True)
    with pytest.raises(SchemaSerializationError, match="fit"):
        ByteSchema().encode(300)
    with pytest.raises(SchemaSerializationError, match="4 bytes"):
        IntSchema().decode(b"\x00")


def test_protobuf_native_definition_is_pulsars() -> None:
    schema = ProtobufNativeSchema(pb.ProduceRequest)
    info = schema.schema_info()
    assert info.type is SchemaType.PROTOBUF_NATIVE
    definition = json.loads(info.schema)
    assert definition["rootMessageTypeName"] == "pulsargrpc.v1.ProduceRequest"
    assert definition["rootFileDescriptorName"] == "pulsargrpc/v1/pulsar.proto"
    files = descriptor_pb2.FileDescriptorSet.FromString(
        base64.b64decode(definition["fileDescriptorSet"])
    )
    assert [f.name for f in files.file] == ["pulsargrpc/v1/pulsar.proto"]
    request = pb.ProduceRequest(sequence_id=7, messages=[pb.MessageData(payload=b"x")])
    assert schema.decode(schema.encode(request)) == request
    with pytest.raises(TypeError):
        schema.encode(pb.MessageId())


def test_key_value_inline_encoding() -> None:
    schema = KeyValueSchema(StringSchema(), IntSchema())
    data = schema.encode(("k", 5))
    assert data == b"\x00\x00\x00\x01k\x00\x00\x00\x04\x00\x00\x00\x05"
    assert schema.decode(data) == ("k", 5)
    info = schema.schema_info()
    assert info.type is SchemaType.KEY_VALUE
    assert info.properties["key.schema.type"] == "STRING"
    assert info.properties["value.schema.type"] == "INT32"
    assert info.properties["kv.encoding.type"] == "INLINE"
    # Both definitions are empty: Pulsar writes each empty part's length as -1.
    assert info.schema == b"\xff\xff\xff\xff" * 2


def test_auto_consume_decodes_each_writer_generically() -> None:
    auto = AutoConsumeSchema()
    avro = AvroSchema(Person)
    person = a_person()
    as_dict = auto.decoder_for(avro.schema_info())(avro.encode(person))
    assert as_dict["name"] == "ada" and as_dict["color"] == "green"
    assert as_dict["home"] == {"street": "Main", "number": 1}
    json_schema = JsonSchema(Person)
    from_json = auto.decoder_for(json_schema.schema_info())(json_schema.encode(person))
    # JSON has no bytes: a generic reader sees their base64 text, as in Pulsar.
    assert from_json == {**as_dict, "avatar": base64.b64encode(b"\x00\x01").decode()}
    assert auto.decoder_for(StringSchema().schema_info())(b"hi") == "hi"
    assert auto.decoder_for(LongSchema().schema_info())(LongSchema().encode(9)) == 9
    assert auto.decoder_for(None)(b"raw") == b"raw"
    kv = KeyValueSchema(StringSchema(), JsonSchema(Address))
    decoded = auto.decoder_for(kv.schema_info())(kv.encode(("k", Address(number=4))))
    assert decoded == ("k", {"street": None, "number": 4})
    proto = ProtobufNativeSchema(pb.MessageId)
    data = proto.encode(pb.MessageId(ledger_id=2**40, entry_id=3))
    assert auto.decoder_for(proto.schema_info())(data) == {
        "ledger_id": 2**40,
        "entry_id": 3,
        "batch_index": 0,
        "partition": 0,
    }
    with pytest.raises(TypeError, match="consumer"):
        auto.encode({"a": 1})


def test_schema_info_wire_form() -> None:
    info = AvroSchema(Address).schema_info()
    message = info.to_proto()
    assert message.type == pb.SCHEMA_TYPE_AVRO and message.schema_data == info.schema
    assert type(info).from_proto(message) == info
    with pytest.raises(ValueError, match="BYTES"):
        BytesSchema().schema_info().to_proto()


def test_a_decoded_record_equals_one_built_through_init() -> None:
    """Avro decoding builds records without re-checking scalar types (from_decoded): the
    record must be the one ``__init__`` would build, defaults and nested values included."""
    schema = AvroSchema(Person)
    for person in (a_person(), Person(name="bare")):
        fields = schema._read(schema.encode(person), None)
        fast, slow = Person.from_decoded(fields), Person(**fields)
        assert fast == slow == person
        assert {f: getattr(fast, f) for f in Person._fields} == {
            f: getattr(slow, f) for f in Person._fields
        }
        assert type(fast.color) is type(slow.color) and type(fast.home) is type(slow.home)


class Flat(Record):
    """Plain fields only: decoded records are built in one step (Record._flat)."""

    id = Long(required=True)
    name = String()
    amount = Double()
    ok = Boolean(required=True)


@pytest.mark.parametrize("schema_class", [AvroSchema, JsonSchema])
def test_a_flat_record_decodes_to_the_record_init_builds(schema_class: type) -> None:
    schema = schema_class(Flat)
    for flat in (Flat(id=1, name="a", amount=2.5, ok=True), Flat(id=2, ok=False)):
        decoded = schema.decode(schema.encode(flat))
        assert decoded == flat and repr(decoded) == repr(flat)
        assert (decoded._required, decoded._default, decoded._required_default) == (
            False,
            None,
            False,
        )
        decoded.name = "changed"  # still checked on assignment
        with pytest.raises(TypeError, match="name"):
            decoded.name = 3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"id": 1, "amount": 3, "ok": true}', Flat(id=1, amount=3, ok=True)),  # int as double
        ('{"id": 1, "ok": true, "extra": 9}', Flat(id=1, ok=True)),  # undeclared: left out
        ('{"id": 1, "amount": NaN, "ok": false}', None),  # Python's json writes NaN
    ],
)
def test_json_values_go_through_the_records_checks(text: str, expected: Flat | None) -> None:
    decoded = JsonSchema(Flat).decode(text.encode())
    if expected is None:
        assert decoded.amount != decoded.amount  # NaN
    else:
        assert decoded == expected


def test_json_of_the_wrong_shape_is_refused() -> None:
    with pytest.raises(TypeError, match="ok"):
        JsonSchema(Flat).decode(b'{"id": 1, "ok": 1}')  # an int is no bool
    with pytest.raises(TypeError, match="id"):
        JsonSchema(Flat).decode(b'{"id": true, "ok": true}')  # a bool is no int
    with pytest.raises(SchemaSerializationError, match="list"):
        JsonSchema(Flat).decode(b"[1, 2]")
    with pytest.raises(SchemaSerializationError, match="not JSON"):
        JsonSchema(Flat).decode(b"{nope")


def test_json_nested_deeper_than_python_reads_is_a_serialization_error() -> None:
    """A message is the sender's: nesting too deep for the parser is a bad message, not a
    RecursionError escaping from value()."""
    deep = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(SchemaSerializationError, match="not JSON"):
        AutoConsumeSchema().decoder_for(JsonSchema(Person).schema_info())(deep)
