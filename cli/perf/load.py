"""The SDK load generators behind `pulsar-grpc perf`: producers, consumers, and both at once.

Producers and consumers of a run share one event loop in the load process, next to the
measuring (cli.perf.stats), so everything here keeps its per-message work small: latency is
timed per group of messages rather than with a callback per message, and consumers are
stopped by a watchdog rather than by a timeout on every ``receive``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pulsar_grpc.cli.perf.spec import ConsumerLatency, LoadSpec, chunk_of, payload_of
from pulsar_grpc.cli.perf.stats import Budget, Pacer, Recorder, now_us, wall_us, with_reporters
from pulsar_grpc.client import AlreadyClosed, Client, Consumer, InitialPosition, Producer

STAMP_BYTES = 8  # e2e payloads start with the send time, µs since the epoch, big endian
_CREATING = 200  # producers being created at once
_DRY_S = 0.5  # consumers that got nothing for this long at the deadline had run dry


async def produce_sdk(spec: LoadSpec, rec: Recorder) -> None:
    """The SDK producer: batching in the client, many sends in flight, latency per message."""
    await _produce(spec, rec, False)


async def produce_stamped(spec: LoadSpec, rec: Recorder) -> None:
    """:func:`produce_sdk` whose payloads start with their send time (e2e's stamp), for a
    consumer in another process (:func:`consume_stamped`) to measure send -> receive."""
    await _produce(spec, rec, True)


async def _produce(spec: LoadSpec, rec: Recorder, stamp: bool) -> None:
    async with spec.client() as client:
        producers = await _create_producers(client, spec)
        await with_reporters([rec], spec.interval, [_send_all(producers, spec, rec, stamp)])


async def consume_stamped(
    spec: LoadSpec, rec: Recorder, subscribed: Callable[[], None], expected: Awaitable[int]
) -> dict[str, int]:
    """e2e's consumer side on its own: subscribe at latest, call ``subscribed`` (the producer,
    in another process, may start), record send -> receive from each payload's stamp, and stop
    once ``expected`` (the count the producer stored) is in, or after ``idle_timeout``."""
    async with spec.client() as client:
        group = await _ConsumerGroup.subscribe(client, spec, rec, InitialPosition.Latest, wall_us())
        group.expected = None
        subscribed()

        async def learn_expected() -> None:
            group.expected = await expected

        learner = asyncio.ensure_future(learn_expected())
        try:
            await with_reporters([rec], spec.interval, [group.run(0)])
        finally:
            learner.cancel()
        return {"received": rec.count, "stale": group.stale}


async def consume_sdk(spec: LoadSpec, rec: Recorder) -> None:
    """The SDK consumers, a new subscription starting at ``spec.initial_position`` (perf all:
    the earliest message, to drain what a produce run left). Stop at ``spec.messages``, at the
    deadline, or after ``idle_timeout`` without a message. With ``FROM_PUBLISH_TIME``, each
    message's latency is now - its publish time, as pulsar-perf consume measures it."""
    async with spec.client() as client:
        position = InitialPosition(spec.initial_position)
        group = await _ConsumerGroup.subscribe(client, spec, rec, position, None)
        await with_reporters([rec], spec.interval, [group.run(spec.duration)])


async def e2e(spec: LoadSpec, produced: Recorder, received: Recorder) -> dict[str, int]:
    """Producers and consumers at once on the same topics.

    Each payload starts with its send time (wall clock, so a consumer in another process on
    the host could read it too); ``received`` records publish -> receive per message.
    Consumers subscribe (at latest) before the first send and stop once they got as many
    messages as were stored, or after ``idle_timeout`` without one. Messages stamped before
    the run (a backlog left on the subscription by an earlier run) are acked and counted as
    ``stale``, not measured.
    """
    async with spec.client() as client:
        group = await _ConsumerGroup.subscribe(
            client, spec, received, InitialPosition.Latest, wall_us()
        )
        group.expected = None  # known once the producers are done
        producers = await _create_producers(client, spec)

        async def produce() -> None:
            await _send_all(producers, spec, produced, True)
            produced.finish()
            group.expected = produced.count

        await with_reporters([produced, received], spec.interval, [produce(), group.run(0)])
        return {"sent": produced.count, "received": received.count, "stale": group.stale}


# ---------------------------------------------------------------- producers


async def _create_producers(client: Client, spec: LoadSpec) -> list[Producer]:
    """Every producer of the run, ``_CREATING`` at a time: thousands of topics (perf curves)
    would otherwise wait for each other's topic load one by one."""
    room = asyncio.Semaphore(_CREATING)

    async def create(topic: str) -> Producer:
        async with room:
            return await client.create_producer(
                topic,
                batching_max_messages=spec.batch,
                batching_max_allowed_size_in_bytes=max(
                    128 * 1024, 2 * spec.batch * (spec.size + 16)
                ),
                batching_max_publish_delay_ms=spec.batch_delay_ms,
                max_pending_messages=spec.max_pending,
                block_if_queue_full=True,
            )

    return list(
        await asyncio.gather(*(create(t) for t in spec.topics for _ in range(spec.producers)))
    )


async def produce_warmed(spec: LoadSpec, rec: Recorder, setup: dict[str, float]) -> None:
    """:func:`produce_sdk` on many topics, measured in steady state: every producer first
    sends one message and waits for its receipt (a topic's first write opens its ledger),
    then the clock starts. ``setup`` gets the seconds the producers took to be created
    (``create_s``) and to be warmed (``warm_s``), which is what thousands of topics cost a
    client before its first measured message."""
    async with spec.client() as client:
        started = time.perf_counter()
        producers = await _create_producers(client, spec)
        created = time.perf_counter()
        payload = payload_of(spec.size)
        await asyncio.gather(*[await p.enqueue(payload) for p in producers])
        setup.update(
            create_s=round(created - started, 3), warm_s=round(time.perf_counter() - created, 3)
        )
        await with_reporters([rec], spec.interval, [_send_all(producers, spec, rec, False)])


async def _send_all(producers: list[Producer], spec: LoadSpec, rec: Recorder, stamp: bool) -> None:
    """Every producer sends from one shared budget (and pace) until it is spent."""
    budget = Budget(spec.messages, spec.duration)
    pacer = Pacer(spec.rate) if spec.rate > 0 else None  # shared: the rate is the total
    chunk = chunk_of(spec, len(producers))
    await asyncio.gather(
        *(_send_loop(p, spec, chunk, budget, pacer, rec, stamp) for p in producers)
    )


async def _send_loop(
    producer: Producer,
    spec: LoadSpec,
    chunk: int,
    budget: Budget,
    pacer: Pacer | None,
    rec: Recorder,
    stamp: bool,
) -> None:
    """Send groups of ``chunk`` messages back to back, timing each message from its call.

    Latency is taken with one done callback per group, not per message: a callback costs
    ~1.5 µs on uvloop, enough to halve what one core can produce. That is exact because a
    group never yields to the loop (the window below keeps ``enqueue`` from blocking), so
    the SDK's batch timer can only fire between groups: a batch holds whole groups, all
    messages of a group get their receipt together, and receipts come in order. On a
    partitioned topic the round-robin router may switch partition inside a group, so there the
    group waits for all its receipts (a callback per message, the price of being exact).
    """
    window = _Window(spec.max_pending)
    payload = payload_of(spec.size)
    tail = payload[STAMP_BYTES:]
    exact = spec.partitions > 0
    while n := budget.take(chunk):
        if pacer is not None:
            await pacer.wait(n)
        await window.take(n)
        sent_us: list[int] = []
        futures: list[asyncio.Future[Any]] = []
        for _ in range(n):
            sent_us.append(now_us())
            if stamp:
                payload = wall_us().to_bytes(STAMP_BYTES, "big") + tail
            future = await producer.enqueue(payload)
            if exact:
                futures.append(future)
        group = asyncio.gather(*futures, return_exceptions=True) if exact else future
        group.add_done_callback(_group_done(rec, window, sent_us))
    await producer.flush()
    await window.drained()


def _group_done(
    rec: Recorder, window: _Window, sent_us: list[int]
) -> Callable[[asyncio.Future[Any]], None]:
    def done(future: asyncio.Future[Any]) -> None:
        window.give(len(sent_us))
        ok = not future.cancelled() and future.exception() is None
        if ok and isinstance(result := future.result(), list):  # a gathered group
            ok = not any(isinstance(r, BaseException) for r in result)
        rec.add_group(sent_us, ok)

    return done


class _Window:
    """Messages in flight, waited for between groups rather than inside ``enqueue``."""

    def __init__(self, size: int) -> None:
        self._size = self._free = size
        self._room = asyncio.Event()

    async def take(self, n: int) -> None:
        while self._free < n:
            self._room.clear()
            await self._room.wait()
        self._free -= n

    def give(self, n: int) -> None:
        self._free += n
        self._room.set()

    async def drained(self) -> None:
        """Until every group's callback ran, so the recorder has counted every receipt."""
        await self.take(self._size)
        self.give(self._size)


# ---------------------------------------------------------------- consumers


class _ConsumerGroup:
    """``spec.consumers`` consumers per topic on one subscription, and when they stop."""

    def __init__(
        self, consumers: list[Consumer], spec: LoadSpec, rec: Recorder, since_us: int | None
    ) -> None:
        self.consumers = consumers
        self.spec = spec
        self.rec = rec
        self.since_us = since_us  # None: payloads carry no stamp, count only
        self.expected: int | None = spec.messages or None
        self.stale = 0
        self.last = time.perf_counter()  # time of the last message, read by the watchdog

    @classmethod
    async def subscribe(
        cls,
        client: Client,
        spec: LoadSpec,
        rec: Recorder,
        position: InitialPosition,
        since_us: int | None,
    ) -> _ConsumerGroup:
        consumers = [
            await client.subscribe(
                topic,
                spec.subscription,
                spec.subscription_type,
                receiver_queue_size=spec.receiver_queue,
                initial_position=position,
            )
            for topic in spec.topics
            for _ in range(spec.consumers)
        ]
        return cls(consumers, spec, rec, since_us)

    async def run(self, duration: float) -> None:
        """Receive on every consumer until the watchdog closes them (``duration`` 0: no
        deadline, only the expected count or idleness ends the run)."""
        await asyncio.gather(self._watch(duration), *(self._receive(c) for c in self.consumers))

    async def _receive(self, consumer: Consumer) -> None:
        """receive() without a timeout, as an application would call it: a timeout costs
        the SDK a timer per message."""
        rec, since = self.rec, self.since_us
        publish_time = self.spec.consumer_latency is ConsumerLatency.FROM_PUBLISH_TIME
        try:
            while self.expected is None or rec.count < self.expected:
                message = await consumer.receive()
                await consumer.acknowledge(message)
                self.last = time.perf_counter()
                if since is None:
                    if publish_time:
                        rec.add(wall_us() - message.publish_timestamp() * 1000)
                    else:
                        rec.count += 1
                    continue
                sent = int.from_bytes(message.data()[:STAMP_BYTES], "big")
                if sent < since:
                    self.stale += 1
                else:
                    rec.add(wall_us() - sent)
        except AlreadyClosed:
            return

    async def _watch(self, duration: float) -> None:
        """Close every consumer once the expected count is in, at the deadline, or when no
        message came for ``idle_timeout``. The run's clock stops at the last message unless
        messages were still flowing at the deadline: a consumer that drained a backlog early
        reports the rate it drained it at, not the backlog spread over the whole duration."""
        deadline = time.perf_counter() + duration if duration > 0 else None
        while True:
            await asyncio.sleep(0.02)
            now = time.perf_counter()
            if self.expected is not None and self.rec.count >= self.expected:
                self.rec.finish(at=self.last)
                break
            if now - self.last >= self.spec.idle_timeout:
                self.rec.finish(at=self.last)
                break
            if deadline is not None and now >= deadline:
                if now - self.last >= _DRY_S:  # drained the backlog before the deadline
                    self.rec.finish(at=self.last)
                break
        await asyncio.gather(*(c.close() for c in self.consumers), return_exceptions=True)
