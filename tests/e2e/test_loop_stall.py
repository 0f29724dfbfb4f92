"""One request never stalls the broker (issue 25): while each expensive request class runs on
a batch of 700,000 empty messages (acks of one index and of 50,000, redeliveries of the partly
acked batch, a seek and a cumulative ack inside it, a batch declaring 2^32 - 1 messages), a
health check every 50 ms on another channel is answered within a generous second. The code
before it waited 26.7 s for the redelivery alone at 1,000,000 messages (a quadratic walk over
the acked indexes), and a declared 2^32 - 1 messages grew the broker to 1.85 GB."""

from __future__ import annotations

from collections.abc import Callable

from bench.loop_stall import Prober, Scenario
from tests.support import BrokerThread

N = 700_000  # the most empty messages a batch may hold and still fit a 4 MiB consume response
BOUND_S = 1.0


async def test_no_request_class_keeps_a_probe_waiting_a_second(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    broker = broker_factory(maxMessagesPerBatch=1_000_000)
    prober = Prober(broker.grpc_address)
    prober.start()
    try:
        steps = await Scenario(broker.grpc_address, N, prober).run("stall")
    finally:
        prober.stop()
    for step in steps:
        print(f"{step.name}: worst probe {step.worst_probe_s * 1000:.0f} ms ({step.wall_s:.2f} s)")
    assert len(prober.samples) > 20
    slow = {s.name: round(s.worst_probe_s, 2) for s in steps if s.worst_probe_s > BOUND_S}
    assert not slow, f"probes waited over {BOUND_S} s during {slow}"
