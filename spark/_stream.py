"""Streaming read: offsets are ``{partition: last covered id}``; the driver tails each
partition to learn how far a micro-batch may go.

The protocol has no "last message id" call, so :meth:`StreamReader.latestOffset` keeps one
non-durable reader per partition on the driver, positioned at the last offset it handed out,
and reads ahead from it (ids only matter). Executors then re-read exactly (start, end] per
partition. Admission control (``maxMessagesPerTrigger``) caps what the driver reads ahead per
trigger; ``Trigger.AvailableNow`` fixes a target offset first and never goes past it.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from pulsar_grpc.client import Message, MessageId, Reader, Timeout

from ._batch import RangePartition
from ._offsets import EARLIEST, LATEST, Range, format_id, key, last_id, parse_id, parse_offsets
from ._options import SourceOptions
from ._read import read_range
from ._runtime import LoopRunner
from ._topics import partition_index, resolve_partitions

Offsets = dict[str, str]


@dataclass
class _Tail:
    """The driver's read-ahead reader of one partition and the offset it stands at."""

    reader: Reader
    position: str
    pending: Message | None = field(default=None)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("pulsar-grpc")``."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._runner: LoopRunner | None = None
        self._tails: dict[str, _Tail] = {}
        self._target: Offsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Executors get only the options; the driver's readers stay on the driver.
        return {"options": self.options, "_runner": None, "_tails": {}, "_target": None}

    # ------------------------------------------------------------------ driver side

    def _run(self) -> LoopRunner:
        if self._runner is None:
            self._runner = LoopRunner(self.options.client)
        return self._runner

    def initialOffset(self) -> Offsets:
        runner = self._run()
        return runner.run(self._initial(runner))

    async def _initial(self, runner: LoopRunner) -> Offsets:
        partitions = await resolve_partitions(runner.client, self.options)
        starts = parse_offsets(self.options.starting_offsets, partitions, LATEST)
        return dict(
            zip(
                partitions,
                await asyncio.gather(*(self._resolve(runner, p, v) for p, v in starts.items())),
                strict=True,
            )
        )

    async def _resolve(self, runner: LoopRunner, partition: str, value: str) -> str:
        if value != LATEST:
            return value
        last = await last_id(runner.client, partition)
        return EARLIEST if last is None else format_id(last, partition_index(partition))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_messages_per_trigger > 0:
            return ReadMaxRows(self.options.max_messages_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the target: the last id of every partition now; never read past it."""
        runner = self._run()
        self._target = runner.run(self._targets(runner))

    async def _targets(self, runner: LoopRunner) -> Offsets:
        partitions = await resolve_partitions(runner.client, self.options)
        lasts = await asyncio.gather(*(self._resolve(runner, p, LATEST) for p in partitions))
        return dict(zip(partitions, lasts, strict=True))

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        runner = self._run()
        return runner.run(self._latest(runner, start, limit))

    async def _latest(self, runner: LoopRunner, start: Offsets, limit: ReadLimit) -> Offsets:
        partitions = await resolve_partitions(runner.client, self.options)
        current = {p: start.get(p, EARLIEST) for p in partitions}  # new partitions: all of them
        quota = None
        if isinstance(limit, ReadMaxRows):
            quota = max(1, math.ceil(limit.max_rows / max(len(partitions), 1)))
        cut = int(time.time() * 1000)
        ends = await asyncio.gather(
            *(self._advance(runner, p, current[p], quota, cut) for p in partitions)
        )
        return dict(zip(partitions, ends, strict=True))

    async def _advance(
        self, runner: LoopRunner, partition: str, start: str, quota: int | None, cut_ms: int
    ) -> str:
        """Read ahead from ``start``: up to ``quota`` messages, stopping at the end of the
        partition, at messages published after ``cut_ms`` and at the AvailableNow target."""
        target = None
        if self._target is not None:
            target_text = self._target.get(partition, EARLIEST)
            if target_text == EARLIEST:
                return start
            target = key(parse_id(target_text))
            if start != EARLIEST and key(parse_id(start)) >= target:
                return start
        tail = await self._tail(runner, partition, start)
        count, last = 0, None
        while quota is None or count < quota:
            message = tail.pending
            tail.pending = None
            if message is None:
                try:
                    message = await tail.reader.read_next(self.options.latest_idle_ms)
                except Timeout:
                    break
            mid = key(message.message_id())
            if message.publish_timestamp() > cut_ms or (target is not None and mid > target):
                tail.pending = message  # not in this batch; the next trigger takes it
                break
            last, count = message.message_id(), count + 1
            if target is not None and mid == target:
                break
        if last is not None:
            tail.position = format_id(last, partition_index(partition))
        return tail.position

    async def _tail(self, runner: LoopRunner, partition: str, start: str) -> _Tail:
        """The partition's read-ahead reader at ``start`` (re-created after a restart or
        whenever Spark asks from another offset than the one we handed out)."""
        tail = self._tails.get(partition)
        if tail is not None and tail.position == start:
            return tail
        if tail is not None:
            await tail.reader.close()
        begin = MessageId.earliest if start == EARLIEST else parse_id(start)
        reader = await runner.client.create_reader(
            partition, begin, receiver_queue_size=self.options.receiver_queue_size
        )
        tail = self._tails[partition] = _Tail(reader, start)
        return tail

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        out: list[InputPartition] = []
        for partition, until in sorted(end.items()):
            after = start.get(partition, EARLIEST)
            if until != EARLIEST and until != after:
                out.append(RangePartition(Range(partition, after, until)))
        return out

    def commit(self, end: Offsets) -> None:
        """Nothing to do: no durable subscription; the checkpoint is the source of truth."""

    def stop(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None
            self._tails.clear()

    # ------------------------------------------------------------------ executor side

    def read(self, partition: InputPartition):  # type: ignore[no-untyped-def]
        assert isinstance(partition, RangePartition)
        return read_range(self.options, partition.value)
