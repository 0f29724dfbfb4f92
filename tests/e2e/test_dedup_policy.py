"""The namespace policy deduplicationEnabled (Pulsar's ``/admin/v2/namespaces/{t}/{ns}/
deduplication`` and pulsar-admin's set-/get-/remove-deduplication): it overrides
brokerDeduplicationEnabled, and a topic already loaded follows a change live (Pulsar's
checkDeduplicationStatus): turned on, it recovers the sequence ids already stored (a
reconnecting producer is told its last one) and drops resends; turned off, it stores them
again and its ``pulsar.dedup`` cursor is gone."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import grpc

from tests.e2e.test_authorization import http
from tests.e2e.test_encryption_policy import admin_cli
from tests.e2e.test_partitioned_and_dedup import close_producer, raw_producer, send
from tests.e2e.wire import batch
from tests.support import BrokerThread
from tests.waiting import eventually

NS = "public/default"
POLICY_PATH = f"/admin/v2/namespaces/{NS}/deduplication"


async def cli(broker: BrokerThread, *args: str) -> str:
    return await asyncio.to_thread(admin_cli, broker, *args)


async def last_sequence_id(ch: grpc.aio.Channel, topic: str, name: str) -> int:
    """What a producer named ``name`` is told on connecting (-1: deduplication is off, or
    nothing of it is stored)."""
    call, ready = await raw_producer(ch, topic, name)
    await close_producer(call)
    return ready.last_sequence_id


async def cursors(broker: BrokerThread, topic: str) -> dict[str, Any]:
    path = f"/admin/v2/persistent/public/default/{topic}/internalStats"
    status, stats = await asyncio.to_thread(http, broker, "GET", path, None)
    assert status == 200, stats
    found: dict[str, Any] = stats["cursors"]
    return found


async def test_the_policy_is_set_read_and_removed(broker: BrokerThread) -> None:
    assert json.loads(await cli(broker, "get-deduplication", NS)) is None
    status, _ = await asyncio.to_thread(http, broker, "GET", POLICY_PATH, None)
    assert status == 204  # Pulsar's null
    enabled = await cli(broker, "set-deduplication", NS, "--enable")
    assert enabled == f"enabled deduplication on {NS}\n"
    assert json.loads(await cli(broker, "get-deduplication", NS)) is True
    policies = json.loads(await cli(broker, "policies", NS))
    assert policies["deduplicationEnabled"] is True
    await cli(broker, "set-deduplication", NS, "-d")
    assert json.loads(await cli(broker, "get-deduplication", NS)) is False
    removed = await cli(broker, "remove-deduplication", NS)
    assert removed == f"removed the deduplication policy of {NS}\n"
    assert json.loads(await cli(broker, "get-deduplication", NS)) is None
    assert "deduplicationEnabled" not in json.loads(await cli(broker, "policies", NS))

    status, answer = await asyncio.to_thread(http, broker, "POST", POLICY_PATH, None, "yes")
    assert status == 400 and "true or false" in answer["reason"], answer
    missing = "/admin/v2/namespaces/public/nope/deduplication"
    status, _ = await asyncio.to_thread(http, broker, "POST", missing, None, True)
    assert status == 404


async def test_a_loaded_topic_follows_the_policy_live(
    broker: BrokerThread, channel: grpc.aio.Channel
) -> None:
    topic = "persistent://public/default/dedup-live"
    call, ready = await raw_producer(channel, topic, "p")
    assert ready.last_sequence_id == -1
    assert not (await send(call, batch(0, [b"a", b"b"]))).duplicate  # sequence ids 0, 1
    assert not (await send(call, batch(0, [b"a", b"b"]))).duplicate  # off: stored again
    probe, _ = await raw_producer(channel, topic, "probe")
    await send(probe, batch(7, [b"x"]))
    await close_producer(probe)

    await cli(broker, "set-deduplication", NS, "--enable")

    # On: the sequence ids stored before are recovered (a reconnecting producer learns its)...
    await eventually(lambda: _equals(last_sequence_id(channel, topic, "probe"), 7), timeout=20)
    assert "pulsar.dedup" in await cursors(broker, "dedup-live")
    # ... and resends are dropped, on the producer opened before the change too.
    assert (await send(call, batch(1, [b"b"]))).duplicate
    assert not (await send(call, batch(2, [b"c"]))).duplicate
    assert (await send(call, batch(2, [b"c"]))).duplicate

    await cli(broker, "set-deduplication", NS, "--disable")

    # Off: nothing is dropped, nothing is known, and the cursor is deleted (its ledgers freed).
    await eventually(lambda: _equals(last_sequence_id(channel, topic, "probe"), -1), timeout=20)
    assert not (await send(call, batch(2, [b"c"]))).duplicate
    assert "pulsar.dedup" not in await cursors(broker, "dedup-live")
    await close_producer(call)


async def test_the_namespace_policy_overrides_the_broker(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    broker = broker_factory(brokerDeduplicationEnabled=True)
    await cli(broker, "set-deduplication", NS, "--disable")
    topic = "persistent://public/default/dedup-off-here"
    async with grpc.aio.insecure_channel(broker.grpc_address) as ch:
        call, _ = await raw_producer(ch, topic, "p")
        assert not (await send(call, batch(0, [b"a"]))).duplicate
        assert not (await send(call, batch(0, [b"a"]))).duplicate
        assert "pulsar.dedup" not in await cursors(broker, "dedup-off-here")

        # Removed: the broker's default (on) holds again, for the loaded topic too.
        await close_producer(call)
        await cli(broker, "remove-deduplication", NS)
        await eventually(lambda: _equals(last_sequence_id(ch, topic, "p"), 0), timeout=20)
        call, _ = await raw_producer(ch, topic, "p")
        assert (await send(call, batch(0, [b"a"]))).duplicate
        await close_producer(call)


async def _equals(value: Any, expected: int) -> bool:
    return bool(await value == expected)
