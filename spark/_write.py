"""Write path: each task produces its rows through the SDK's batching producer.

Rows are sent with ``enqueue`` (batched on the wire) and the task waits for every receipt
before it reports success, so a committed Spark job means every row is stored; the first
broker error fails the task with the topic and the broker's message. A DataFrame that is not
raw bytes is written with a schema (spark/_encode.py), which the driver declares once before
any task runs, so a schema the topic refuses fails the query at planning.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from pulsar_grpc.client import (
    IncompatibleSchema,
    MessageId,
    Producer,
    PulsarException,
    TopicNotFound,
)
from pulsar_grpc.schema import SchemaInfo

from ._encode import META, ValueEncoding, plan_encoding
from ._options import OptionError, SourceOptions
from ._runtime import LoopRunner

ACCEPTED = {"value", *META}


class WriteError(RuntimeError):
    """The broker refused (or never acknowledged) a message the task wrote."""


@dataclass
class WriteCommit(WriterCommitMessage):
    """What a task reports: rows stored, per topic."""

    counts: dict[str, int]


class SchemaMismatch(WriteError):
    """The topic's schema refuses the one the DataFrame's columns make."""


def _failed(topic: str, error: BaseException) -> WriteError:
    return WriteError(f"pulsar-grpc: writing to {topic} failed: {error!r}")


def check_save_mode(overwrite: bool) -> None:
    """Refuse Overwrite as Spark's Kafka sink does: a topic's messages cannot be replaced."""
    if overwrite:
        raise OptionError(
            "mode: expected append, got 'overwrite': a topic's messages cannot be replaced "
            "(Spark's Kafka sink refuses it too)"
        )


def check_schema(schema: StructType, options: SourceOptions) -> None:
    """Fail at planning time for a column next to ``value`` that is not metadata, or a
    DataFrame with nothing to write."""
    names = set(schema.fieldNames())
    unknown = sorted(names - ACCEPTED)
    if "value" in names and unknown:
        raise ValueError(
            f"unsupported columns {unknown}: next to a 'value' column expected some of "
            f"{sorted(ACCEPTED)} (without 'value', the other columns make a record)"
        )
    if not names - set(META):
        raise ValueError("writing to pulsar-grpc needs a 'value' column or record columns")
    if options.topic is None and "topic" not in names:
        raise ValueError("set the option topic or provide a 'topic' column")


def plan_sink(schema: StructType, options: SourceOptions) -> ValueEncoding:
    """Check the DataFrame and choose its encoding; a typed write to the option's topic
    declares its schema from the driver first (registered, or refused with the broker's
    reason), instead of from every task at once."""
    check_schema(schema, options)
    raw = plan_encoding(schema, options.avro_schema, None)
    if not raw.typed or options.topic is None:
        return raw
    with LoopRunner(options.client) as runner:
        return runner.run(_declare(runner, schema, options, options.topic))


async def _declare(
    runner: LoopRunner, schema: StructType, options: SourceOptions, topic: str
) -> ValueEncoding:
    like: SchemaInfo | None = None
    try:
        like = await runner.client.get_schema(topic)
    except TopicNotFound:
        pass  # no schema yet: the derived one becomes the first version
    encoding = plan_encoding(schema, options.avro_schema, like)
    try:
        producer = await runner.client.create_producer(topic, schema=encoding.schema())
    except IncompatibleSchema as exc:
        raise SchemaMismatch(
            f"pulsar-grpc: the DataFrame's columns do not fit the schema of {topic}: "
            f"{exc} (cast or rename the columns, or give the option avroSchema)"
        ) from None
    await producer.close()
    return encoding


def _as_bytes(value: bytes | str | None) -> bytes | None:
    """A row's raw value as a payload; a null one stays None, which the producer sends as a
    null value (a tombstone), as Spark's Kafka sink writes a null value."""
    return value.encode() if isinstance(value, str) else value


def _as_key(key: bytes | str | None) -> str | None:
    """Pulsar keys are strings: a binary key (the source's ``key`` column) is UTF-8 text."""
    if isinstance(key, bytes):
        return key.decode("utf-8")
    return key


async def _producer(
    runner: LoopRunner,
    producers: dict[str, Producer],
    topic: str,
    options: SourceOptions,
    encoding: ValueEncoding,
) -> Producer:
    producer = producers.get(topic)
    if producer is None:
        settings = {
            "batching_max_messages": options.batching_max_messages,
            "batching_max_publish_delay_ms": options.batching_max_publish_delay_ms,
            "max_pending_messages": options.max_pending_messages,
            "send_timeout_millis": options.send_timeout_ms,
            "block_if_queue_full": True,
            **options.encryption.producer_keywords(),
            **dict(options.producer_extra),  # a pulsar.producer.* option wins
        }
        producer = await runner.client.create_producer(topic, schema=encoding.schema(), **settings)
        producers[topic] = producer
    return producer


async def _send_batch(
    runner: LoopRunner,
    producers: dict[str, Producer],
    batch: pa.RecordBatch,
    options: SourceOptions,
    encoding: ValueEncoding,
    futures: list[tuple[str, asyncio.Future[MessageId]]],
    counts: dict[str, int],
) -> None:
    columns = {name: batch.column(name).to_pylist() for name in batch.schema.names}
    values = encoding.values(columns, batch.num_rows)
    keys = columns.get("key", columns.get("keyString"))
    props = columns.get("properties")
    event_times = columns.get("eventTime")
    topics = columns.get("topic")
    for i, value in enumerate(values):
        topic = (topics[i] if topics is not None else None) or options.topic
        if topic is None:
            raise WriteError(f"row {i} has no topic and the option topic is not set")
        properties = props[i] if props is not None else None
        event = event_times[i] if event_times is not None else None
        try:
            producer = await _producer(runner, producers, topic, options, encoding)
            future = await producer.enqueue(
                value if encoding.typed else _as_bytes(value),
                dict(properties) if properties else None,
                partition_key=_as_key(keys[i]) if keys is not None else None,
                event_timestamp=int(event.timestamp() * 1000) if event is not None else None,
            )
        except (PulsarException, ValueError, TypeError) as exc:  # the broker, or the schema
            raise _failed(topic, exc) from exc
        futures.append((topic, future))
        if len(futures) >= 4 * options.max_pending_messages:
            await _settle(futures, counts)


async def _settle(
    futures: list[tuple[str, asyncio.Future[MessageId]]], counts: dict[str, int]
) -> None:
    """Wait for every receipt; raise WriteError with the broker's message on the first
    failure (the others are awaited too so none is left unretrieved)."""
    results = await asyncio.gather(*(f for _, f in futures), return_exceptions=True)
    for (topic, _), result in zip(futures, results, strict=True):
        if isinstance(result, BaseException):
            futures.clear()
            raise _failed(topic, result) from result
        counts[topic] = counts.get(topic, 0) + 1
    futures.clear()


def write_batches(
    options: SourceOptions, encoding: ValueEncoding, batches: Iterator[pa.RecordBatch]
) -> WriteCommit:
    """Produce every row of the task and wait until the broker stored all of them."""
    counts: dict[str, int] = {}
    with LoopRunner(options.client) as runner:
        producers: dict[str, Producer] = {}
        futures: list[tuple[str, asyncio.Future[MessageId]]] = []
        for batch in batches:
            runner.run(_send_batch(runner, producers, batch, options, encoding, futures, counts))
        for topic, producer in producers.items():
            try:
                runner.run(producer.flush())
            except PulsarException as exc:
                raise _failed(topic, exc) from exc
        runner.run(_settle(futures, counts))
    return WriteCommit(counts)


class BatchWriter(DataSourceArrowWriter):
    """``df.write.format("pulsar-grpc")``: appends (there is nothing to overwrite)."""

    def __init__(self, options: SourceOptions, encoding: ValueEncoding) -> None:
        self.options = options
        self.encoding = encoding

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(self.options, self.encoding, iterator)


class StreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("pulsar-grpc")``: at-least-once (a retried micro-batch is
    produced again; enable broker deduplication for exactly-once)."""

    def __init__(self, options: SourceOptions, encoding: ValueEncoding) -> None:
        self.options = options
        self.encoding = encoding

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(self.options, self.encoding, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Rows are stored before a task reports success: nothing left to do."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Stored messages cannot be taken back; the micro-batch is retried."""
