"""Pulsar's java.time schemas in the SDK: the exact bytes Pulsar's Java InstantSchema,
LocalDateSchema, LocalTimeSchema and LocalDateTimeSchema write, round trips, refusals of
values that name no instant or would lose their time, and AUTO_CONSUME decoding them."""

from __future__ import annotations

import datetime as dt
import struct
from typing import Any

import pytest

from pulsar_grpc.schema import (
    AutoConsumeSchema,
    InstantSchema,
    LocalDateSchema,
    LocalDateTimeSchema,
    LocalTimeSchema,
    Schema,
    SchemaSerializationError,
    SchemaType,
)

UTC = dt.UTC
NOON_NANOS = (12 * 3600 + 34 * 60 + 56) * 1_000_000_000 + 789_000_000


@pytest.mark.parametrize(
    ("schema", "value", "wire"),
    [
        # epoch second then nanosecond of it, as Java's Instant.getEpochSecond / getNano
        (
            InstantSchema(),
            dt.datetime(2020, 1, 1, 0, 0, 0, 123456, tzinfo=UTC),
            struct.pack(">qi", 1_577_836_800, 123_456_000),
        ),
        # before the epoch: the second is floored and the nanoseconds stay positive
        (
            InstantSchema(),
            dt.datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=UTC),
            struct.pack(">qi", -1, 500_000_000),
        ),
        (LocalDateSchema(), dt.date(2020, 1, 1), struct.pack(">q", 18262)),
        (LocalDateSchema(), dt.date(1969, 12, 31), struct.pack(">q", -1)),
        (LocalTimeSchema(), dt.time(12, 34, 56, 789000), struct.pack(">q", NOON_NANOS)),
        (
            LocalDateTimeSchema(),
            dt.datetime(2020, 1, 1, 12, 34, 56, 789000),
            struct.pack(">qq", 18262, NOON_NANOS),
        ),
    ],
    ids=lambda p: type(p).__name__ if isinstance(p, Schema) else "",
)
def test_pulsars_encoding_both_ways(schema: Schema, value: Any, wire: bytes) -> None:
    assert schema.encode(value) == wire
    assert schema.decode(wire) == value
    assert AutoConsumeSchema().decoder_for(schema.schema_info())(wire) == value


def test_schema_infos_are_pulsars() -> None:
    infos = [
        s.schema_info()
        for s in (InstantSchema(), LocalDateSchema(), LocalTimeSchema(), LocalDateTimeSchema())
    ]
    assert [(i.type, i.name, i.schema) for i in infos] == [
        (SchemaType.INSTANT, "Instant", b""),
        (SchemaType.LOCAL_DATE, "LocalDate", b""),
        (SchemaType.LOCAL_TIME, "LocalTime", b""),
        (SchemaType.LOCAL_DATE_TIME, "LocalDateTime", b""),
    ]


def test_an_instant_in_another_zone_is_the_same_instant() -> None:
    paris = dt.timezone(dt.timedelta(hours=1))
    value = dt.datetime(2020, 1, 1, 1, 0, tzinfo=paris)
    decoded = InstantSchema().decode(InstantSchema().encode(value))
    assert decoded == value and decoded.tzinfo is UTC


def test_nanoseconds_from_java_are_truncated_to_microseconds() -> None:
    wire = struct.pack(">qi", 0, 123_456_789)
    assert InstantSchema().decode(wire) == dt.datetime(1970, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)
    time_wire = struct.pack(">q", 999)
    assert LocalTimeSchema().decode(time_wire) == dt.time(0, 0, 0, 0)


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        (InstantSchema(), dt.datetime(2020, 1, 1)),  # naive: names no instant
        (InstantSchema(), 1_577_836_800),
        (LocalDateSchema(), dt.datetime(2020, 1, 1, 12)),  # its time would be lost
        (LocalTimeSchema(), dt.time(12, tzinfo=UTC)),
        (LocalDateTimeSchema(), dt.datetime(2020, 1, 1, tzinfo=UTC)),
        (LocalDateTimeSchema(), dt.date(2020, 1, 1)),
    ],
    ids=lambda p: type(p).__name__ if isinstance(p, Schema) else "",
)
def test_values_of_the_wrong_kind_are_refused(schema: Schema, value: Any) -> None:
    with pytest.raises(TypeError, match="expected"):
        schema.encode(value)


@pytest.mark.parametrize(
    ("schema", "wire"),
    [
        (InstantSchema(), b"\x00" * 8),  # too short
        (InstantSchema(), struct.pack(">qi", 0, 1_000_000_000)),  # nanos past the second
        (InstantSchema(), struct.pack(">qi", 2**62, 0)),  # beyond Python's datetime
        (LocalDateSchema(), struct.pack(">q", 2**40)),
        (LocalTimeSchema(), struct.pack(">q", 86_400 * 1_000_000_000)),  # past the day
        (LocalDateTimeSchema(), struct.pack(">qq", 0, -1)),
    ],
    ids=lambda p: type(p).__name__ if isinstance(p, Schema) else "",
)
def test_bytes_that_are_no_such_value_raise_a_schema_error(schema: Schema, wire: bytes) -> None:
    with pytest.raises(SchemaSerializationError):
        schema.decode(wire)
