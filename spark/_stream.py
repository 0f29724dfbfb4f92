"""Streaming read: offsets are ``{partition: last covered id}``.

Where a micro-batch may end: without admission control, the newest id of every partition
(``GetLastMessageId``, one call per partition, nothing read). With ``maxMessagesPerTrigger``,
``maxBytesPerTrigger`` or ``minOffsetsPerTrigger`` the driver must count messages and bytes,
which ids alone do not tell, so it keeps one non-durable reader per partition that reads ahead
from the last offset it handed out (ids and sizes only are kept, at most what one trigger may
take). Executors then re-read exactly (start, end] per partition. ``Trigger.AvailableNow``
fixes a target offset first and never goes past it.

Lag: pyspark's Python ``DataSourceStreamReader`` has no metrics hook (the JVM's
``ReportsSourceMetrics``, which Kafka's avg/maxOffsetsBehindLatest use, is not bridged), so
the source implements ``reportLatestOffset``: each progress shows ``latestOffset`` (newest id
per partition) next to ``endOffset``, and :func:`pulsar_grpc.spark.lag` turns one progress
into entries behind latest.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from pulsar_grpc.client import MessageId, Reader, Timeout

from ._batch import RangePartition, read_partition
from ._offsets import (
    EARLIEST,
    LATEST,
    Key,
    Range,
    before,
    first_id,
    format_id,
    key,
    last_id,
    parse_id,
    parse_offsets,
)
from ._options import SourceOptions
from ._read import open_reader
from ._runtime import LoopRunner
from ._topics import partition_index, resolve_partitions
from ._typed import ValueShape

Offsets = dict[str, str]


@dataclass
class _Tail:
    """The driver's read-ahead reader of one partition: the offset it has handed out up to,
    and the (id, bytes) of messages read after it but not handed out yet."""

    reader: Reader
    position: str
    peeked: deque[tuple[MessageId, int]] = field(default_factory=deque)


@dataclass(frozen=True)
class _Quota:
    """What one partition may take in one trigger (None: no limit)."""

    messages: int | None = None
    bytes: int | None = None

    def limited(self) -> bool:
        return self.messages is not None or self.bytes is not None


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("pulsar-grpc")``."""

    def __init__(self, options: SourceOptions, shape: ValueShape) -> None:
        self.options = options
        self.shape = shape
        self._runner: LoopRunner | None = None
        self._tails: dict[str, _Tail] = {}
        self._target: Offsets | None = None
        self._last_batch_s = time.monotonic()

    def __getstate__(self) -> dict[str, Any]:
        # Executors get only the options; the driver's readers stay on the driver.
        return {
            "options": self.options,
            "shape": self.shape,
            "_runner": None,
            "_tails": {},
            "_target": None,
        }

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
        starts = parse_offsets("startingOffsets", self.options.starting_offsets, partitions, LATEST)
        resolved = await asyncio.gather(*(self._resolve(runner, p, v) for p, v in starts.items()))
        return dict(zip(partitions, resolved, strict=True))

    async def _resolve(self, runner: LoopRunner, partition: str, value: str) -> str:
        """A start offset: startingTime, or ``latest`` as the newest id now."""
        if self.options.starting_time_ms is not None:
            at = await first_id(
                runner.client, partition, self.options.latest_idle_ms, self.options.starting_time_ms
            )
            if at is not None:
                return before(at)
            value = LATEST  # nothing published since startingTime: what comes next
        if value != LATEST:
            return value
        return await self._newest(runner, partition)

    async def _newest(self, runner: LoopRunner, partition: str) -> str:
        last = await last_id(runner.client, partition)
        return EARLIEST if last is None else format_id(last, partition_index(partition))

    def getDefaultReadLimit(self) -> ReadLimit:
        o = self.options
        if o.max_messages_per_trigger:
            return ReadMaxRows(o.max_messages_per_trigger)
        if o.max_bytes_per_trigger:
            return ReadMaxBytes(o.max_bytes_per_trigger)
        if o.min_messages_per_trigger:
            return ReadMinRows(o.min_messages_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the target: the last id of every partition now; never read past it."""
        runner = self._run()
        self._target = runner.run(self._newest_all(runner))

    async def _newest_all(self, runner: LoopRunner) -> Offsets:
        partitions = await resolve_partitions(runner.client, self.options)
        lasts = await asyncio.gather(*(self._newest(runner, p) for p in partitions))
        return dict(zip(partitions, lasts, strict=True))

    def reportLatestOffset(self) -> Offsets:
        """The newest id of every partition, shown as ``latestOffset`` in the progress."""
        runner = self._run()
        return runner.run(self._newest_all(runner))

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        runner = self._run()
        return runner.run(self._latest(runner, start, limit))

    async def _latest(self, runner: LoopRunner, start: Offsets, limit: ReadLimit) -> Offsets:
        partitions = await resolve_partitions(runner.client, self.options)
        current = {p: start.get(p, EARLIEST) for p in partitions}  # new partitions: all of them
        quota = self._quota(limit, len(partitions))
        minimum = self._minimum(limit)
        if not quota.limited() and minimum is None:
            ends = await asyncio.gather(
                *(self._to_newest(runner, p, current[p]) for p in partitions)
            )
            return dict(zip(partitions, ends, strict=True))
        # Read ahead only as far as this trigger can take (or far enough to see the minimum).
        peek = _Quota(quota.messages or minimum, quota.bytes)
        tails = await asyncio.gather(*(self._peek(runner, p, current[p], peek) for p in partitions))
        available = sum(len(t.peeked) for t in tails)
        overdue = time.monotonic() - self._last_batch_s >= self.options.max_trigger_delay_ms / 1000
        if not available or (minimum is not None and available < minimum and not overdue):
            return current  # nothing, or not enough yet: wait (Kafka's minOffsetsPerTrigger)
        self._last_batch_s = time.monotonic()
        if not quota.limited():  # the minimum is met: take everything there is now
            self._close_tails()
            ends = await asyncio.gather(
                *(self._to_newest(runner, p, current[p]) for p in partitions)
            )
            return dict(zip(partitions, ends, strict=True))
        return {p: self._take(p, t, quota) for p, t in zip(partitions, tails, strict=True)}

    def _quota(self, limit: ReadLimit, partitions: int) -> _Quota:
        """Per-partition caps from the options, unless Spark asks for everything."""
        if isinstance(limit, ReadAllAvailable):
            return _Quota()
        o, n = self.options, max(partitions, 1)
        return _Quota(
            math.ceil(o.max_messages_per_trigger / n) if o.max_messages_per_trigger else None,
            math.ceil(o.max_bytes_per_trigger / n) if o.max_bytes_per_trigger else None,
        )

    def _minimum(self, limit: ReadLimit) -> int | None:
        """minOffsetsPerTrigger, except when Spark asks for everything or under AvailableNow
        (whose target is fixed: waiting for more could wait forever)."""
        if isinstance(limit, ReadAllAvailable) or self._target is not None:
            return None
        return self.options.min_messages_per_trigger or None

    def _target_key(self, partition: str) -> Key | None:
        if self._target is None:
            return None
        target = self._target.get(partition, EARLIEST)
        return (-1, -1, -1) if target == EARLIEST else key(parse_id(target))

    async def _to_newest(self, runner: LoopRunner, partition: str, start: str) -> str:
        """All there is: the AvailableNow target, else the newest id now (never backwards)."""
        target = self._target.get(partition, EARLIEST) if self._target is not None else None
        end = target if target is not None else await self._newest(runner, partition)
        if end == EARLIEST or (start != EARLIEST and key(parse_id(end)) <= key(parse_id(start))):
            return start
        return end

    async def _peek(self, runner: LoopRunner, partition: str, start: str, want: _Quota) -> _Tail:
        """Read ahead from ``start`` until the tail holds ``want`` (or the partition, or the
        AvailableNow target, has no more for now)."""
        tail = await self._tail(runner, partition, start)
        target = self._target_key(partition)
        size = sum(b for _, b in tail.peeked)
        while (want.messages is None or len(tail.peeked) < want.messages) and (
            want.bytes is None or size < want.bytes
        ):
            if target is not None and tail.peeked and key(tail.peeked[-1][0]) >= target:
                break
            try:
                message = await tail.reader.read_next(self.options.latest_idle_ms)
            except Timeout:
                break
            tail.peeked.append((message.message_id(), len(message.data())))
            size += len(message.data())
        if target is not None:  # what lies past the target is never handed out
            while tail.peeked and key(tail.peeked[-1][0]) > target:
                tail.peeked.pop()
        return tail

    def _take(self, partition: str, tail: _Tail, quota: _Quota) -> str:
        """Hand out peeked messages up to the quota (at least one, so a message larger than
        maxBytesPerTrigger still passes); the tail's position moves to the last one."""
        count, size, last = 0, 0, None
        while tail.peeked:
            mid, length = tail.peeked[0]
            if count and (
                (quota.messages is not None and count >= quota.messages)
                or (quota.bytes is not None and size + length > quota.bytes)
            ):
                break
            tail.peeked.popleft()
            count, size, last = count + 1, size + length, mid
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
        reader = await open_reader(runner.client, partition, start, self.options)
        tail = self._tails[partition] = _Tail(reader, start)
        return tail

    def _close_tails(self) -> None:
        """Forget the read-ahead readers (their client closes them with the runner, or they
        are replaced when the next trigger asks from another offset)."""
        for tail in self._tails.values():
            tail.position = ""

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

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition, self.shape)
