"""Schemas, as pulsar-client's ``pulsar.schema``: Record classes with typed fields, the
schemas that encode values (Avro, JSON, string, the primitives, the java.time types, Protobuf
native, key/value), and AUTO_CONSUME for a consumer that takes each message's own schema.

>>> from pulsar_grpc.schema import AvroSchema, Integer, Record, String
>>> class User(Record):
...     name = String(required=True)
...     age = Integer()
>>> producer = await client.create_producer("users", schema=AvroSchema(User))
>>> await producer.send(User(name="ada", age=36))
>>> consumer = await client.subscribe("users", "sub", schema=AvroSchema(User))
>>> (await consumer.receive()).value().name
'ada'
"""

from .auto import AutoConsumeSchema, generic_decoder
from .definition import (
    Array,
    Boolean,
    Bytes,
    CustomEnum,
    Double,
    Field,
    Float,
    Integer,
    Long,
    Map,
    Null,
    Record,
    String,
)
from .key_value import KeyValueSchema
from .protobuf_native import ProtobufNativeSchema
from .schema import (
    AvroSchema,
    BooleanSchema,
    ByteSchema,
    BytesSchema,
    DoubleSchema,
    FloatSchema,
    IntSchema,
    JsonSchema,
    LongSchema,
    Schema,
    SchemaInfo,
    SchemaSerializationError,
    SchemaType,
    ShortSchema,
    StringSchema,
)
from .temporal import InstantSchema, LocalDateSchema, LocalDateTimeSchema, LocalTimeSchema

__all__ = [
    "Array",
    "AutoConsumeSchema",
    "AvroSchema",
    "Boolean",
    "BooleanSchema",
    "ByteSchema",
    "Bytes",
    "BytesSchema",
    "CustomEnum",
    "Double",
    "DoubleSchema",
    "Field",
    "Float",
    "FloatSchema",
    "InstantSchema",
    "IntSchema",
    "Integer",
    "JsonSchema",
    "KeyValueSchema",
    "LocalDateSchema",
    "LocalDateTimeSchema",
    "LocalTimeSchema",
    "Long",
    "LongSchema",
    "Map",
    "Null",
    "ProtobufNativeSchema",
    "Record",
    "Schema",
    "SchemaInfo",
    "SchemaSerializationError",
    "SchemaType",
    "ShortSchema",
    "String",
    "StringSchema",
    "generic_decoder",
]
