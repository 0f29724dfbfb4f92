"""Random request sequences from a raw gRPC client (hypothesis), against a standalone broker
process: every call answered or ended with a documented status, no acked message delivered
again, the broker's loop never held, and every receipt still good after kill -9 (see
tests/e2e/fuzzing.py for the operations and invariants). A short run here; bench/
fuzz_requests.py runs it long and records the figures in docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import grpc
import pytest
from hypothesis import HealthCheck, Phase, given, settings

from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.fuzzing import PROGRAMS, Op, Prober, Run, run_program
from tests.e2e.wire import stub
from tests.support import StandaloneProcess

EXAMPLES = 25
# The longest the probe may wait for an answer while programs run. Generous for a loaded CI
# machine (a GC pause, a commit); what it catches is a request whose cost grows with a count
# it declared (a stall of seconds). bench/fuzz_requests.py reports the worst measured.
STALL_BOUND_S = 1.0

T = TypeVar("T")
RETAIN_ALL = (
    "--set", "defaultRetentionTimeInMinutes=-1", "--set", "defaultRetentionSizeInMB=-1",
)  # fmt: skip


class ClientLoop:
    """One event loop on a thread of its own for every program of a run: hypothesis calls the
    test function synchronously, and grpc.aio keeps to the first loop it runs on."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> ClientLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=300)


async def _run_one(address: str, run: Run, sub_type: str, ops: list[Op]) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        await run_program(channel, run, sub_type, ops)


def fuzz(address: str, run: Run, examples: int) -> None:
    """Run ``examples`` programs against the broker at ``address``, stopping at the first
    violation (hypothesis then shrinks it to a minimal program)."""
    with ClientLoop() as client:
        _fuzz(client, address, run, examples)


def _fuzz(client: ClientLoop, address: str, run: Run, examples: int) -> None:
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        # No shrinking: the broker is shared by every program, so a failure may depend on
        # what earlier programs left behind, and replaying smaller programs would mislead.
        phases=(Phase.explicit, Phase.generate),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(PROGRAMS)
    def program(drawn: tuple[str, list[Op]]) -> None:
        sub_type, ops = drawn
        before = len(run.violations)
        client.run(_run_one(address, run, sub_type, ops))
        assert len(run.violations) == before, run.violations[before:]

    program()


async def stored_entries(address: str, topic: str) -> set[tuple[int, int]]:
    """Every entry a reader from the earliest position gets (until none comes for 1 s)."""
    metadata = (
        ("x-pulsar-topic", topic),
        ("x-pulsar-durable", "false"),
        ("x-pulsar-start-message-id", "earliest"),
    )
    async with grpc.aio.insecure_channel(address) as channel:
        call = stub(channel).Consume(metadata=metadata)
        assert (await call.read()).HasField("subscribed")
        await call.write(pb.ConsumeRequest(flow=pb.Flow(permits=1_000_000)))
        found: set[tuple[int, int]] = set()
        try:
            while True:
                response = await asyncio.wait_for(call.read(), 1.0)
                for entry in response.messages.entries:
                    found.add((entry.ledger_id, entry.entry_id))
        except TimeoutError:
            pass
        finally:
            call.cancel()
    return found


@pytest.mark.timeout(600)
def test_random_request_sequences_keep_every_invariant(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    # Infinite retention: a ledger every subscription acked stays, so every receipt can be
    # looked for after the restart.
    broker = standalone_factory(None, *RETAIN_ALL)
    run = Run()
    with Prober(broker.grpc_address) as prober:
        fuzz(broker.grpc_address, run, EXAMPLES)
    print(
        f"\n{run.programs} programs, {run.requests} requests; the probe waited at most "
        f"{prober.worst_s * 1000:.0f} ms"
    )
    assert not prober.failures, prober.failures[:5]
    assert prober.worst_s < STALL_BOUND_S
    broker.kill9()
    restarted = standalone_factory(broker.data_dir, *RETAIN_ALL)
    with ClientLoop() as client:
        for topic, receipted in run.receipted.items():
            if receipted:
                stored = client.run(stored_entries(restarted.grpc_address, topic))
                missing = receipted - stored
                assert not missing, f"{topic}: receipted, lost across kill -9: {sorted(missing)}"
