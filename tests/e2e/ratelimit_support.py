"""Helpers for the rate-limit tests: a raw producer that floods a topic as fast as gRPC lets
it (or writes at a steady pace), a raw consumer that timestamps what arrives, and the rate
seen in a measured window.

The windows start after the first second: a token bucket starts full (one period's worth, the
burst an idle producer may send), so the steady rate is what follows it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc

from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.wire import batch, stub
from tests.support import BrokerThread
from tests.waiting import eventually


@dataclass
class Arrivals:
    """(monotonic time, message count) of each receipt or delivered entry."""

    seen: list[tuple[float, int]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def add(self, count: int) -> None:
        self.seen.append((time.monotonic(), count))

    @property
    def total(self) -> int:
        return sum(n for _, n in self.seen)

    def rate(self, start_s: float, end_s: float) -> float:
        """Messages per second between ``start_s`` and ``end_s`` after ``started``."""
        lo, hi = self.started + start_s, self.started + end_s
        return sum(n for t, n in self.seen if lo <= t < hi) / (end_s - start_s)

    def count_between(self, lo: float, hi: float) -> int:
        """Messages that arrived between the monotonic times ``lo`` and ``hi``."""
        return sum(n for t, n in self.seen if lo <= t < hi)

    async def wait_until(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, self.started + seconds - time.monotonic()))


class Flood:
    """A Produce call that writes batches of ``per_request`` messages of ``size`` bytes back
    to back; ``written`` counts what the client got to write (gRPC's flow control makes
    ``write`` wait when the broker stops reading), ``receipts`` what the broker stored."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        topic: str,
        per_request: int = 1,
        size: int = 10,
        pace: float | None = None,
    ) -> None:
        self.call = stub(channel).Produce(metadata=(("x-pulsar-topic", topic),))
        self.topic = topic if "://" in topic else f"persistent://public/default/{topic}"
        self.per_request = per_request
        self.pace = pace  # messages per second the writer keeps to; None: as fast as it can
        self.payload = b"x" * size
        self.written = 0
        self.receipts = Arrivals()
        self._tasks: list[asyncio.Task[None]] = []
        self._receipt = asyncio.Event()  # set by each receipt

    async def start(self) -> Flood:
        first = await self.call.read()
        assert first.HasField("ready"), first
        self.receipts = Arrivals()
        self._tasks = [asyncio.create_task(self._write()), asyncio.create_task(self._read())]
        return self

    async def _write(self) -> None:
        seq = 0
        began = time.monotonic()
        while True:
            if self.pace is not None:  # on a schedule, so a late wake-up catches up
                await asyncio.sleep(max(0.0, began + seq / self.pace - time.monotonic()))
            await self.call.write(batch(seq, [self.payload] * self.per_request))
            seq += self.per_request
            self.written += self.per_request

    async def _read(self) -> None:
        while True:
            response = await self.call.read()
            if response is grpc.aio.EOF:
                return
            assert response.HasField("receipt"), response
            self.receipts.add(response.receipt.batch_size)
            self._receipt.set()

    async def until_stored(self, messages: int, timeout_s: float = 30) -> None:
        """Wait until the broker stored at least ``messages``."""
        async with asyncio.timeout(timeout_s):
            while self.receipts.total < messages:
                self._receipt.clear()
                self.check()
                await self._receipt.wait()

    def check(self) -> None:
        """Fail if the call ended (an error would end it): a throttled producer is slowed,
        never refused."""
        for task in self._tasks:
            if task.done():
                task.result()
                raise AssertionError("the produce call ended")

    async def stop(self) -> None:
        self.check()
        self.call.cancel()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class Drain:
    """A Consume call that grants ``permits`` far beyond the limit and timestamps arrivals."""

    def __init__(self, channel: grpc.aio.Channel, topic: str, sub_type: str) -> None:
        metadata = (
            ("x-pulsar-topic", topic),
            ("x-pulsar-subscription", "sub"),
            ("x-pulsar-subscription-type", sub_type),
            ("x-pulsar-initial-position", "Earliest"),
        )
        self.call = stub(channel).Consume(metadata=metadata)
        self.arrivals = Arrivals()
        self._task: asyncio.Task[None] | None = None

    async def start(self, permits: int) -> Drain:
        first = await self.call.read()
        assert first.HasField("subscribed"), first
        self.arrivals = Arrivals()
        await self.call.write(pb.ConsumeRequest(flow=pb.Flow(permits=permits)))
        self._task = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        while True:
            response = await self.call.read()
            if response is grpc.aio.EOF:
                return
            if response.HasField("messages"):
                for entry in response.messages.entries:
                    self.arrivals.add(len(entry.messages))

    async def stop(self) -> None:
        self.call.cancel()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


def within(measured: float, expected: float, tolerance: float = 0.10) -> bool:
    return abs(measured - expected) <= tolerance * expected


# The window steady_rate measures: long against the one period's worth a bucket may hold.
STEADY_WINDOW_S = 3.0


async def steady_rate(
    broker: BrokerThread, floods: Sequence[Flood], window_s: float = STEADY_WINDOW_S
) -> float:
    """The floods' topics' messages a second together over ``window_s``, as the broker counted
    them when it took them (msgInCounter, read on its own loop: the test's client shares the
    interpreter with the broker, so a receipt's arrival time on the client can lag by the
    length of a stall), measured once every flooded topic's producers were held back
    (publishRateLimitedTimes > 0), when the burst an idle start leaves in the bucket is spent."""
    assert broker.service is not None
    names = {flood.topic for flood in floods}
    topics = [await broker.call(broker.service.topics.get_topic(name)) for name in names]

    async def held() -> bool:
        return all(topic.publish_rate_limited_times > 0 for topic in topics)

    async def published() -> tuple[float, int]:
        return time.monotonic(), sum(topic.rate_in.messages for topic in topics)

    await eventually(held, timeout=30)
    began, before = await broker.call(published())
    await asyncio.sleep(window_s)
    ended, after = await broker.call(published())
    return (after - before) / (ended - began)


def held_to(rate: float, limit: float, window_s: float = STEADY_WINDOW_S) -> bool:
    """Whether a rate measured over ``window_s`` is what a token bucket of ``limit`` a second
    allows: at most the rate plus one period's worth (the most a bucket holds: a stall of the
    machine lets it fill, and what follows may use it, as Pulsar's AsyncTokenBucket does), and
    at least 80% of it (the producers are not starved). Unthrottled, a flood is ~40x over."""
    return 0.8 * limit <= rate <= limit * (1 + 1 / window_s)
