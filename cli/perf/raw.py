"""Hand-driven streams with no SDK, and the bare server that gives the grpc.aio ceiling.

``produce_raw`` against the broker shows what the SDK costs on the produce path; against
:func:`serve_ceiling` (no broker at all, same batching) it is the ceiling of grpc.aio itself.
``consume_raw`` does the same for the consume path.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any

import grpc

from pulsar_grpc.cli.perf.spec import LoadSpec, chunk_of, payload_of
from pulsar_grpc.cli.perf.stats import Budget, Pacer, Recorder, now_us, with_reporters
from pulsar_grpc.client._headers import Header
from pulsargrpc.v1 import pulsar_pb2 as pb
from pulsargrpc.v1 import pulsar_pb2_grpc as pb_grpc

CEILING_READY = "perf ceiling ready port="


async def produce_raw(spec: LoadSpec, rec: Recorder) -> None:
    """ProduceRequests built by hand and pipelined on ``producers`` streams per topic."""
    target = spec.service_url.removeprefix("grpc://")
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.PulsarServiceStub(channel)
        budget = Budget(spec.messages, spec.duration)
        streams_total = spec.producers * len(spec.topics)
        pacer = Pacer(spec.rate) if spec.rate > 0 else None  # shared: the rate is the total
        window = max(1, spec.max_pending // spec.batch)
        streams = [
            _RawStream(stub, topic, payload_of(spec.size), window, spec.authorization())
            for topic in spec.topics
            for _ in range(spec.producers)
        ]
        for stream in streams:
            await stream.open()
        chunk = chunk_of(spec, streams_total)
        work = [s.run(chunk, budget, pacer, rec) for s in streams]
        await with_reporters([rec], spec.interval, work)


class _RawStream:
    """One Produce call: a writer pipelining batches, a reader matching receipts in order."""

    def __init__(
        self,
        stub: pb_grpc.PulsarServiceStub,
        topic: str,
        payload: bytes,
        window: int,
        authorization: tuple[tuple[str, str], ...],
    ):
        self._call = stub.Produce(metadata=((Header.TOPIC.value, topic), *authorization))
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


async def consume_raw(spec: LoadSpec, rec: Recorder) -> None:
    """One Consume stream per topic driven by hand: permits back and one cumulative ack per
    response. Against the SDK consumer this shows what the SDK's per-message work costs."""
    target = spec.service_url.removeprefix("grpc://")
    options = [("grpc.max_receive_message_length", -1)]
    async with grpc.aio.insecure_channel(target, options=options) as channel:
        stub = pb_grpc.PulsarServiceStub(channel)
        calls = []
        for topic in spec.topics:
            metadata = (
                (Header.TOPIC.value, topic),
                (Header.SUBSCRIPTION.value, spec.subscription),
                (Header.INITIAL_POSITION.value, spec.initial_position),
                *spec.authorization(),
            )
            call = stub.Consume(metadata=metadata)
            response = await call.read()
            if response is grpc.aio.EOF or response.WhichOneof("response") != "subscribed":
                raise RuntimeError(f"the broker did not answer ConsumerSubscribed: {response!r}")
            await call.write(pb.ConsumeRequest(flow=pb.Flow(permits=spec.receiver_queue)))
            calls.append(call)
        work = [_raw_receive_loop(call, spec, rec) for call in calls]
        await with_reporters([rec], spec.interval, work)
        for call in calls:
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
        tail = entries[-1]
        rec.count += n
        last_id = pb.MessageId(
            ledger_id=tail.ledger_id,
            entry_id=tail.entry_id,
            batch_index=len(tail.messages) - 1,
            partition=tail.partition,
        )
        await call.write(pb.ConsumeRequest(ack=pb.Ack(type=pb.Cumulative, ids=[last_id])))
        await call.write(pb.ConsumeRequest(flow=pb.Flow(permits=n)))


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
