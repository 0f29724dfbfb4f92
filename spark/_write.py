"""Write path: each task produces its rows through the SDK's batching producer.

Rows are sent with ``enqueue`` (batched on the wire) and the task waits for every receipt
before it reports success, so a committed Spark job means every row is stored; the first
broker error fails the task with the topic and the broker's message.
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

from pulsar_grpc.client import MessageId, Producer, PulsarException

from ._options import OptionError, SourceOptions
from ._runtime import LoopRunner

ACCEPTED = {"value", "key", "keyString", "properties", "eventTime", "topic"}


class WriteError(RuntimeError):
    """The broker refused (or never acknowledged) a message the task wrote."""


@dataclass
class WriteCommit(WriterCommitMessage):
    """What a task reports: rows stored, per topic."""

    counts: dict[str, int]


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
    """Fail at planning time for a missing value column or an unknown one."""
    names = set(schema.fieldNames())
    if "value" not in names:
        raise ValueError("writing to pulsar-grpc needs a 'value' column (binary or string)")
    unknown = sorted(names - ACCEPTED)
    if unknown:
        raise ValueError(f"unsupported columns {unknown}: expected some of {sorted(ACCEPTED)}")
    if options.topic is None and "topic" not in names:
        raise ValueError("set the option topic or provide a 'topic' column")


def _as_bytes(value: bytes | str | None) -> bytes:
    if value is None:
        return b""
    return value.encode() if isinstance(value, str) else value


def _as_key(key: bytes | str | None) -> str | None:
    """Pulsar keys are strings: a binary key (the source's ``key`` column) is UTF-8 text."""
    if isinstance(key, bytes):
        return key.decode("utf-8")
    return key


async def _producer(
    runner: LoopRunner, producers: dict[str, Producer], topic: str, options: SourceOptions
) -> Producer:
    producer = producers.get(topic)
    if producer is None:
        settings = {
            "batching_max_messages": options.batching_max_messages,
            "batching_max_publish_delay_ms": options.batching_max_publish_delay_ms,
            "max_pending_messages": options.max_pending_messages,
            "send_timeout_millis": options.send_timeout_ms,
            "block_if_queue_full": True,
            **dict(options.producer_extra),  # a pulsar.producer.* option wins
        }
        producer = await runner.client.create_producer(topic, **settings)
        producers[topic] = producer
    return producer


async def _send_batch(
    runner: LoopRunner,
    producers: dict[str, Producer],
    batch: pa.RecordBatch,
    options: SourceOptions,
    futures: list[tuple[str, asyncio.Future[MessageId]]],
    counts: dict[str, int],
) -> None:
    columns = {name: batch.column(name).to_pylist() for name in batch.schema.names}
    values = columns["value"]
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
            producer = await _producer(runner, producers, topic, options)
            future = await producer.enqueue(
                _as_bytes(value),
                dict(properties) if properties else None,
                partition_key=_as_key(keys[i]) if keys is not None else None,
                event_timestamp=int(event.timestamp() * 1000) if event is not None else None,
            )
        except PulsarException as exc:
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


def write_batches(options: SourceOptions, batches: Iterator[pa.RecordBatch]) -> WriteCommit:
    """Produce every row of the task and wait until the broker stored all of them."""
    counts: dict[str, int] = {}
    with LoopRunner(options.client) as runner:
        producers: dict[str, Producer] = {}
        futures: list[tuple[str, asyncio.Future[MessageId]]] = []
        for batch in batches:
            runner.run(_send_batch(runner, producers, batch, options, futures, counts))
        for topic, producer in producers.items():
            try:
                runner.run(producer.flush())
            except PulsarException as exc:
                raise _failed(topic, exc) from exc
        runner.run(_settle(futures, counts))
    return WriteCommit(counts)


class BatchWriter(DataSourceArrowWriter):
    """``df.write.format("pulsar-grpc")``: appends (there is nothing to overwrite)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(self.options, iterator)


class StreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("pulsar-grpc")``: at-least-once (a retried micro-batch is
    produced again; enable broker deduplication for exactly-once)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Rows are stored before a task reports success: nothing left to do."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Stored messages cannot be taken back; the micro-batch is retried."""
