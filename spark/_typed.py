"""Typed reads: the topic's schema turned into the ``value`` column's Spark type, and each
message decoded with the schema version it was written with into that shape.

The shape is the topic's latest schema when the query is planned (a streaming query keeps it
for its whole run, as Spark needs): an AVRO or JSON record becomes a struct (Spark's
``from_avro`` mapping), STRING and the primitives a column of their type. A message written
with another version is read by Avro's schema resolution into the planned shape, so a
compatible evolution keeps the columns stable: fields added later take their defaults in old
rows, and a running query drops what a newer writer added.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import fastavro
import pyarrow as pa

from pulsar_grpc.client import Client, Message, TopicNotFound
from pulsar_grpc.schema import SchemaInfo, SchemaType, generic_decoder

from ._options import OptionError, SourceOptions
from ._topics import base_topic, resolve_partitions

Decode = Callable[[bytes], Any]

_PRIMITIVES: dict[SchemaType, pa.DataType] = {
    SchemaType.STRING: pa.string(),
    SchemaType.BOOLEAN: pa.bool_(),
    SchemaType.INT8: pa.int8(),
    SchemaType.INT16: pa.int16(),
    SchemaType.INT32: pa.int32(),
    SchemaType.INT64: pa.int64(),
    SchemaType.FLOAT: pa.float32(),
    SchemaType.DOUBLE: pa.float64(),
    # Pulsar's DATE, TIME and TIMESTAMP: the milliseconds of their INT64, as stored.
    SchemaType.DATE: pa.int64(),
    SchemaType.TIME: pa.int64(),
    SchemaType.TIMESTAMP: pa.int64(),
}
_RECORDS = (SchemaType.AVRO, SchemaType.JSON)
_AVRO_PRIMITIVES: dict[str, pa.DataType] = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}
_LOGICAL: dict[str, pa.DataType] = {
    "date": pa.date32(),
    "timestamp-millis": pa.timestamp("us", tz="UTC"),
    "timestamp-micros": pa.timestamp("us", tz="UTC"),
    "uuid": pa.string(),
}


class UnsupportedSchema(OptionError):
    """The topic's schema has no Spark form here (read it with valueFormat=binary)."""


def _unsupported(topic: str, why: str) -> UnsupportedSchema:
    return UnsupportedSchema(
        f"{topic}: {why}; read the raw bytes with the option valueFormat=binary"
    )


class _AvroToArrow:
    """Avro type -> Arrow type, as Spark's ``from_avro``: unions with null are nullable,
    enums strings, fixed binary; named types are remembered for later references."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.named: dict[str, pa.DataType] = {}

    def convert(self, kind: Any) -> pa.DataType:
        if isinstance(kind, str):
            if kind in _AVRO_PRIMITIVES:
                return _AVRO_PRIMITIVES[kind]
            if kind in self.named:
                return self.named[kind]
            raise _unsupported(self.topic, f"unknown Avro type {kind!r}")
        if isinstance(kind, list):
            members = [m for m in kind if m != "null"]
            if len(members) != 1:
                raise _unsupported(self.topic, f"an Avro union of {len(members)} non-null types")
            return self.convert(members[0])
        logical = _LOGICAL.get(kind.get("logicalType", ""))
        if logical is not None:
            return logical
        if kind.get("logicalType") == "decimal":
            return pa.decimal128(int(kind["precision"]), int(kind.get("scale", 0)))
        converted = self._complex(kind)
        if "name" in kind:
            self.named[kind["name"]] = converted
            if kind.get("namespace"):
                self.named[f"{kind['namespace']}.{kind['name']}"] = converted
        return converted

    def _complex(self, kind: dict[str, Any]) -> pa.DataType:
        name = kind["type"]
        if name == "record":
            return pa.struct([pa.field(f["name"], self.convert(f["type"])) for f in kind["fields"]])
        if name == "enum":
            return pa.string()
        if name == "fixed":
            return pa.binary()
        if name == "array":
            return pa.list_(self.convert(kind["items"]))
        if name == "map":
            return pa.map_(pa.string(), self.convert(kind["values"]))
        return self.convert(name)


@dataclass(frozen=True)
class ValueShape:
    """What the ``value`` column holds: the payload (no schema, or valueFormat=binary), or the
    value decoded with ``info``, the topic's latest schema when the query was planned."""

    info: SchemaInfo | None = None
    topic: str = ""

    def arrow_type(self) -> pa.DataType:
        if self.info is None:
            return pa.binary()
        if self.info.type in _RECORDS:
            return _AvroToArrow(self.topic).convert(self.info.definition())
        kind = _PRIMITIVES.get(self.info.type)
        if kind is None:
            raise _unsupported(self.topic, f"its schema is {self.info.type.name}")
        return kind

    def decoder(self) -> ValueDecoder | None:
        """The executor's decoder (None: the payload is the value)."""
        return None if self.info is None else ValueDecoder(self.info, self.arrow_type())


class ValueDecoder:
    """One task's decoding: per writer version a message carries, its schema (GetSchema, once
    per task) resolved to the planned one."""

    def __init__(self, reader: SchemaInfo, arrow_type: pa.DataType) -> None:
        self.reader = reader
        self.arrow_type = arrow_type
        self._own = _decoder(reader, None)
        self._by_version: dict[str, Decode] = {}

    async def prepare(self, client: Client, topic: str, messages: list[Message]) -> None:
        """Fetch the writer schemas of ``messages`` this task has not seen yet."""
        if self.reader.type not in _RECORDS:
            return  # a STRING or primitive payload reads the same in every version
        for version in {m.schema_version() for m in messages} - {""} - set(self._by_version):
            writer = await client.get_schema(base_topic(topic), version)
            self._by_version[version] = _decoder(self.reader, writer)

    def values(self, messages: list[Message]) -> pa.Array:
        out: list[Any] = []
        for message in messages:
            if message.has_null_value():  # a tombstone: nothing was encoded to decode
                out.append(None)
                continue
            decode = self._by_version.get(message.schema_version(), self._own)
            try:
                out.append(decode(message.data()))
            except (ValueError, TypeError, KeyError, IndexError, EOFError, AttributeError) as exc:
                raise ValueError(
                    f"message {message.message_id()} does not decode with the topic's "
                    f"{self.reader.type.name} schema ({exc}); read it with valueFormat=binary"
                ) from None
        return pa.array(out, self.arrow_type)


def _decoder(reader: SchemaInfo, writer: SchemaInfo | None) -> Decode:
    """Payloads written with ``writer`` (None: the reader's own) in the reader's shape."""
    if reader.type is SchemaType.AVRO:
        parsed = fastavro.parse_schema(reader.definition())
        if writer is None or writer.type is not SchemaType.AVRO or writer.schema == reader.schema:
            return lambda data: fastavro.schemaless_reader(io.BytesIO(data), parsed)
        written = fastavro.parse_schema(writer.definition())
        return lambda data: fastavro.schemaless_reader(io.BytesIO(data), written, parsed)
    if reader.type is SchemaType.JSON:
        definition = reader.definition()
        return lambda data: _json_value(definition, json.loads(data), {})
    return generic_decoder(reader)


def _json_value(kind: Any, value: Any, named: dict[str, Any]) -> Any:
    """A JSON value in the shape of an Avro type: a field a record lacks takes its default
    (JSON has no writer resolution), base64 text of a bytes field becomes bytes."""
    if value is None:
        return None
    if isinstance(kind, list):
        members = [m for m in kind if m != "null"]
        return _json_value(members[0], value, named) if members else None
    if isinstance(kind, str):
        if kind in named:
            return _json_value(named[kind], value, named)
        return base64.b64decode(value) if kind == "bytes" and isinstance(value, str) else value
    if "name" in kind:
        named[kind["name"]] = kind
    name = kind["type"]
    if name == "record":
        return {
            f["name"]: _json_value(f["type"], value.get(f["name"], f.get("default")), named)
            for f in kind["fields"]
        }
    if name == "array":
        return [_json_value(kind["items"], v, named) for v in value]
    if name == "map":
        return {k: _json_value(kind["values"], v, named) for k, v in value.items()}
    if name in ("enum", "fixed"):
        return value
    return _json_value(name, value, named)


async def topic_shape(client: Client, options: SourceOptions) -> ValueShape:
    """The read's value shape: the latest schema of the topics read (they must agree)."""
    if options.value_format == "binary":
        return ValueShape()
    partitions = await resolve_partitions(client, options)
    found: dict[str, SchemaInfo | None] = {}
    for topic in sorted({base_topic(p) for p in partitions}):
        try:
            found[topic] = await client.get_schema(topic)
        except TopicNotFound:
            found[topic] = None  # no schema: the payload is the value
    distinct = {(i.type, i.schema) if i else None for i in found.values()}
    if len(distinct) > 1:
        kinds = ", ".join(f"{t}: {i.type.name if i else 'none'}" for t, i in found.items())
        raise OptionError(
            f"the topics read have different schemas ({kinds}); read them in separate "
            "queries, or their raw bytes with the option valueFormat=binary"
        )
    topic, info = next(iter(found.items()), ("", None))
    return ValueShape(info, topic)
