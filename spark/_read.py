"""Executor side of a read: one task streams one :class:`Range` as Arrow batches.

A task opens a non-durable reader positioned just after the range's start and reads until
its end id, so a retried task reads exactly the same messages (nothing is acked, nothing is
shared between tasks).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa

from pulsar_grpc.client import Client, Message, MessageId, Reader, Timeout

from ._arrow import to_record_batch
from ._message_ids import parse_id
from ._offsets import EARLIEST, Range, first_id, key, reader_start
from ._options import SourceOptions
from ._runtime import LoopRunner
from ._topics import base_topic, partition_index
from ._typed import ValueShape

log = logging.getLogger(__name__)


class DataLossError(RuntimeError):
    """Messages the query still had to read were trimmed (see option failOnDataLoss)."""


def read_range(options: SourceOptions, part: Range, shape: ValueShape) -> Iterator[pa.RecordBatch]:
    """The messages of ``part`` in publish order, ``arrow_batch_size`` rows per batch, their
    values decoded into ``shape``."""
    topic, partition = base_topic(part.topic), partition_index(part.topic)
    decoder = shape.decoder()
    with LoopRunner(options.client) as runner:
        reader = runner.run(open_reader(runner.client, part.topic, part.after, options))
        checked = part.after == EARLIEST
        while True:
            messages, done = runner.run(_chunk(reader, part, options))
            if messages and not checked:
                runner.run(_check_trimmed(runner, part, messages[0].message_id(), options))
                checked = True
            if messages:
                values = None
                if decoder is not None:
                    runner.run(decoder.prepare(runner.client, part.topic, messages))
                    values = decoder.values(messages)
                yield to_record_batch(
                    messages, topic, partition, options.include_properties, values
                )
            if done:
                return


async def open_reader(client: Client, topic: str, after: str, options: SourceOptions) -> Reader:
    """A non-durable reader of ``topic`` positioned after offset ``after``."""
    start, inclusive = reader_start(after)
    kwargs = {
        "receiver_queue_size": options.receiver_queue_size,
        **options.encryption.reader_keywords(),
        **dict(options.reader_extra),
    }
    return await client.create_reader(topic, start, start_message_id_inclusive=inclusive, **kwargs)


async def _chunk(reader: Reader, part: Range, options: SourceOptions) -> tuple[list[Message], bool]:
    """Up to ``arrow_batch_size`` messages of the range, and whether the range is done."""
    out: list[Message] = []
    while len(out) < options.arrow_batch_size:
        try:
            message = await reader.read_next(options.poll_timeout_ms)
        except Timeout:
            _missing(part, options, out)
            return out, True
        mid = message.message_id()
        if part.is_past_end(mid):
            return out, True
        if not options.encryption.discards(message):
            out.append(message)
        if part.is_end(mid):
            return out, True
    return out, False


def no_data_left(topic: str, after: str, options: SourceOptions) -> None:
    """A read starts at an offset of a partition that holds no message at all any more:
    what followed the offset may have been trimmed (failOnDataLoss decides)."""
    text = (
        f"{topic}: the start offset {after} is older than the first available message (none: "
        "every message was trimmed, or the offset is not of this topic)"
    )
    if options.fail_on_data_loss:
        raise DataLossError(text + "; set failOnDataLoss=false to read nothing instead")
    log.warning("%s", text)


def _missing(part: Range, options: SourceOptions, read: list[Message]) -> None:
    """The end id never arrived: it was trimmed while we read, or the range is wrong."""
    last = str(read[-1].message_id()) if read else part.after
    text = (
        f"{part.topic}: no message after {last} within pollTimeoutMs={options.poll_timeout_ms} "
        f"although the range ends at {part.until} (trimmed, or the topic was deleted?)"
    )
    if options.fail_on_data_loss:
        raise DataLossError(text + "; set failOnDataLoss=false to read what is left")
    log.warning("%s", text)


async def _check_trimmed(
    runner: LoopRunner, part: Range, got: MessageId, options: SourceOptions
) -> None:
    """Fail (or warn) when the start offset is older than the partition's first message.

    Trimming deletes whole ledgers and entry ids are contiguous inside a ledger, so only a
    first message in another ledger than the start can mean a gap; only then do we look up
    the partition's first available message.
    """
    start = parse_id(part.after)
    if got.ledger_id() == start.ledger_id() or start.entry_id() < 0:  # entry -1: see before()
        return
    first = await first_id(runner.client, part.topic, options.latest_idle_ms)
    if first is None or key(start) >= key(first):
        return
    text = (
        f"{part.topic}: the start offset {part.after} is older than the first available "
        f"message {first}: messages in between may have been trimmed "
        "(set failOnDataLoss=false to read on)"
    )
    if options.fail_on_data_loss:
        raise DataLossError(text + "; set failOnDataLoss=false to skip them")
    log.warning("%s", text)
