"""The Client over real gRPC against a tiny in-process servicer: call metadata, partitions,
the produce and consume round trip, error trailers, the blocking wrapper."""

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
import pytest

from pulsar_grpc import client
from pulsar_grpc.client import Client, DeadLetterPolicy, MessageId, SyncClient
from pulsargrpc.v1 import pulsar_pb2 as pb
from pulsargrpc.v1 import pulsar_pb2_grpc as pb_grpc


class FakeBroker(pb_grpc.PulsarServiceServicer):
    """Stores each produce request as one entry of ledger 1; partitions from a dict."""

    def __init__(self) -> None:
        self.partitions: dict[str, int] = {}
        self.entries: dict[str, list[pb.ProduceRequest]] = {}
        self.metadata: list[dict[str, str]] = []
        self.lookups: list[tuple[pb.LookupRequest, dict[str, str]]] = []
        self.lookup_answers: dict[str, pb.LookupResponse] = {}
        self.url = ""

    async def GetPartitionedTopicMetadata(self, request, context):
        return pb.PartitionedTopicMetadataResponse(partitions=self.partitions.get(request.topic, 0))

    async def Lookup(self, request, context):
        """Connect here, unless ``lookup_answers`` holds another answer for the topic."""
        self.lookups.append((request, dict(context.invocation_metadata())))
        answer = self.lookup_answers.get(request.topic)
        if answer is not None:
            return answer
        return pb.LookupResponse(
            authoritative=True, grpc_url=self.url, listener_name=request.listener_name
        )

    async def Produce(self, request_iterator, context):
        md = dict(context.invocation_metadata())
        self.metadata.append(md)
        topic = md["x-pulsar-topic"]
        if md.get("x-pulsar-producer-name") == "busy":
            context.set_trailing_metadata((("pulsar-error-code", "16"),))
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "producer busy")
        yield pb.ProduceResponse(ready=pb.ProducerReady(producer_name="gen-1", topic=topic))
        async for request in request_iterator:
            entries = self.entries.setdefault(topic, [])
            entries.append(request)
            yield pb.ProduceResponse(
                receipt=pb.SendReceipt(
                    sequence_id=request.sequence_id, ledger_id=1, entry_id=len(entries) - 1
                )
            )

    async def Consume(self, request_iterator, context):
        md = dict(context.invocation_metadata())
        self.metadata.append(md)
        topic = md["x-pulsar-topic"]
        yield pb.ConsumeResponse(subscribed=pb.ConsumerSubscribed(consumer_name="c", topic=topic))
        async for request in request_iterator:
            if request.WhichOneof("request") == "flow":
                entries = [
                    pb.DeliveredEntry(
                        ledger_id=1, entry_id=i, sequence_id=r.sequence_id, messages=r.messages
                    )
                    for i, r in enumerate(self.entries.get(topic, []))
                ]
                yield pb.ConsumeResponse(messages=pb.MessageBatch(entries=entries))
            elif request.WhichOneof("request") == "ack" and request.ack.request_id:
                yield pb.ConsumeResponse(
                    ack_receipt=pb.AckReceipt(request_id=request.ack.request_id)
                )


@contextlib.asynccontextmanager
async def fake_broker(
    credentials: grpc.ServerCredentials | None = None,
) -> AsyncIterator[FakeBroker]:
    """A FakeBroker on a free loopback port (over TLS with ``credentials``); ``url`` is its
    address."""
    server = grpc.aio.server()
    fake = FakeBroker()
    pb_grpc.add_PulsarServiceServicer_to_server(fake, server)
    if credentials is None:
        port = server.add_insecure_port("127.0.0.1:0")
        fake.url = f"grpc://127.0.0.1:{port}"
    else:
        port = server.add_secure_port("127.0.0.1:0", credentials)
        fake.url = f"grpc+ssl://127.0.0.1:{port}"
    await server.start()
    try:
        yield fake
    finally:
        await server.stop(None)


@pytest.fixture
async def broker():
    async with fake_broker() as fake:
        yield fake


async def test_produce_then_consume_round_trip_with_metadata(broker):
    async with Client(broker.url, listener_name="internal") as c:
        producer = await c.create_producer("t", batching_max_messages=10)
        futures = [await producer.enqueue(b"m%d" % i, properties={"i": str(i)}) for i in range(3)]
        ids = await asyncio.gather(*futures)
        assert ids == [
            MessageId(ledger_id=1, entry_id=0, batch_index=i, partition=-1) for i in range(3)
        ]
        assert producer.producer_name() == "gen-1"
        consumer = await c.subscribe(
            "t",
            "sub",
            "key_shared",
            initial_position="earliest",
            dead_letter_policy=DeadLetterPolicy(3),
        )
        msgs = [await consumer.receive(timeout_ms=2000) for _ in range(3)]
        assert [m.data() for m in msgs] == [b"m0", b"m1", b"m2"]
        assert msgs[2].properties() == {"i": "2"}
        await consumer.acknowledge(msgs[0], wait=True)
    produce_md, consume_md = broker.metadata
    assert produce_md["x-pulsar-topic"] == "t"
    assert produce_md["x-pulsar-listenername"] == "internal"
    assert "x-pulsar-producer-name" not in produce_md
    assert consume_md["x-pulsar-subscription"] == "sub"
    assert consume_md["x-pulsar-subscription-type"] == "Key_Shared"
    assert consume_md["x-pulsar-initial-position"] == "Earliest"
    assert consume_md["x-pulsar-max-redeliver-count"] == "3"
    assert consume_md["x-pulsar-negative-ack-delay-ms"] == "60000"
    assert "x-pulsar-dead-letter-topic" not in consume_md


async def test_partitioned_topic_has_one_stream_per_partition(broker):
    broker.partitions["orders"] = 3
    async with Client(broker.url) as c:
        assert await c.get_partitions_for_topic("orders") == [
            f"persistent://public/default/orders-partition-{i}" for i in range(3)
        ]
        producer = await c.create_producer("orders", batching_max_messages=1)
        msg_id = await producer.send(b"x", partition_key="k")
        consumer = await c.subscribe("orders", "s")
        msg = await consumer.receive(timeout_ms=2000)
        assert msg.message_id() == msg_id and msg_id.partition() >= 0
    topics = sorted(md["x-pulsar-topic"] for md in broker.metadata)
    assert topics == sorted([f"orders-partition-{i}" for i in range(3)] * 2)


async def test_reader_metadata(broker):
    async with Client(broker.url) as c:
        reader = await c.create_reader(
            "t",
            MessageId(ledger_id=4, entry_id=5, batch_index=0, partition=-1),
            start_message_id_inclusive=True,
        )
        await reader.close()
    (md,) = broker.metadata
    assert md["x-pulsar-durable"] == "false"
    assert md["x-pulsar-start-message-id"] == "4:5:-1:0"
    assert md["x-pulsar-start-message-id-inclusive"] == "true"
    assert md["x-pulsar-subscription"].startswith("reader-")


async def test_error_trailer_surfaces_as_specific_error(broker):
    async with Client(broker.url) as c:
        with pytest.raises(client.ProducerBusy) as info:
            await c.create_producer("t", producer_name="busy")
        assert info.value.code == 16


async def test_lookup_and_unreachable_broker(broker):
    broker.lookup_answers["t"] = pb.LookupResponse(grpc_url="grpc://b:1", listener_name="ext")
    async with Client(broker.url, listener_name="ext") as c:
        result = await c.lookup("t")
        assert result.grpc_url == "grpc://b:1" and result.listener_name == "ext"
    async with Client("grpc://127.0.0.1:1", operation_timeout_ms=1000) as c:
        with pytest.raises(client.ConnectError):
            await c.create_producer("t")


def test_invalid_service_url():
    for url in ["ftp://h:1", "pulsar://h:6650", "grpc://", "h:1", "grpc://h:1/x", "http://h:1/x"]:
        with pytest.raises(ValueError):
            Client(url)


async def test_sync_client(broker):
    def run():
        with SyncClient(broker.url) as c:
            producer = c.create_producer("s")
            assert producer.send(b"hello") == MessageId(
                ledger_id=1, entry_id=0, batch_index=0, partition=-1
            )
            consumer = c.subscribe("s", "sub")
            msg = consumer.receive(timeout_ms=2000)
            consumer.acknowledge(msg)
            return msg.data()

    assert await asyncio.to_thread(run) == b"hello"
