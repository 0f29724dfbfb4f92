"""Whatever bytes or call metadata a client sends, a client's mistake ends its call with a
client error (INVALID_ARGUMENT and Pulsar's code), never INTERNAL or UNKNOWN, and the broker
keeps serving. Requests go out as raw bytes, so nothing client-side can validate them first."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import grpc
import pytest

from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.wire import batch, error_code
from tests.support import BrokerThread

SERVICE = "/pulsargrpc.v1.PulsarService/"
GARBAGE = b"\xff\xff\xff\xff"  # field 31, wire type 7: no protobuf message decodes it
Metadata = Sequence[tuple[str, str]]


def raw(value: bytes) -> bytes:
    return value


def raw_stream(channel: grpc.aio.Channel, method: str, metadata: Metadata) -> grpc.aio.Call:
    rpc = channel.stream_stream(SERVICE + method, request_serializer=raw, response_deserializer=raw)
    return rpc(metadata=tuple(metadata))


async def stream_error(
    channel: grpc.aio.Channel, method: str, metadata: Metadata, *requests: bytes
) -> grpc.aio.AioRpcError:
    """Open the stream, wait for its first answer (ready / subscribed), then send ``requests``;
    the call must end with an error."""
    call = raw_stream(channel, method, metadata)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call.read()
        for request in requests:
            await call.write(request)
        while True:
            await call.read()
    return err.value


def assert_client_error(error: grpc.aio.AioRpcError, code: int = pb.UnknownError) -> None:
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert error_code(error) == code


async def assert_still_serving(channel: grpc.aio.Channel) -> None:
    call = raw_stream(channel, "Produce", (("x-pulsar-topic", "after-hostile-input"),))
    pb.ProduceResponse.FromString(await call.read())
    await call.write(batch(1, [b"ok"]).SerializeToString())
    assert pb.ProduceResponse.FromString(await call.read()).HasField("receipt")
    await call.done_writing()


CONSUMER = (("x-pulsar-topic", "hostile"), ("x-pulsar-subscription", "s"))


@pytest.mark.parametrize(
    ("method", "metadata"),
    [("Consume", CONSUMER), ("Produce", (("x-pulsar-topic", "hostile"),))],
)
async def test_undecodable_stream_request_is_invalid_argument(
    channel: grpc.aio.Channel, method: str, metadata: Metadata
) -> None:
    error = await stream_error(channel, method, metadata, GARBAGE)
    assert_client_error(error)
    assert "malformed" in (error.details() or "")
    await assert_still_serving(channel)


@pytest.mark.parametrize("method", ["Lookup", "GetLastMessageId", "GetPartitionedTopicMetadata"])
async def test_undecodable_unary_request_is_invalid_argument(
    channel: grpc.aio.Channel, method: str
) -> None:
    rpc = channel.unary_unary(SERVICE + method, request_serializer=raw, response_deserializer=raw)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await rpc(GARBAGE, timeout=30)
    assert_client_error(err.value)
    assert "malformed" in (err.value.details() or "")


DOT_TOPICS = [
    "persistent://./default/t",
    "persistent://../default/t",
    "persistent://public/./t",
    "persistent://public/../t",
    "persistent://public/default/.",
    "persistent://public/default/..",
    "..",
]


@pytest.mark.parametrize("topic", DOT_TOPICS)
async def test_dot_segments_in_topic_names_are_invalid_topic_names(
    channel: grpc.aio.Channel, topic: str
) -> None:
    produce = await stream_error(channel, "Produce", (("x-pulsar-topic", topic),))
    assert_client_error(produce, pb.InvalidTopicName)
    consume = await stream_error(
        channel, "Consume", (("x-pulsar-topic", topic), ("x-pulsar-subscription", "s"))
    )
    assert_client_error(consume, pb.InvalidTopicName)
    dead_letter = await stream_error(
        channel, "Consume", (*CONSUMER, ("x-pulsar-dead-letter-topic", topic))
    )
    assert_client_error(dead_letter, pb.InvalidTopicName)
    for method, request in [
        ("Lookup", pb.LookupRequest(topic=topic)),
        ("GetLastMessageId", pb.GetLastMessageIdRequest(topic=topic)),
        ("GetPartitionedTopicMetadata", pb.PartitionedTopicMetadataRequest(topic=topic)),
    ]:
        rpc = channel.unary_unary(
            SERVICE + method, request_serializer=raw, response_deserializer=raw
        )
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await rpc(request.SerializeToString(), timeout=30)
        assert_client_error(err.value, pb.InvalidTopicName)


@pytest.mark.parametrize(
    ("name", "needle"),
    [(".", "'.' and '..' are reserved"), ("..", "'.' and '..' are reserved"),
     ("pulsar.dedup", "reserved for the broker's deduplication cursor")],
)  # fmt: skip
async def test_reserved_subscription_names_are_refused(
    channel: grpc.aio.Channel, name: str, needle: str
) -> None:
    error = await stream_error(
        channel, "Consume", (("x-pulsar-topic", "hostile"), ("x-pulsar-subscription", name))
    )
    assert_client_error(error)
    assert needle in (error.details() or "")
    await assert_still_serving(channel)


async def test_subscription_names_with_slashes_are_kept_apart(channel: grpc.aio.Channel) -> None:
    """'a/b' and '../x' are legal subscription names (Pulsar encodes them): they subscribe."""
    for name in ("a/b", "../x", "%2F"):
        call = raw_stream(
            channel, "Consume", (("x-pulsar-topic", "hostile"), ("x-pulsar-subscription", name))
        )
        response = pb.ConsumeResponse.FromString(await call.read())
        assert response.subscribed.subscription == name
        call.cancel()


@pytest.mark.parametrize("value", ["1", "999"])
async def test_an_ack_timeout_under_a_second_is_invalid_argument(
    channel: grpc.aio.Channel, value: str
) -> None:
    """Pulsar's clients refuse an ack timeout under a second; the broker's timeout check runs
    every quarter of the shortest one, so it refuses them too."""
    error = await stream_error(channel, "Consume", (*CONSUMER, ("x-pulsar-ack-timeout-ms", value)))
    assert_client_error(error)
    assert "x-pulsar-ack-timeout-ms" in (error.details() or "")


@pytest.mark.parametrize(
    "header",
    [
        "x-pulsar-priority-level",
        "x-pulsar-max-redeliver-count",
        "x-pulsar-ack-timeout-ms",
        "x-pulsar-negative-ack-delay-ms",
    ],
)
@pytest.mark.parametrize("value", [str(2**63), "9" * 5000, "-1", "1e3", "+5", "5_000", ""])
async def test_out_of_range_numbers_in_call_metadata_are_invalid_argument(
    channel: grpc.aio.Channel, header: str, value: str
) -> None:
    if value == "":  # an empty value means the default: the call goes through
        call = raw_stream(channel, "Consume", (*CONSUMER, (header, value)))
        assert pb.ConsumeResponse.FromString(await call.read()).HasField("subscribed")
        call.cancel()
        return
    error = await stream_error(channel, "Consume", (*CONSUMER, (header, value)))
    assert_client_error(error)
    assert header in (error.details() or "")


async def test_empty_consume_request_is_invalid_argument(channel: grpc.aio.Channel) -> None:
    error = await stream_error(channel, "Consume", CONSUMER, b"")
    assert_client_error(error)
    assert "empty ConsumeRequest" in (error.details() or "")


@pytest.mark.parametrize(("sequence_id", "messages"), [(2**64 - 1, 2), (2**63, 1), (2**63 - 2, 3)])
async def test_sequence_ids_beyond_a_java_long_are_refused_and_leave_the_name_usable(
    broker_factory: Callable[..., BrokerThread], sequence_id: int, messages: int
) -> None:
    """A receipt carrying them could not be encoded, and with deduplication the producer name
    would keep them as its last sequence id, breaking every later ProducerReady."""
    broker = broker_factory(brokerDeduplicationEnabled=True)
    metadata = (("x-pulsar-topic", "hostile-seq"), ("x-pulsar-producer-name", "p"))
    async with grpc.aio.insecure_channel(broker.grpc_address) as ch:
        request = batch(sequence_id, [b"m"] * messages).SerializeToString()
        error = await stream_error(ch, "Produce", metadata, request)
        assert_client_error(error)
        assert "exceed" in (error.details() or "")
        call = raw_stream(ch, "Produce", metadata)
        ready = pb.ProduceResponse.FromString(await call.read()).ready
        assert ready.last_sequence_id == -1
        await call.write(batch(0, [b"ok"]).SerializeToString())
        assert pb.ProduceResponse.FromString(await call.read()).receipt.sequence_id == 0
        await call.done_writing()


async def test_requests_behind_an_unsubscribe_are_not_applied(channel: grpc.aio.Channel) -> None:
    """Acks sent behind an Unsubscribe would find the cursor closed: the call stops reading
    at the Unsubscribe and ends cleanly, never with an INTERNAL "cursor is closed"."""
    producer = raw_stream(channel, "Produce", (("x-pulsar-topic", "hostile-unsub"),))
    await producer.read()
    await producer.write(batch(0, [b"m"]).SerializeToString())
    receipt = pb.ProduceResponse.FromString(await producer.read()).receipt
    await producer.done_writing()
    message_id = pb.MessageId(ledger_id=receipt.ledger_id, entry_id=receipt.entry_id)
    unsubscribe = pb.ConsumeRequest(unsubscribe=pb.Unsubscribe(request_id=1))
    ack = pb.ConsumeRequest(ack=pb.Ack(ids=[message_id], request_id=2))
    for round_ in range(5):
        call = raw_stream(
            channel,
            "Consume",
            (("x-pulsar-topic", "hostile-unsub"), ("x-pulsar-subscription", f"s{round_}"),
             ("x-pulsar-initial-position", "Earliest")),
        )  # fmt: skip
        await call.read()
        try:
            for request in (unsubscribe, *[ack] * 20):
                await call.write(request.SerializeToString())
            while await call.read() is not grpc.aio.EOF:
                pass
        except grpc.aio.AioRpcError:
            pass  # grpc's Python client: a write after the end marks the call INTERNAL locally
        code, details = await call.code(), await call.details()
        assert code == grpc.StatusCode.OK or details == "Internal error from Core", details
