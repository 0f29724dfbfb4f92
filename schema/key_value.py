"""A key and a value, each with its own schema, in one payload: Pulsar's KEY_VALUE schema
with its INLINE encoding (each part length-prefixed, 4 bytes big-endian)."""

from __future__ import annotations

import json
import struct
from typing import Any

from .schema import Schema, SchemaInfo, SchemaSerializationError, SchemaType

__all__ = ["KeyValueSchema", "split_key_value"]

_LENGTH = struct.Struct(">i")
# Pulsar writes an empty part's length as -1 (0xFFFFFFFF).
_EMPTY = -1


def _join(key: bytes, value: bytes) -> bytes:
    return b"".join(
        (
            _LENGTH.pack(len(key) if key else _EMPTY),
            key,
            _LENGTH.pack(len(value) if value else _EMPTY),
            value,
        )
    )


def split_key_value(data: bytes) -> tuple[bytes, bytes]:
    """The two length-prefixed parts of a KEY_VALUE payload or definition."""
    try:
        (key_size,) = _LENGTH.unpack_from(data, 0)
        key_size = max(key_size, 0)
        key = data[4 : 4 + key_size]
        (value_size,) = _LENGTH.unpack_from(data, 4 + key_size)
        value_size = max(value_size, 0)
        value = data[8 + key_size : 8 + key_size + value_size]
    except struct.error:
        raise SchemaSerializationError("a key/value payload is truncated") from None
    if len(key) != key_size or len(value) != value_size:
        raise SchemaSerializationError("a key/value payload is truncated")
    return key, value


def key_value_info(key: SchemaInfo, value: SchemaInfo) -> SchemaInfo:
    """Pulsar's KEY_VALUE SchemaInfo: both definitions joined, their types, names and
    properties in the properties (KeyValueSchemaInfo.encodeKeyValueSchemaInfo)."""
    properties = {
        "key.schema.name": key.name,
        "key.schema.type": key.type.name,
        "key.schema.properties": json.dumps(key.properties),
        "value.schema.name": value.name,
        "value.schema.type": value.type.name,
        "value.schema.properties": json.dumps(value.properties),
        "kv.encoding.type": "INLINE",
    }
    return SchemaInfo(SchemaType.KEY_VALUE, "KeyValue", _join(key.schema, value.schema), properties)


class KeyValueSchema(Schema):
    """Values are ``(key, value)`` tuples; each part is encoded with its own schema.

    >>> schema = KeyValueSchema(StringSchema(), AvroSchema(User))
    >>> schema.decode(schema.encode(("k", User(name="ada"))))[0]
    'k'
    """

    def __init__(self, key_schema: Schema, value_schema: Schema) -> None:
        self.key_schema = key_schema
        self.value_schema = value_schema
        super().__init__(
            key_value_info(key_schema.schema_info(), value_schema.schema_info()), tuple
        )

    def encode(self, value: Any) -> bytes:
        self._validate_object_type(value)
        if len(value) != 2:
            raise TypeError("a key/value is a (key, value) tuple")
        return _join(self.key_schema.encode(value[0]), self.value_schema.encode(value[1]))

    def decode(self, data: bytes) -> tuple[Any, Any]:
        key, value = split_key_value(data)
        return self.key_schema.decode(key), self.value_schema.decode(value)


def key_value_parts(info: SchemaInfo) -> tuple[SchemaInfo, SchemaInfo]:
    """The key's and the value's SchemaInfo inside a KEY_VALUE one (the inverse of
    :func:`key_value_info`)."""
    key, value = split_key_value(info.schema)
    props = info.properties

    def part(prefix: str, definition: bytes) -> SchemaInfo:
        kind = SchemaType[props.get(f"{prefix}.schema.type", "BYTES")]
        properties = json.loads(props.get(f"{prefix}.schema.properties") or "{}")
        return SchemaInfo(kind, props.get(f"{prefix}.schema.name", ""), definition, properties)

    return part("key", key), part("value", value)
