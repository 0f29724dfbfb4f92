"""Loop-stall bench: how long one client's expensive request keeps every other client waiting.

Why: the broker's event loop is shared by every client, so a request whose cost grows faster
than what its client sent (a quadratic walk over a batch's acked indexes, an allocation sized
by a declared count) stalls everyone (issue 25: 26.7 s for a redelivery of a batch of
1,000,000 messages with one index acked). A prober thread makes a cheap unary call (the
health check) every 50 ms on its own channel and records how long each took; each request
class runs in turn and the worst probe latency during it is its stall. The baseline is the
worst probe of an idle period of the same run.

Request classes, on one batch of ``n`` empty messages: produce it; deliver it; ack index 0;
redeliver (RedeliverUnacknowledged) the partly acked batch; ack every other index of the first
``min(n, 100000)`` in one request; negative-ack it and take the redelivery (listing those
indexes); seek into the middle of the batch; a cumulative ack inside the batch; one Ack naming
the entry 200,000 times (a request of many ids); a compressed batch declaring 2^32 - 1
messages over a 1-byte payload (refused: INVALID_ARGUMENT).

Usage (the broker is a child process, maxMessagesPerBatch raised to let the batch in)::

    PYTHONPATH=$PWD:$PWD/protos python -m bench.loop_stall [--sizes 1000,10000,100000,700000]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pulsargrpc.v1 import pulsar_pb2 as pb

SERVICE = "/pulsargrpc.v1.PulsarService/"
PROBE_INTERVAL_S = 0.05
ANSWER_S = 120.0
# Sizes the sweep uses by default: up to what a 4 MiB consume response can carry (a batch of
# 700,000 empty messages; 1,000,000 is refused, its redelivery could not fit).
DEFAULT_SIZES = (1_000, 10_000, 100_000, 700_000)


# Ids in the one Ack request that names many (each id ~16 bytes on the wire).
MANY_IDS = 200_000


def _raw(value: bytes) -> bytes:
    return value


class Prober(threading.Thread):
    """A health check every PROBE_INTERVAL_S on its own channel and thread; each call's
    (start, latency) is kept."""

    def __init__(self, address: str) -> None:
        super().__init__(name="loop-prober", daemon=True)
        self._address = address
        self._halt = threading.Event()
        self.samples: list[tuple[float, float]] = []

    def run(self) -> None:
        with grpc.insecure_channel(self._address) as channel:
            check = health_pb2_grpc.HealthStub(channel).Check
            check(health_pb2.HealthCheckRequest(), timeout=ANSWER_S)  # connected
            while not self._halt.is_set():
                began = time.monotonic()
                check(health_pb2.HealthCheckRequest(), timeout=ANSWER_S)
                self.samples.append((began, time.monotonic() - began))
                self._halt.wait(max(0.0, PROBE_INTERVAL_S - (time.monotonic() - began)))

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def worst(self, since: float, until: float) -> float:
        """The longest call that was under way at some time in [since, until]."""
        return max(
            (lat for start, lat in self.samples if start <= until and start + lat >= since),
            default=0.0,
        )


@dataclass
class Step:
    name: str
    wall_s: float
    worst_probe_s: float


@dataclass
class Scenario:
    """One batch of ``n`` messages taken through every expensive request class."""

    address: str
    n: int
    prober: Prober
    steps: list[Step] = field(default_factory=list)

    async def measure(self, name: str, action: Callable[[], Awaitable[None]]) -> None:
        await asyncio.sleep(2 * PROBE_INTERVAL_S)  # a probe or two before
        began = time.monotonic()
        await action()
        ended = time.monotonic()
        await asyncio.sleep(2 * PROBE_INTERVAL_S)  # and after: a stall may outlast the answer
        self.steps.append(Step(name, ended - began, self.prober.worst(began, ended)))

    async def run(self, topic: str) -> list[Step]:
        n = self.n
        ids_acked = min(n, 100_000)
        big = pb.ProduceRequest(messages=[pb.MessageData()] * n).SerializeToString()
        async with grpc.aio.insecure_channel(
            self.address, options=[("grpc.max_receive_message_length", -1)]
        ) as ch:
            consume = ch.stream_stream(
                SERVICE + "Consume", request_serializer=_raw, response_deserializer=_raw
            )(
                metadata=(
                    ("x-pulsar-topic", topic),
                    ("x-pulsar-subscription", "s"),
                    ("x-pulsar-negative-ack-delay-ms", "1"),
                )
            )
            responses = _responses(consume)
            await anext(responses)  # subscribed
            produce = ch.stream_stream(
                SERVICE + "Produce", request_serializer=_raw, response_deserializer=_raw
            )(metadata=(("x-pulsar-topic", topic),))
            await produce.read()  # ready
            position: list[int] = []

            async def produce_batch() -> None:
                await produce.write(big)
                receipt = pb.ProduceResponse.FromString(await produce.read()).receipt
                position[:] = [receipt.ledger_id, receipt.entry_id]

            def mid(index: int) -> pb.MessageId:
                return pb.MessageId(ledger_id=position[0], entry_id=position[1], batch_index=index)

            async def send(request: pb.ConsumeRequest, answer: str) -> pb.ConsumeResponse:
                await consume.write(request.SerializeToString())
                return await _until(responses, answer)

            async def delivered(request: pb.ConsumeRequest | None = None) -> None:
                if request is not None:
                    await consume.write(request.SerializeToString())
                await _until(responses, "messages")

            def ack(indexes: list[int], rid: int, kind: int = pb.Individual) -> pb.ConsumeRequest:
                ids = [mid(i) for i in indexes]
                return pb.ConsumeRequest(ack=pb.Ack(type=kind, ids=ids, request_id=rid))

            await self.measure("produce", produce_batch)
            odd = ack(list(range(1, ids_acked, 2)), 2)  # built before its step is measured
            await self.measure(
                "deliver", lambda: delivered(pb.ConsumeRequest(flow=pb.Flow(permits=2**31)))
            )
            await self.measure("ack index 0", lambda: send(ack([0], 1), "ack_receipt"))
            redeliver = pb.ConsumeRequest(redeliver=pb.RedeliverUnacknowledged(request_id=3))
            await self.measure("redeliver", lambda: delivered(redeliver))
            await self.measure("ack every 2nd index", lambda: send(odd, "ack_receipt"))
            nack = pb.ConsumeRequest(negative_ack=pb.NegativeAck(ids=[mid(-1)]))
            await self.measure("nack, redelivery", lambda: delivered(nack))
            seek = pb.ConsumeRequest(seek=pb.Seek(message_id=mid(n // 2), request_id=4))
            await self.measure("seek into batch", lambda: delivered(seek))
            cumulative = ack([n * 3 // 4], 5, pb.Cumulative)
            await self.measure("cumulative in batch", lambda: send(cumulative, "ack_receipt"))
            many = ack([-1] * MANY_IDS, 6)  # one Ack naming the entry MANY_IDS times (~3 MB)
            await self.measure(f"ack of {MANY_IDS:,} ids", lambda: send(many, "ack_receipt"))
            consume.cancel()
            produce.cancel()
            await self.measure("declared 2^32-1", lambda: _declared_count_refused(ch, topic))
        return self.steps


async def _responses(call: grpc.aio.StreamStreamCall) -> AsyncIterator[pb.ConsumeResponse]:
    while True:
        yield pb.ConsumeResponse.FromString(await call.read())


async def _until(responses: AsyncIterator[pb.ConsumeResponse], kind: str) -> pb.ConsumeResponse:
    """The next response of ``kind`` (answers such as seek_done or redeliver_done skipped)."""
    async with asyncio.timeout(ANSWER_S):
        async for response in responses:
            if response.WhichOneof("response") == kind:
                return response
            if response.WhichOneof("response") == "request_error":
                raise AssertionError(f"refused: {response.request_error}")
    raise AssertionError("the stream ended")


async def _declared_count_refused(channel: grpc.aio.Channel, topic: str) -> None:
    produce = channel.stream_stream(
        SERVICE + "Produce", request_serializer=_raw, response_deserializer=_raw
    )(metadata=(("x-pulsar-topic", topic + "-declared"),))
    await produce.read()
    batch = pb.CompressedBatch(num_messages=2**32 - 1, uncompressed_size=2**32 - 1, messages=b"x")
    await produce.write(pb.ProduceRequest(compressed=batch).SerializeToString())
    try:
        await produce.read()
    except grpc.aio.AioRpcError as exc:
        if exc.code() is not grpc.StatusCode.INVALID_ARGUMENT:
            raise
        return
    raise AssertionError("a batch declaring 2^32 - 1 messages was stored")


async def sweep(address: str, sizes: list[int]) -> tuple[float, dict[int, list[Step]]]:
    """The idle baseline's worst probe, then each size's steps."""
    prober = Prober(address)
    prober.start()
    try:
        await asyncio.sleep(0.5)
        began = time.monotonic()
        await asyncio.sleep(2.0)
        baseline = prober.worst(began, time.monotonic())
        results = {}
        for n in sizes:
            results[n] = await Scenario(address, n, prober).run(f"stall-{n}")
        return baseline, results
    finally:
        prober.stop()


def main() -> None:
    from bench.killsoak import Broker  # the standalone broker as a child process

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="loop-stall-"))
    broker = Broker(work / "data", work, ["--set", f"maxMessagesPerBatch={max(sizes)}"])
    broker.start()
    try:
        baseline, results = asyncio.run(sweep(f"127.0.0.1:{broker.port}", sizes))
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"idle baseline: worst probe {baseline * 1000:.1f} ms")
    names = [s.name for s in next(iter(results.values()))]
    print("| request | " + " | ".join(f"n={n:,}" for n in results) + " |")
    print("|---|" + "---|" * len(results))
    for i, name in enumerate(names):
        cells = [f"{steps[i].worst_probe_s * 1000:.0f} ms" for steps in results.values()]
        print(f"| {name} | " + " | ".join(cells) + " |")
    worst = [max(s.worst_probe_s for s in steps) for steps in results.values()]
    print("| **worst stall** | " + " | ".join(f"**{w * 1000:.0f} ms**" for w in worst) + " |")


if __name__ == "__main__":
    main()
