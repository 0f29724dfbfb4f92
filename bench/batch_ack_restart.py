"""Reproduction of a kill -9 loss: a grouped batch-index ack sent on the new stream after a
restart must not ack the rest of the batch.

Why: an earlier soak found that, on Failover and Shared, the never-acked messages of a batch
were lost after kill -9 when the SDK's grouped ack of one index reached the broker (on the
reconnected stream) before the entry was pending again. This script runs exactly that for
each subscription type and says whether m1..m9 come back.

Steps per subscription type, each with a fresh data directory and broker:
one consumer with ``ack_group_time_ms=3000``; one producer sends m0..m9 as one batch; the
consumer receives all ten and acks m0 without waiting (the ack sits in the 3 s group); the
broker is killed with SIGKILL at once and restarted on the same port and directory; the
consumer then receives until idle. Expected: m1..m9 are delivered again (m0 may or may not
be: its ack was never receipted). With ``--receipted`` the ack of m0 waits for its AckReceipt
before the kill, and m0 must then not come back (an ack stays acked once receipted).

Usage::

    PYTHONPATH=$PWD:$PWD/protos python -m bench.batch_ack_restart --data /tmp/bar
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
from pathlib import Path

from bench.killsoak import Broker
from pulsar_grpc.client import Client, ConsumerType, Timeout

TYPES = (
    ConsumerType.Exclusive,
    ConsumerType.Failover,
    ConsumerType.Shared,
    ConsumerType.KeyShared,
)
IDLE_MS = 8000


def fresh_broker(data: Path) -> Broker:
    """A started broker on an emptied data directory (its logs there too)."""
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    broker = Broker(data / "store", data, [])
    broker.start()
    return broker


async def run_one(sub_type: ConsumerType, data: Path, receipted: bool) -> tuple[bool, str]:
    """One scenario; (passed, line to print)."""
    broker = await asyncio.to_thread(fresh_broker, data)
    topic = f"persistent://public/default/bar-{sub_type.value.lower()}"
    try:
        async with Client(broker.service_url, max_backoff_interval_ms=500) as client:
            producer = await client.create_producer(
                topic, batching_max_messages=10, batching_max_publish_delay_ms=1000
            )
            consumer = await client.subscribe(
                topic,
                "s",
                sub_type,
                consumer_name="c0",
                initial_position="earliest",
                ack_group_time_ms=3000,
            )
            futures = [await producer.enqueue(f"m{i}".encode()) for i in range(10)]
            ids = [await f for f in futures]
            entries = {(m.ledger_id, m.entry_id) for m in ids}
            msgs = [await consumer.receive(timeout_ms=10000) for _ in range(10)]
            await consumer.acknowledge(msgs[0].message_id(), wait=receipted)
            await asyncio.to_thread(broker.kill9)
            await asyncio.to_thread(broker.start)
            again: list[bytes] = []
            while True:
                try:
                    msg = await consumer.receive(timeout_ms=IDLE_MS)
                except Timeout:
                    break
                again.append(msg.data())
                await consumer.acknowledge(msg.message_id(), wait=True)
            await consumer.close()
            await producer.close()
    finally:
        await asyncio.to_thread(broker.stop)
    problems = await asyncio.to_thread(broker.log_problems)
    expected = {f"m{i}".encode() for i in range(1, 10)}
    missing = sorted(expected - set(again))
    acked_back = receipted and b"m0" in again
    passed = not missing and not acked_back and not problems
    line = (
        f"{sub_type.value:<10} batch entries={sorted(entries)} first delivery "
        f"{[m.data().decode() for m in msgs]} after restart {[p.decode() for p in again]} "
        f"missing {[p.decode() for p in missing]} receipted m0 back {acked_back} "
        f"log problems {problems} "
        f"-> {'PASS' if passed else 'FAIL'}"
    )
    return passed, line


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, type=Path, help="emptied first")
    parser.add_argument("--rounds", type=int, default=1, help="repeat every type this often")
    parser.add_argument(
        "--receipted", action="store_true", help="m0's ack waits for its receipt before the kill"
    )
    args = parser.parse_args()
    failed = 0
    for round_no in range(1, args.rounds + 1):
        for sub_type in TYPES:
            passed, line = await run_one(sub_type, args.data / sub_type.value, args.receipted)
            print(f"round {round_no}: {line}", flush=True)
            failed += not passed
    print(f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
