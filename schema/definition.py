"""Record classes with typed fields: pulsar-client's ``pulsar.schema`` definition API.

A Record subclass declares its fields as class attributes; ``schema()`` is the Avro record
schema Pulsar's Python client derives from the same class (field order, ``["null", type]``
for a field that is not ``required``, a ``default`` only with ``required_default=True``), so
a class ported from pulsar-client registers the same definition and stays compatible with what
it registered there.

>>> class User(Record):
...     name = String(required=True)
...     age = Integer()
>>> User(name="ada", age=36).age
36
"""

from __future__ import annotations

import builtins
import copy
import enum
from typing import Any, ClassVar

__all__ = [
    "Array",
    "Boolean",
    "Bytes",
    "CustomEnum",
    "Double",
    "Field",
    "Float",
    "Integer",
    "Long",
    "Map",
    "Null",
    "Record",
    "String",
]

# Instance attributes of a Record that are not fields.
_RESERVED = ("_default", "_required", "_required_default")


def _name_of(kind: Any) -> str:
    return getattr(kind, "__name__", str(kind))


class Field:
    """One typed field of a Record. ``required``: the value may not be None (the Avro type
    is the plain type, not a union with null); ``default``: the value a new record starts
    with; ``required_default``: the default is written into the schema (what lets a reader
    of a newer version read data without the field)."""

    avro_type: ClassVar[str] = ""
    python_types: tuple[type, ...] = ()

    def __init__(
        self, default: Any = None, required: bool = False, required_default: bool = False
    ) -> None:
        self._required = required
        self._required_default = required_default
        self._default = None if default is None else self.validate_type("default", default)

    def type(self) -> str:
        """The Avro type name."""
        return self.avro_type

    def python_type(self) -> builtins.type | tuple[builtins.type, ...]:
        """The Python type(s) a value may have."""
        return self.python_types

    def validate_type(self, name: str, value: Any) -> Any:
        """The value to store for field ``name``; TypeError if it has the wrong type."""
        if value is None and not self._required:
            return self.default()
        if not isinstance(value, self.python_types) or (
            isinstance(value, bool) and bool not in self.python_types
        ):
            raise TypeError(
                f"Invalid type '{type(value)}' for field '{name}'. "
                f"Expected: {' or '.join(t.__name__ for t in self.python_types)}"
            )
        return value

    def schema(self) -> Any:
        """This field's Avro type, on its own."""
        return self.schema_info(set())

    def schema_info(self, defined_names: set[str]) -> Any:
        """This field's Avro type, in a schema where ``defined_names`` are named already."""
        return self.avro_type

    def default(self) -> Any:
        """The value a new record starts with."""
        return self._default

    def required_default(self) -> bool:
        """Whether the schema carries the default."""
        return self._required_default


class Null(Field):
    """Always None."""

    avro_type = "null"
    python_types = (type(None),)

    def validate_type(self, name: str, value: Any) -> Any:
        if value is not None:
            raise TypeError(f"Field {name} is set to be None")
        return value


class Boolean(Field):
    """A bool; False unless a default is given (as pulsar-client)."""

    avro_type = "boolean"
    python_types = (bool,)

    def default(self) -> Any:
        return False if self._default is None else self._default


class Integer(Field):
    """A 32-bit int."""

    avro_type = "int"
    python_types = (int,)


class Long(Field):
    """A 64-bit int."""

    avro_type = "long"
    python_types = (int,)


class Float(Field):
    """A 32-bit float (an int is taken too)."""

    avro_type = "float"
    python_types = (float, int)


class Double(Field):
    """A 64-bit float (an int is taken too)."""

    avro_type = "double"
    python_types = (float, int)


class Bytes(Field):
    """Bytes; a str is stored UTF-8 encoded."""

    avro_type = "bytes"
    python_types = (bytes, str)

    def validate_type(self, name: str, value: Any) -> Any:
        if isinstance(value, str):
            return value.encode()
        return super().validate_type(name, value)


class String(Field):
    """Text; bytes are decoded as UTF-8."""

    avro_type = "string"
    python_types = (str, bytes)

    def validate_type(self, name: str, value: Any) -> Any:
        value = super().validate_type(name, value)
        return value.decode() if isinstance(value, bytes) else value


class CustomEnum(Field):
    """A Python Enum (a class attribute holding an Enum class becomes one): an Avro enum of
    the members' names. A value may be given as the member, its name or its value."""

    avro_type = "enum"

    def __init__(
        self,
        enum_type: type[enum.Enum],
        default: Any = None,
        required: bool = False,
        required_default: bool = False,
    ) -> None:
        if not (isinstance(enum_type, type) and issubclass(enum_type, enum.Enum)):
            raise TypeError(f"{_name_of(enum_type)} is not a valid Enum type")
        self.enum_type = enum_type
        self.python_types = (enum_type,)
        super().__init__(default, required, required_default)

    def validate_type(self, name: str, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, self.enum_type):
            return value
        if isinstance(value, str) and value in self.enum_type.__members__:
            return self.enum_type[value]
        for member in self.enum_type:
            if member.value == value and not isinstance(value, bool):
                return member
        raise TypeError(
            f"Invalid enum value '{value}' for field '{name}'. "
            f"Expected: {list(self.enum_type.__members__)}"
        )

    def schema_info(self, defined_names: set[str]) -> Any:
        name = self.enum_type.__name__
        if name in defined_names:
            return name
        defined_names.add(name)
        return {"type": "enum", "name": name, "symbols": [m.name for m in self.enum_type]}


def _as_field(kind: Any) -> Field | Record:
    if isinstance(kind, (Field, Record)):
        return kind
    if isinstance(kind, type) and issubclass(kind, Record):
        return kind()
    raise TypeError(f"Argument {_name_of(kind)} is not a Record or a Field")


def _item_schema(kind: Field | Record, defined_names: set[str]) -> Any:
    if isinstance(kind, (Array, Map, Record)):
        return kind.schema_info(defined_names)
    return kind.type()


class Array(Field):
    """A list whose items are all of ``array_type`` (a Field or a Record)."""

    avro_type = "array"
    python_types = (list,)

    def __init__(
        self,
        array_type: Any,
        default: Any = None,
        required: bool = False,
        required_default: bool = False,
    ) -> None:
        self.array_type = _as_field(array_type)
        super().__init__(default, required, required_default)

    def validate_type(self, name: str, value: Any) -> Any:
        if value is None:
            return None
        super().validate_type(name, value)
        item = self.array_type
        return [_coerce(item, f"{name}[{i}]", v) for i, v in enumerate(value)]

    def schema_info(self, defined_names: set[str]) -> Any:
        return {"type": "array", "items": _item_schema(self.array_type, defined_names)}


class Map(Field):
    """A dict of str keys whose values are all of ``value_type`` (a Field or a Record)."""

    avro_type = "map"
    python_types = (dict,)

    def __init__(
        self,
        value_type: Any,
        default: Any = None,
        required: bool = False,
        required_default: bool = False,
    ) -> None:
        self.value_type = _as_field(value_type)
        super().__init__(default, required, required_default)

    def validate_type(self, name: str, value: Any) -> Any:
        if value is None:
            return None
        super().validate_type(name, value)
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"Map keys for field {name} should all be strings")
            out[key] = _coerce(self.value_type, f"{name}[{key!r}]", item)
        return out

    def schema_info(self, defined_names: set[str]) -> Any:
        return {"type": "map", "values": _item_schema(self.value_type, defined_names)}


def _coerce(kind: Field | Record, name: str, value: Any) -> Any:
    """An item of an array or map: a dict becomes the item Record (a decoded message)."""
    if isinstance(kind, Record) and isinstance(value, dict):
        return type(kind)(**value)
    if isinstance(kind, Field) and value is None:
        raise TypeError(f"Item {name} is None")
    return kind.validate_type(name, value)


class RecordMeta(type):
    """Collects a Record subclass's fields, in declaration order, into ``_fields``."""

    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> RecordMeta:
        if bases:  # not Record itself
            fields: dict[str, Field | Record] = {}
            for key, value in namespace.items():
                if isinstance(value, type) and issubclass(value, enum.Enum):
                    fields[key] = CustomEnum(value)
                elif isinstance(value, RecordMeta):
                    fields[key] = value()
                elif isinstance(value, (Field, Record)):
                    fields[key] = value
            namespace["_fields"] = fields
            namespace["_required"] = False
            namespace["_flat"] = _flat_plan(fields)
        return super().__new__(mcs, name, bases, namespace)


class Record(metaclass=RecordMeta):
    """A record type: subclass it and declare fields. Instances are built from keyword
    arguments (nested records may be given as dicts); setting an undeclared field or a value
    of the wrong type raises. A Record instance used as a field of another record is a nested
    record (``required``, ``default`` and ``required_default`` as for a Field).

    ``_avro_namespace`` sets the Avro namespace; ``_sorted_fields = True`` lists the fields
    alphabetically in the schema.
    """

    _fields: ClassVar[dict[str, Field | Record]] = {}
    # For a record of plain fields only (see _flat_plan): each field's name and the types its
    # value is stored as it is; None otherwise.
    _flat: ClassVar[tuple[tuple[str, frozenset[type]], ...] | None] = None
    # A nested field's settings (__init__ sets them on each instance); a record built from a
    # decoded message has the class's, which are __init__'s defaults.
    _default: Any = None
    _required: bool = False
    _required_default: bool = False
    _avro_namespace: ClassVar[str | None] = None
    _sorted_fields: ClassVar[bool] = False

    def __init__(
        self,
        default: Any = None,
        required_default: bool = False,
        required: bool = False,
        **kwargs: Any,
    ) -> None:
        object.__setattr__(self, "_default", default)
        object.__setattr__(self, "_required_default", required_default)
        object.__setattr__(self, "_required", required)
        for key, field in self._fields.items():
            if key in kwargs:
                value = kwargs[key]
                if isinstance(field, Record) and isinstance(value, dict):
                    value = type(field)(**value)
                setattr(self, key, value)
            elif isinstance(field, Record):
                object.__setattr__(self, key, field.default())
            else:
                object.__setattr__(self, key, copy.copy(field.default()))

    @classmethod
    def from_decoded(cls, fields: dict[str, Any]) -> Record:
        """A record from what an Avro decoder read against this class's own schema. Scalar
        values are taken as they are: the decoder has checked their types, and checking them
        again through ``__init__`` was most of a decode's cost. Enums, lists, maps and nested
        records go through the same conversions as in ``__init__``. A record of plain fields
        keeps ``fields`` itself as its attributes (the decoder made it for this record)."""
        if cls._flat is not None and len(fields) == len(cls._flat):
            return cls._with_state(fields)
        record = cls.__new__(cls)
        for key, field in cls._fields.items():
            value = fields.get(key)
            if type(field) in _TAKEN_AS_DECODED:
                if value is None and not field._required:
                    value = copy.copy(field.default())
                object.__setattr__(record, key, value)
            elif isinstance(field, Record) and isinstance(value, dict):
                object.__setattr__(record, key, type(field).from_decoded(value))
            elif key in fields:
                setattr(record, key, value)
            else:
                object.__setattr__(record, key, copy.copy(field.default()))
        return record

    @classmethod
    def from_json(cls, fields: dict[str, Any]) -> Record:
        """A record from a decoded JSON object: as ``cls(**fields)``, whose checks a JSON
        value needs (nothing typed it), with a record of plain fields whose values all have
        their field's type built in one step instead of one checked assignment a field."""
        flat = cls._flat
        if flat is None:
            return cls(**fields)
        state = {}
        for name, types in flat:
            value = fields.get(name, _MISSING)
            if type(value) not in types:  # converted, defaulted or refused by __init__
                return cls(**fields)
            state[name] = value
        return cls._with_state(state)

    @classmethod
    def _with_state(cls, state: dict[str, Any]) -> Record:
        """A record whose attributes are ``state`` (field values only)."""
        record = _new(cls)
        _set_attribute(record, "__dict__", state)
        return record

    @classmethod
    def schema(cls) -> dict[str, Any]:
        """The Avro record schema of this class, as pulsar-client's ``Record.schema()``."""
        return cls.schema_info(set())

    @classmethod
    def schema_info(cls, defined_names: set[str]) -> Any:
        """The schema, or only the record's name where ``defined_names`` has it already."""
        prefix = f"{cls._avro_namespace}." if cls._avro_namespace is not None else ""
        full_name = prefix + cls.__name__
        if full_name in defined_names:
            return full_name
        defined_names.add(full_name)
        schema: dict[str, Any] = {"type": "record", "name": cls.__name__}
        if cls._avro_namespace is not None:
            schema["namespace"] = cls._avro_namespace
        names = sorted(cls._fields) if cls._sorted_fields else list(cls._fields)
        fields = []
        for name in names:
            field = cls._fields[name]
            field_type = field.schema_info(defined_names)
            if not field._required:
                field_type = ["null", field_type]
            if field.required_default():
                default = field.default()
                default = default.name if isinstance(default, enum.Enum) else default
                fields.append({"name": name, "default": default, "type": field_type})
            else:
                fields.append({"name": name, "type": field_type})
        schema["fields"] = fields
        return schema

    def __setattr__(self, key: str, value: Any) -> None:
        if key in _RESERVED:
            object.__setattr__(self, key, value)
            return
        field = self._fields.get(key)
        if field is None:
            raise AttributeError(f"Cannot set undeclared field {key} on record")
        object.__setattr__(self, key, field.validate_type(key, value))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f, None) for f in self._fields)

    # Mutable and compared by value: not hashable.
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        values = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields)
        return f"{type(self).__name__}({values})"

    def type(self) -> str:
        """The record's name."""
        return type(self).__name__

    def python_type(self) -> builtins.type:
        """The record class."""
        return type(self)

    def validate_type(self, name: str, value: Any) -> Any:
        """As a nested field: a value must be an instance of this record class (or None)."""
        if value is None and not self._required:
            return self.default()
        if not isinstance(value, type(self)):
            raise TypeError(
                f"Invalid type '{type(value)}' for sub-record field '{name}'. "
                f"Expected: {type(self).__name__}"
            )
        return value

    def default(self) -> Any:
        """As a nested field: the default value."""
        return self._default

    def required_default(self) -> bool:
        """As a nested field: whether the schema carries the default."""
        return self._required_default

    def to_dict(self) -> dict[str, Any]:
        """The field values, nested records and enums included, as plain Python values
        (enums by name): what the Avro and JSON encoders write."""
        return {name: _plain(getattr(self, name)) for name in self._fields}


def _plain(value: Any) -> Any:
    if type(value) in _SCALARS:  # most fields: nothing to convert, and the cheapest test
        return value
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _flat_plan(
    fields: dict[str, Field | Record],
) -> tuple[tuple[str, frozenset[type]], ...] | None:
    """Each field's name and the exact types ``__init__`` would store unchanged, when every
    field is a plain one (a scalar whose None stays None); None when any is not (an enum, a
    list, a map, a nested record, an optional Boolean whose None becomes False)."""
    plan = []
    for name, field in fields.items():
        types = _STORED_AS_IS.get(type(field))
        if types is None or not (field._required or field.default() is None):
            return None
        plan.append((name, types if field._required else types | {type(None)}))
    return tuple(plan)


_SCALARS = frozenset({str, int, float, bool, bytes, type(None)})
# The value types each plain field keeps as they are (bool is not an int here: __init__
# refuses it for an Integer; a str for Bytes and bytes for String are converted).
_STORED_AS_IS: dict[type, frozenset[type]] = {
    Null: frozenset({type(None)}),
    Boolean: frozenset({bool}),
    Integer: frozenset({int}),
    Long: frozenset({int}),
    Float: frozenset({float, int}),
    Double: frozenset({float, int}),
    Bytes: frozenset({bytes}),
    String: frozenset({str}),
}
_MISSING = object()
_new = object.__new__
_set_attribute = object.__setattr__
# Fields whose decoded Avro value is already what ``__init__`` would store (a str for String,
# bytes for Bytes, a bool, an int, a float): Record.from_decoded takes them as they are.
_TAKEN_AS_DECODED = frozenset({Null, Boolean, Integer, Long, Float, Double, Bytes, String})
