"""What the schema registry keeps: Pulsar's schema types, compatibility strategies, a schema's
definition (:class:`SchemaInfo`) and a stored version of it (:class:`StoredSchema`).

Protocol-neutral: a protocol handler turns its own wire form into a :class:`SchemaInfo` with
:meth:`SchemaInfo.create`, which validates the definition (broker/schema/validation.py).
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from pulsar_grpc.broker.errors import InvalidSchemaDataError
from pulsar_grpc.broker.json_text import json_value

# Pulsar's versions are longs sent as 8 bytes, big-endian (LongSchemaVersion).
VERSION_BYTES = 8


class SchemaType(enum.IntEnum):
    """Pulsar's Schema.Type (PulsarApi.proto), with its numbers; NONE is bytes, no schema."""

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

    @property
    def is_struct(self) -> bool:
        """Described by an Avro schema (Pulsar's AvroSchemaBasedCompatibilityCheck types)."""
        return self in _AVRO_DESCRIBED

    @property
    def is_primitive(self) -> bool:
        """Pulsar's SchemaType.isPrimitive: compatible only with the same type."""
        return self not in _COMPLEX

    @classmethod
    def parse(cls, name: str) -> SchemaType:
        """A type by Pulsar's name (admin JSON); BYTES is NONE, as Pulsar stores it."""
        if name == "BYTES":
            return cls.NONE
        try:
            return cls[name]
        except KeyError:
            raise InvalidSchemaDataError(
                f"unknown schema type {name[:40]!r} (known: {', '.join(t.name for t in cls)})"
            ) from None


_AVRO_DESCRIBED = frozenset({SchemaType.JSON, SchemaType.PROTOBUF, SchemaType.AVRO})
_COMPLEX = _AVRO_DESCRIBED | {SchemaType.KEY_VALUE, SchemaType.PROTOBUF_NATIVE}


class CompatibilityStrategy(enum.Enum):
    """Pulsar's SchemaCompatibilityStrategy. UNDEFINED (a namespace's default) means the
    broker's schemaCompatibilityStrategy."""

    UNDEFINED = "UNDEFINED"
    ALWAYS_INCOMPATIBLE = "ALWAYS_INCOMPATIBLE"
    ALWAYS_COMPATIBLE = "ALWAYS_COMPATIBLE"
    BACKWARD = "BACKWARD"
    FORWARD = "FORWARD"
    FULL = "FULL"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @property
    def transitive(self) -> bool:
        """Checked against every version since the last delete, not only the latest."""
        return self.name.endswith("_TRANSITIVE")

    @property
    def new_reads_old(self) -> bool:
        """BACKWARD's rule: a consumer with the new schema reads what the old one wrote."""
        return self.name.split("_")[0] in ("BACKWARD", "FULL")

    @property
    def old_reads_new(self) -> bool:
        """FORWARD's rule: a consumer with the old schema reads what the new one writes."""
        return self.name.split("_")[0] in ("FORWARD", "FULL")


def encode_version(version: int) -> bytes:
    return version.to_bytes(VERSION_BYTES, "big")


def decode_version(raw: bytes) -> int:
    """A version as clients send it; anything but 8 bytes of a non-negative long is refused."""
    if len(raw) != VERSION_BYTES or raw[0] & 0x80:
        raise InvalidSchemaDataError(
            f"a schema version is {VERSION_BYTES} bytes, big-endian (got {len(raw)} bytes)"
        )
    return int.from_bytes(raw, "big")


@dataclass(frozen=True, slots=True)
class SchemaInfo:
    """A schema's definition: its type, data (an Avro schema as JSON text for AVRO, JSON and
    PROTOBUF) and properties. From a client, make one with ``validation.new_schema``."""

    type: SchemaType
    data: bytes
    properties: Mapping[str, str] = field(default_factory=dict)

    @property
    def fingerprint(self) -> str:
        """What makes two schemas the same one (Pulsar's SchemaHash: type and data, not the
        properties): registering it again answers the version it already has. A KEY_VALUE
        schema's parts' types are in its properties, so those count too."""
        digest = hashlib.sha256(bytes([self.type]) + self._canonical_data())
        if self.type is SchemaType.KEY_VALUE:
            for side in ("key", "value"):
                digest.update(b"\0" + self.properties.get(f"{side}.schema.type", "").encode())
        return digest.hexdigest()

    def _canonical_data(self) -> bytes:
        """The data with JSON's insignificant differences (spacing, key order) taken out, for
        the types whose data is JSON text: the same definition sent with another layout is the
        same schema, not a new version each time."""
        if self.type not in _JSON_DATA:
            return self.data
        try:
            parsed = json_value(self.data)
        except ValueError:  # validation refuses such data before it is registered
            return self.data
        return json.dumps(parsed, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class StoredSchema:
    """One version of a topic's schema; a delete is a version too (Pulsar's isDeleted)."""

    version: int
    info: SchemaInfo
    deleted: bool
    timestamp_ms: int


# The types whose schema data is JSON text (an Avro definition, or Pulsar's
# ProtobufNativeSchemaData).
_JSON_DATA = frozenset(
    {SchemaType.AVRO, SchemaType.JSON, SchemaType.PROTOBUF, SchemaType.PROTOBUF_NATIVE}
)
