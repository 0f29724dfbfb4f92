"""The compatibility checks (Pulsar's SchemaCompatibilityCheck implementations), with Apache
Avro's own checker for Avro-described definitions.

- AVRO, JSON, PROTOBUF: Avro's reader/writer rules. BACKWARD: the new schema reads what the
  existing one wrote; FORWARD: the existing one reads what the new one writes; FULL: both.
  The _TRANSITIVE forms check every version since the last delete, the others the latest.
- KEY_VALUE: the key's and the value's schemas, each by its own type's rules.
- PROTOBUF_NATIVE: Pulsar's rule: the root message may not change (its fields are not
  compared, as Pulsar's ProtobufNativeSchemaCompatibilityCheck does not).
- the primitives: the same type only, whatever the strategy (Pulsar's rule).

A type change is refused (except under ALWAYS_COMPATIBLE), ALWAYS_INCOMPATIBLE refuses any new
schema once there is one, and ALWAYS_COMPATIBLE accepts anything of a struct type. A refusal
says which version, which field and which rule.
"""

from __future__ import annotations

from collections.abc import Sequence

import avro.schema
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from pulsar_grpc.broker.errors import IncompatibleSchemaError
from pulsar_grpc.broker.schema.data import (
    CompatibilityStrategy,
    SchemaInfo,
    SchemaType,
    StoredSchema,
)
from pulsar_grpc.broker.schema.validation import (
    avro_schema,
    key_value_parts,
    protobuf_native_root,
)


def check(
    existing: Sequence[StoredSchema], new: SchemaInfo, strategy: CompatibilityStrategy
) -> None:
    """Raise IncompatibleSchemaError unless ``new`` may follow ``existing`` (the versions since
    the last delete, oldest first) under ``strategy`` (not UNDEFINED: resolve it first)."""
    if not existing:
        return
    targets = existing if strategy.transitive else existing[-1:]
    for old in reversed(targets):
        try:
            _check_pair(old.info, new, strategy)
        except IncompatibleSchemaError as exc:
            raise IncompatibleSchemaError(
                f"Incompatible schema: {exc.message} (version {old.version}, strategy "
                f"{strategy.value})"
            ) from None


def _check_pair(old: SchemaInfo, new: SchemaInfo, strategy: CompatibilityStrategy) -> None:
    if old.type.is_primitive or new.type.is_primitive:
        if old.type is not new.type:
            raise IncompatibleSchemaError(
                f"the topic's schema type is {old.type.name}, the new one {new.type.name}"
            )
        return
    if strategy is CompatibilityStrategy.ALWAYS_COMPATIBLE:
        return
    if old.type is not new.type:
        raise IncompatibleSchemaError(
            f"the topic's schema type is {old.type.name}, the new one {new.type.name}"
        )
    if old.fingerprint == new.fingerprint:
        return
    if strategy is CompatibilityStrategy.ALWAYS_INCOMPATIBLE:
        raise IncompatibleSchemaError("the strategy refuses every new schema")
    if new.type.is_struct:
        _check_avro(avro_schema(old), avro_schema(new), strategy)
    elif new.type is SchemaType.KEY_VALUE:
        for side, old_part, new_part in zip(
            ("key", "value"), key_value_parts(old), key_value_parts(new), strict=True
        ):
            try:
                _check_pair(old_part, new_part, strategy)
            except IncompatibleSchemaError as exc:
                raise IncompatibleSchemaError(f"the {side} schema: {exc.message}") from None
    elif new.type is SchemaType.PROTOBUF_NATIVE:
        old_root, new_root = protobuf_native_root(old), protobuf_native_root(new)
        if old_root != new_root:
            raise IncompatibleSchemaError(
                f"the root message may not change (from {old_root} to {new_root})"
            )


def _check_avro(
    old: avro.schema.Schema, new: avro.schema.Schema, strategy: CompatibilityStrategy
) -> None:
    if strategy.new_reads_old:
        _can_read(new, old, "the new schema cannot read data written with the topic's schema")
    if strategy.old_reads_new:
        _can_read(old, new, "the topic's schema cannot read data written with the new one")


def _can_read(reader: avro.schema.Schema, writer: avro.schema.Schema, what: str) -> None:
    result = ReaderWriterCompatibilityChecker().get_compatibility(reader, writer)
    if result.compatibility is SchemaCompatibilityType.compatible:
        return
    rules = ", ".join(sorted(i.value for i in result.incompatibilities))
    where = "; ".join(_describe(reader, location) for location in sorted(result.locations))
    details = "; ".join(sorted(str(m) for m in result.messages))
    raise IncompatibleSchemaError(f"{what}: {where}: {rules} ({details})")


def _describe(reader: avro.schema.Schema, location: str) -> str:
    """``field 'b' (/fields/1)`` for a location in a record's fields, else the location."""
    parts = location.strip("/").split("/")
    if len(parts) >= 2 and parts[0] == "fields" and parts[1].isdigit():
        fields = getattr(reader, "fields", None) or []
        index = int(parts[1])
        if index < len(fields):
            return f"field '{fields[index].name}' ({location})"
    return f"at {location}"
