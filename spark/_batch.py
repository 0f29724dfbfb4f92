"""Batch read planning on the driver: partitions, concrete offsets, splits."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from pulsar_grpc.client import Client, MessageId

from ._offsets import (
    EARLIEST,
    LATEST,
    Range,
    Span,
    before,
    first_id,
    last_id,
    parse_id,
    parse_offsets,
    split,
)
from ._options import SourceOptions
from ._read import no_data_left, read_range
from ._runtime import LoopRunner
from ._topics import resolve_partitions
from ._typed import ValueShape


class RangePartition(InputPartition):
    """One Spark task: a :class:`Range` (pickled to the executor)."""

    def __init__(self, value: Range) -> None:
        super().__init__(value)
        self.value: Range = value


def read_partition(
    options: SourceOptions, partition: InputPartition, shape: ValueShape
) -> Iterator[pa.RecordBatch]:
    """A task's rows. A plan with no range still gets one task from Spark, with its default
    ``InputPartition(None)``: that task reads nothing (an empty DataFrame, full schema)."""
    if isinstance(partition, RangePartition):
        return read_range(options, partition.value, shape)
    return iter(())


async def _span(
    client: Client, options: SourceOptions, partition: str, start: str, end: str
) -> Span | None:
    """Where the read of one partition starts and ends, or None when it covers nothing."""
    idle = options.latest_idle_ms
    if options.starting_time_ms is not None:
        at = await first_id(client, partition, idle, at_ms=options.starting_time_ms)
        if at is None:
            return None  # nothing published at or after startingTime
        start = before(at)
    elif start == LATEST:
        return None  # from latest up to latest: empty by definition
    until: MessageId | None
    inclusive = True
    if options.ending_time_ms is not None:
        until = await first_id(client, partition, idle, at_ms=options.ending_time_ms + 1)
        if until is not None:  # end before the first message published after endingTime
            until, inclusive = (
                MessageId(
                    ledger_id=until.ledger_id(),
                    entry_id=until.entry_id(),
                    batch_index=-1,
                    partition=-1,
                ),
                False,
            )
        else:
            until = await last_id(client, partition)
    elif end == LATEST:
        until = await last_id(client, partition)
    else:
        until = parse_id(end)
    if until is None:
        if start != EARLIEST:
            no_data_left(partition, start, options)
        return None
    first = await first_id(client, partition, idle) if start == EARLIEST else None
    span = Span(partition, start, until, first, inclusive)
    return None if span.is_empty() else span


async def plan_ranges(client: Client, options: SourceOptions) -> list[Range]:
    """Resolve topics and offsets to concrete ranges; ``latest`` becomes the last id now.

    Resolving on the driver makes every task (and every retry of it) read a fixed range.
    With ``minPartitions`` the spans are cut finer until there are about that many tasks.
    """
    partitions = await resolve_partitions(client, options)
    starts = parse_offsets("startingOffsets", options.starting_offsets, partitions, EARLIEST)
    ends = parse_offsets("endingOffsets", options.ending_offsets, partitions, LATEST)
    planned = await asyncio.gather(
        *(_span(client, options, p, starts[p], ends[p]) for p in partitions)
    )
    spans = [s for s in planned if s is not None]
    per_split = options.entries_per_split
    if options.min_partitions and spans:
        total = sum(s.entries() for s in spans)
        per_split = min(per_split, max(1, math.floor(total / options.min_partitions)))
    return [r for s in spans for r in split(s, per_split)]


class BatchReader(DataSourceReader):
    """``spark.read.format("pulsar-grpc")``: one task per partition range."""

    def __init__(self, options: SourceOptions, shape: ValueShape) -> None:
        self.options = options
        self.shape = shape

    def partitions(self) -> list[InputPartition]:
        with LoopRunner(self.options.client) as runner:
            ranges = runner.run(plan_ranges(runner.client, self.options))
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition, self.shape)
