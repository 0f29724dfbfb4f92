"""The load generators behind `pulsar-grpc perf`, their measurements, and the bare-stream server.

Everything here runs on one event loop in the load process. The load process has one core, so
the measuring must cost little per message: latencies are counted in a plain dict (µs -> count)
and folded into HDR histograms only when a stats line is printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from hdrh.histogram import HdrHistogram

from client import AlreadyClosed, Client, Consumer, InitialPosition, Producer
from pulsargrpc.v1 import pulsar_pb2 as pb
from pulsargrpc.v1 import pulsar_pb2_grpc as pb_grpc

# Latencies are recorded in µs, up to 10 minutes, with 3 significant digits.
_HDR_MAX_US = 600_000_000
PERCENTILES = (50.0, 95.0, 99.0, 99.9)
CEILING_READY = "perf ceiling ready port="


def now_us() -> int:
    return time.perf_counter_ns() // 1000


def _bucket(us: int) -> int:
    """``us`` cut to the 11 significant bits an HDR histogram with 3 digits keeps anyway,
    so the dict of pending latencies stays small."""
    shift = us.bit_length() - 11
    return us if shift <= 0 else (us >> shift) << shift


def payload_of(size: int) -> bytes:
    """Incompressible bytes, so nothing on the path gets an unfair shortcut."""
    return random.Random(size).randbytes(size)


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """What one load run does (the produce/consume flags of `perf`)."""

    service_url: str
    topic: str
    size: int = 100
    batch: int = 100
    messages: int = 0  # 0: until the duration is over
    duration: float = 0.0  # 0: until the message count is reached
    rate: float = 0.0  # messages/s over all producers, 0: as fast as possible
    producers: int = 1
    max_pending: int = 10_000  # per producer: messages sent and not receipted
    batch_delay_ms: float = 1.0
    subscription: str = "perf-sub"
    receiver_queue: int = 10_000
    idle_timeout: float = 10.0  # a consumer stops after this long without a message
    interval: float = 2.0  # seconds between stats lines


@dataclass(slots=True)
class Recorder:
    """Counts completed messages and their latencies; prints a stats line per interval."""

    label: str
    size: int
    count: int = 0
    errors: int = 0
    pending: dict[int, int] = field(default_factory=dict)  # latency µs -> count, not yet folded
    total: HdrHistogram = field(default_factory=lambda: HdrHistogram(1, _HDR_MAX_US, 3))
    started: float = field(default_factory=time.perf_counter)
    finished: float = 0.0
    _last_count: int = 0
    _last_time: float = 0.0

    def add(self, latency_us: int, n: int = 1) -> None:
        """``n`` messages completed, each after ``latency_us``."""
        self.count += n
        key = _bucket(latency_us)
        self.pending[key] = self.pending.get(key, 0) + n

    def add_group(self, sent_us: list[int], ok: bool) -> None:
        """Messages sent at ``sent_us`` got their receipt now (or failed, if not ``ok``)."""
        if not ok:
            self.errors += len(sent_us)
            return
        received = now_us()
        pending = self.pending
        for sent in sent_us:
            key = _bucket(received - sent)
            pending[key] = pending.get(key, 0) + 1
        self.count += len(sent_us)

    def start(self) -> None:
        self.started = self._last_time = time.perf_counter()

    def finish(self, at: float | None = None) -> None:
        """Stop the clock (at ``at``: a consumer that waited in vain stops at its last message)."""
        if not self.finished:
            self.finished = at or time.perf_counter()

    def line(self) -> str:
        """The stats line of the interval since the previous one (latencies of that interval)."""
        interval = HdrHistogram(1, _HDR_MAX_US, 3)
        for value, n in self.pending.items():
            interval.record_value(max(1, value), n)
        self.pending.clear()
        self.total.add(interval)
        now = time.perf_counter()
        rate = (self.count - self._last_count) / max(now - self._last_time, 1e-9)
        self._last_count, self._last_time = self.count, now
        text = (
            f"{self.label:<12} {now - self.started:6.1f}s  {rate:>11,.0f} msg/s "
            f"{rate * self.size / 1e6:7.1f} MB/s"
        )
        if interval.get_total_count():
            text += "  latency ms " + format_latency(latency_ms(interval))
        return text + (f"  errors {self.errors}" if self.errors else "")

    def summary(self) -> dict[str, Any]:
        """Totals of the whole run; folds what the last interval left."""
        if self.pending:
            self.line()
        elapsed = max((self.finished or time.perf_counter()) - self.started, 1e-9)
        return {
            "messages": self.count,
            "errors": self.errors,
            "seconds": round(elapsed, 3),
            "msg_per_s": round(self.count / elapsed, 1),
            "mb_per_s": round(self.count * self.size / elapsed / 1e6, 2),
            "latency_ms": latency_ms(self.total) if self.total.get_total_count() else None,
        }

    async def report_every(self, seconds: float) -> None:
        """Print a stats line every ``seconds`` until cancelled."""
        while True:
            await asyncio.sleep(seconds)
            print(self.line(), file=sys.stderr, flush=True)


def latency_ms(h: HdrHistogram) -> dict[str, float]:
    """mean, percentiles and max of a histogram of µs, in ms."""
    out = {"mean": round(h.get_mean_value() / 1000, 3)}
    for p in PERCENTILES:
        out[f"p{p:g}"] = round(h.get_value_at_percentile(p) / 1000, 3)
    out["max"] = round(h.get_max_value() / 1000, 3)
    return out


def format_latency(lat: dict[str, float]) -> str:
    return " ".join(f"{k} {v:.2f}" for k, v in lat.items())


class Budget:
    """Messages the producers of one run may still send: a count and/or a deadline."""

    def __init__(self, messages: int, duration: float) -> None:
        self._left = messages if messages > 0 else None
        self._deadline = time.monotonic() + duration if duration > 0 else None

    def take(self, wanted: int) -> int:
        """Up to ``wanted`` messages to send now; 0 means the run is over."""
        if self._deadline is not None and time.monotonic() >= self._deadline:
            return 0
        if self._left is None:
            return wanted
        n = min(wanted, self._left)
        self._left -= n
        return n


class Pacer:
    """Spreads sends evenly at ``rate`` messages/s (no catching up after a stall)."""

    def __init__(self, rate: float) -> None:
        self._interval = 1.0 / rate
        self._next = time.monotonic()

    async def wait(self, n: int) -> None:
        now = time.monotonic()
        self._next = max(self._next, now - 0.1) + n * self._interval
        delay = self._next - now
        if delay > 0:
            await asyncio.sleep(delay)


def chunk_of(spec: LoadSpec) -> int:
    """Messages sent back to back, without yielding to the loop: a batch when unlimited,
    ~1 ms worth when paced. Batches then hold whole chunks: a full batch is one chunk, and
    the SDK's batch timer can only fire between chunks."""
    if spec.rate <= 0:
        return spec.batch
    return max(1, min(spec.batch, int(spec.rate / spec.producers / 1000)))


async def with_reporter(rec: Recorder, interval: float, work: list[Any]) -> None:
    """Run ``work`` (coroutines) while printing stats lines; stop the clock when it ends."""
    rec.start()
    reporter = asyncio.get_running_loop().create_task(rec.report_every(interval))
    try:
        await asyncio.gather(*work)
    finally:
        rec.finish()
        reporter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reporter


# ---------------------------------------------------------------- SDK producer


async def produce_sdk(spec: LoadSpec, rec: Recorder) -> None:
    """The SDK producer: batching in the client, many sends in flight, latency per message."""
    async with Client(spec.service_url) as client:
        producers = [
            await client.create_producer(
                spec.topic,
                batching_max_messages=spec.batch,
                batching_max_bytes=max(128 * 1024, 2 * spec.batch * (spec.size + 16)),
                batching_max_publish_delay_ms=spec.batch_delay_ms,
                max_pending_messages=spec.max_pending,
            )
            for _ in range(spec.producers)
        ]
        budget = Budget(spec.messages, spec.duration)
        pacer = Pacer(spec.rate / spec.producers) if spec.rate > 0 else None
        work = [_sdk_send_loop(p, spec, budget, pacer, rec) for p in producers]
        await with_reporter(rec, spec.interval, work)


async def _sdk_send_loop(
    producer: Producer, spec: LoadSpec, budget: Budget, pacer: Pacer | None, rec: Recorder
) -> None:
    """Send groups of ``chunk`` messages back to back, timing each message from its call.

    Latency is taken with one done callback per group, not per message: a callback costs
    ~1.5 µs on uvloop, enough to halve what one core can produce. That is exact because a
    group never yields to the loop (the window below keeps ``send_async`` from blocking), so
    the SDK's batch timer can only fire between groups: a batch holds whole groups, all
    messages of a group get their receipt together, and receipts come in order.
    """
    window = _Window(spec.max_pending)
    payload, chunk = payload_of(spec.size), chunk_of(spec)
    while n := budget.take(chunk):
        if pacer is not None:
            await pacer.wait(n)
        await window.take(n)
        sent_us: list[int] = []
        for _ in range(n):
            sent_us.append(now_us())
            future = await producer.send_async(payload)
        future.add_done_callback(_group_done(rec, window, sent_us))
    await producer.flush()


def _group_done(
    rec: Recorder, window: _Window, sent_us: list[int]
) -> Callable[[asyncio.Future[Any]], None]:
    def done(future: asyncio.Future[Any]) -> None:
        window.give(len(sent_us))
        rec.add_group(sent_us, not future.cancelled() and future.exception() is None)

    return done


class _Window:
    """Messages in flight, waited for between groups rather than inside ``send_async``."""

    def __init__(self, size: int) -> None:
        self._free = size
        self._room = asyncio.Event()

    async def take(self, n: int) -> None:
        while self._free < n:
            self._room.clear()
            await self._room.wait()
        self._free -= n

    def give(self, n: int) -> None:
        self._free += n
        self._room.set()


# ---------------------------------------------------------------- raw stream


async def produce_raw(spec: LoadSpec, rec: Recorder) -> None:
    """ProduceRequests built by hand and pipelined on one stream per producer: no SDK.

    Against the broker this shows what the SDK costs; against the bare server of
    :func:`serve_ceiling` it is the ceiling of grpc.aio itself.
    """
    target = spec.service_url.removeprefix("grpc://")
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.PulsarServiceStub(channel)
        budget = Budget(spec.messages, spec.duration)
        pacer = Pacer(spec.rate / spec.producers) if spec.rate > 0 else None
        window = max(1, spec.max_pending // spec.batch)
        streams = [
            _RawStream(stub, spec.topic, payload_of(spec.size), window)
            for _ in range(spec.producers)
        ]
        for stream in streams:
            await stream.open()
        work = [s.run(chunk_of(spec), budget, pacer, rec) for s in streams]
        await with_reporter(rec, spec.interval, work)


class _RawStream:
    """One Produce call: a writer pipelining batches, a reader matching receipts in order."""

    def __init__(self, stub: pb_grpc.PulsarServiceStub, topic: str, payload: bytes, window: int):
        self._call = stub.Produce(metadata=(("x-pulsar-topic", topic),))
        self._message = pb.MessageData(payload=payload)
        self._window = asyncio.Semaphore(window)
        self._sent: deque[tuple[int, int]] = deque()  # (sent µs, messages) per batch in flight
        self._sequence_id = 0

    async def open(self) -> None:
        response = await self._call.read()
        if response is grpc.aio.EOF or response.WhichOneof("response") != "ready":
            raise RuntimeError(f"the server did not answer ProducerReady: {response!r}")
        self._sequence_id = response.ready.last_sequence_id + 1

    async def run(self, chunk: int, budget: Budget, pacer: Pacer | None, rec: Recorder) -> None:
        reader = asyncio.get_running_loop().create_task(self._read(rec))
        messages = [self._message] * chunk
        while n := budget.take(chunk):
            if pacer is not None:
                await pacer.wait(n)
            sent_us = now_us()
            await self._window.acquire()
            request = pb.ProduceRequest(messages=messages[:n], sequence_id=self._sequence_id)
            self._sequence_id += n
            self._sent.append((sent_us, n))
            await self._call.write(request)
        await self._call.done_writing()
        await reader

    async def _read(self, rec: Recorder) -> None:
        while (response := await self._call.read()) is not grpc.aio.EOF:
            if response.WhichOneof("response") != "receipt":
                continue
            sent_us, n = self._sent.popleft()
            rec.add(now_us() - sent_us, n)
            self._window.release()
        rec.errors += sum(n for _, n in self._sent)


# ---------------------------------------------------------------- consumer


async def consume_sdk(spec: LoadSpec, rec: Recorder) -> None:
    """The SDK consumer: a large receiver queue, an (SDK-grouped) ack per message.

    Reads from the earliest message, so it drains what a produce run left. Stops at
    ``spec.messages``, at the deadline, or after ``idle_timeout`` without a message.
    """
    async with Client(spec.service_url) as client:
        consumer = await client.subscribe(
            spec.topic,
            spec.subscription,
            receiver_queue_size=spec.receiver_queue,
            initial_position=InitialPosition.Earliest,
        )
        await with_reporter(rec, spec.interval, [_receive_loop(consumer, spec, rec)])
        await consumer.close()


async def _receive_loop(consumer: Consumer, spec: LoadSpec, rec: Recorder) -> None:
    """receive() without a timeout, as an application would call it: a timeout costs the SDK
    a timer per message. A watchdog closes the consumer at the deadline or when idle."""
    limit = spec.messages if spec.messages > 0 else None
    last = [time.perf_counter()]  # time of the last message, shared with the watchdog
    watchdog = asyncio.get_running_loop().create_task(_watch(consumer, spec, rec, last))
    try:
        while limit is None or rec.count < limit:
            message = await consumer.receive()
            await consumer.acknowledge(message)
            rec.count += 1
            last[0] = time.perf_counter()
    except AlreadyClosed:
        return
    finally:
        watchdog.cancel()


async def _watch(consumer: Consumer, spec: LoadSpec, rec: Recorder, last: list[float]) -> None:
    deadline = time.perf_counter() + spec.duration if spec.duration > 0 else None
    while True:
        await asyncio.sleep(min(0.2, spec.idle_timeout))
        now = time.perf_counter()
        if now - last[0] >= spec.idle_timeout:
            rec.finish(at=last[0])
            break
        if deadline is not None and now >= deadline:
            break
    await consumer.close()


async def consume_raw(spec: LoadSpec, rec: Recorder) -> None:
    """One Consume stream driven by hand: permits back and a cumulative ack per response.

    Against :func:`consume_sdk` this shows what the SDK's per-message work costs.
    """
    metadata = (
        ("x-pulsar-topic", spec.topic),
        ("x-pulsar-subscription", spec.subscription),
        ("x-pulsar-initial-position", "Earliest"),
    )
    target = spec.service_url.removeprefix("grpc://")
    options = [("grpc.max_receive_message_length", -1)]
    async with grpc.aio.insecure_channel(target, options=options) as channel:
        call = pb_grpc.PulsarServiceStub(channel).Consume(metadata=metadata)
        response = await call.read()
        if response is grpc.aio.EOF or response.WhichOneof("response") != "subscribed":
            raise RuntimeError(f"the broker did not answer ConsumerSubscribed: {response!r}")
        await call.write(pb.ConsumeRequest(flow=pb.Flow(permits=spec.receiver_queue)))
        await with_reporter(rec, spec.interval, [_raw_receive_loop(call, spec, rec)])
        call.cancel()


async def _raw_receive_loop(call: Any, spec: LoadSpec, rec: Recorder) -> None:
    limit = spec.messages if spec.messages > 0 else None
    deadline = time.monotonic() + spec.duration if spec.duration > 0 else None
    last = time.perf_counter()
    while limit is None or rec.count < limit:
        if deadline is not None and time.monotonic() >= deadline:
            return
        try:
            response = await asyncio.wait_for(call.read(), spec.idle_timeout)
        except TimeoutError:
            rec.finish(at=last)
            return
        if response is grpc.aio.EOF:
            return
        last = time.perf_counter()
        if response.WhichOneof("response") != "messages":
            continue
        entries = response.messages.entries
        n = sum(len(e.messages) for e in entries)
        last = entries[-1]
        rec.count += n
        last_id = pb.MessageId(
            ledger_id=last.ledger_id,
            entry_id=last.entry_id,
            batch_index=len(last.messages) - 1,
            partition=last.partition,
        )
        await call.write(pb.ConsumeRequest(ack=pb.Ack(type=pb.Cumulative, ids=[last_id])))
        await call.write(pb.ConsumeRequest(flow=pb.Flow(permits=n)))


# ---------------------------------------------------------------- the bare stream


class CeilingServicer(pb_grpc.PulsarServiceServicer):
    """Answers each ProduceRequest with a small SendReceipt: grpc.aio with no broker behind."""

    async def Produce(self, request_iterator: Any, context: Any) -> Any:
        yield pb.ProduceResponse(
            ready=pb.ProducerReady(producer_name="ceiling", last_sequence_id=-1, topic="ceiling")
        )
        entry = 0
        async for request in request_iterator:
            n = len(request.messages)
            yield pb.ProduceResponse(
                receipt=pb.SendReceipt(
                    sequence_id=request.sequence_id,
                    highest_sequence_id=request.sequence_id + n - 1,
                    ledger_id=1,
                    entry_id=entry,
                    partition=-1,
                    batch_size=n,
                )
            )
            entry += 1


def serve_ceiling() -> None:
    """Entry of the bare-stream server process: prints its port, serves until killed."""
    import uvloop

    async def main() -> None:
        server = grpc.aio.server()
        pb_grpc.add_PulsarServiceServicer_to_server(CeilingServicer(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print(f"{CEILING_READY}{port}", flush=True)
        await server.wait_for_termination()

    uvloop.run(main())
