"""Pulsar's java.time schemas, with their encodings (InstantSchema, LocalDateSchema,
LocalTimeSchema, LocalDateTimeSchema of Pulsar's Java client), so that a value written here
reads in a Java consumer and the other way round:

- INSTANT: epoch seconds (int64) then nanoseconds of that second (int32), big-endian, 12 bytes;
  a UTC-aware ``datetime.datetime`` here;
- LOCAL_DATE: the epoch day (int64), a ``datetime.date``;
- LOCAL_TIME: the nanosecond of the day (int64), a naive ``datetime.time``;
- LOCAL_DATE_TIME: the epoch day then the nanosecond of the day (two int64), a naive
  ``datetime.datetime``.

Python's datetime counts microseconds: a value written with finer nanoseconds (by Java) reads
here truncated to the microsecond. Pulsar's DATE, TIME and TIMESTAMP (java.util.Date and the
java.sql types) are milliseconds in an INT64; pulsar-client for Python has no schema for them,
so AUTO_CONSUME gives that millisecond count as an int (auto.py).
"""

from __future__ import annotations

import datetime as dt
import struct
from typing import Any, ClassVar

from .schema import Schema, SchemaInfo, SchemaSerializationError, SchemaType

__all__ = ["InstantSchema", "LocalDateSchema", "LocalDateTimeSchema", "LocalTimeSchema"]

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
_NANOS_PER_DAY = 86_400 * 1_000_000_000
_INSTANT = struct.Struct(">qi")
_LONG = struct.Struct(">q")
_TWO_LONGS = struct.Struct(">qq")


class _TemporalSchema(Schema):
    """A java.time schema: its SchemaInfo is Pulsar's (empty definition, Java's name)."""

    schema_type: ClassVar[SchemaType]
    java_name: ClassVar[str]
    layout: ClassVar[struct.Struct]

    def __init__(self) -> None:
        super().__init__(SchemaInfo(self.schema_type, self.java_name), None)

    def encode(self, value: Any) -> bytes:
        self._check(value)
        try:
            return self.layout.pack(*self._fields(value))
        except struct.error as exc:
            raise SchemaSerializationError(f"{value!r} does not fit {self!r}: {exc}") from None

    def decode(self, data: bytes) -> Any:
        if len(data) != self.layout.size:
            raise SchemaSerializationError(
                f"{self!r} expects {self.layout.size} bytes, the message has {len(data)}"
            )
        try:
            return self._value(*self.layout.unpack(data))
        except (OverflowError, ValueError) as exc:
            raise SchemaSerializationError(
                f"{self!r} cannot represent the message's value in Python: {exc}"
            ) from None

    def _check(self, value: Any) -> None:
        raise NotImplementedError

    def _fields(self, value: Any) -> tuple[int, ...]:
        raise NotImplementedError

    def _value(self, *fields: int) -> Any:
        raise NotImplementedError

    def _refuse(self, value: Any, expected: str) -> None:
        raise TypeError(
            f"Invalid record obj of type {type(value)} - expected {expected} ({self!r})"
        )


def _nano_of_day(value: dt.time | dt.datetime) -> int:
    seconds = (value.hour * 60 + value.minute) * 60 + value.second
    return seconds * 1_000_000_000 + value.microsecond * 1000


def _time_of(nano_of_day: int) -> dt.time:
    if not 0 <= nano_of_day < _NANOS_PER_DAY:
        raise ValueError(f"nanosecond of the day {nano_of_day} is outside a day")
    seconds, nanos = divmod(nano_of_day, 1_000_000_000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return dt.time(hour, minute, second, nanos // 1000)


class InstantSchema(_TemporalSchema):
    """INSTANT: a UTC-aware ``datetime`` (an aware one in any zone is the same instant; a
    naive one is refused, since it names no instant)."""

    schema_type = SchemaType.INSTANT
    java_name = "Instant"
    layout = _INSTANT

    def _check(self, value: Any) -> None:
        if not isinstance(value, dt.datetime) or value.utcoffset() is None:
            self._refuse(value, "an aware datetime.datetime")

    def _fields(self, value: dt.datetime) -> tuple[int, ...]:
        delta = value - _EPOCH  # days and seconds floor, as Java's epoch second
        return delta.days * 86_400 + delta.seconds, delta.microseconds * 1000

    def _value(self, *fields: int) -> dt.datetime:
        seconds, nanos = fields
        if not 0 <= nanos < 1_000_000_000:
            raise ValueError(f"nanoseconds {nanos} are outside a second")
        return _EPOCH + dt.timedelta(seconds=seconds, microseconds=nanos // 1000)


class LocalDateSchema(_TemporalSchema):
    """LOCAL_DATE: a ``datetime.date`` (not a datetime: its time would be lost)."""

    schema_type = SchemaType.LOCAL_DATE
    java_name = "LocalDate"
    layout = _LONG

    def _check(self, value: Any) -> None:
        if not isinstance(value, dt.date) or isinstance(value, dt.datetime):
            self._refuse(value, "a datetime.date")

    def _fields(self, value: dt.date) -> tuple[int, ...]:
        return (value.toordinal() - _EPOCH_ORDINAL,)

    def _value(self, *fields: int) -> dt.date:
        return dt.date.fromordinal(fields[0] + _EPOCH_ORDINAL)


class LocalTimeSchema(_TemporalSchema):
    """LOCAL_TIME: a naive ``datetime.time`` (a local time has no zone)."""

    schema_type = SchemaType.LOCAL_TIME
    java_name = "LocalTime"
    layout = _LONG

    def _check(self, value: Any) -> None:
        if not isinstance(value, dt.time) or value.tzinfo is not None:
            self._refuse(value, "a naive datetime.time")

    def _fields(self, value: dt.time) -> tuple[int, ...]:
        return (_nano_of_day(value),)

    def _value(self, *fields: int) -> dt.time:
        return _time_of(fields[0])


class LocalDateTimeSchema(_TemporalSchema):
    """LOCAL_DATE_TIME: a naive ``datetime.datetime``."""

    schema_type = SchemaType.LOCAL_DATE_TIME
    java_name = "LocalDateTime"
    layout = _TWO_LONGS

    def _check(self, value: Any) -> None:
        if not isinstance(value, dt.datetime) or value.tzinfo is not None:
            self._refuse(value, "a naive datetime.datetime")

    def _fields(self, value: dt.datetime) -> tuple[int, ...]:
        return value.toordinal() - _EPOCH_ORDINAL, _nano_of_day(value)

    def _value(self, *fields: int) -> dt.datetime:
        epoch_day, nano_of_day = fields
        day = dt.date.fromordinal(epoch_day + _EPOCH_ORDINAL)
        return dt.datetime.combine(day, _time_of(nano_of_day))
