"""The namespace policy encryption_required (Pulsar's), over the raw wire: set through the admin
CLI (pulsar-admin's verbs) or REST, the broker refuses every batch that is not end-to-end
encrypted with Pulsar's answer (MetadataError "Messages must be encrypted", FAILED_PRECONDITION)
and accepts an encrypted one byte for byte without reading it; a change reaches a producer that
is already open, survives a restart, and in a cluster reaches the broker that owns the topic."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from collections.abc import Callable

import grpc
import pytest

from pulsar_grpc import Client, CryptoError
from pulsar_grpc.broker.naming import TopicName
from pulsar_grpc.cli.main import main
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.cluster import BrokerMember, place, zk_postgres_cluster
from tests.e2e.test_authorization import http
from tests.e2e.wire import batch, error_code, stub
from tests.postgres import postgres_server, postgres_url
from tests.support import BrokerThread
from tests.waiting import eventually
from tests.zookeeper import zk_chroot, zookeeper

__all__ = [
    "postgres_server",
    "postgres_url",
    "zk_chroot",
    "zk_postgres_cluster",
    "zookeeper",
]  # fixtures

POLICY_PATH = "/admin/v2/namespaces/public/default/encryptionRequired"
REFUSAL = "Messages must be encrypted"


def encrypted(sequence_id: int) -> pb.ProduceRequest:
    """A batch as an encrypting producer sends it; the broker never reads ``messages``, so any
    bytes do, as long as one encrypted data key is named."""
    context = pb.EncryptionContext(
        keys=[pb.EncryptionKey(key="app-key", value=b"\x01" * 256, metadata={"v": "1"})],
        algorithm="AES-256-GCM",
        param=b"\x02" * 12,
    )
    compressed = pb.CompressedBatch(
        num_messages=2, uncompressed_size=40, key=b"k", messages=b"\xaa" * 72, encryption=context
    )
    return pb.ProduceRequest(sequence_id=sequence_id, compressed=compressed)


def compressed_only(sequence_id: int) -> pb.ProduceRequest:
    """A CompressedBatch that is not encrypted (no EncryptionContext)."""
    compressed = pb.CompressedBatch(
        num_messages=1, uncompressed_size=5, messages=b"\x6a\x03\x0a\x01x"
    )
    return pb.ProduceRequest(sequence_id=sequence_id, compressed=compressed)


class RawProducer:
    """One Produce call on the raw stub."""

    def __init__(self, channel: grpc.aio.Channel, topic: str) -> None:
        self.call = stub(channel).Produce(metadata=(("x-pulsar-topic", topic),))

    async def open(self) -> RawProducer:
        assert (await self.call.read()).WhichOneof("response") == "ready"
        return self

    async def send(self, request: pb.ProduceRequest) -> pb.SendReceipt:
        await self.call.write(request)
        return (await self.call.read()).receipt

    async def refused(self, request: pb.ProduceRequest) -> grpc.aio.AioRpcError:
        await self.call.write(request)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await self.call.read()
        return info.value


def assert_refused_as_pulsar_does(error: grpc.aio.AioRpcError) -> None:
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, error
    assert error_code(error) == pb.MetadataError
    assert REFUSAL in (error.details() or "")


async def plain_is_refused(channel: grpc.aio.Channel, topic: str) -> bool:
    """Whether a fresh producer's unencrypted batch is refused now (a probe for waiting)."""
    producer = await RawProducer(channel, topic).open()
    try:
        await producer.send(batch(0, [b"probe"]))
        return False
    except grpc.aio.AioRpcError as exc:
        assert_refused_as_pulsar_does(exc)
        return True
    finally:
        producer.call.cancel()


def admin_cli(broker: BrokerThread, *args: str) -> str:
    """`pulsar-grpc admin namespaces ...` in this process: its output (it must succeed)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["admin", "--admin-url", broker.http_url, "namespaces", *args])
    assert code == 0, out.getvalue()
    return out.getvalue()


async def set_required(broker: BrokerThread, enable: bool) -> None:
    flag = "--enable" if enable else "--disable"
    await asyncio.to_thread(admin_cli, broker, "set-encryption-required", "public/default", flag)


async def test_unencrypted_batches_are_refused_and_encrypted_ones_carried(
    broker: BrokerThread, channel: grpc.aio.Channel
) -> None:
    get = ("get-encryption-required", "public/default")
    assert json.loads(await asyncio.to_thread(admin_cli, broker, *get)) is False
    await set_required(broker, True)
    assert json.loads(await asyncio.to_thread(admin_cli, broker, *get)) is True
    policies = json.loads(await asyncio.to_thread(admin_cli, broker, "policies", "public/default"))
    assert policies["encryption_required"] is True
    # The policy is the namespace's: probe another topic, so none of "sealed" is a probe's.
    await eventually(lambda: plain_is_refused(channel, "sealed-probe"), timeout=20)

    producer = await RawProducer(channel, "sealed").open()
    receipt = await producer.send(encrypted(0))
    assert (receipt.batch_size, receipt.highest_sequence_id) == (2, 1)
    assert_refused_as_pulsar_does(await producer.refused(batch(2, [b"secret in clear"])))
    producer = await RawProducer(channel, "sealed").open()
    assert_refused_as_pulsar_does(await producer.refused(compressed_only(5)))

    # What was accepted is delivered as it was sent (the broker never decrypts).
    consumer = stub(channel).Consume(
        metadata=(
            ("x-pulsar-topic", "sealed"),
            ("x-pulsar-subscription", "s"),
            ("x-pulsar-initial-position", "Earliest"),
        )
    )
    await consumer.read()
    await consumer.write(pb.ConsumeRequest(flow=pb.Flow(permits=10)))
    response = await consumer.read()
    while response.WhichOneof("response") != "messages":
        response = await consumer.read()
    (entry,) = response.messages.entries
    assert entry.compressed == encrypted(0).compressed
    consumer.cancel()


async def test_a_bad_body_is_refused(broker: BrokerThread) -> None:
    status, answer = await asyncio.to_thread(http, broker, "POST", POLICY_PATH, None, "yes")
    assert status == 400, answer
    assert "true or false" in answer["reason"]


async def test_the_policy_reaches_an_open_producer_both_ways(
    broker: BrokerThread, channel: grpc.aio.Channel
) -> None:
    producer = await RawProducer(channel, "flip").open()
    assert (await producer.send(batch(0, [b"before"]))).highest_sequence_id == 0
    await set_required(broker, True)
    await eventually(lambda: plain_is_refused(channel, "flip"), timeout=20)
    assert_refused_as_pulsar_does(await producer.refused(batch(1, [b"after"])))

    producer = await RawProducer(channel, "flip").open()
    assert (await producer.send(encrypted(1))).batch_size == 2
    await set_required(broker, False)

    async def accepted_again() -> bool:
        return not await plain_is_refused(channel, "flip")

    await eventually(accepted_again, timeout=20)
    assert (await producer.send(batch(3, [b"plain again"]))).highest_sequence_id == 3


async def test_the_policy_survives_a_restart(broker_factory: Callable[..., BrokerThread]) -> None:
    first = broker_factory()
    await set_required(first, True)
    data_dir = first.config.dataDirectory
    assert first.service is not None
    await first.call(first.service.close())  # the data directory is free again
    again = broker_factory(data_dir=data_dir)
    get = ("get-encryption-required", "public/default")
    assert json.loads(await asyncio.to_thread(admin_cli, again, *get)) is True
    async with grpc.aio.insecure_channel(again.grpc_address) as channel:
        assert await plain_is_refused(channel, "kept-sealed")


@pytest.fixture
def cluster(zk_postgres_cluster: list[BrokerMember]) -> list[BrokerMember]:
    return zk_postgres_cluster


async def test_a_policy_set_on_another_broker_reaches_the_owner(
    cluster: list[BrokerMember],
) -> None:
    topic = TopicName.get("cluster-sealed")
    owner = await place(cluster, cluster[0].service_url, topic)
    other = next(m for m in cluster if m is not owner)
    async with grpc.aio.insecure_channel(owner.grpc("internal")) as channel:
        producer = await RawProducer(channel, topic.full_name).open()
        assert (await producer.send(batch(0, [b"before"]))).highest_sequence_id == 0
        await set_required(other.broker, True)
        await eventually(lambda: plain_is_refused(channel, topic.full_name), timeout=20)
        assert_refused_as_pulsar_does(await producer.refused(batch(1, [b"after"])))


async def test_a_plain_sdk_producer_fails_at_once_with_the_brokers_reason(
    broker: BrokerThread, channel: grpc.aio.Channel
) -> None:
    """The SDK does not retry the refusal until its send timeout: the producer must encrypt,
    and the application is told so in the broker's words."""
    await set_required(broker, True)
    await eventually(lambda: plain_is_refused(channel, "sdk-plain"), timeout=20)
    async with Client(broker.service_url) as client:
        producer = await client.create_producer("sdk-plain", send_timeout_millis=60_000)
        started = asyncio.get_running_loop().time()
        with pytest.raises(CryptoError, match=REFUSAL):
            await producer.send(b"in clear")
        assert asyncio.get_running_loop().time() - started < 30  # not the send timeout
