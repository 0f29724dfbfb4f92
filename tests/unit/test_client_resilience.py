"""The reconnect story's edges, on fake streams: closing a producer that is reconnecting, a
Failover consumer's active flag across a reconnect, receive timeouts while reconnecting, which
errors creation retries, and the keepalive options of the SDK's channels.
"""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from pulsar_grpc import client
from pulsar_grpc.client import HandleState, MessageId
from pulsar_grpc.client._channels import channel_options
from pulsar_grpc.client._errors import is_retryable_at_creation
from pulsar_grpc.client._reader import Reader
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.unit.fake_stream import FakeDialer
from tests.unit.test_client_batching import receipt, settle
from tests.unit.test_client_flow import batch
from tests.unit.test_client_reconnect import (
    REFUSED,
    TLS_REFUSED,
    reconnected,
    rpc_error,
    start_consumer,
    start_producer,
)

S = grpc.StatusCode

# ---------------------------------------------------------------- closing a producer


async def test_close_while_reconnecting_fails_pending_sends_at_once():
    dialer = FakeDialer()
    producer, part = await start_producer(dialer, batching_max_messages=1, send_timeout_ms=30_000)
    dialer.refusals = [client.ConnectError(REFUSED)] * 10_000  # the broker stays away
    futures = [await producer.enqueue(b"m%d" % i) for i in range(3)]
    dialer.last.fail()
    await settle()
    assert part.state is HandleState.CONNECTING
    batched = await producer.enqueue(b"queued while reconnecting")
    started = time.monotonic()
    await asyncio.wait_for(producer.close(), 5)
    assert time.monotonic() - started < 1  # not the 30 s send timeout
    for future in [*futures, batched]:
        with pytest.raises(client.AlreadyClosed, match="closed while reconnecting"):
            await future
    assert part.state is HandleState.CLOSED
    attempts = len(dialer.params)
    await asyncio.sleep(0.02)
    assert len(dialer.params) == attempts  # no reconnect after close
    with pytest.raises(client.AlreadyClosed):
        await producer.enqueue(b"after close")


async def test_close_while_connected_still_waits_for_receipts():
    dialer = FakeDialer()
    producer, part = await start_producer(dialer, batching_max_messages=1)
    future = await producer.enqueue(b"last")
    closing = asyncio.ensure_future(producer.close())
    await settle()
    assert not closing.done() and part.state is HandleState.READY
    with pytest.raises(client.AlreadyClosed):  # nothing new while it drains
        await producer.enqueue(b"too late")
    dialer.last.push(receipt(dialer.last.written[0], ledger=7, entry=0))
    await asyncio.wait_for(closing, 5)
    assert await future == MessageId(ledger_id=7, entry_id=0, batch_index=0, partition=-1)
    assert part.state is HandleState.CLOSED


# ---------------------------------------------------------------- consumers


def active_change(active: bool) -> pb.ConsumeResponse:
    return pb.ConsumeResponse(active_consumer_change=pb.ActiveConsumerChange(is_active=active))


async def test_failover_active_flag_is_unknown_until_the_new_stream_says():
    dialer = FakeDialer()
    consumer, _ = await start_consumer(dialer, subscription_type=client.ConsumerType.Failover)
    assert consumer.is_active is None
    dialer.last.push(active_change(True))
    await settle()
    assert consumer.is_active is True
    dialer.refusals = [client.ConnectError(REFUSED)] * 2
    dialer.last.fail()
    await settle()
    assert consumer.is_active is None  # the old stream's answer no longer holds
    second = await reconnected(dialer, 2)
    assert consumer.is_active is None
    second.push(active_change(False))  # another consumer took over meanwhile
    await settle()
    assert consumer.is_active is False


async def test_receive_with_a_timeout_while_reconnecting_raises_timeout():
    dialer = FakeDialer()
    consumer, part = await start_consumer(dialer, durable=False)
    reader = Reader(
        consumer, lambda topic: asyncio.sleep(0, None), ["t"], MessageId.earliest, False
    )
    dialer.refusals = [client.ConnectError(REFUSED)] * 10_000
    dialer.last.fail()
    await settle()
    assert part.state is HandleState.CONNECTING
    with pytest.raises(client.Timeout, match="no message within"):
        await consumer.receive(timeout_ms=50)
    with pytest.raises(client.Timeout, match="no message within"):
        await reader.read_next(timeout_ms=50)
    dialer.refusals = []
    second = await reconnected(dialer, 2)
    second.push(batch(0, 1))
    assert (await reader.read_next(timeout_ms=1000)).data() == b"0-0"


# ---------------------------------------------------------------- which errors creation retries


@pytest.mark.parametrize(
    ("error", "retried"),
    [
        (client.ConnectError(REFUSED), True),  # nothing listening: the broker is restarting
        (rpc_error(S.UNAVAILABLE, "6"), True),  # ServiceNotReady: topic being unloaded
        (rpc_error(S.INTERNAL, "1"), True),  # MetadataError
        (rpc_error(S.UNAVAILABLE, "14"), True),  # TooManyRequests
        (client.ConnectError(TLS_REFUSED), False),  # wrong CA, TLS to a plaintext port
        (client.ConnectError("failed to connect...: Socket closed"), False),  # plaintext to TLS
        (rpc_error(S.UNAVAILABLE), False),
        (rpc_error(S.UNAUTHENTICATED, "3"), False),
        (rpc_error(S.PERMISSION_DENIED, "4"), False),
        (rpc_error(S.FAILED_PRECONDITION, "16"), False),  # ProducerBusy: Pulsar fails it too
        (rpc_error(S.NOT_FOUND, "11"), False),
        (client.Timeout("deadline"), False),
    ],
)
def test_errors_creation_retries(error: client.PulsarError, retried: bool) -> None:
    assert is_retryable_at_creation(error) is retried


# ---------------------------------------------------------------- keepalive


def test_channels_ping_while_calls_are_open_at_the_configured_interval():
    options = dict(channel_options(-1, 100, 1))
    assert options["grpc.keepalive_time_ms"] == 1000
    assert options["grpc.keepalive_timeout_ms"] == 1000
    # A keepalive waits behind an unanswered flow-control ping: that one times out as soon.
    assert options["grpc.http2.ping_timeout_ms"] == 1000
    assert options["grpc.keepalive_permit_without_calls"] == 0
    assert options["grpc.http2.max_pings_without_data"] == 0  # else pings stop after 2
    assert dict(channel_options(-1, 100, 600))["grpc.keepalive_timeout_ms"] == 20_000
    assert "grpc.keepalive_time_ms" not in dict(channel_options(-1, 100, 0))
    # The default is Pulsar's keepAliveIntervalSeconds.
    c = client.Client("grpc://h:1")
    assert dict(c._calls.pool._options)["grpc.keepalive_time_ms"] == 30_000
    c = client.Client("grpc://h:1", keep_alive_interval_seconds=300)
    assert dict(c._calls.pool._options)["grpc.keepalive_time_ms"] == 300_000
    with pytest.raises(ValueError, match="keep_alive"):
        client.Client("grpc://h:1", keep_alive_interval_seconds=-1)
