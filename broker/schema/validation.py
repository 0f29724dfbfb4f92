"""Validation of a client's schema definition before anything stores or compares it (Pulsar's
SchemaDataValidator): a definition that is not one is refused with InvalidSchemaDataError.

Bounds, since a client chooses these bytes: the data is at most :data:`MAX_SCHEMA_DATA_BYTES`
(Pulsar has no bound of its own: its definitions are Java classes' schemas, a few KiB), and
the properties at most :data:`MAX_PROPERTIES` pairs of :data:`MAX_PROPERTY_CHARS` each.

- AVRO, JSON and PROTOBUF: the data is an Avro schema, as JSON text (Pulsar's JSON schemas
  are Avro-described too; the older Jackson JSON-schema form is not accepted).
- KEY_VALUE: Pulsar's encoding, the key's and the value's definitions each behind a 4-byte
  big-endian length, their types in the properties ``key.schema.type`` and
  ``value.schema.type`` (default BYTES); each part is validated as a schema of its type.
- PROTOBUF_NATIVE: Pulsar's ProtobufNativeSchemaData JSON: ``fileDescriptorSet`` (base64 of a
  serialized FileDescriptorSet), ``rootMessageTypeName``, ``rootFileDescriptorName``.
- the primitives: any data (Pulsar's is empty).
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import avro.schema
from google.protobuf import descriptor_pb2
from google.protobuf.message import DecodeError

from pulsar_grpc.broker.errors import InvalidSchemaDataError
from pulsar_grpc.broker.json_text import json_value
from pulsar_grpc.broker.schema.data import SchemaInfo, SchemaType

MAX_SCHEMA_DATA_BYTES = 256 * 1024
MAX_PROPERTIES = 64
MAX_PROPERTY_CHARS = 4096
# Parsed Avro definitions, by their text: a transitive check parses every stored version.
_PARSED_CACHE = 64


def new_schema(
    type_: SchemaType, data: bytes, properties: Mapping[str, str] | None = None
) -> SchemaInfo:
    """A client's schema, validated."""
    info = SchemaInfo(type_, bytes(data), dict(properties or {}))
    validate(info)
    return info


def validate(info: SchemaInfo) -> None:
    if len(info.data) > MAX_SCHEMA_DATA_BYTES:
        raise InvalidSchemaDataError(
            f"schema definition of {len(info.data)} bytes exceeds {MAX_SCHEMA_DATA_BYTES}"
        )
    if len(info.properties) > MAX_PROPERTIES:
        raise InvalidSchemaDataError(
            f"{len(info.properties)} schema properties exceed {MAX_PROPERTIES}"
        )
    for key, value in info.properties.items():
        if len(key) > MAX_PROPERTY_CHARS or len(value) > MAX_PROPERTY_CHARS:
            raise InvalidSchemaDataError(
                f"schema property {key[:40]!r} is longer than {MAX_PROPERTY_CHARS} characters"
            )
    if info.type.is_struct:
        avro_schema(info)
    elif info.type is SchemaType.KEY_VALUE:
        for part in key_value_parts(info):
            validate(part)
    elif info.type is SchemaType.PROTOBUF_NATIVE:
        protobuf_native_root(info)


def avro_schema(info: SchemaInfo) -> avro.schema.Schema:
    """The Avro schema an AVRO, JSON or PROTOBUF definition is."""
    return _parse_avro(info.type.name, info.data)


@lru_cache(maxsize=_PARSED_CACHE)
def _parse_avro(type_name: str, data: bytes) -> avro.schema.Schema:
    try:
        return avro.schema.parse(data.decode("utf-8"))
    except Exception as exc:  # SchemaParseException, UnicodeDecodeError, RecursionError, ...
        detail = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise InvalidSchemaDataError(
            f"the {type_name} schema definition is not a valid Avro schema: {detail}"
        ) from None


def key_value_parts(info: SchemaInfo) -> tuple[SchemaInfo, SchemaInfo]:
    """The key's and the value's schemas of a KEY_VALUE definition."""
    data, parts = info.data, []
    offset = 0
    for side in ("key", "value"):
        if len(data) < offset + 4:
            raise InvalidSchemaDataError(f"KEY_VALUE schema data ends before the {side}'s length")
        (length,) = struct.unpack_from(">i", data, offset)
        offset += 4
        length = max(length, 0)  # Pulsar writes -1 for an empty part
        if len(data) < offset + length:
            raise InvalidSchemaDataError(f"KEY_VALUE schema data ends inside the {side}'s schema")
        part_type = SchemaType.parse(info.properties.get(f"{side}.schema.type", "BYTES"))
        properties = _json_object(info.properties.get(f"{side}.schema.properties", "{}"), side)
        parts.append(SchemaInfo(part_type, data[offset : offset + length], properties))
        offset += length
    if offset != len(data):
        raise InvalidSchemaDataError("KEY_VALUE schema data goes on past the value's schema")
    return parts[0], parts[1]


def _json_object(raw: str, side: str) -> dict[str, str]:
    try:
        value: Any = json_value(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise InvalidSchemaDataError(f"{side}.schema.properties is not a JSON object")
    return {str(k): str(v) for k, v in value.items()}


def protobuf_native_root(info: SchemaInfo) -> str:
    """The root message's full name of a PROTOBUF_NATIVE definition, once it is checked that
    its descriptor set parses and holds that message."""
    try:
        value = json_value(info.data)
        encoded = value["fileDescriptorSet"]
        root = value["rootMessageTypeName"]
        descriptors = descriptor_pb2.FileDescriptorSet.FromString(
            base64.b64decode(encoded, validate=True)
        )
    except (ValueError, KeyError, TypeError, binascii.Error, DecodeError) as exc:
        raise InvalidSchemaDataError(
            "PROTOBUF_NATIVE schema data is not Pulsar's ProtobufNativeSchemaData "
            f"(fileDescriptorSet, rootMessageTypeName): {type(exc).__name__}"
        ) from None
    names = {
        f"{f.package}.{m.name}" if f.package else m.name
        for f in descriptors.file
        for m in f.message_type
    }
    if not isinstance(root, str) or root not in names:
        raise InvalidSchemaDataError(
            f"PROTOBUF_NATIVE root message {str(root)[:80]!r} is not in its fileDescriptorSet"
        )
    return root
