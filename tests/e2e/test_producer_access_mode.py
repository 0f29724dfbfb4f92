"""Producer access modes (PIP-68) over real gRPC: the broker enforces Shared, Exclusive,
WaitForExclusive and ExclusiveWithFencing, and the topic epoch it stores with the managed
ledger outlives an unload and a broker restart (issue 26)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc
import pytest

import pulsar_grpc as pulsar
from pulsar_grpc.client import ProducerAccessMode
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.admin_support import call as admin_call
from tests.e2e.wire import batch, error_code, stub
from tests.support import BrokerThread
from tests.waiting import eventually

TOPIC = "persistent://public/default/access"
MODE = "x-pulsar-producer-access-mode"
EPOCH = "x-pulsar-producer-topic-epoch"


def open_producer(
    channel: grpc.aio.Channel, mode: str | None = None, epoch: int | None = None, name: str = ""
) -> grpc.aio.StreamStreamCall:
    metadata = [("x-pulsar-topic", TOPIC)]
    if mode is not None:
        metadata.append((MODE, mode))
    if epoch is not None:
        metadata.append((EPOCH, str(epoch)))
    if name:
        metadata.append(("x-pulsar-producer-name", name))
    return stub(channel).Produce(metadata=metadata)


async def ready(call: grpc.aio.StreamStreamCall) -> pb.ProducerReady:
    response = await asyncio.wait_for(call.read(), 10)
    assert response.WhichOneof("response") == "ready"
    return response.ready


async def refused(call: grpc.aio.StreamStreamCall) -> tuple[grpc.StatusCode, int, str]:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await asyncio.wait_for(call.read(), 10)
    return err.value.code(), error_code(err.value), err.value.details() or ""


async def in_line(broker: BrokerThread, count: int) -> None:
    """Wait until ``count`` WaitForExclusive producers wait for the topic (its stats'
    waitingPublishers, as Pulsar's), so what the test does next comes after they queued."""

    async def queued() -> bool:
        _, stats = await admin_call(
            broker, "GET", "/admin/v2/persistent/public/default/access/stats"
        )
        return bool(stats["waitingPublishers"] == count)

    await eventually(queued)


async def test_exclusive_refuses_every_other_producer_and_shared_refuses_beside_it(
    channel: grpc.aio.Channel,
) -> None:
    shared = open_producer(channel)
    assert not (await ready(shared)).HasField("topic_epoch")  # never held exclusively
    status, code, details = await refused(open_producer(channel, "Exclusive"))
    assert (status, code) == (grpc.StatusCode.FAILED_PRECONDITION, pb.ProducerFenced)
    assert "shared producers" in details
    await shared.done_writing()
    await shared.read()  # the stream ends: the topic has no producer

    holder = open_producer(channel, "exclusive", name="holder")  # case-insensitive, as others
    assert (await ready(holder)).topic_epoch == 0
    status, code, details = await refused(open_producer(channel, "Exclusive"))
    assert (status, code) == (grpc.StatusCode.FAILED_PRECONDITION, pb.ProducerFenced)
    assert "holder" in details
    status, code, _ = await refused(open_producer(channel))
    assert (status, code) == (grpc.StatusCode.FAILED_PRECONDITION, pb.ProducerBusy)
    await holder.write(batch(0, [b"x"]))
    assert (await holder.read()).receipt.entry_id == 0


@pytest.mark.parametrize(
    ("header", "value"),
    [(MODE, "Exclusiv"), (EPOCH, "-1"), (EPOCH, "one"), (EPOCH, "99999999999999999999")],
)
async def test_a_bad_access_mode_or_epoch_is_invalid_argument(
    channel: grpc.aio.Channel, header: str, value: str
) -> None:
    call = stub(channel).Produce(metadata=[("x-pulsar-topic", TOPIC), (header, value)])
    status, _, details = await refused(call)
    assert status == grpc.StatusCode.INVALID_ARGUMENT
    assert header in details


async def test_wait_for_exclusive_gets_the_topic_when_the_holder_closes(
    broker: BrokerThread, channel: grpc.aio.Channel
) -> None:
    holder = open_producer(channel, "Exclusive")
    assert (await ready(holder)).topic_epoch == 0
    left = open_producer(channel, "WaitForExclusive")
    waiter = open_producer(channel, "WaitForExclusive")
    waiting = asyncio.ensure_future(ready(waiter))
    early = asyncio.ensure_future(left.read())
    await in_line(broker, 2)
    assert not waiting.done() and not early.done()  # no answer while the topic is held
    left.cancel()  # leaves the line: it must not be handed the topic
    await holder.done_writing()
    await holder.read()
    got = await waiting
    assert got.topic_epoch == 1
    await waiter.write(batch(0, [b"mine"]))
    assert (await waiter.read()).WhichOneof("response") == "receipt"
    # The topic is the waiter's: a Shared producer is still refused.
    assert (await refused(open_producer(channel)))[1] == pb.ProducerBusy


async def test_wait_for_exclusive_waits_behind_shared_producers_too(
    broker: BrokerThread, channel: grpc.aio.Channel
) -> None:
    shared = open_producer(channel)
    await ready(shared)
    waiting = asyncio.ensure_future(ready(open_producer(channel, "WaitForExclusive")))
    await in_line(broker, 1)
    assert not waiting.done()
    await shared.done_writing()
    await shared.read()
    assert (await waiting).topic_epoch == 0


async def test_exclusive_with_fencing_ends_the_holder_and_fails_the_waiters(
    broker: BrokerThread, channel: grpc.aio.Channel
) -> None:
    holder = open_producer(channel, "Exclusive")
    await ready(holder)
    waiter = open_producer(channel, "WaitForExclusive")
    await in_line(broker, 1)
    fencer = open_producer(channel, "ExclusiveWithFencing")
    assert (await ready(fencer)).topic_epoch == 1
    for fenced in (holder, waiter):
        status, code, _ = await refused(fenced)
        assert (status, code) == (grpc.StatusCode.FAILED_PRECONDITION, pb.ProducerFenced)
    # The fenced holder cannot come back with its epoch, not even as WaitForExclusive.
    await fencer.done_writing()
    await fencer.read()
    status, code, details = await refused(open_producer(channel, "Exclusive", epoch=0))
    assert code == pb.ProducerFenced and "epoch" in details
    assert (await ready(open_producer(channel, "Exclusive", epoch=1))).topic_epoch == 1


async def test_the_topic_epoch_outlives_an_unload_and_a_broker_restart(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    """Stored with the managed ledger: the broker that loads the topic next (here the same one
    after an unload, then a fresh one on the same data) fences the replaced producer."""
    broker = broker_factory()
    assert broker.service is not None
    async with grpc.aio.insecure_channel(broker.grpc_address) as channel:
        first = open_producer(channel, "Exclusive")
        assert (await ready(first)).topic_epoch == 0
        second = open_producer(channel, "ExclusiveWithFencing")
        assert (await ready(second)).topic_epoch == 1
        await refused(first)
        assert await broker.call(broker.service.topics.unload_topic(TOPIC))
        status, code, _ = await refused(second)
        assert status == grpc.StatusCode.UNAVAILABLE  # retryable: reconnect with the epoch
        status, code, _ = await refused(open_producer(channel, "Exclusive", epoch=0))
        assert code == pb.ProducerFenced
        back = open_producer(channel, "Exclusive", epoch=1)
        assert (await ready(back)).topic_epoch == 1
    await broker.call(broker.service.close())  # the data directory is free again
    restarted = broker_factory(data_dir=broker.config.dataDirectory)
    async with grpc.aio.insecure_channel(restarted.grpc_address) as channel:
        assert (await refused(open_producer(channel, "WaitForExclusive", epoch=0)))[1] == (
            pb.ProducerFenced
        )
        assert (await ready(open_producer(channel, "Exclusive"))).topic_epoch == 2


async def test_the_sdk_sends_the_access_mode_and_keeps_its_epoch(broker: BrokerThread) -> None:
    assert broker.service is not None
    async with pulsar.Client(broker.service_url) as client:
        holder = await client.create_producer(TOPIC, access_mode=ProducerAccessMode.Exclusive)
        with pytest.raises(pulsar.ProducerFenced):
            await client.create_producer(TOPIC, access_mode=ProducerAccessMode.Exclusive)
        with pytest.raises(pulsar.ProducerBusy):
            await client.create_producer(TOPIC)
        await holder.send(b"before")
        # An unload: the SDK reconnects with its epoch and keeps the topic.
        assert await broker.call(broker.service.topics.unload_topic(TOPIC))
        await holder.send(b"after")
        waiting = asyncio.ensure_future(
            client.create_producer(TOPIC, access_mode=ProducerAccessMode.WaitForExclusive)
        )
        await in_line(broker, 1)
        assert not waiting.done()
        await holder.close()
        successor = await asyncio.wait_for(waiting, 10)
        await successor.send(b"successor")
        fencer = await client.create_producer(
            TOPIC, access_mode=ProducerAccessMode.ExclusiveWithFencing
        )
        await fencer.send(b"fencer")

        async def fenced() -> bool:  # its stream ends soon after the fencer is admitted
            try:
                await successor.send(b"late")
            except pulsar.ProducerFenced:
                return True
            return False

        await eventually(fenced)


@pytest.mark.parametrize("value", ['{"a": 1}', "[]", "not json", '{"a": ' * 1000])
async def test_metadata_that_is_not_an_object_of_strings_is_invalid_argument(
    channel: grpc.aio.Channel, value: str
) -> None:
    call = stub(channel).Produce(metadata=[("x-pulsar-topic", TOPIC), ("x-pulsar-metadata", value)])
    status, _, details = await refused(call)
    assert status == grpc.StatusCode.INVALID_ARGUMENT
    assert "x-pulsar-metadata" in details
