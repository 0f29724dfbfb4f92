"""The load the SDK benchmarks share: one producer sends every value as fast as the SDK lets
it (``enqueue`` with ``block_if_queue_full``, then ``flush``), then one consumer receives them
all back; the two rates, in messages per second.

A consumer given a schema decodes each message (``value()``), as an application reading typed
values does; without one it takes the bytes (``data()``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from pulsar_grpc.client import Client
from pulsar_grpc.schema import Schema


async def produce_then_consume(
    client: Client,
    topic: str,
    values: Sequence[Any],
    *,
    batch: int,
    schema: Schema | None = None,
    **producer_options: Any,
) -> tuple[float, float]:
    """(produce msg/s, consume msg/s) of ``values`` on ``topic``, in batches of ``batch``."""
    typed: dict[str, Any] = {} if schema is None else {"schema": schema}
    consumer = await client.subscribe(topic, "bench", initial_position="Earliest", **typed)
    producer = await client.create_producer(
        topic,
        batching_max_messages=batch,
        max_pending_messages=20_000,
        block_if_queue_full=True,
        **typed,
        **producer_options,
    )
    started = time.perf_counter()
    futures = [await producer.enqueue(v) for v in values]
    await producer.flush()
    await asyncio.gather(*futures)
    produce_s = time.perf_counter() - started
    started = time.perf_counter()
    for _ in values:
        message = await consumer.receive(30_000)
        message.data() if schema is None else message.value()
    consume_s = time.perf_counter() - started
    await consumer.acknowledge_cumulative(message)
    await producer.close()
    await consumer.close()
    return len(values) / produce_s, len(values) / consume_s
