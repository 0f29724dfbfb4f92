"""Schemas: how a typed value becomes a message's bytes and back, and the definition a
producer declares for its topic (Pulsar's SchemaInfo: type, name, definition, properties).

The encodings are Pulsar's, so a message written here reads in any Pulsar client and the
other way round: UTF-8 for strings, big-endian integers and IEEE 754 floats, one byte for a
boolean, Avro binary for AVRO, JSON text for JSON (whose definition is an Avro record schema,
as Pulsar's).
"""

from __future__ import annotations

import base64
import enum
import io
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import fastavro
import orjson

from pulsargrpc.v1 import pulsar_pb2 as pb

from .definition import Array, Bytes, Map, Record

__all__ = [
    "AvroSchema",
    "BooleanSchema",
    "ByteSchema",
    "BytesSchema",
    "DoubleSchema",
    "FloatSchema",
    "IntSchema",
    "JsonSchema",
    "LongSchema",
    "Schema",
    "SchemaInfo",
    "SchemaSerializationError",
    "SchemaType",
    "ShortSchema",
    "StringSchema",
]


class SchemaType(enum.IntEnum):
    """Pulsar's SchemaType, with its numbers; BYTES and AUTO_CONSUME exist only on clients
    (a bytes producer declares nothing; an AUTO_CONSUME consumer takes each message's own)."""

    AUTO_CONSUME = -3
    BYTES = -1
    NONE = 0
    STRING = 1
    JSON = 2
    PROTOBUF = 3
    AVRO = 4
    BOOLEAN = 5
    INT8 = 6
    INT16 = 7
    INT32 = 8
    INT64 = 9
    FLOAT = 10
    DOUBLE = 11
    DATE = 12
    TIME = 13
    TIMESTAMP = 14
    KEY_VALUE = 15
    INSTANT = 16
    LOCAL_DATE = 17
    LOCAL_TIME = 18
    LOCAL_DATE_TIME = 19
    PROTOBUF_NATIVE = 20


class SchemaSerializationError(ValueError):
    """A value the schema cannot encode, or bytes it cannot decode."""


@dataclass(frozen=True)
class SchemaInfo:
    """A schema's definition, as Pulsar's SchemaInfo and the wire's Schema message."""

    type: SchemaType
    name: str
    schema: bytes = b""
    properties: dict[str, str] = field(default_factory=dict)

    def to_proto(self) -> pb.Schema:
        """The wire form (a BYTES or AUTO_CONSUME schema has none: declare nothing)."""
        if self.type < 0:
            raise ValueError(f"a {self.type.name} schema is not declared to the broker")
        return pb.Schema(
            name=self.name,
            schema_data=self.schema,
            type=pb.SchemaType.ValueType(int(self.type)),
            properties=self.properties,
        )

    @classmethod
    def from_proto(cls, message: pb.Schema) -> SchemaInfo:
        """From the wire form (GetSchema's answer)."""
        return cls(
            SchemaType(message.type), message.name, message.schema_data, dict(message.properties)
        )

    def definition(self) -> Any:
        """The definition parsed as JSON (AVRO, JSON, PROTOBUF, PROTOBUF_NATIVE)."""
        return json.loads(self.schema)


class Schema:
    """A schema: its :class:`SchemaInfo` and the encoding of its values. ``encode`` refuses
    a value of the wrong type with a TypeError naming the type expected."""

    # Whether decoding depends on the writer's version (:meth:`decoder_for`): a consumer
    # fetches the versions its messages carry only for such a schema.
    reads_writer_version: ClassVar[bool] = False

    def __init__(self, info: SchemaInfo, python_type: type | tuple[type, ...] | None) -> None:
        self._info = info
        self._python_type = python_type

    def schema_info(self) -> SchemaInfo:
        """What the producer declares (pulsar-client's ``schema_info()``)."""
        return self._info

    def encode(self, value: Any) -> bytes:
        """The message payload for ``value``."""
        raise NotImplementedError

    def decode(self, data: bytes) -> Any:
        """The value of a payload written with this schema."""
        raise NotImplementedError

    def decoder_for(self, writer: SchemaInfo | None) -> Callable[[bytes], Any]:
        """How to decode a payload written with ``writer`` (the version a message carries;
        None: the producer declared none) into this schema's values. By default the payload
        is read as this schema's own; Avro resolves the writer's version to its own."""
        return self.decode

    def _validate_object_type(self, value: Any) -> None:
        expected = self._python_type
        if expected is not None and (
            not isinstance(value, expected) or (isinstance(value, bool) and expected is int)
        ):
            raise TypeError(
                f"Invalid record obj of type {type(value)} - expected type is {expected}"
                f" ({type(self).__name__})"
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class BytesSchema(Schema):
    """The payload as it is (Pulsar's default: nothing is declared to the broker)."""

    def __init__(self) -> None:
        super().__init__(SchemaInfo(SchemaType.BYTES, "BYTES"), bytes)

    def encode(self, value: Any) -> bytes:
        self._validate_object_type(value)
        return bytes(value)

    def decode(self, data: bytes) -> bytes:
        return data


class StringSchema(Schema):
    """UTF-8 text."""

    def __init__(self) -> None:
        super().__init__(SchemaInfo(SchemaType.STRING, "STRING"), str)

    def encode(self, value: Any) -> bytes:
        self._validate_object_type(value)
        return str(value).encode()

    def decode(self, data: bytes) -> str:
        return data.decode()


class _StructSchema(Schema):
    """A fixed-size primitive, packed big-endian as Pulsar's primitive schemas."""

    schema_type: ClassVar[SchemaType]
    layout: ClassVar[struct.Struct]
    value_type: ClassVar[type | tuple[type, ...]]

    def __init__(self) -> None:
        super().__init__(SchemaInfo(self.schema_type, self.schema_type.name), self.value_type)

    def encode(self, value: Any) -> bytes:
        self._validate_object_type(value)
        try:
            return self.layout.pack(value)
        except struct.error as exc:
            raise SchemaSerializationError(f"{value!r} does not fit {self!r}: {exc}") from None

    def decode(self, data: bytes) -> Any:
        if len(data) != self.layout.size:
            raise SchemaSerializationError(
                f"{self!r} expects {self.layout.size} bytes, the message has {len(data)}"
            )
        return self.layout.unpack(data)[0]


class BooleanSchema(_StructSchema):
    """A bool: one byte, 0 or 1."""

    schema_type = SchemaType.BOOLEAN
    layout = struct.Struct(">?")
    value_type = bool


class ByteSchema(_StructSchema):
    """INT8: one signed byte."""

    schema_type = SchemaType.INT8
    layout = struct.Struct(">b")
    value_type = int


class ShortSchema(_StructSchema):
    """INT16, big-endian."""

    schema_type = SchemaType.INT16
    layout = struct.Struct(">h")
    value_type = int


class IntSchema(_StructSchema):
    """INT32, big-endian."""

    schema_type = SchemaType.INT32
    layout = struct.Struct(">i")
    value_type = int


class LongSchema(_StructSchema):
    """INT64, big-endian."""

    schema_type = SchemaType.INT64
    layout = struct.Struct(">q")
    value_type = int


class FloatSchema(_StructSchema):
    """FLOAT: IEEE 754 single precision, big-endian."""

    schema_type = SchemaType.FLOAT
    layout = struct.Struct(">f")
    value_type = (float, int)


class DoubleSchema(_StructSchema):
    """DOUBLE: IEEE 754 double precision, big-endian."""

    schema_type = SchemaType.DOUBLE
    layout = struct.Struct(">d")
    value_type = (float, int)


def _definition_text(definition: Any) -> bytes:
    """The definition as pulsar-client writes it (``json.dumps(..., indent=True)``), so that
    the same class registers byte for byte the same schema from either client."""
    return json.dumps(definition, indent=True).encode()


class _RecordSchema(Schema):
    """A schema of Record values (or of dicts, given only a definition)."""

    def __init__(
        self,
        record_cls: type[Record] | None,
        schema_type: SchemaType,
        definition: dict[str, Any] | None,
        properties: dict[str, str] | None = None,
    ) -> None:
        if record_cls is None and definition is None:
            raise ValueError("give a Record class or a schema definition")
        self._record_cls = record_cls
        self._definition: dict[str, Any] = (
            record_cls.schema() if record_cls is not None else definition  # type: ignore[assignment]
        )
        info = SchemaInfo(
            schema_type, schema_type.name, _definition_text(self._definition), properties or {}
        )
        super().__init__(info, record_cls if record_cls is not None else dict)

    def definition(self) -> dict[str, Any]:
        """The Avro record schema (parsed)."""
        return self._definition

    def _fields_of(self, value: Any) -> dict[str, Any]:
        self._validate_object_type(value)
        return value.to_dict() if isinstance(value, Record) else value


class AvroSchema(_RecordSchema):
    """Avro binary, as pulsar-client's ``AvroSchema``: ``AvroSchema(User)``, or
    ``AvroSchema(None, schema_definition={...})`` for dict values.

    A message written with another version of the schema is read by Avro's schema
    resolution (:meth:`decoder_for`): fields the reader added take their defaults."""

    reads_writer_version = True

    def __init__(
        self, record_cls: type[Record] | None, schema_definition: dict[str, Any] | None = None
    ) -> None:
        super().__init__(record_cls, SchemaType.AVRO, schema_definition)
        self._parsed = fastavro.parse_schema(self._definition)

    def encode(self, value: Any) -> bytes:
        fields = self._fields_of(value)
        buffer = io.BytesIO()
        try:
            fastavro.schemaless_writer(buffer, self._parsed, fields)
        except (ValueError, TypeError, AttributeError, KeyError) as exc:
            raise SchemaSerializationError(f"cannot encode {value!r} as Avro: {exc}") from None
        return buffer.getvalue()

    def decode(self, data: bytes) -> Any:
        return self.make(self._read(data, None))

    def make(self, fields: dict[str, Any]) -> Any:
        """A decoded value: an instance of the Record class (fields it does not declare are
        left out), else the dict itself. The decoder's types are trusted (fastavro read them
        against this schema, or resolved them to it)."""
        if self._record_cls is None:
            return fields
        return self._record_cls.from_decoded(fields)

    def decoder_for(self, writer: SchemaInfo | None) -> Callable[[bytes], Any]:
        """Bytes written with another version of the schema are resolved to this one (Avro's
        schema resolution: a field this version added takes its default)."""
        if writer is None or writer.type is not SchemaType.AVRO:
            return self.decode
        definition = writer.definition()
        if definition == self._definition:
            return self.decode
        parsed = fastavro.parse_schema(definition)
        return lambda data: self.make(self._read(data, parsed))

    def _read(self, data: bytes, writer: Any) -> dict[str, Any]:
        try:
            if writer is None:
                return fastavro.schemaless_reader(io.BytesIO(data), self._parsed)  # type: ignore[return-value]
            return fastavro.schemaless_reader(io.BytesIO(data), writer, self._parsed)  # type: ignore[return-value]
        except (EOFError, ValueError, TypeError, KeyError, IndexError) as exc:
            raise SchemaSerializationError(f"cannot decode the message as Avro: {exc}") from None


def _json_default(value: Any) -> Any:
    """Bytes in JSON: base64 text, as Pulsar's Java client (Jackson) writes them."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# One encoder for every message (json.dumps with options builds a new one each call).
_JSON_ENCODER = json.JSONEncoder(separators=(",", ":"), default=_json_default)


def loads_json(data: bytes) -> Any:
    """A message's JSON value. orjson reads it several times faster than the standard
    library; what orjson refuses but Python's json reads (NaN and Infinity, which Python's
    json writes for such floats, and integers past 64 bits) is read by json. Raises
    SchemaSerializationError when neither can."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep for Python
        raise SchemaSerializationError(f"the message is not JSON: {exc!r}"[:300]) from None


def _bytes_from_json(kind: Any, value: Any) -> Any:
    """A decoded JSON value with the base64 text of Bytes fields turned back into bytes."""
    if value is None:
        return None
    if isinstance(kind, Bytes) and isinstance(value, str):
        return base64.b64decode(value)
    if isinstance(kind, Record) and isinstance(value, dict):
        return {k: _bytes_from_json(kind._fields.get(k), v) for k, v in value.items()}
    if isinstance(kind, Array) and isinstance(value, list):
        return [_bytes_from_json(kind.array_type, v) for v in value]
    if isinstance(kind, Map) and isinstance(value, dict):
        return {k: _bytes_from_json(kind.value_type, v) for k, v in value.items()}
    return value


def _holds_bytes(kind: Any) -> bool:
    """Whether a Bytes field is anywhere in ``kind`` (a record, array or map included)."""
    if isinstance(kind, Bytes):
        return True
    if isinstance(kind, Record):
        return any(_holds_bytes(f) for f in kind._fields.values())
    if isinstance(kind, Array):
        return _holds_bytes(kind.array_type)
    if isinstance(kind, Map):
        return _holds_bytes(kind.value_type)
    return False


class JsonSchema(_RecordSchema):
    """JSON text, as pulsar-client's ``JsonSchema``; the definition is the Record's Avro
    schema (Pulsar's). Enums are written by name and bytes as base64 text (as Pulsar's Java
    client does)."""

    def __init__(
        self, record_cls: type[Record] | None, schema_definition: dict[str, Any] | None = None
    ) -> None:
        super().__init__(record_cls, SchemaType.JSON, schema_definition)
        # The record's shape, for turning base64 text back into bytes; None when no field
        # anywhere in it holds bytes (most records), so decoding skips that walk.
        self._bytes_shape = (
            record_cls() if record_cls is not None and _holds_bytes(record_cls()) else None
        )

    def encode(self, value: Any) -> bytes:
        fields = self._fields_of(value)
        try:
            return _JSON_ENCODER.encode(fields).encode()
        except (TypeError, ValueError) as exc:
            raise SchemaSerializationError(f"cannot encode {value!r} as JSON: {exc}") from None

    def decode(self, data: bytes) -> Any:
        fields = loads_json(data)
        if self._record_cls is None:
            return fields
        if not isinstance(fields, dict):
            raise SchemaSerializationError(
                f"the message is JSON {type(fields).__name__}, not a {self._record_cls.__name__}"
            )
        if self._bytes_shape is not None:
            fields = _bytes_from_json(self._bytes_shape, fields)
        return self._record_cls.from_json(fields)
