"""What a schema costs the SDK: messages per second produced and consumed with typed values
(an Avro record, the same record as JSON) against raw bytes, in one run on one broker.

The raw payloads are the Avro record's own bytes (about 100 each), so raw and Avro put the
same bytes on the wire and the difference is encoding on send and decoding on ``value()``.
Each kind gets its own topic on one standalone broker (a child process, as a deployment runs
it): one SDK producer enqueues ``--messages`` values as fast as it can (batches of up to 100,
``block_if_queue_full=True``), then one consumer reads them back and decodes each one
(``value()``; ``data()`` for raw bytes). That first table is the SDK's own cost, a consumer
draining a full queue.

The second is what a deployment sees: for each kind, a producer and a consumer in separate
processes (``--role``), running at the same time against the same broker, the consumer
decoding each message of the live stream as it arrives; its rate is the messages over the time
from its first message to its last, and each side's CPU time a message (what a typed value
costs it even while it keeps up with the stream) is compared with raw bytes'. A first,
small table times encoding and decoding one value in this process, beside the decoding
library alone. Prints a Markdown table of each for docs/benchmarks.md.

Usage::

    PYTHONPATH=$PWD:$PWD/protos python -m bench.schema_cost --messages 100000
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import fastavro
import orjson

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


def kinds(messages: int) -> dict[str, tuple[Schema | None, list[Any]]]:
    """Each kind's schema (None: raw bytes) and values: the same records, the raw ones being
    their Avro bytes."""
    records = events(messages)
    avro = AvroSchema(Event)
    return {
        "bytes": (None, [avro.encode(r) for r in records]),
        "avro": (avro, records),
        "json": (JsonSchema(Event), records),
    }


async def produce_role(service_url: str, kind: str, topic: str, messages: int) -> dict[str, float]:
    """The live run's producer: every value as fast as the SDK sends them."""
    schema, values = kinds(messages)[kind]
    typed: dict[str, Any] = {} if schema is None else {"schema": schema}
    async with Client(service_url) as client:
        producer = await client.create_producer(
            topic,
            batching_max_messages=100,
            max_pending_messages=20_000,
            block_if_queue_full=True,
            **typed,
        )
        started, cpu = time.perf_counter(), time.process_time()
        futures = [await producer.enqueue(v) for v in values]
        await producer.flush()
        await asyncio.gather(*futures)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {"produce": messages / elapsed, "produce_cpu_us": cpu / messages * 1e6}


async def consume_role(service_url: str, kind: str, topic: str, messages: int) -> dict[str, float]:
    """The live run's consumer: subscribed before the producer starts (it says so on stdout),
    decoding each message as it arrives; the rate from its first message to its last."""
    schema = kinds(1)[kind][0]
    typed: dict[str, Any] = {} if schema is None else {"schema": schema}
    async with Client(service_url) as client:
        consumer = await client.subscribe(topic, "live", **typed)
        print("subscribed", flush=True)
        message = await consumer.receive(60_000)
        message.data() if schema is None else message.value()
        started, cpu = time.perf_counter(), time.process_time()
        for _ in range(messages - 1):
            message = await consumer.receive(30_000)
            message.data() if schema is None else message.value()
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        await consumer.acknowledge_cumulative(message)
    return {"consume": (messages - 1) / elapsed, "consume_cpu_us": cpu / (messages - 1) * 1e6}


async def live_run(service_url: str, kind: str, messages: int) -> dict[str, float]:
    """One kind's live run: the consumer process, then (once it has subscribed) the
    producer process; both rates."""

    async def role(name: str) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.schema_cost", "--role", name, "--kind", kind,
            "--topic", topic, "--service-url", service_url, "--messages", str(messages),
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip

    topic = f"bench-live-{kind}"
    consumer = await role("consume")
    assert consumer.stdout is not None
    if (await consumer.stdout.readline()).strip() != b"subscribed":
        raise RuntimeError(f"the {kind} consumer did not subscribe")
    producer = await role("produce")
    outputs = await asyncio.gather(producer.communicate(), consumer.communicate())
    if producer.returncode or consumer.returncode:
        raise RuntimeError(f"the {kind} live run failed")
    rates: dict[str, float] = {}
    for out, _ in outputs:
        rates.update(json.loads(out.decode().strip().splitlines()[-1]))
    return rates


def per_value(records: list[Event], repeat: int = 50_000) -> list[tuple[str, float, float]]:
    """Microseconds to encode and to decode one value, each kind, in this process; and the
    decoding library alone (fastavro, orjson) for comparison."""
    avro, js = AvroSchema(Event), JsonSchema(Event)
    sample = (records * (repeat // len(records) + 1))[:repeat]
    parsed = fastavro.parse_schema(Event.schema())
    avro_raw = [avro.encode(r) for r in sample]
    json_raw = [js.encode(r) for r in sample]

    def us(fn: Any, values: list[Any]) -> float:
        started = time.perf_counter_ns()
        for value in values:
            fn(value)
        return (time.perf_counter_ns() - started) / len(values) / 1000

    return [
        ("avro", us(avro.encode, sample), us(avro.decode, avro_raw)),
        ("json", us(js.encode, sample), us(js.decode, json_raw)),
        (
            "fastavro alone",
            float("nan"),
            us(lambda d: fastavro.schemaless_reader(io.BytesIO(d), parsed), avro_raw),
        ),
        ("orjson alone", float("nan"), us(orjson.loads, json_raw)),
    ]


def table(rows: list[tuple[str, dict[str, float]]], columns: list[tuple[str, str]]) -> None:
    """A Markdown table of each kind's rates and their share of the raw bytes' rate; for a
    column ending in ``_cpu_us`` (CPU time a message), the cost over raw bytes instead."""
    heads = "".join(
        f" {title} | vs bytes |" if key.endswith("_cpu_us") else f" {title} msg/s | vs bytes |"
        for key, title in columns
    )
    print(f"| values |{heads}")
    print("|---|" + "---:|---:|" * len(columns))
    base = rows[0][1]
    for kind, r in rows:
        cells = "".join(
            f" {r[key]:.1f} | {r[key] / base[key] - 1:+.0%} |"
            if key.endswith("_cpu_us")
            else f" {r[key]:,.0f} | {r[key] / base[key]:.0%} |"
            for key, _ in columns
        )
        print(f"| {kind} |{cells}")


async def main(messages: int) -> None:
    all_kinds = kinds(messages)
    raw = all_kinds["bytes"][1]
    records = all_kinds["avro"][1]
    json_size = sum(len(JsonSchema(Event).encode(r)) for r in records[:1000]) / 1000
    data = Path(tempfile.mkdtemp(prefix="bench-schema-"))
    broker = Broker(data / "store", data, [])
    broker.start()
    try:
        load_before = os.getloadavg()[0]
        queued = [
            (k, await run_kind(broker.service_url, k, s, v)) for k, (s, v) in all_kinds.items()
        ]
        live = [(k, await live_run(broker.service_url, k, messages)) for k in all_kinds]
        load_after = os.getloadavg()[0]
    finally:
        broker.stop()
        shutil.rmtree(data, ignore_errors=True)
    print(
        f"{messages} messages; Avro {sum(map(len, raw)) / messages:.0f} bytes each, JSON "
        f"{json_size:.0f}; load average {load_before:.2f} before, {load_after:.2f} after"
    )
    print("\nPer value, in this process (µs):\n")
    print("| values | encode | decode |")
    print("|---|---:|---:|")
    for kind, encode_us, decode_us in per_value(records):
        encode = "" if encode_us != encode_us else f"{encode_us:.2f}"
        print(f"| {kind} | {encode} | {decode_us:.2f} |")
    print("\nOne process, the consumer draining its queue after the producer is done:\n")
    table(queued, [("produce", "produce"), ("consume", "consume (decode)")])
    print("\nLive: producer and consumer in separate processes at the same time:\n")
    table(
        live,
        [
            ("produce", "produce"),
            ("produce_cpu_us", "producer CPU µs/msg"),
            ("consume", "consume (decode)"),
            ("consume_cpu_us", "consumer CPU µs/msg"),
        ],
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--role", choices=["produce", "consume"], help="a live run's side")
    parser.add_argument("--kind", choices=["bytes", "avro", "json"], default="bytes")
    parser.add_argument("--topic", default="")
    parser.add_argument("--service-url", default="")
    args = parser.parse_args()
    if args.role is None:
        asyncio.run(main(args.messages))
    else:
        side = produce_role if args.role == "produce" else consume_role
        print(json.dumps(asyncio.run(side(args.service_url, args.kind, args.topic, args.messages))))
