"""The row layout of the source (as the Pulsar and Kafka connectors have it) in Arrow.

Tasks hand Spark ``pyarrow.RecordBatch``es rather than tuples: Spark then skips its per-row
Python conversion, which would otherwise cost more than reading from the broker.
"""

from __future__ import annotations

import pyarrow as pa

from pulsar_grpc.client import Message

from ._offsets import format_id

ARROW_SCHEMA = pa.schema(
    [
        pa.field("value", pa.binary()),
        pa.field("key", pa.binary()),
        pa.field("keyString", pa.string()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("messageId", pa.string()),
        pa.field("publishTime", pa.timestamp("us", tz="UTC")),
        pa.field("eventTime", pa.timestamp("us", tz="UTC")),
        pa.field("properties", pa.map_(pa.string(), pa.string())),
    ]
)


def arrow_schema(value_type: pa.DataType, include_properties: bool) -> pa.Schema:
    """The rows' Arrow schema: ``value`` holds the payload, or the value decoded with the
    topic's schema (spark/_typed.py)."""
    schema = ARROW_SCHEMA.set(0, pa.field("value", value_type))
    if include_properties:
        return schema
    return schema.remove(schema.get_field_index("properties"))


def to_record_batch(
    messages: list[Message],
    topic: str,
    partition: int,
    include_properties: bool = True,
    values: pa.Array | None = None,
) -> pa.RecordBatch:
    """Rows for messages of one partition; empty key and unset event time become null.

    ``key`` is binary as in Spark's Kafka source (the UTF-8 bytes of Pulsar's string key),
    ``keyString`` the same key as text, which is what Pulsar users mostly compare against.
    ``values``: the decoded values (the payloads when None). A null value (a tombstone) is a
    null ``value``, as Spark's Kafka source reads one; an empty payload is empty bytes.
    """
    n = len(messages)
    keys = [m.partition_key() or None for m in messages]
    if values is None:
        payloads = [None if m.has_null_value() else m.data() for m in messages]
        values = pa.array(payloads, pa.binary())
    arrays = [
        values,
        pa.array([k.encode() if k is not None else None for k in keys], pa.binary()),
        pa.array(keys, pa.string()),
        pa.array([topic] * n, pa.string()),
        pa.array([partition] * n, pa.int32()),
        pa.array([format_id(m.message_id(), partition) for m in messages], pa.string()),
        pa.array([m.publish_timestamp() * 1000 for m in messages], pa.timestamp("us", tz="UTC")),
        pa.array(
            [(m.event_timestamp() * 1000) or None for m in messages],
            pa.timestamp("us", tz="UTC"),
        ),
    ]
    schema = arrow_schema(values.type, include_properties)
    if include_properties:
        properties = [list(m.properties().items()) for m in messages]
        arrays.append(pa.array(properties, pa.map_(pa.string(), pa.string())))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
