"""What a schema costs the SDK: messages per second produced and consumed with typed values
(an Avro record, the same record as JSON) against raw bytes, in one run on one broker.

The raw payloads are the Avro record's own bytes (about 100 each), so raw and Avro put the
same bytes on the wire and the difference is encoding on send and decoding on ``value()``.
Each kind gets its own topic on one standalone broker (a child process, as a deployment runs
it): one SDK producer enqueues ``--messages`` values as fast as it can (batches of up to 100,
``block_if_queue_full=True``), then one consumer reads them back and decodes each one
(``value()``; ``data()`` for raw bytes). Prints a Markdown table for docs/benchmarks.md.

Usage::

    PYTHONPATH=$PWD:$PWD/protos python -m bench.schema_cost --messages 100000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

from bench.killsoak import Broker
from bench.sdk_load import produce_then_consume
from pulsar_grpc.client import Client
from pulsar_grpc.schema import AvroSchema, Double, JsonSchema, Long, Record, Schema, String

EVENTS = ["page_view", "add_to_cart", "checkout", "search", "login"]


class Event(Record):
    id = Long(required=True)
    user = String(required=True)
    event = String(required=True)
    ts = Long(required=True)
    path = String(required=True)
    amount = Double(required=True)


def events(count: int, seed: int = 7) -> list[Event]:
    rng = random.Random(seed)
    return [
        Event(
            id=i,
            user=f"user-{rng.randrange(100_000):06d}",
            event=rng.choice(EVENTS),
            ts=1_700_000_000_000 + i * 17,
            path=f"/catalog/shoes/{rng.randrange(5000)}/reviews/page/{rng.randrange(40)}?sort=new&lang=en-GB",
            amount=round(rng.uniform(1, 500), 2),
        )
        for i in range(count)
    ]


async def run_kind(
    service_url: str, kind: str, schema: Schema | None, values: list[Any]
) -> dict[str, float]:
    async with Client(service_url) as client:
        produce, consume = await produce_then_consume(
            client, f"bench-schema-{kind}", values, batch=100, schema=schema
        )
    return {"produce": produce, "consume": consume}


async def main(messages: int) -> None:
    records = events(messages)
    avro = AvroSchema(Event)
    raw = [avro.encode(r) for r in records]
    json_size = sum(len(JsonSchema(Event).encode(r)) for r in records[:1000]) / 1000
    kinds: list[tuple[str, Schema | None, list[Any]]] = [
        ("bytes", None, raw),
        ("avro", avro, records),
        ("json", JsonSchema(Event), records),
    ]
    data = Path(tempfile.mkdtemp(prefix="bench-schema-"))
    broker = Broker(data / "store", data, [])
    broker.start()
    try:
        rows = [(k, await run_kind(broker.service_url, k, s, v)) for k, s, v in kinds]
    finally:
        broker.stop()
        shutil.rmtree(data, ignore_errors=True)
    print(
        f"{messages} messages; Avro {sum(map(len, raw)) / messages:.0f} bytes each, JSON "
        f"{json_size:.0f}; load average {os.getloadavg()[0]:.2f}"
    )
    print("| values | produce msg/s | vs bytes | consume msg/s | vs bytes |")
    print("|---|---|---|---|---|")
    base = rows[0][1]
    for kind, r in rows:
        print(
            f"| {kind} | {r['produce']:,.0f} | {r['produce'] / base['produce']:.0%} | "
            f"{r['consume']:,.0f} | {r['consume'] / base['consume']:.0%} |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    asyncio.run(main(parser.parse_args().messages))
