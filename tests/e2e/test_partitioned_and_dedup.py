"""Partitioned topics (created through the HTTP admin API) and broker-side deduplication,
including after a kill -9 of a standalone broker and a restart on the same data.

"Nothing else arrives" is a short bounded receive timeout (``NOTHING_MS``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import aiohttp
import grpc
import pytest

from pulsar_grpc.client import Client, MessageId
from pulsar_grpc.client._routing import partition_for_key
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.messaging import assert_nothing_more, receive_n
from tests.e2e.wire import batch, error_code, stub
from tests.support import BrokerThread, StandaloneProcess

DEDUP = ("--set", "brokerDeduplicationEnabled=true")


async def create_partitioned(http_url: str, topic: str, partitions: int) -> None:
    url = f"{http_url}/admin/v2/persistent/public/default/{topic}/partitions"
    async with (
        aiohttp.ClientSession() as session,
        session.put(url, data=str(partitions), headers={"Content-Type": "application/json"}) as r,
    ):
        assert r.status in (200, 204), await r.text()


# ------------------------------------------------------------------ partitioned topics


async def test_partitioned_topic_routing_and_consumption(broker: BrokerThread) -> None:
    topic = "orders"
    full = f"persistent://public/default/{topic}"
    await create_partitioned(broker.http_url, topic, 4)
    async with Client(broker.service_url) as client:
        assert await client.get_partitions_for_topic(topic) == [
            f"{full}-partition-{i}" for i in range(4)
        ]
        consumer = await client.subscribe(topic, "sub", "Shared", initial_position="Earliest")
        producer = await client.create_producer(topic, batching_max_publish_delay_ms=1)

        # Without a key: round robin (one batching window per partition) reaches every one.
        unkeyed = [f"u{i}".encode() for i in range(40)]
        unkeyed_ids = [await producer.send(p) for p in unkeyed]
        spread = Counter(i.partition() for i in unkeyed_ids)
        assert set(spread) == {0, 1, 2, 3}, f"round robin missed partitions: {spread}"

        # With a key: every message of a key on one partition, Pulsar's murmur3 choice.
        keyed: dict[str, list[MessageId]] = {}
        for key in ("user-1", "user-2", "user-3", "user-42"):
            keyed[key] = [
                await producer.send(f"{key}/{i}".encode(), partition_key=key) for i in range(5)
            ]
        for key, ids in keyed.items():
            assert {i.partition() for i in ids} == {partition_for_key(key, 4)}, key

        total = 40 + 20
        got = await receive_n(consumer, total)
        assert sorted(m.data() for m in got) == sorted(
            unkeyed + [f"{k}/{i}".encode() for k in keyed for i in range(5)]
        )
        for m in got:
            assert m.topic_name() == f"{full}-partition-{m.message_id().partition()}"
            if m.partition_key():
                assert m.message_id().partition() == partition_for_key(m.partition_key(), 4)
        # Per partition, messages arrive in publish order.
        for p in range(4):
            of_p = [m.message_id() for m in got if m.message_id().partition() == p]
            assert of_p == sorted(of_p)
        await assert_nothing_more(consumer)


async def test_producing_to_the_base_name_of_a_partitioned_topic_is_not_allowed(
    broker: BrokerThread,
) -> None:
    topic = "persistent://public/default/parted"
    await create_partitioned(broker.http_url, "parted", 4)
    async with grpc.aio.insecure_channel(broker.grpc_address) as ch:
        meta = await stub(ch).GetPartitionedTopicMetadata(
            pb.PartitionedTopicMetadataRequest(topic=topic), metadata=(("x-pulsar-topic", topic),)
        )
        assert meta.partitions == 4
        call = stub(ch).Produce(metadata=(("x-pulsar-topic", topic),))
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call.read()
            await call.write(batch(0, [b"nope"]))
            await call.read()
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION, err.value
    assert error_code(err.value) == pb.NotAllowedError
    assert "partition" in (err.value.details() or "").lower()


# ------------------------------------------------------------------ deduplication


async def raw_producer(
    ch: grpc.aio.Channel, topic: str, name: str
) -> tuple[grpc.aio.StreamStreamCall, pb.ProducerReady]:
    call = stub(ch).Produce(metadata=(("x-pulsar-topic", topic), ("x-pulsar-producer-name", name)))
    response = await call.read()
    assert response.HasField("ready"), response
    return call, response.ready


async def send(call: grpc.aio.StreamStreamCall, request: pb.ProduceRequest) -> pb.SendReceipt:
    await call.write(request)
    response = await call.read()
    assert response.HasField("receipt"), response
    return response.receipt


async def close_producer(call: grpc.aio.StreamStreamCall) -> None:
    """Half-close and wait for the broker to end the call, so the name is free again."""
    await call.done_writing()
    assert await call.read() == grpc.aio.EOF


async def test_resent_sequence_ids_are_stored_once(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    broker = broker_factory(brokerDeduplicationEnabled=True)
    topic = "persistent://public/default/dedup-raw"
    async with grpc.aio.insecure_channel(broker.grpc_address) as ch:
        call, ready = await raw_producer(ch, topic, "p1")
        assert ready.last_sequence_id == -1
        r0 = await send(call, batch(0, [b"a", b"b"]))  # sequence ids 0, 1
        r2 = await send(call, batch(2, [b"c"]))
        assert not r0.duplicate and not r2.duplicate
        assert (r0.sequence_id, r0.highest_sequence_id, r0.batch_size) == (0, 1, 2)
        # The same batches again on the same stream: dropped.
        dup0 = await send(call, batch(0, [b"a", b"b"]))
        dup2 = await send(call, batch(2, [b"c"]))
        assert dup0.duplicate and dup2.duplicate
        await close_producer(call)

        # A new stream with the same producer name learns where it stopped.
        call, ready = await raw_producer(ch, topic, "p1")
        assert ready.last_sequence_id == 2
        assert (await send(call, batch(1, [b"b"]))).duplicate
        r3 = await send(call, batch(3, [b"d"]))
        assert not r3.duplicate
        assert (r3.ledger_id, r3.entry_id) != (r2.ledger_id, r2.entry_id)
        await close_producer(call)

        # Another producer name has its own sequence: its 0 is not a duplicate.
        other, ready = await raw_producer(ch, topic, "p2")
        assert ready.last_sequence_id == -1
        assert not (await send(other, batch(0, [b"e"]))).duplicate
        other.cancel()

    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(topic, "sub", initial_position="Earliest")
        got = await receive_n(consumer, 5)
        assert [m.data() for m in got] == [b"a", b"b", b"c", b"d", b"e"]
        assert [(m.producer_name(), m.sequence_id()) for m in got] == [
            ("p1", 0),
            ("p1", 1),
            ("p1", 2),
            ("p1", 3),
            ("p2", 0),
        ]
        await assert_nothing_more(consumer)


async def test_sdk_producer_resending_from_initial_sequence_id_is_deduplicated(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    broker = broker_factory(brokerDeduplicationEnabled=True)
    topic = "dedup-sdk"
    data = [f"d{i}".encode() for i in range(5)]
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(topic, "sub", initial_position="Earliest")
        # initial_sequence_id is the last id published before (Pulsar's): the first is 0.
        first = await client.create_producer(
            topic, "sdk-p", batching_max_messages=1, initial_sequence_id=-1
        )
        ids = [await first.send(p) for p in data]
        assert all(i.ledger_id() >= 0 for i in ids)
        assert first.last_sequence_id() == 4
        await first.close()

        # The application restarts and re-sends everything with its own sequence ids.
        resend = await client.create_producer(topic, "sdk-p", batching_max_messages=1)
        dup_ids = [await resend.send(p, sequence_id=i) for i, p in enumerate(data)]
        assert dup_ids == [MessageId(ledger_id=-1, entry_id=-1, batch_index=-1, partition=-1)] * 5
        await resend.close()

        # Without initial_sequence_id the producer continues after the broker's last id.
        cont = await client.create_producer(topic, "sdk-p", batching_max_messages=1)
        assert cont.last_sequence_id() == 4
        new_id = await cont.send(b"d5")
        assert new_id.ledger_id() >= 0

        got = await receive_n(consumer, 6)
        assert [m.data() for m in got] == [*data, b"d5"]
        assert [m.sequence_id() for m in got] == list(range(6))
        await assert_nothing_more(consumer)


async def test_deduplication_survives_kill_9_and_restart(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    topic = "persistent://public/default/dedup-durable"
    first = standalone_factory(None, *DEDUP)
    async with grpc.aio.insecure_channel(first.grpc_address) as ch:
        call, ready = await raw_producer(ch, topic, "survivor")
        assert ready.last_sequence_id == -1
        # Pipelined: 10 batches of 2 messages, sequence ids 0..19; wait for every receipt.
        for i in range(10):
            await call.write(batch(2 * i, [f"k{2 * i}".encode(), f"k{2 * i + 1}".encode()]))
        receipts = [(await call.read()).receipt for _ in range(10)]
        assert [r.sequence_id for r in receipts] == list(range(0, 20, 2))
        assert not any(r.duplicate for r in receipts)
        first.kill9()

    restarted = standalone_factory(first.data_dir, *DEDUP)
    async with grpc.aio.insecure_channel(restarted.grpc_address) as ch:
        call, ready = await raw_producer(ch, topic, "survivor")
        assert ready.last_sequence_id == 19
        for i in (5, 9):  # re-sent after the "crash": stored already
            dup = await send(call, batch(2 * i, [f"k{2 * i}".encode(), f"k{2 * i + 1}".encode()]))
            assert dup.duplicate, dup
        fresh = await send(call, batch(20, [b"k20"]))
        assert not fresh.duplicate
        call.cancel()

    async with Client(restarted.service_url) as client:
        consumer = await client.subscribe(topic, "sub", initial_position="Earliest")
        got = await receive_n(consumer, 21)
        assert [m.data() for m in got] == [f"k{i}".encode() for i in range(21)]
        await assert_nothing_more(consumer)
