"""Reproduction: on a Failover switch, a message the old active consumer still holds is acked
(with its AckReceipt) after the broker already redelivered it to the new active consumer,
which then hands it to the application: an acked message delivered again, with no restart.

Why: the kill -9 soak's check c (a receipted ack is never delivered again) fired on a
Failover subscription right after a restart, when consumers reconnect one by one and the
active consumer changes. This shows the same thing deterministically, without a kill, so
the finding can be judged: the copy was dispatched before the ack arrived (Pulsar's
dispatcher behaves the same: an inactive consumer may ack what it holds). With
``--ack-first`` the ack is receipted before the switch: then m0 must not come back.

Since the broker waits ``activeConsumerFailoverDelayTimeMillis`` (Pulsar's 1 s) before serving
the new active consumer, an ack sent within that delay (``--ack-after-s``, 0.3 s by default)
is applied first and m0 is not delivered again; an ack sent after it (``--ack-after-s 1.5``)
still races, as in Pulsar: the delay narrows the window, it cannot close it.

Usage::

    PYTHONPATH=$PWD:$PWD/protos python -m bench.failover_switch_race --data /tmp/fsr
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from bench.batch_ack_restart import fresh_broker
from pulsar_grpc.client import Client, ConsumerType, Timeout


async def wait_for(condition: object, timeout_s: float = 10) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        await asyncio.sleep(0.02)
    return False


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, type=Path, help="emptied first")
    parser.add_argument("--ack-first", action="store_true", help="ack before the switch")
    parser.add_argument(
        "--ack-after-s", type=float, default=0.3, help="how long after the switch c-b acks"
    )
    args = parser.parse_args()
    broker = await asyncio.to_thread(fresh_broker, args.data)
    topic = "persistent://public/default/failover-switch-race"
    try:
        async with Client(broker.service_url) as client:
            producer = await client.create_producer(topic, batching_max_publish_delay_ms=200)
            later = await client.subscribe(
                topic, "s", ConsumerType.Failover, consumer_name="c-b", initial_position="earliest"
            )
            ids = [await f for f in [await producer.enqueue(b"m%d" % i) for i in range(10)]]
            held = await later.receive(timeout_ms=10000)  # c-b holds m0 (and queues the rest)
            if args.ack_first:
                await later.acknowledge(held.message_id(), wait=True)
            first = await client.subscribe(
                topic, "s", ConsumerType.Failover, consumer_name="c-a", initial_position="earliest"
            )
            switched = await wait_for(lambda: first.is_active is True and later.is_active is False)
            await asyncio.sleep(args.ack_after_s)
            if not args.ack_first:
                await later.acknowledge(held.message_id(), wait=True)  # receipted
            again = []
            while True:
                try:
                    msg = await first.receive(timeout_ms=3000)
                except Timeout:
                    break
                again.append(msg.data())
            stale = []  # what the inactive c-b still hands to its application
            while True:
                try:
                    stale.append((await later.receive(timeout_ms=1000)).data())
                except Timeout:
                    break
            await first.close()
            await later.close()
            await producer.close()
    finally:
        await asyncio.to_thread(broker.stop)
    back = held.data() in again
    print(
        f"batch entries {sorted({(m.ledger_id, m.entry_id) for m in ids})}; c-b held "
        f"{held.data()!r} {held.message_id()}; ack first: {args.ack_first}; "
        f"switched to c-a: {switched}; c-b's ack of it "
        f"receipted; c-a then received {again}; acked message delivered again: {back}; "
        f"inactive c-b still handed out {stale}"
    )
    return 1 if back else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
