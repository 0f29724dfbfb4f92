"""Typed writes: how the sink turns a row into a payload and which schema it registers.

A DataFrame with a binary (or string) ``value`` column writes those bytes without a schema,
as before. Otherwise the row's value is a record: the ``value`` struct, or, without a
``value`` column, every column that is not message metadata (key, keyString, properties,
eventTime, topic), as Pulsar's Spark connector writes a row's fields. Its Avro schema is
derived from the Spark types (Spark's ``to_avro`` mapping; a nullable column is a union with
null, default null) or given with the option ``avroSchema``; a ``value`` column of a
primitive Spark type writes Pulsar's schema of that primitive. The producer declares the
schema, so the broker registers it or refuses it under the namespace's strategy.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from pulsar_grpc.schema import (
    AvroSchema,
    BooleanSchema,
    ByteSchema,
    DoubleSchema,
    FloatSchema,
    IntSchema,
    LongSchema,
    Schema,
    SchemaInfo,
    SchemaType,
    ShortSchema,
)

#: Columns that are message metadata, never part of a written record.
META = ("key", "keyString", "properties", "eventTime", "topic")
RAW_VALUE = (BinaryType, StringType)
RECORD_NAME = "topLevelRecord"  # Spark's to_avro default

_PRIMITIVE_SCHEMAS: dict[type[DataType], Callable[[], Schema]] = {
    BooleanType: BooleanSchema,
    ByteType: ByteSchema,
    ShortType: ShortSchema,
    IntegerType: IntSchema,
    LongType: LongSchema,
    FloatType: FloatSchema,
    DoubleType: DoubleSchema,
}
_AVRO: dict[type[DataType], Any] = {
    StringType: "string",
    BinaryType: "bytes",
    BooleanType: "boolean",
    ByteType: "int",
    ShortType: "int",
    IntegerType: "int",
    LongType: "long",
    FloatType: "float",
    DoubleType: "double",
    DateType: {"type": "int", "logicalType": "date"},
    TimestampType: {"type": "long", "logicalType": "timestamp-micros"},
    TimestampNTZType: {"type": "long", "logicalType": "timestamp-micros"},
}


class UnsupportedColumn(ValueError):
    """A column whose Spark type has no Avro form here."""


@dataclass(frozen=True)
class ValueEncoding:
    """How a row becomes a payload: the ``value`` column's bytes (``kind`` None), a primitive
    (``kind`` its schema class), or a record with Avro ``definition`` made of the ``value``
    struct (``columns`` empty) or of ``columns``."""

    definition_text: str | None = None
    columns: tuple[str, ...] = ()
    kind: Callable[[], Schema] | None = None

    @property
    def typed(self) -> bool:
        """Whether rows are written with a schema (else the value column's bytes)."""
        return self.definition_text is not None or self.kind is not None

    def schema(self) -> Schema | None:
        """The producer's schema (None: bytes, no schema declared)."""
        if self.kind is not None:
            return self.kind()
        if self.definition_text is None:
            return None
        return AvroSchema(None, schema_definition=json.loads(self.definition_text))

    def values(self, columns: dict[str, list[Any]], rows: int) -> list[Any]:
        """The rows' values, as the schema encodes them."""
        if self.definition_text is None:
            return columns["value"]
        definition = json.loads(self.definition_text)
        if self.columns:
            records: list[Any] = [{c: columns[c][i] for c in self.columns} for i in range(rows)]
        else:
            records = columns["value"]
        return [_avro_value(definition, r, {}) for r in records]


def plan_encoding(
    schema: StructType, avro_schema: str | None, like: SchemaInfo | None
) -> ValueEncoding:
    """The encoding of a DataFrame with ``schema``; ``like``: the topic's current schema,
    whose record names and nullability the derived schema follows (Avro resolution matches
    records by name, and Spark marks almost every column nullable)."""
    fields = {f.name: f for f in schema.fields}
    value = fields.get("value")
    columns = () if value is not None else tuple(n for n in fields if n not in META)
    if avro_schema is not None:
        return ValueEncoding(avro_schema, columns)
    if value is not None and isinstance(value.dataType, RAW_VALUE):
        return ValueEncoding()
    if value is not None and type(value.dataType) in _PRIMITIVE_SCHEMAS:
        return ValueEncoding(kind=_PRIMITIVE_SCHEMAS[type(value.dataType)])
    record = value.dataType if value is not None else StructType([fields[c] for c in columns])
    if not isinstance(record, StructType) or not record.fields:
        raise UnsupportedColumn(
            f"value: expected binary, string, a primitive or a struct, got {record.simpleString()}"
        )
    existing = like.definition() if like is not None and like.type is SchemaType.AVRO else None
    name = existing.get("name", RECORD_NAME) if isinstance(existing, dict) else RECORD_NAME
    derived = _record(record, name, existing, ())
    if isinstance(existing, dict) and existing.get("namespace"):
        derived["namespace"] = existing["namespace"]
    return ValueEncoding(json.dumps(derived), columns)


def _non_null(kind: Any) -> Any:
    """The type inside a nullable union (the type itself otherwise)."""
    if isinstance(kind, list):
        members = [m for m in kind if m != "null"]
        return members[0] if len(members) == 1 else None
    return kind


def _record(struct: StructType, name: str, like: Any, path: tuple[str, ...]) -> dict[str, Any]:
    like_fields = {f["name"]: f for f in like.get("fields", [])} if isinstance(like, dict) else {}
    fields = []
    for field in struct.fields:
        existing = like_fields.get(field.name)
        inner = _non_null(existing["type"]) if existing is not None else None
        kind = _avro_type(field.dataType, inner, (*path, field.name))
        nullable = field.nullable if existing is None else isinstance(existing["type"], list)
        out: dict[str, Any] = {"name": field.name, "type": ["null", kind] if nullable else kind}
        if nullable:
            out["default"] = None
        elif existing is not None and "default" in existing:
            out["default"] = existing["default"]
        fields.append(out)
    return {"type": "record", "name": name, "fields": fields}


def _avro_type(kind: DataType, like: Any, path: tuple[str, ...]) -> Any:
    simple = _AVRO.get(type(kind))
    if simple is not None:
        return simple
    if isinstance(kind, DecimalType):
        return {
            "type": "bytes",
            "logicalType": "decimal",
            "precision": kind.precision,
            "scale": kind.scale,
        }
    if isinstance(kind, StructType):
        name = like.get("name") if isinstance(like, dict) and like.get("type") == "record" else None
        return _record(kind, name or "_".join((RECORD_NAME, *path)), like, path)
    if isinstance(kind, ArrayType):
        items_like = _non_null(like.get("items")) if isinstance(like, dict) else None
        items = _avro_type(kind.elementType, items_like, path)
        return {"type": "array", "items": ["null", items] if kind.containsNull else items}
    if isinstance(kind, MapType) and isinstance(kind.keyType, StringType):
        values_like = _non_null(like.get("values")) if isinstance(like, dict) else None
        values = _avro_type(kind.valueType, values_like, path)
        return {"type": "map", "values": ["null", values] if kind.valueContainsNull else values}
    raise UnsupportedColumn(f"{'.'.join(path)}: {kind.simpleString()} has no Avro form")


def _avro_value(kind: Any, value: Any, named: dict[str, Any]) -> Any:
    """A row's Python value (from Arrow: maps are lists of pairs) as fastavro writes it."""
    if value is None:
        return None
    if isinstance(kind, list):
        members = [m for m in kind if m != "null"]
        return _avro_value(members[0], value, named) if len(members) == 1 else value
    if isinstance(kind, str):
        return _avro_value(named[kind], value, named) if kind in named else value
    if "name" in kind:
        named[kind["name"]] = kind
    if kind["type"] == "record":
        return {
            f["name"]: _avro_value(f["type"], value.get(f["name"]), named) for f in kind["fields"]
        }
    if kind["type"] == "array":
        return [_avro_value(kind["items"], v, named) for v in value]
    if kind["type"] == "map":
        pairs = value.items() if isinstance(value, dict) else value
        return {k: _avro_value(kind["values"], v, named) for k, v in pairs}
    return value
