"""Random request sequences against a live broker, and the invariants that must hold after
each (issue 25's fuzzing): what tests/e2e/test_fuzz_requests.py runs briefly in the suite and
bench/fuzz_requests.py runs long.

A program is a list of operations on one topic and one subscription, drawn by hypothesis:
produce a batch (plain, or compressed with declared counts and sizes that may lie), grant
permits (any uint32), ack (individual or cumulative, of delivered ids or made-up ones, batch
indexes from -5 up), negative-ack, redeliver, seek (to an id or a time), and reconnect. They
run over raw gRPC, as a client in any language would send them. After each operation and at
the end, these must hold:

- every call is answered, or ends with a documented status (docs/protocol.md's table);
- no message whose ack was receipted (AckReceipt) is delivered again, until a seek;
- the broker keeps answering: a probe thread calls it every 50 ms and records the longest
  wait (the caller bounds it);
- every receipted entry is still there after the broker is killed with kill -9 and started
  again (the caller checks :attr:`Run.receipted`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import grpc
from hypothesis import strategies as st

from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.wire import stub

# What a call may end with besides success (docs/protocol.md), and CANCELLED when we cancel.
DOCUMENTED = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.UNAVAILABLE,
}
ANSWER_S = 10.0  # every answer a request asked for comes within this
NACK_DELAY_MS = 50  # the consumers' negative-ack delay: redeliveries come within a program
SUB_TYPES = ("Exclusive", "Shared", "Failover", "Key_Shared")
ALL = -1  # the whole entry, in an acked key


@dataclass(frozen=True)
class Produce:
    messages: int
    payload: int  # bytes per message
    compressed: tuple[int, int] | None  # declared (num_messages, uncompressed_size)


@dataclass(frozen=True)
class Flow:
    permits: int


@dataclass(frozen=True)
class Pick:
    """An id to send: the delivered entry at ``index`` (modulo what was delivered), or, with
    ``made_up``, an id no entry has; ``batch_index`` as sent."""

    index: int
    batch_index: int
    made_up: bool


@dataclass(frozen=True)
class Ack:
    cumulative: bool
    picks: tuple[Pick, ...]


@dataclass(frozen=True)
class Nack:
    picks: tuple[Pick, ...]


@dataclass(frozen=True)
class Redeliver:
    pass


@dataclass(frozen=True)
class Seek:
    pick: Pick | None  # None: by publish time (now)


@dataclass(frozen=True)
class Reconnect:
    pass


@dataclass(frozen=True)
class Wait:
    """Let the broker work (negative-ack redeliveries come after NACK_DELAY_MS)."""

    seconds: float


Op = Produce | Flow | Ack | Nack | Redeliver | Seek | Reconnect | Wait

_picks = st.builds(
    Pick,
    index=st.integers(0, 50),
    batch_index=st.integers(-5, 40),
    made_up=st.booleans(),
)
OPS = st.one_of(
    st.builds(Wait, seconds=st.sampled_from([0.05, 0.2])),
    st.builds(
        Produce,
        messages=st.integers(0, 40),
        payload=st.integers(0, 64),
        compressed=st.none()
        | st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))
        | st.tuples(st.integers(0, 64), st.integers(0, 4096)),
    ),
    st.builds(Flow, permits=st.integers(0, 2**32 - 1) | st.integers(0, 100)),
    st.builds(Ack, cumulative=st.booleans(), picks=st.lists(_picks, max_size=5).map(tuple)),
    st.builds(Nack, picks=st.lists(_picks, max_size=5).map(tuple)),
    st.just(Redeliver()),
    st.builds(Seek, pick=st.none() | _picks),
    st.just(Reconnect()),
)
PROGRAMS = st.tuples(st.sampled_from(SUB_TYPES), st.lists(OPS, min_size=1, max_size=16))


class Prober:
    """A thread that calls the broker every 50 ms (a cheap unary call on a channel of its own)
    and keeps the longest wait: how long the broker's event loop was held."""

    def __init__(self, address: str) -> None:
        self._channel = grpc.insecure_channel(address)
        self._stub = stub(self._channel)  # type: ignore[arg-type]
        self.worst_s = 0.0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="prober", daemon=True)

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        self._channel.close()

    def _run(self) -> None:
        request = pb.PartitionedTopicMetadataRequest(topic="probe")
        while not self._stop.wait(0.05):
            started = time.monotonic()
            try:
                self._stub.GetPartitionedTopicMetadata(request, timeout=60)
            except grpc.RpcError as e:
                self.failures.append(f"{e.code()}: {e.details()}")
            self.worst_s = max(self.worst_s, time.monotonic() - started)


@dataclass
class Run:
    """What the programs were told, across every program of a run."""

    receipted: dict[str, set[tuple[int, int]]] = field(default_factory=dict)  # topic -> ids
    violations: list[str] = field(default_factory=list)
    programs: int = 0
    requests: int = 0


class _Consumer:
    """A raw Consume call; a task files its responses."""

    def __init__(self, channel: grpc.aio.Channel, topic: str, sub_type: str) -> None:
        metadata = (
            ("x-pulsar-topic", topic),
            ("x-pulsar-subscription", "sub"),
            ("x-pulsar-subscription-type", sub_type),
            ("x-pulsar-initial-position", "Earliest"),
            ("x-pulsar-negative-ack-delay-ms", str(NACK_DELAY_MS)),
        )
        self.call = stub(channel).Consume(metadata=metadata)
        self.responses: asyncio.Queue[pb.ConsumeResponse | BaseException] = asyncio.Queue()
        self.task = asyncio.create_task(self._pump())

    async def _pump(self) -> None:
        try:
            while (response := await self.call.read()) is not grpc.aio.EOF:
                await self.responses.put(response)
        except BaseException as e:  # the call's end: checked by whoever reads it
            await self.responses.put(e)

    async def close(self) -> None:
        self.call.cancel()
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


class Program:
    """One program's run: a topic, a subscription, the ids delivered and acked."""

    def __init__(self, channel: grpc.aio.Channel, run: Run, topic: str, sub_type: str) -> None:
        self.channel = channel
        self.run = run
        self.topic = topic
        self.sub_type = sub_type
        self.delivered: list[pb.DeliveredEntry] = []
        self.acked: set[tuple[int, int, int]] = set()  # (ledger, entry, index | ALL)
        self.acked_before: tuple[int, int] | None = None  # a receipted cumulative ack's entry
        self.sizes: dict[tuple[int, int], int] = {}
        self.pending_acks: dict[int, list[tuple[int, int, int]]] = {}
        self.cumulative_acks: dict[int, tuple[int, int, int]] = {}
        self.request_ids = iter(range(1, 1 << 62))
        self.consumer: _Consumer | None = None
        self.producer: grpc.aio.StreamStreamCall | None = None
        self.sequence = 0
        run.receipted.setdefault(topic, set())

    def _violation(self, what: str) -> None:
        self.run.violations.append(f"{self.topic} ({self.sub_type}): {what}")

    def _ended(self, error: BaseException) -> None:
        if isinstance(error, grpc.aio.AioRpcError):
            if error.code() not in DOCUMENTED:
                self._violation(f"a call ended {error.code()}: {error.details()}")
        elif not isinstance(error, asyncio.CancelledError):
            self._violation(f"a call failed with {error!r}")

    # ---------------------------------------------------------------- the consumer side

    async def _consumer(self) -> _Consumer:
        if self.consumer is None:
            self.consumer = _Consumer(self.channel, self.topic, self.sub_type)
        return self.consumer

    async def drain(self, quiet_s: float) -> None:
        """File every response until none came for ``quiet_s``."""
        consumer = await self._consumer()
        while True:
            try:
                item = await asyncio.wait_for(consumer.responses.get(), quiet_s)
            except TimeoutError:
                return
            if isinstance(item, BaseException):
                self._ended(item)
                await consumer.close()
                self.consumer = None
                return
            self._file(item)

    def _file(self, response: pb.ConsumeResponse) -> None:
        kind = response.WhichOneof("response")
        if kind == "messages":
            for entry in response.messages.entries:
                self._check_delivery(entry)
                self.delivered.append(entry)
                self.sizes[(entry.ledger_id, entry.entry_id)] = _count(entry)
        elif kind == "ack_receipt":
            rid = response.ack_receipt.request_id
            self.acked.update(self.pending_acks.pop(rid, ()))
            if rid in self.cumulative_acks:
                ledger, entry, index = self.cumulative_acks.pop(rid)
                before = (ledger, entry)
                if self.acked_before is None or before > self.acked_before:
                    self.acked_before = before
                self.acked.add((ledger, entry, ALL) if index < 0 else (ledger, entry, index))
                self.acked.update((ledger, entry, i) for i in range(max(index, -1) + 1))
        elif kind == "seek_done":
            self.acked.clear()  # a seek moves acks both ways: check from here on
            self.acked_before = None
        elif kind == "request_error":
            self.pending_acks.pop(response.request_error.request_id, None)
            self.cumulative_acks.pop(response.request_error.request_id, None)

    def _check_delivery(self, entry: pb.DeliveredEntry) -> None:
        key = (entry.ledger_id, entry.entry_id)
        skipped = set(entry.acked_batch_indexes)
        count = _count(entry)
        if self.acked_before is not None and key < self.acked_before:
            self._violation(f"{key} delivered after a receipted cumulative ack past it")
        for index in range(min(count, 10_000)):
            if index in skipped:
                continue
            if (*key, ALL) in self.acked or (*key, index) in self.acked:
                self._violation(f"{key}:{index} delivered again after its ack was receipted")
                return

    def _id(self, pick: Pick) -> pb.MessageId:
        if pick.made_up or not self.delivered:
            return pb.MessageId(ledger_id=pick.index * 7919 + 3, entry_id=pick.index * 31 + 1)
        entry = self.delivered[pick.index % len(self.delivered)]
        return pb.MessageId(
            ledger_id=entry.ledger_id, entry_id=entry.entry_id, batch_index=pick.batch_index
        )

    async def _send(self, request: pb.ConsumeRequest) -> None:
        consumer = await self._consumer()
        try:
            await consumer.call.write(request)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
            await self.drain(0.05)  # the call ended: its status is checked there

    # ---------------------------------------------------------------- operations

    async def apply(self, op: Op) -> None:
        self.run.requests += 1
        if isinstance(op, Produce):
            await self._produce(op)
        elif isinstance(op, Flow):
            await self._send(pb.ConsumeRequest(flow=pb.Flow(permits=op.permits)))
        elif isinstance(op, Ack):
            await self._ack(op)
        elif isinstance(op, Nack):
            ids = [self._id(p) for p in op.picks]
            await self._send(pb.ConsumeRequest(negative_ack=pb.NegativeAck(ids=ids)))
        elif isinstance(op, Redeliver):
            rid = next(self.request_ids)
            await self._send(
                pb.ConsumeRequest(redeliver=pb.RedeliverUnacknowledged(request_id=rid))
            )
        elif isinstance(op, Seek):
            rid = next(self.request_ids)
            if op.pick is None:
                seek = pb.Seek(publish_time=int(time.time() * 1000), request_id=rid)
            else:
                seek = pb.Seek(message_id=self._id(op.pick), request_id=rid)
            await self._send(pb.ConsumeRequest(seek=seek))
        elif isinstance(op, Wait):
            await self.drain(op.seconds)
        elif isinstance(op, Reconnect) and self.consumer is not None:
            await self.drain(0.05)
            if self.consumer is not None:
                await self.consumer.close()
                self.consumer = None
        await self.drain(0.02)

    async def _ack(self, op: Ack) -> None:
        if not op.picks:
            return
        ids = [self._id(p) for p in op.picks]
        rid = next(self.request_ids)
        if op.cumulative:
            last = ids[-1]
            self.cumulative_acks[rid] = (last.ledger_id, last.entry_id, last.batch_index)
            ids = [last]
        else:
            self.pending_acks[rid] = [
                (i.ledger_id, i.entry_id, ALL if i.batch_index < 0 else i.batch_index)
                for i in ids
                if i.batch_index >= -1
            ]
        ack_type = pb.Cumulative if op.cumulative else pb.Individual
        await self._send(pb.ConsumeRequest(ack=pb.Ack(type=ack_type, ids=ids, request_id=rid)))

    async def _produce(self, op: Produce) -> None:
        if self.producer is None:
            self.producer = stub(self.channel).Produce(metadata=(("x-pulsar-topic", self.topic),))
            try:
                first = await asyncio.wait_for(self.producer.read(), ANSWER_S)
            except grpc.aio.AioRpcError as e:
                self._ended(e)
                self.producer = None
                return
            except TimeoutError:
                self._violation(f"a Produce call not answered within {ANSWER_S:g} s")
                self.producer.cancel()
                self.producer = None
                return
            assert first.HasField("ready"), first
        payloads = [bytes([i % 251]) * op.payload for i in range(op.messages)]
        request = pb.ProduceRequest(sequence_id=self.sequence)
        if op.compressed is None:
            request.messages.extend(pb.MessageData(payload=p) for p in payloads)
        else:
            count, size = op.compressed
            request.compressed.CopyFrom(
                pb.CompressedBatch(
                    compression=pb.NONE,
                    num_messages=count,
                    uncompressed_size=size,
                    messages=b"".join(payloads),
                )
            )
        self.sequence += max(op.messages, 1)
        try:
            await self.producer.write(request)
            response = await asyncio.wait_for(self.producer.read(), ANSWER_S)
        except grpc.aio.AioRpcError as e:
            self._ended(e)
            self.producer = None
            return
        except TimeoutError:
            self._violation(f"no answer to a produce of {op} within {ANSWER_S:g} s")
            self.producer.cancel()
            self.producer = None
            return
        if response is grpc.aio.EOF:
            self._violation(f"a Produce call ended without a status after {op}")
            self.producer = None
            return
        receipt = response.receipt
        if not receipt.duplicate:
            self.run.receipted[self.topic].add((receipt.ledger_id, receipt.entry_id))

    async def close(self) -> None:
        await self.drain(0.1)
        if self.consumer is not None:
            await self.consumer.close()
        if self.producer is not None:
            self.producer.cancel()


def _count(entry: pb.DeliveredEntry) -> int:
    return entry.compressed.num_messages if entry.HasField("compressed") else len(entry.messages)


async def run_program(channel: grpc.aio.Channel, run: Run, sub_type: str, ops: list[Op]) -> None:
    """Run one program on a topic of its own; violations go to ``run``."""
    run.programs += 1
    program = Program(channel, run, f"fuzz-{run.programs}-{time.monotonic_ns()}", sub_type)
    try:
        await program.apply(Flow(permits=100))
        for op in ops:
            await program.apply(op)
        # The end: all the permits a client may give, then whatever still comes.
        await program.apply(Flow(permits=1000))
        await program.drain(0.3)
    finally:
        await program.close()


def receipted_ids(run: Run) -> Iterator[tuple[str, tuple[int, int]]]:
    for topic, ids in run.receipted.items():
        for entry in sorted(ids):
            yield topic, entry
