"""Opening many topics at once never fails: a thousand consumers on a thousand topics subscribe
together, and all of them subscribe again at once after a kill -9 and restart (each topic's
ledger needs a new ledger id then, so ids are in demand all at the same moment)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc

from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.wire import stub
from tests.support import StandaloneProcess

TOPICS = 1000


async def subscribe_all(address: str, topics: list[str]) -> list[str]:
    """Subscribe to every topic at once; the errors, if any (one per failed topic)."""
    async with grpc.aio.insecure_channel(address) as ch:
        s = stub(ch)

        async def subscribe(topic: str) -> str | None:
            call = s.Consume(metadata=(("x-pulsar-topic", topic), ("x-pulsar-subscription", "s")))
            try:
                response = await asyncio.wait_for(call.read(), 120)
                return None if response.HasField("subscribed") else f"{topic}: {response}"
            except grpc.aio.AioRpcError as exc:
                return f"{topic}: {exc.code().name} {exc.details()}"
            finally:
                call.cancel()

        results = await asyncio.gather(*(subscribe(t) for t in topics))
    return [r for r in results if r is not None]


async def test_a_thousand_topics_open_at_once_and_again_after_a_restart(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    broker = standalone_factory()
    topics = [f"persistent://public/default/many-{i}" for i in range(TOPICS)]
    assert await subscribe_all(broker.grpc_address, topics) == []
    broker.kill9()

    restarted = standalone_factory(broker.data_dir)
    assert await subscribe_all(restarted.grpc_address, topics) == []
    # And the topics work: one produce lands on the last of them.
    async with grpc.aio.insecure_channel(restarted.grpc_address) as ch:
        producer = stub(ch).Produce(metadata=(("x-pulsar-topic", topics[-1]),))
        assert (await producer.read()).HasField("ready")
        await producer.write(pb.ProduceRequest(messages=[pb.MessageData(payload=b"x")]))
        assert (await producer.read()).HasField("receipt")
        await producer.done_writing()
