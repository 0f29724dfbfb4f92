"""AUTO_CONSUME: decode each message with the schema it was written with, for a consumer
that does not know the topic's schema in advance (Pulsar's ``Schema.AUTO_CONSUME()``).

Values come back as plain Python values: a dict for an AVRO, JSON or PROTOBUF_NATIVE record,
str for STRING, int, float or bool for the primitives (DATE, TIME and TIMESTAMP: their
milliseconds), datetime, date and time for the java.time types (temporal.py), a
``(key, value)`` tuple for KEY_VALUE, and the bytes themselves for a message written without
a schema.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from functools import partial
from typing import Any

import fastavro

from .key_value import key_value_parts, split_key_value
from .protobuf_native import decode_generic_protobuf, message_class_of
from .schema import (
    BooleanSchema,
    ByteSchema,
    DoubleSchema,
    FloatSchema,
    IntSchema,
    LongSchema,
    Schema,
    SchemaInfo,
    SchemaSerializationError,
    SchemaType,
    ShortSchema,
    StringSchema,
    loads_json,
)
from .temporal import InstantSchema, LocalDateSchema, LocalDateTimeSchema, LocalTimeSchema

__all__ = ["AutoConsumeSchema", "generic_decoder"]

_FIXED: dict[SchemaType, Schema] = {
    SchemaType.STRING: StringSchema(),
    SchemaType.BOOLEAN: BooleanSchema(),
    SchemaType.INT8: ByteSchema(),
    SchemaType.INT16: ShortSchema(),
    SchemaType.INT32: IntSchema(),
    SchemaType.INT64: LongSchema(),
    SchemaType.FLOAT: FloatSchema(),
    SchemaType.DOUBLE: DoubleSchema(),
    # Pulsar's DATE, TIME and TIMESTAMP are milliseconds in an INT64; pulsar-client for
    # Python has no schema for them, so the count is given as it is.
    SchemaType.DATE: LongSchema(),
    SchemaType.TIME: LongSchema(),
    SchemaType.TIMESTAMP: LongSchema(),
    SchemaType.INSTANT: InstantSchema(),
    SchemaType.LOCAL_DATE: LocalDateSchema(),
    SchemaType.LOCAL_TIME: LocalTimeSchema(),
    SchemaType.LOCAL_DATE_TIME: LocalDateTimeSchema(),
}


def _bytes(data: bytes) -> bytes:
    return data


def _avro(parsed: Any, data: bytes) -> Any:
    try:
        return fastavro.schemaless_reader(io.BytesIO(data), parsed)
    except (EOFError, ValueError, TypeError, KeyError, IndexError) as exc:
        raise SchemaSerializationError(f"cannot decode the message as Avro: {exc}") from None


def _key_value(
    key: Callable[[bytes], Any], value: Callable[[bytes], Any], data: bytes
) -> tuple[Any, Any]:
    key_data, value_data = split_key_value(data)
    return key(key_data), value(value_data)


def generic_decoder(info: SchemaInfo | None) -> Callable[[bytes], Any]:
    """How to decode payloads written with ``info`` into plain Python values."""
    if info is None or info.type in (SchemaType.NONE, SchemaType.BYTES):
        return _bytes
    kind = info.type
    if kind in _FIXED:
        return _FIXED[kind].decode
    if kind is SchemaType.AVRO:
        return partial(_avro, fastavro.parse_schema(info.definition()))
    if kind is SchemaType.JSON:
        return loads_json
    if kind is SchemaType.PROTOBUF_NATIVE:
        return partial(decode_generic_protobuf, message_class_of(info))
    if kind is SchemaType.KEY_VALUE:
        key, value = key_value_parts(info)
        return partial(_key_value, generic_decoder(key), generic_decoder(value))
    raise SchemaSerializationError(f"AUTO_CONSUME cannot decode {kind.name} messages")


class AutoConsumeSchema(Schema):
    """Takes whatever schema each message was written with; declares none to the broker.

    >>> consumer = await client.subscribe("my-topic", "sub", schema=AutoConsumeSchema())
    >>> (await consumer.receive()).value()
    {'name': 'ada', 'age': 36}
    """

    reads_writer_version = True

    def __init__(self) -> None:
        super().__init__(SchemaInfo(SchemaType.AUTO_CONSUME, "AUTO_CONSUME"), None)

    def encode(self, value: Any) -> bytes:
        raise TypeError("AUTO_CONSUME is a consumer's schema: a producer cannot send with it")

    def decode(self, data: bytes) -> Any:
        return data

    def decoder_for(self, writer: SchemaInfo | None) -> Callable[[bytes], Any]:
        return generic_decoder(writer)
