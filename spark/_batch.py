"""Batch read planning on the driver: partitions, concrete offsets, splits."""

from __future__ import annotations

import asyncio

from pyspark.sql.datasource import DataSourceReader, InputPartition

from pulsar_grpc.client import Client, MessageId

from ._offsets import (
    EARLIEST,
    LATEST,
    Range,
    first_id,
    key,
    last_id,
    parse_id,
    parse_offsets,
    split,
)
from ._options import SourceOptions
from ._read import read_range
from ._runtime import LoopRunner
from ._topics import resolve_partitions


class RangePartition(InputPartition):
    """One Spark task: a :class:`Range` (pickled to the executor)."""

    def __init__(self, value: Range) -> None:
        super().__init__(value)
        self.value: Range = value


async def plan_ranges(client: Client, options: SourceOptions) -> list[Range]:
    """Resolve topics and offsets to concrete ranges; ``latest`` becomes the last id now.

    Resolving on the driver makes every task (and every retry of it) read a fixed range.
    """
    partitions = await resolve_partitions(client, options)
    starts = parse_offsets(options.starting_offsets, partitions, EARLIEST)
    ends = parse_offsets(options.ending_offsets, partitions, LATEST)
    if any(v == EARLIEST for v in ends.values()):
        raise ValueError("endingOffsets cannot be earliest")
    if any(v == LATEST for v in starts.values()):
        # Reading from latest up to latest in a batch query is empty by definition.
        starts = {p: v for p, v in starts.items() if v != LATEST}

    async def plan(partition: str) -> list[Range]:
        if partition not in starts:
            return []
        after = starts[partition]
        end: MessageId | None
        if ends[partition] == LATEST:
            end = await last_id(client, partition)
        else:
            end = parse_id(ends[partition])
        if end is None:
            return []
        first = (
            await first_id(client, partition, options.latest_idle_ms) if after == EARLIEST else None
        )
        if after != EARLIEST and key(end) <= key(parse_id(after)):
            return []
        return split(partition, after, end, first, options.entries_per_split)

    planned = await asyncio.gather(*(plan(p) for p in partitions))
    return [r for ranges in planned for r in ranges]


class BatchReader(DataSourceReader):
    """``spark.read.format("pulsar-grpc")``: one task per partition range."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        with LoopRunner(self.options.client) as runner:
            ranges = runner.run(plan_ranges(runner.client, self.options))
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition):  # type: ignore[no-untyped-def]
        assert isinstance(partition, RangePartition)
        return read_range(self.options, partition.value)
