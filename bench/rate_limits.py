"""How accurate the publish and dispatch rate limits are at 1,000, 10,000 and 100,000 msg/s.

One standalone broker (a child process, as a deployment runs it). For each limit L:

- publish: one raw Produce stream writes batches as fast as gRPC lets it, first on a topic with
  no limit (what the client can offer), then on a topic whose publish rate is L (a topic
  policy, set through the admin API); the rate is the receipts' messages per second in a
  window that starts 2 s in (after the bucket's initial burst);
- dispatch: a backlog is stored first, then the subscription's dispatch rate is set to L
  (namespace subscriptionDispatchRate) and one raw Exclusive consumer with permits to spare
  drains it; the rate is the delivered messages per second in the same kind of window.

Prints a Markdown table for docs/benchmarks.md (and JSON with --json).

Usage::

    PYTHONPATH=$PWD:$PWD/protos python -m bench.rate_limits [--window 5] [--size 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import grpc

from bench.killsoak import Broker
from tests.e2e.ratelimit_support import Drain, Flood

LIMITS = (1_000, 10_000, 100_000)
WARMUP_S = 2.0


def batch_for(limit: int) -> int:
    """Messages per request: enough that the client can offer several times the limit."""
    return 10 if limit <= 1_000 else 100


def admin(http_url: str, path: str, body: dict[str, Any]) -> None:
    request = urllib.request.Request(f"{http_url}{path}", json.dumps(body).encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10):
        pass


async def publish_rate(url: str, topic: str, per_request: int, size: int, window: float) -> float:
    async with grpc.aio.insecure_channel(url) as channel:
        flood = await Flood(channel, topic, per_request=per_request, size=size).start()
        await flood.receipts.wait_until(WARMUP_S + window)
        await flood.stop()
    return flood.receipts.rate(WARMUP_S, WARMUP_S + window)


async def dispatch_rate(broker: Broker, topic: str, limit: int, size: int, window: float) -> float:
    url = broker.service_url.removeprefix("grpc://")
    backlog = int(limit * (WARMUP_S + window + 2))
    async with grpc.aio.insecure_channel(url) as channel:
        flood = await Flood(channel, topic, per_request=100, size=size).start()
        await flood.until_stored(backlog, timeout_s=120)
        await flood.stop()
        drain = await Drain(channel, topic, "Exclusive").start(permits=backlog * 2)
        await drain.arrivals.wait_until(WARMUP_S + window)
        await drain.stop()
    return drain.arrivals.rate(WARMUP_S, WARMUP_S + window)


async def measure(broker: Broker, window: float, size: int) -> list[dict[str, Any]]:
    url = broker.service_url.removeprefix("grpc://")
    rows = []
    for limit in LIMITS:
        per_request = batch_for(limit)
        offered = await publish_rate(url, f"free-{limit}", per_request, size, window)
        admin(
            broker.http_url,
            f"/admin/v2/persistent/public/default/pub-{limit}/publishRate",
            {"publishThrottlingRateInMsg": limit, "publishThrottlingRateInByte": -1},
        )
        published = await publish_rate(url, f"pub-{limit}", per_request, size, window)
        admin(
            broker.http_url,
            "/admin/v2/namespaces/public/default/subscriptionDispatchRate",
            {"dispatchThrottlingRateInMsg": limit, "ratePeriodInSecond": 1},
        )
        dispatched = await dispatch_rate(broker, f"disp-{limit}", limit, size, window)
        rows.append(
            {
                "limit": limit,
                "batch": per_request,
                "offered": offered,
                "published": published,
                "dispatched": dispatched,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| limit (msg/s) | batch | offered, no limit | published | error | dispatched | error |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        pub_err = (r["published"] - r["limit"]) / r["limit"] * 100
        disp_err = (r["dispatched"] - r["limit"]) / r["limit"] * 100
        lines.append(
            f"| {r['limit']:,} | {r['batch']} | {r['offered']:,.0f} | {r['published']:,.0f} "
            f"| {pub_err:+.1f}% | {r['dispatched']:,.0f} | {disp_err:+.1f}% |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=5.0, help="seconds measured")
    parser.add_argument("--size", type=int, default=100, help="payload bytes")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ratebench-"))
    broker = Broker(work / "data", work, [])
    try:
        broker.start()
        began = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        rows = asyncio.run(measure(broker, args.window, args.size))
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nstarted {began}, window {args.window} s, payload {args.size} B\n")
    print(json.dumps(rows, indent=2) if args.json else table(rows))


if __name__ == "__main__":
    main()
