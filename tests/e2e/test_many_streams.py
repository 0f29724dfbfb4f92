"""Many streams opened at once are all served.

gRPC core queues the calls that arrive faster than grpc.aio's server loop takes them; past its
default limits (1,000 at random, 3,000 for sure) it refused the rest as CANCELLED, with no log
line, which a client cannot tell from its own cancellation. The broker raises the limits to
``grpcMaxPendingCalls`` (100,000), so a burst of 3,000 Consume streams over 10 channels (issue
25's example, which lost 511 of them) subscribes every one. Real broker, real gRPC.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import grpc

from pulsar_grpc.handler.server_options import server_options
from tests.e2e.wire import stub
from tests.support import BrokerThread

STREAMS = 3000
CHANNELS = 10


async def test_three_thousand_consume_streams_opened_at_once_are_all_served(
    broker: BrokerThread,
) -> None:
    channels = [grpc.aio.insecure_channel(broker.grpc_address) for _ in range(CHANNELS)]
    calls: list[grpc.aio.StreamStreamCall] = []

    async def subscribe(i: int) -> str:
        metadata = (
            ("x-pulsar-topic", f"many-streams-{i % 50}"),
            ("x-pulsar-subscription", f"s{i}"),
        )
        call = stub(channels[i % CHANNELS]).Consume(metadata=metadata)
        calls.append(call)
        try:
            response = await asyncio.wait_for(call.read(), 120)
        except grpc.aio.AioRpcError as exc:
            return f"{exc.code().name} {exc.details()}"
        return "subscribed" if response.HasField("subscribed") else str(response)

    try:
        outcomes = Counter(await asyncio.gather(*(subscribe(i) for i in range(STREAMS))))
    finally:
        for call in calls:
            call.cancel()
        await asyncio.gather(*(ch.close() for ch in channels))
    assert outcomes == {"subscribed": STREAMS}


def test_the_pending_call_limit_is_one_deterministic_limit() -> None:
    """Soft and hard limit alike: between them gRPC core would refuse calls at random."""
    options = dict(server_options(5 << 20, 30, 1234))
    assert options["grpc.server.max_pending_requests"] == 1234
    assert options["grpc.server.max_pending_requests_hard_limit"] == 1234
