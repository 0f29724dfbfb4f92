"""How long producers are blocked when a bundle is unloaded, or its owner is killed (-9).

Three brokers, a partitioned topic placed over them, and one producer per partition (on the
partition itself, so a producer's stalls are its partition's) sending one message at a time,
each awaited to its receipt, through a broker that is not the bundle's owner; a Shared
consumer receives and acks. Once every producer has had receipts for a while, the bundle of
partition 0 is disrupted:

- ``unload``: ``PUT /admin/v2/namespaces/public/default/<bundle>/unload`` to the owner: it
  closes the bundle's topics and releases it; the clients
  look the topics up again and the leader places the bundle anew.
- ``kill``: SIGKILL of the owner: its bundles stay its own until ZooKeeper expires its
  session (``metadataStoreSessionTimeoutMillis``), so the time blocked is dominated by it.

Per disruption, over the producers of the bundle's partitions: the longest gap between two
receipts (the time blocked), and the time from the disruption to the receipt that ended that
gap (the first one from the bundle's new owner). Unloads repeat on one cluster; each kill gets
fresh brokers.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import statistics
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pulsar_grpc.broker.naming import DEFAULT_NAMESPACE, NamespaceBundles, TopicName
from pulsar_grpc.cli.perf.servers import DEFAULT_SESSION_MS, Brokers, Servers, placed_topic
from pulsar_grpc.client import AlreadyClosed, Client, ConsumerType, Producer
from pulsar_grpc.client._connection import DEFAULT_MAX_BACKOFF_MS
from pulsar_grpc.client.exceptions import Timeout

BROKERS = 3
TOPIC = "perf-blocked"
STEADY_S = 2.0  # receipts before the disruption, and after every producer recovered
RECOVERY_LIMIT_S = 120.0  # beyond the session timeout: a producer that never recovers


class Disruption(enum.Enum):
    UNLOAD = "unload"
    KILL = "kill"


@dataclass
class _Receipts:
    """One producer's receipt times (monotonic seconds)."""

    times: list[float] = field(default_factory=list)

    def longest_gap(self, since: float) -> tuple[float, float]:
        """The longest wait between receipts from the last one before ``since`` on, and when
        the receipt that ended it came (when the producer was unblocked)."""
        start = max((i for i, t in enumerate(self.times) if t < since), default=0)
        times = self.times[start:]
        return max(((b - a, b) for a, b in itertools.pairwise(times)), default=(0.0, since))

    def first_after(self, moment: float) -> float | None:
        return next((t for t in self.times if t > moment), None)


@dataclass(frozen=True)
class BlockedSpec:
    """What `perf cluster --blocked` measures, and how often."""

    partitions: int
    repeat: int
    session_timeouts_ms: tuple[int, ...]  # one series of kills each
    # The SDK's reconnect backoff doubles from 100 ms up to this: after a kill, the clients'
    # retries are that far apart by the time the dead broker's session expires.
    max_backoff_ms: int = DEFAULT_MAX_BACKOFF_MS


def blocked_runs(
    servers: Servers, disruptions: list[Disruption], spec: BlockedSpec
) -> list[dict[str, Any]]:
    """Each disruption ``spec.repeat`` times (kills once per session timeout); p50/max."""
    out = []
    for disruption in disruptions:
        kill = disruption is Disruption.KILL
        for session_ms in spec.session_timeouts_ms if kill else (DEFAULT_SESSION_MS,):
            if not kill:
                with servers.brokers(BROKERS, session_ms) as brokers:
                    runs = [
                        _measure(brokers, disruption, spec, f"{TOPIC}-u{i}")
                        for i in range(spec.repeat)
                    ]
            else:
                runs = []
                for i in range(spec.repeat):
                    with servers.brokers(BROKERS, session_ms) as brokers:
                        runs.append(_measure(brokers, disruption, spec, f"{TOPIC}-k{i}"))
            out.append(_summary(disruption, session_ms, spec.max_backoff_ms, runs))
    return out


def _summary(
    disruption: Disruption, session_ms: int, max_backoff_ms: int, runs: list[dict[str, Any]]
) -> dict[str, Any]:
    def p50_max(key: str) -> dict[str, float]:
        values = [r[key] for r in runs]
        return {"p50": round(statistics.median(values), 3), "max": round(max(values), 3)}

    return {
        "disruption": disruption.value,
        "session_ms": session_ms,
        "client_max_backoff_ms": max_backoff_ms,
        "gap_s": p50_max("gap_s"),
        "first_receipt_s": p50_max("first_receipt_s"),
        "runs": runs,
    }


def _measure(
    brokers: Brokers, disruption: Disruption, spec: BlockedSpec, topic: str
) -> dict[str, Any]:
    partitions = spec.partitions
    owners = placed_topic(brokers.service_urls[0], brokers.http_urls[0], topic, partitions)
    victim = brokers.service_urls.index(owners[0])
    bundles = NamespaceBundles.with_count(DEFAULT_NAMESPACE, 4)
    bundle = bundles.bundle_for(TopicName.get(f"{topic}-partition-0"))
    hit = [
        p
        for p in range(partitions)
        if bundles.bundle_for(TopicName.get(f"{topic}-partition-{p}")) == bundle
    ]
    via = (victim + 1) % len(brokers.processes)  # the clients' broker: not the owner

    async def disrupt() -> None:
        if disruption is Disruption.KILL:
            # In a thread: the loop goes on taking receipts while the kill is waited for.
            await asyncio.to_thread(brokers.processes[victim].kill9)
            return
        url = f"{brokers.http_urls[victim]}/admin/v2/namespaces/public/default/{bundle.range_str}"
        request = urllib.request.Request(url + "/unload", method="PUT")
        await asyncio.to_thread(urllib.request.urlopen, request, timeout=60)

    client = Client(brokers.service_urls[via], max_backoff_interval_ms=spec.max_backoff_ms)
    result = asyncio.run(_under_load(client, topic, partitions, hit, disrupt))
    result.update(bundle=bundle.range_str, partitions_hit=hit)
    print(f"perf cluster: {disruption.value}: {result}", file=sys.stderr, flush=True)
    return result


async def _under_load(
    client: Client,
    topic: str,
    partitions: int,
    hit: list[int],
    disrupt: Callable[[], Awaitable[None]],
) -> dict[str, Any]:
    receipts = [_Receipts() for _ in range(partitions)]
    stop = asyncio.Event()
    delivered: list[float] = []
    async with client:
        consumer = await client.subscribe(
            topic, "blocked", consumer_type=ConsumerType.Shared, initial_position="Earliest"
        )
        producers = [
            await client.create_producer(
                f"{topic}-partition-{p}", batching_enabled=False, send_timeout_millis=0
            )
            for p in range(partitions)
        ]

        async def produce(producer: Producer, mine: _Receipts) -> None:
            while not stop.is_set():
                await producer.send(b"x" * 100)
                mine.times.append(time.monotonic())

        async def consume() -> None:
            while not stop.is_set():
                try:
                    message = await consumer.receive(timeout_millis=200)
                    await consumer.acknowledge(message)
                except (Timeout, AlreadyClosed):
                    continue
                delivered.append(time.monotonic())

        tasks = [
            asyncio.create_task(produce(p, r)) for p, r in zip(producers, receipts, strict=True)
        ]
        tasks.append(asyncio.create_task(consume()))
        try:
            await asyncio.sleep(STEADY_S)
            began = time.monotonic()
            await disrupt()
            over = time.monotonic()
            deadline = over + RECOVERY_LIMIT_S
            while any(receipts[p].first_after(over) is None for p in hit):
                if time.monotonic() > deadline or any(t.done() for t in tasks):
                    raise RuntimeError(f"producers of partitions {hit} did not recover")
                await asyncio.sleep(0.01)
            await asyncio.sleep(STEADY_S)
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
    # Receipts that were on their way when the broker died may still be taken after the
    # disruption: a producer is unblocked by the receipt that ends its longest gap.
    gaps = [receipts[p].longest_gap(began) for p in hit]
    others = [p for p in range(partitions) if p not in hit]
    return {
        "gap_s": round(max(gap for gap, _ in gaps), 3),
        "first_receipt_s": round(max(end for _, end in gaps) - began, 3),
        "gap_per_producer_s": [round(gap, 3) for gap, _ in gaps],
        "call_s": round(over - began, 3),
        "other_partitions_gap_s": round(
            max((receipts[p].longest_gap(began)[0] for p in others), default=0.0), 3
        ),
        "consumer_gap_s": round(
            max(
                (b - a for a, b in itertools.pairwise(delivered) if b > began),
                default=0.0,
            ),
            3,
        ),
    }
