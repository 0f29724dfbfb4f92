"""What batch compression costs and saves: bytes on the wire and on disk, and messages per
second produced and consumed, per codec, for a compressible payload (JSON-like records).

Each codec gets its own topic on one standalone broker (a child process, as a deployment runs
it): one SDK producer sends ``--messages`` records as fast as it can (batches of up to 1000,
``block_if_queue_full=True``), then one consumer reads them back. Bytes come from the topic's
admin stats: ``bytesInCounter`` (batch bytes the broker received, i.e. on the wire) and
``storageSize`` (entry bytes stored). Prints a Markdown table for docs/benchmarks.md.

Usage::

    PYTHONPATH=$PWD:$PWD/protos python -m bench.compression --messages 100000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import tempfile
from pathlib import Path

import aiohttp

from bench.killsoak import Broker
from bench.sdk_load import produce_then_consume
from pulsar_grpc.client import Client, CompressionType

CODECS = [CompressionType.NONE, CompressionType.LZ4, CompressionType.ZLib]
CODECS += [CompressionType.ZSTD, CompressionType.SNAPPY]
EVENTS = ["page_view", "add_to_cart", "checkout", "search", "login"]
SECTIONS = ["shoes", "books", "garden"]


def records(count: int, seed: int = 7) -> list[bytes]:
    """``count`` distinct JSON records of about 240 bytes: repeated field names and similar
    values, as application events are."""
    rng = random.Random(seed)
    return [
        json.dumps(
            {
                "id": i,
                "user": f"user-{rng.randrange(100_000):06d}",
                "event": rng.choice(EVENTS),
                "ts": 1_700_000_000_000 + i * 17,
                "path": f"/catalog/{rng.choice(SECTIONS)}/{rng.randrange(5000)}",
                "agent": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko)",
                "amount": round(rng.uniform(1, 500), 2),
                "tags": rng.sample(["new", "sale", "promo", "gift", "eco", "vip"], 3),
            }
        ).encode()
        for i in range(count)
    ]


async def stats(http_url: str, topic: str) -> dict[str, int]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{http_url}/admin/v2/persistent/public/default/{topic}/stats") as resp,
    ):
        data = await resp.json()
    return {"wire": int(data["bytesInCounter"]), "disk": int(data["storageSize"])}


async def run_codec(
    service_url: str, http_url: str, codec: CompressionType, payloads: list[bytes]
) -> dict[str, float]:
    topic = f"bench-zip-{codec.name.lower()}"
    async with Client(service_url) as client:
        produce, consume = await produce_then_consume(
            client, topic, payloads, batch=1000, compression_type=codec
        )
    sizes = await stats(http_url, topic)
    return {"produce": produce, "consume": consume, **sizes}


async def main(messages: int) -> None:
    payloads = records(messages)
    plaintext = sum(len(p) for p in payloads)
    data = Path(tempfile.mkdtemp(prefix="bench-zip-"))
    broker = Broker(data / "store", data, [])
    broker.start()
    try:
        rows = [
            (c, await run_codec(broker.service_url, broker.http_url, c, payloads)) for c in CODECS
        ]
    finally:
        broker.stop()
        shutil.rmtree(data, ignore_errors=True)
    load = os.getloadavg()[0]
    print(
        f"{messages} records, {plaintext / messages:.0f} bytes each on average, "
        f"{plaintext / 1e6:.1f} MB of payload; load average {load:.2f}"
    )
    print(
        "| codec | on the wire (MB) | on disk (MB) | disk vs none | produce msg/s | consume msg/s |"
    )
    print("|---|---|---|---|---|---|")
    none_disk = rows[0][1]["disk"]
    for codec, r in rows:
        print(
            f"| {codec.name} | {r['wire'] / 1e6:.1f} | {r['disk'] / 1e6:.1f} | "
            f"{r['disk'] / none_disk:.0%} | {r['produce']:,.0f} | {r['consume']:,.0f} |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    asyncio.run(main(parser.parse_args().messages))
