"""The Spark source's schema mappings without a JVM: Spark types -> the sink's Avro record ->
the source's Arrow/Spark types (they must come back the same), a row encoded by the sink and
decoded by the source, JSON values filled with defaults, and the types with no column form."""

from __future__ import annotations

import datetime
import decimal
import json
from collections.abc import Mapping

import pytest
from pyspark.sql.pandas.types import from_arrow_type
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pulsar_grpc.schema import SchemaInfo, SchemaType
from pulsar_grpc.spark._encode import UnsupportedColumn, plan_encoding
from pulsar_grpc.spark._options import OptionError, SourceOptions
from pulsar_grpc.spark._typed import UnsupportedSchema, ValueShape, _decoder


def struct(**fields: DataType) -> StructType:
    """``fromDDL`` needs a JVM; unit tests build the types by hand."""
    return StructType([StructField(name, kind) for name, kind in fields.items()])


SPARK = struct(
    s=StringType(),
    b=BinaryType(),
    t=BooleanType(),
    i=IntegerType(),
    l=LongType(),
    f=FloatType(),
    d=DoubleType(),
    day=DateType(),
    at=TimestampType(),
    money=DecimalType(10, 2),
    tags=ArrayType(StringType()),
    counts=MapType(StringType(), LongType()),
    inner=struct(city=StringType()),
)


def avro(definition: Mapping[str, object], kind: SchemaType = SchemaType.AVRO) -> SchemaInfo:
    return SchemaInfo(kind, kind.name, json.dumps(definition).encode())


def test_spark_types_survive_the_sink_and_the_source() -> None:
    encoding = plan_encoding(struct(value=SPARK), None, None)
    assert encoding.definition_text is not None
    info = avro(json.loads(encoding.definition_text))
    back = from_arrow_type(ValueShape(info, "t").arrow_type())
    assert back.simpleString() == SPARK.simpleString()
    row = {
        "s": "x",
        "b": b"\x00",
        "t": True,
        "i": 1,
        "l": 2**40,
        "f": 1.5,
        "d": 2.5,
        "day": datetime.date(2024, 2, 29),
        "at": datetime.datetime(2024, 1, 1, 12, tzinfo=datetime.UTC),
        "money": decimal.Decimal("12.34"),
        "tags": ["a"],
        "counts": [("k", 1)],  # a map as Arrow's to_pylist gives it
        "inner": {"city": "Oslo"},
    }
    (value,) = encoding.values({"value": [row]}, 1)
    schema = encoding.schema()
    assert schema is not None
    decoded = _decoder(info, None)(schema.encode(value))
    assert decoded == {**row, "counts": {"k": 1}}


def test_the_topics_record_names_and_nullability_win() -> None:
    existing = {
        "type": "record",
        "name": "User",
        "namespace": "app",
        "fields": [
            {"name": "name", "type": "string"},
            {"name": "home", "type": ["null", {"type": "record", "name": "Home", "fields": []}]},
        ],
    }
    df = struct(name=StringType(), home=struct(city=StringType()), keyString=StringType())
    encoding = plan_encoding(df, None, avro(existing))
    assert encoding.columns == ("name", "home")  # keyString is metadata
    derived = json.loads(encoding.definition_text or "")
    assert (derived["name"], derived["namespace"]) == ("User", "app")
    assert derived["fields"][0]["type"] == "string"  # required in the topic: not a union
    assert derived["fields"][1]["type"][1]["name"] == "Home"


def test_json_values_take_defaults_and_bytes_from_base64() -> None:
    definition = {
        "type": "record",
        "name": "E",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "raw", "type": ["null", "bytes"], "default": None},
            {"name": "source", "type": "string", "default": "legacy"},
        ],
    }
    decode = _decoder(avro(definition, SchemaType.JSON), None)
    assert decode(b'{"id": 1, "raw": "AAE="}') == {"id": 1, "raw": b"\x00\x01", "source": "legacy"}


def test_types_without_a_column_form_are_refused_by_name() -> None:
    union = {"type": "record", "name": "U", "fields": [{"name": "u", "type": ["int", "string"]}]}
    with pytest.raises(UnsupportedSchema, match=r"union of 2 non-null types.*valueFormat=binary"):
        ValueShape(avro(union), "t").arrow_type()
    with pytest.raises(UnsupportedColumn, match="m: map<int,string> has no Avro form"):
        plan_encoding(struct(m=MapType(IntegerType(), StringType())), None, None)
    raw = plan_encoding(struct(value=BinaryType(), key=StringType()), None, None)
    assert raw.schema() is None  # bytes, as before: no schema declared


def test_the_avro_schema_option_is_checked_at_planning_and_used_as_given() -> None:
    base = {"service.url": "grpc://127.0.0.1:1", "topic": "t"}
    with pytest.raises(OptionError, match="avroSchema: expected an Avro schema in JSON"):
        SourceOptions.parse({**base, "avro.schema": "{not json"})
    with pytest.raises(OptionError, match="valueFormat: expected typed or binary"):
        SourceOptions.parse({**base, "valueFormat": "avro"})
    given = json.dumps({"type": "record", "name": "R", "fields": [{"name": "n", "type": "string"}]})
    options = SourceOptions.parse({**base, "avroSchema": given})
    encoding = plan_encoding(struct(n=StringType()), options.avro_schema, None)
    assert (encoding.definition_text, encoding.columns) == (given, ("n",))
