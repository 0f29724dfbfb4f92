"""What a subscription's backlog counts, as `pulsar-grpc topics stats` (the admin REST API) shows
it: entries, as Pulsar's msgBacklog does, while unackedMessages and the counters count messages.

docs/semantics.md ("Stats and metrics") states both; an operator reading a backlog of 1 after
producing 10 batched messages must find that documented, and this checks the documentation.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
import uuid
from typing import Any

from pulsar_grpc.client import Client
from tests.e2e.messaging import receive_n
from tests.support import BrokerThread
from tests.waiting import eventually


def subscription_stats(broker: BrokerThread, topic: str, subscription: str) -> dict[str, Any]:
    url = f"{broker.http_url}/admin/v2/persistent/public/default/{topic}/stats"
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())["subscriptions"][subscription]  # type: ignore[no-any-return]


async def test_msg_backlog_counts_entries_and_unacked_messages_counts_messages(
    broker: BrokerThread,
) -> None:
    topic = f"backlog-{uuid.uuid4().hex[:8]}"

    async def stats() -> dict[str, Any]:
        return await asyncio.to_thread(subscription_stats, broker, topic, "sub")

    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(topic, "sub", initial_position="earliest")
        batching = await client.create_producer(
            topic, batching_max_messages=10, batching_max_publish_delay_ms=5000
        )
        futures = [await batching.enqueue(f"m{i}".encode()) for i in range(10)]
        ids = await asyncio.gather(*futures)
        assert {(i.ledger_id(), i.entry_id()) for i in ids} == {
            (ids[0].ledger_id(), ids[0].entry_id())
        }
        single = await client.create_producer(topic, batching_max_messages=1)
        await single.send(b"alone")
        # 11 messages in 2 entries: the batch of 10 and the single message
        assert (await stats())["msgBacklog"] == 2

        messages = await receive_n(consumer, 11)
        for message in messages[:5]:  # half of the batch
            await consumer.acknowledge(message)

        async def half_the_batch_acked() -> None:
            now = await stats()
            assert now["unackedMessages"] == 6, now

        await eventually(half_the_batch_acked, timeout=10)
        assert (await stats())["msgBacklog"] == 2  # an entry counts until all of it is acked

        for message in messages[5:10]:
            await consumer.acknowledge(message)

        async def only_the_single_left() -> None:
            now = await stats()
            assert (now["msgBacklog"], now["unackedMessages"]) == (1, 1), now

        await eventually(only_the_single_left, timeout=10)
        await consumer.acknowledge(messages[10])

        async def nothing_left() -> None:
            now = await stats()
            assert (now["msgBacklog"], now["unackedMessages"]) == (0, 0), now

        await eventually(nothing_left, timeout=10)
        assert (await stats())["msgOutCounter"] == 11  # dispatch counters count messages
