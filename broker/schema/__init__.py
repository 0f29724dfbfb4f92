"""The schema registry: versions per topic in the metadata store, compatibility strategies
with Apache Avro's checker, and the namespace policies that govern them (Pulsar's
SchemaRegistryService and its topic-side use)."""

from pulsar_grpc.broker.schema.data import (
    CompatibilityStrategy,
    SchemaInfo,
    SchemaType,
    StoredSchema,
    decode_version,
    encode_version,
)
from pulsar_grpc.broker.schema.policies import SchemaPolicies
from pulsar_grpc.broker.schema.registry import SchemaRegistry
from pulsar_grpc.broker.schema.service import Declared, TopicSchemas, schema_id
from pulsar_grpc.broker.schema.storage import SchemaStorage
from pulsar_grpc.broker.schema.validation import new_schema

__all__ = [
    "CompatibilityStrategy",
    "Declared",
    "SchemaInfo",
    "SchemaPolicies",
    "SchemaRegistry",
    "SchemaStorage",
    "SchemaType",
    "StoredSchema",
    "TopicSchemas",
    "decode_version",
    "encode_version",
    "new_schema",
    "schema_id",
]
