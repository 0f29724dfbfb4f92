"""Topic names must be printable ASCII on every RPC (docs/protocol.md, "Topic names").

gRPC metadata values carry printable ASCII only (the client library refuses anything else
before sending), and Produce and Consume name their topic in ``x-pulsar-topic``: a topic
outside that set could be looked up, yet never used. So every RPC that takes a topic in its
request body refuses it the same way, INVALID_ARGUMENT with InvalidTopicName, as does the
admin API; and every printable ASCII character but '/' works everywhere.
"""

from __future__ import annotations

from urllib.parse import quote

import aiohttp
import grpc
import pytest

from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.wire import batch, error_code, stub
from tests.support import BrokerThread

NON_ASCII = [
    "persistent://public/default/tópico",
    "persistent://public/default/emoji-\U0001f600",
    "tópico",  # short form
    "persistent://public/default/tab\there",
    "persistent://public/default/nul\x00",
]
# Every printable ASCII character but '/', which separates the parts of a name.
PRINTABLE = "".join(chr(c) for c in range(0x20, 0x7F) if c != ord("/"))


def assert_invalid_topic_name(err: grpc.aio.AioRpcError) -> None:
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
    assert error_code(err) == pb.InvalidTopicName
    assert "only printable ASCII characters" in (err.details() or ""), err.details()


@pytest.mark.parametrize("name", NON_ASCII)
async def test_lookup_refuses_a_name_the_metadata_cannot_carry(
    channel: grpc.aio.Channel, name: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub(channel).Lookup(pb.LookupRequest(topic=name))
    assert_invalid_topic_name(err.value)


@pytest.mark.parametrize("name", NON_ASCII)
async def test_partitioned_metadata_refuses_a_name_the_metadata_cannot_carry(
    channel: grpc.aio.Channel, name: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub(channel).GetPartitionedTopicMetadata(
            pb.PartitionedTopicMetadataRequest(topic=name)
        )
    assert_invalid_topic_name(err.value)


@pytest.mark.parametrize("name", NON_ASCII)
async def test_last_message_id_refuses_a_name_the_metadata_cannot_carry(
    channel: grpc.aio.Channel, name: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub(channel).GetLastMessageId(pb.GetLastMessageIdRequest(topic=name))
    assert_invalid_topic_name(err.value)


@pytest.mark.parametrize("method", ["Produce", "Consume"])
async def test_streams_cannot_even_send_such_a_name(channel: grpc.aio.Channel, method: str) -> None:
    """Why the rule exists: gRPC itself refuses the header, before the broker sees it."""
    call = getattr(stub(channel), method)(
        metadata=(("x-pulsar-topic", NON_ASCII[0]), ("x-pulsar-subscription", "s"))
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call.read()
    assert err.value.code() == grpc.StatusCode.INTERNAL
    assert "metadata" in (err.value.details() or "").lower()


async def test_dead_letter_topic_name_follows_the_same_rule(channel: grpc.aio.Channel) -> None:
    """A header can only hold printable ASCII, so the rule holds there by construction; a name
    that breaks another rule is refused as a topic name too."""
    call = stub(channel).Consume(
        metadata=(
            ("x-pulsar-topic", "t"),
            ("x-pulsar-subscription", "s"),
            ("x-pulsar-dead-letter-topic", "persistent://public/default/a/b"),
        )
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call.read()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_code(err.value) == pb.InvalidTopicName


@pytest.mark.parametrize("name", ["tópico", "emoji-\U0001f600"])
async def test_admin_create_refuses_the_name_too(broker: BrokerThread, name: str) -> None:
    async with aiohttp.ClientSession() as session:
        for suffix, body in (("", None), ("/partitions", "2")):
            url = f"{broker.http_url}/admin/v2/persistent/public/default/{quote(name)}{suffix}"
            headers = {"Content-Type": "application/json"}
            async with session.put(url, data=body, headers=headers) as r:
                assert r.status == 400, await r.text()
                assert "only printable ASCII characters" in (await r.json())["reason"]


async def test_every_printable_ascii_name_works_on_every_rpc(channel: grpc.aio.Channel) -> None:
    topic = f"persistent://public/default/{PRINTABLE}"
    lookup = await stub(channel).Lookup(pb.LookupRequest(topic=topic))
    assert lookup.grpc_url
    meta = await stub(channel).GetPartitionedTopicMetadata(
        pb.PartitionedTopicMetadataRequest(topic=topic)
    )
    assert meta.partitions == 0

    producer = stub(channel).Produce(
        metadata=(("x-pulsar-topic", topic), ("x-pulsar-producer-name", "p"))
    )
    assert (await producer.read()).HasField("ready")
    await producer.write(batch(0, [b"hello"]))
    receipt = (await producer.read()).receipt
    producer.cancel()

    last = await stub(channel).GetLastMessageId(pb.GetLastMessageIdRequest(topic=topic))
    assert (last.last_message_id.ledger_id, last.last_message_id.entry_id) == (
        receipt.ledger_id,
        receipt.entry_id,
    )

    consumer = stub(channel).Consume(
        metadata=(
            ("x-pulsar-topic", topic),
            ("x-pulsar-subscription", "s"),
            ("x-pulsar-initial-position", "Earliest"),
        )
    )
    assert (await consumer.read()).HasField("subscribed")
    await consumer.write(pb.ConsumeRequest(flow=pb.Flow(permits=10)))
    delivered = await consumer.read()
    while delivered.HasField("active_consumer_change"):  # Exclusive: it is the active one
        delivered = await consumer.read()
    assert delivered.HasField("messages"), delivered
    entries = delivered.messages.entries
    assert [m.payload for e in entries for m in e.messages] == [b"hello"]
    consumer.cancel()
